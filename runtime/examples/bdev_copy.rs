//! An async copy between two bdevs with many I/Os in flight, then a check of the copy.
//!
//! Two malloc bdevs; on every reactor, `--inflight` tasks share that reactor's part of the
//! disk chunk by chunk: first the source is filled with a pattern, then each chunk is read
//! from the source and written to the destination, then the destination is read back and
//! checked. Each task owns one pool buffer and moves it through its futures. Exits 1 on an
//! I/O error or a mismatch.
//!
//! `cargo run -p pmio-runtime --example bdev_copy -- [--size-mib 32] [--chunk-kib 64] [--inflight 32]`
//! (`--corrupt-lba N` flips a byte of the destination's block N when it is read back: the
//! check must then fail.)

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use pmio::aio::{BufPool, PoolBuf};
use pmio::dma::DmaPoolOptions;
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, spawn_local};
use pmio_runtime::Bdev;

mod common;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Write the pattern to the source.
    Fill,
    /// Read each chunk from the source, write it to the destination.
    Copy,
    /// Read the destination back and check the pattern.
    Verify,
}

/// What one reactor does in a phase: chunks `first..end`, `inflight` at a time.
#[derive(Clone, Copy)]
struct Share {
    phase: Phase,
    first: u64,
    end: u64,
    chunk: usize,
    inflight: u32,
}

fn main() -> Result<(), Error> {
    let size = common::number("--size-mib", 32) << 20;
    let chunk = (common::number("--chunk-kib", 64) << 10) as usize;
    let inflight = common::number("--inflight", 32) as u32;
    let corrupt = common::value("--corrupt-lba").map(|_| common::number("--corrupt-lba", 0));
    for name in ["Src0", "Dst0"] {
        pmio_runtime::registry().register(MallocDevice::new(MallocOptions {
            name: name.into(),
            num_blocks: size / 512,
            corrupt_lba: corrupt.filter(|_| name == "Dst0"),
            ..Default::default()
        })?)?;
    }
    let reactors = Reactors::start(CoreMask::available()?, ReactorsOptions::default())?;
    let cores = reactors.cores().to_vec();
    let chunks = size / chunk as u64;
    for phase in [Phase::Fill, Phase::Copy, Phase::Verify] {
        let start = Instant::now();
        // One contiguous share of the chunks per reactor, run at once on all of them.
        let per = chunks.div_ceil(cores.len() as u64);
        let handles = cores
            .iter()
            .enumerate()
            .map(|(i, &core)| {
                let share = Share {
                    phase,
                    first: i as u64 * per,
                    end: ((i as u64 + 1) * per).min(chunks),
                    chunk,
                    inflight,
                };
                reactors.spawn_on(core, move || run(share))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for h in handles {
            h.join()??;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{phase:?}: {} MiB on {} reactor(s), {inflight} I/Os in flight each, {:.0} MiB/s",
            size >> 20,
            cores.len(),
            (size >> 20) as f64 / secs
        );
    }
    reactors.stop()?;
    println!("copy verified");
    Ok(())
}

/// One reactor's share of a phase: `inflight` tasks take the next chunk until none is left.
async fn run(share: Share) -> Result<(), Error> {
    let src = Bdev::open("Src0")?;
    let dst = Bdev::open("Dst0")?;
    let pool = BufPool::new(DmaPoolOptions {
        count: share.inflight,
        buf_size: share.chunk,
        ..Default::default()
    })?;
    let next = Rc::new(Cell::new(share.first));
    let workers: Vec<_> = (0..share.inflight)
        .map(|_| {
            let (src, dst, next) = (src.clone(), dst.clone(), Rc::clone(&next));
            let buf = pool.get().expect("one buffer per task");
            spawn_local(worker(share, src, dst, next, buf))
        })
        .collect();
    for w in workers {
        w.await??;
    }
    Ok(())
}

/// A task of a share: its chunks one after the other, its buffer moved through each I/O.
async fn worker(
    share: Share,
    src: Bdev,
    dst: Bdev,
    next: Rc<Cell<u64>>,
    mut buf: PoolBuf,
) -> Result<(), Error> {
    let lba_of = |c: u64| c * share.chunk as u64 / u64::from(src.block_size());
    loop {
        let c = next.get();
        if c >= share.end {
            return Ok(());
        }
        next.set(c + 1);
        let lba = lba_of(c);
        let res;
        (res, buf) = match share.phase {
            Phase::Fill => {
                pattern(c, &mut buf);
                src.write(buf, lba).await
            }
            Phase::Copy => {
                let (res, read) = src.read(buf, lba).await;
                res?;
                dst.write(read, lba).await
            }
            Phase::Verify => dst.read(buf, lba).await,
        };
        res?;
        if matches!(share.phase, Phase::Verify) && !matches_pattern(c, &buf) {
            return Err(format!("chunk {c} (block {lba}) differs from the source").into());
        }
    }
}

/// Word `i` of chunk `c` (of `len` bytes): its byte offset on the disk, mixed.
fn word(c: u64, len: usize, i: usize) -> [u8; 8] {
    let offset = c * len as u64 + 8 * i as u64;
    offset.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()
}

/// Fills `buf` with chunk `c`'s contents.
fn pattern(c: u64, buf: &mut [u8]) {
    let len = buf.len();
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(c, len, i));
    }
}

/// Whether `buf` holds chunk `c`'s contents.
fn matches_pattern(c: u64, buf: &[u8]) -> bool {
    buf.chunks_exact(8)
        .enumerate()
        .all(|(i, w)| w == word(c, buf.len(), i))
}
