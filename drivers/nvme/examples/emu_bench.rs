//! The NVMe driver's submit + complete cost against the software controller (issue 7).
//!
//! The emulator runs on its own thread pinned to core 0; this thread, pinned to core 1, keeps
//! `--qd` commands in flight on one queue pair, submitting completed tags back in batches
//! (batch 32 at QD 32). Reported per I/O: wall time, and the CPU time of the submitting thread
//! (submit + poll + completion handling; the emulator's work is on the other core, but its
//! speed bounds the rate, so read the numbers as a trend, not a target).
//!
//! ```text
//! cargo run --release -p pmio-nvme --features emulator --example emu_bench -- [--seconds 3] [--qd 32] [--op read|write|flush] [--bs 4096]
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pmio::bdev::DriverQueue;
use pmio::dma::DmaRegion;
use pmio::request::{Io, IoBuf, Op, Request};
use pmio_nvme::emu::{Emu, EmuConfig, pin_to_core};
use pmio_nvme::{Controller, NvmeOptions};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() -> Result<()> {
    let mut seconds = 3u64;
    let mut qd = 32usize;
    let mut op = Op::Read;
    let mut bs = 4096usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => seconds = val()?.parse()?,
            "--qd" => qd = val()?.parse()?,
            "--bs" => bs = val()?.parse()?,
            "--op" => {
                op = match val()?.as_str() {
                    "read" => Op::Read,
                    "write" => Op::Write,
                    "flush" => Op::Flush,
                    o => bail!("--op {o}: expected read, write or flush"),
                }
            }
            _ => bail!("unknown argument {a}"),
        }
    }
    if qd == 0 || qd > 1023 || bs == 0 || !bs.is_multiple_of(512) || bs > 128 << 10 {
        bail!("--qd must be 1..=1023 and --bs a multiple of 512 up to 128 KiB");
    }
    let emu = Emu::new(EmuConfig {
        blocks: 1 << 17,
        ..EmuConfig::default()
    });
    let c = Controller::attach_with(emu.clone(), emu.clone(), NvmeOptions::default())?;
    let mut q = c.bdev(1).context("namespace 1")?.open_qpair(qd as u32)?;
    let mem = DmaRegion::new(qd * bs)?;
    // SAFETY: `mem` outlives the controller (dropped after it, at the end of main).
    unsafe { c.dma_register(mem.as_ptr(), mem.len())? };
    let _emu_thread = emu.spawn(Some(0));
    pin_to_core(1);

    let nblocks = (bs / 512) as u32;
    let blocks = 1u64 << 17;
    let mut rqs: Vec<Request> = (0..qd)
        .map(|t| Request {
            tag: t as u16,
            ..Request::default()
        })
        .collect();
    let mut lba = 0u64;
    let mut prep = |rq: &mut Request| {
        lba = (lba + 7919 * u64::from(nblocks)) % (blocks - u64::from(nblocks));
        let t = usize::from(rq.tag);
        let io = Io {
            op,
            lba: if op == Op::Flush { 0 } else { lba },
            nblocks: if op == Op::Flush { 0 } else { nblocks },
            buf: if op == Op::Flush {
                IoBuf::EMPTY
            } else {
                // SAFETY: inside `mem`; one slot per tag, untouched while its I/O runs.
                unsafe { IoBuf::from_raw_parts(mem.as_ptr().add(t * bs), bs as u32) }
            },
            ..Io::default()
        };
        rq.prepare(&io, 0);
    };
    let mut tags: Vec<u16> = (0..qd as u16).collect();
    for rq in rqs.iter_mut() {
        prep(rq);
    }
    let mut done = Vec::with_capacity(qd);
    let mut ios = 0u64;
    let mut errors = 0u64;
    let (t0, cpu0) = (Instant::now(), thread_cpu_ns());
    let end = t0 + Duration::from_secs(seconds);
    q.submit(&mut rqs, &tags);
    let mut polls = 0u64;
    let mut batches = 0u64;
    loop {
        done.clear();
        q.poll(&mut rqs, &mut done, qd);
        polls += 1;
        if done.is_empty() {
            if polls.is_multiple_of(4096) && Instant::now() >= end {
                break;
            }
            continue;
        }
        tags.clear();
        for &t in &done {
            let rq = &mut rqs[usize::from(t)];
            if !rq.status.is_success() {
                errors += 1;
            }
            prep(rq);
            tags.push(t);
        }
        ios += done.len() as u64;
        batches += 1;
        if polls.is_multiple_of(64) && Instant::now() >= end {
            break;
        }
        q.submit(&mut rqs, &tags);
    }
    let (wall, cpu) = (t0.elapsed(), thread_cpu_ns() - cpu0);
    // Drain what is still in flight.
    let drain_end = Instant::now() + Duration::from_secs(5);
    while q.outstanding() > 0 && Instant::now() < drain_end {
        done.clear();
        q.poll(&mut rqs, &mut done, qd);
    }
    let s = q.stats();
    if s.completed < ios {
        bail!("driver counted {} completions for {ios} I/Os", s.completed);
    }
    println!(
        "op {:?} bs {bs} qd {qd}: {ios} I/Os in {:.2} s = {:.0} kIOPS; wall {:.0} ns/IO; submitter CPU {:.0} ns/IO; avg completions per productive poll {:.1}; errors {errors}; timeouts {}",
        op,
        wall.as_secs_f64(),
        ios as f64 / wall.as_secs_f64() / 1e3,
        wall.as_nanos() as f64 / ios.max(1) as f64,
        cpu as f64 / ios.max(1) as f64,
        ios as f64 / batches.max(1) as f64,
        s.timeouts
    );
    drop(q);
    c.detach()?;
    drop(c);
    drop(mem);
    Ok(())
}
