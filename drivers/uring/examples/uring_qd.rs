//! Drives one uring queue directly (no block layer, no reactor) at a queue depth with 4 KiB
//! random reads and reports IOPS and CPU time per I/O: the driver's own cost, for comparison
//! with pmio-perf (which adds the block layer) and t/io_uring.
//!
//! `cargo run --release -p pmio-uring --example uring_qd -- SPEC [QD] [BATCH] [SECONDS]`
//! with SPEC as pmio-perf's `uring:` spec without the prefix, e.g. `path=/var/tmp/f,direct=0`.

use std::time::{Duration, Instant};

use pmio::{BlockDevice, HctxType, IoBuf, Op, Request};
use pmio_uring::{UringBdev, UringOptions};

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let spec = args
        .get(1)
        .ok_or("usage: uring_qd SPEC [QD] [BATCH] [SECONDS]")?;
    let qd: usize = args.get(2).map_or(Ok(128), |s| s.parse())?;
    let batch: usize = args.get(3).map_or(Ok(32), |s| s.parse())?;
    let secs: u64 = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let bdev = UringBdev::create(&UringOptions::parse(spec)?)?;
    let bs = bdev.info().block_size;
    let per = 4096 / bs;
    let units = bdev.info().num_blocks / u64::from(per);
    let region = pmio::dma::DmaRegion::with_options(qd * 4096, bdev.dma_options())?;
    // SAFETY: the region outlives the queue (dropped after it, at the end of main).
    unsafe { bdev.register_memory(&[(region.as_ptr(), region.len())]) };
    let mut q = bdev.open_queue(HctxType::Default, 0, qd as u32)?;
    let mut rqs: Vec<Request> = (0..qd)
        .map(|i| Request {
            op: Op::Read,
            tag: i as u16,
            nblocks: per,
            // SAFETY: slot i of the region, used by request i only.
            buf: unsafe { IoBuf::from_raw_parts(region.as_ptr().add(i * 4096), 4096) },
            ..Request::default()
        })
        .collect();
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |rq: &mut Request| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rq.lba = (rng % units) * u64::from(per);
    };
    let mut free: Vec<u16> = (0..qd as u16).collect();
    let mut done = Vec::with_capacity(qd);
    let mut ios = 0u64;
    let (t0, c0) = (Instant::now(), cpu_time());
    let end = t0 + Duration::from_secs(secs);
    let mut turns = 0u32;
    loop {
        while free.len() >= batch.min(qd) {
            let n = batch.min(free.len());
            let tags: Vec<u16> = free.drain(free.len() - n..).collect();
            for &t in &tags {
                next(&mut rqs[t as usize]);
            }
            q.submit(&mut rqs, &tags);
        }
        done.clear();
        q.poll(&mut rqs, &mut done, batch);
        for &t in &done {
            assert!(rqs[t as usize].status.is_success(), "{:?}", rqs[t as usize]);
        }
        ios += done.len() as u64;
        free.extend_from_slice(&done);
        turns += 1;
        if turns.is_multiple_of(1024) && Instant::now() >= end {
            break;
        }
    }
    let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
    println!(
        "{spec}: QD{qd} batch {batch}: IOPS={:.1}K CPU/IO={:.0} ns",
        ios as f64 / wall.as_secs_f64() / 1e3,
        cpu.as_nanos() as f64 / ios as f64
    );
    Ok(())
}
