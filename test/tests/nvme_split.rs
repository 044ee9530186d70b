//! 1 MiB I/O on the NVMe driver over the software controller with a 64 KiB MDTS (issue 15):
//! the block layer splits each I/O into 64 KiB commands (the driver refuses anything larger),
//! at offsets that are not multiples of 64 KiB, on queues shallower than the children of one
//! I/O, with and without mq-deadline; every block read back is checked against the last write
//! (`--verify`-style: each block carries its LBA and the version of the write), and the
//! controller's media is compared with the expected image at the end.

use std::sync::Arc;

use pmio::bdev::{BdevQueue, BdevQueueOptions, SchedMode};
use pmio::plug::Plug;
use pmio::sched::SharedDeadline;
use pmio::{BlockDevice, DmaRegion, Io, IoBuf, Op};
use pmio_nvme::emu::{Emu, EmuConfig};
use pmio_nvme::{Controller, NvmeOptions};

const BS: usize = 512;
/// 1 MiB I/Os.
const IO_BLOCKS: u64 = 2048;
/// Units: one 1 MiB I/O each, spaced so that each starts at its own odd offset.
const UNITS: u64 = 12;
const SPACING: u64 = IO_BLOCKS + 64;

/// The unit's first block: `u × SPACING` plus a shift that is never a multiple of the 64 KiB
/// transfer (128 blocks), so children start off any 64 KiB line.
fn unit_lba(u: u64) -> u64 {
    u * SPACING + 1 + (u * 37) % 61
}

fn fill_block(lba: u64, version: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(&lba.to_le_bytes());
    out[8..16].copy_from_slice(&version.to_le_bytes());
    let mut x = lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_add(7);
    for b in out[16..].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn attach() -> (Arc<Emu>, Controller) {
    let emu = Emu::new(EmuConfig {
        blocks: UNITS * SPACING + 64,
        block_shift: 9,
        // 2^4 pages of 4 KiB: 64 KiB, 128 blocks per command.
        mdts: 4,
        ..EmuConfig::default()
    });
    let c = Controller::attach_with(emu.clone(), emu.clone(), NvmeOptions::default())
        .expect("attach the emulated controller");
    (emu, c)
}

/// One run: `ops` I/Os on random units (writes and reads, at most `depth` in flight, never
/// two on one unit), every read checked; then the media compared.
fn run(sched: bool, depth: u32, ops: u32, seed: u64) {
    let (emu, c) = attach();
    let dev = c.bdev(1).expect("namespace 1");
    assert_eq!(dev.info().max_transfer_blocks, 128, "64 KiB MDTS");
    let mode = if sched {
        let opts = dev.info().deadline_options(depth, 1);
        SchedMode::MqDeadline {
            dd: Arc::new(SharedDeadline::new(opts).unwrap()),
            owner: 0,
        }
    } else {
        SchedMode::None
    };
    let dev: Arc<dyn BlockDevice> = dev;
    let mut q = BdevQueue::open(Arc::clone(&dev), BdevQueueOptions { depth, sched: mode })
        .expect("open the queue");
    let slot_bytes = IO_BLOCKS as usize * BS;
    let region = DmaRegion::new(depth as usize * slot_bytes).unwrap();
    // SAFETY: the region outlives every I/O and the controller (dropped at the end).
    unsafe { dev.register_memory(&[(region.as_ptr(), region.len())]) };
    let slot_buf = |slot: usize| {
        // SAFETY: in the region; a slot serves one I/O at a time.
        unsafe { IoBuf::from_raw_parts(region.as_ptr().add(slot * slot_bytes), slot_bytes as u32) }
    };
    let slot_bytes_mut = |slot: usize| {
        // SAFETY: as above; only touched while its slot has no I/O in flight.
        unsafe {
            std::slice::from_raw_parts_mut(region.as_ptr().add(slot * slot_bytes), slot_bytes)
        }
    };

    let mut plug = Plug::default();
    let mut rng = seed | 1;
    let mut version = vec![0u64; UNITS as usize]; // 0: never written
    let mut busy = vec![false; UNITS as usize];
    let mut free: Vec<usize> = (0..depth as usize).collect();
    // token = slot << 32 | unit << 1 | is_write; the version written lives in `pending`.
    let mut pending: Vec<Option<u64>> = vec![None; depth as usize];
    let (mut issued, mut checked_blocks, mut busy_answers) = (0u32, 0u64, 0u32);
    // The first pass writes every unit in order, then random reads and writes.
    let mut next_fill = 0u64;
    while issued < ops || q.outstanding() > 0 {
        // Submit while there are slots and units.
        plug.begin();
        while issued < ops
            && let Some(&slot) = free.last()
        {
            let (unit, write) = if next_fill < UNITS {
                (next_fill, true)
            } else {
                let u = xorshift(&mut rng) % UNITS;
                (u, xorshift(&mut rng).is_multiple_of(3))
            };
            if busy[unit as usize] {
                break;
            }
            let lba = unit_lba(unit);
            let v = version[unit as usize] + 1;
            if write {
                for (b, blk) in slot_bytes_mut(slot).chunks_exact_mut(BS).enumerate() {
                    fill_block(lba + b as u64, v, blk);
                }
            }
            let io = Io {
                op: if write { Op::Write } else { Op::Read },
                lba,
                nblocks: IO_BLOCKS as u32,
                buf: slot_buf(slot),
                token: (slot as u64) << 32 | unit << 1 | u64::from(write),
                ..Io::default()
            };
            q.expect(&mut plug, &io);
            match q.submit(&mut plug, &io) {
                Ok(_) => {
                    free.pop();
                    busy[unit as usize] = true;
                    pending[slot] = write.then_some(v);
                    issued += 1;
                    if next_fill < UNITS {
                        next_fill += 1;
                    }
                }
                Err(e) => {
                    assert!(e.is_busy(), "{e}");
                    busy_answers += 1;
                    break;
                }
            }
        }
        plug.finish();
        q.flush();
        let mut done = Vec::new();
        q.poll(16, |rq| done.push(*rq));
        for rq in done {
            let slot = (rq.token >> 32) as usize;
            let unit = (rq.token & 0xffff_ffff) >> 1;
            let write = rq.token & 1 == 1;
            assert!(
                rq.status.is_success(),
                "{:?} of unit {unit}: {:?}",
                rq.op,
                rq.status
            );
            assert_eq!((rq.lba, u64::from(rq.nblocks)), (unit_lba(unit), IO_BLOCKS));
            if write {
                version[unit as usize] = pending[slot].take().expect("a write's version");
            } else {
                let v = version[unit as usize];
                let mut want = vec![0u8; BS];
                for (b, blk) in slot_bytes_mut(slot).chunks_exact(BS).enumerate() {
                    let lba = rq.lba + b as u64;
                    fill_block(lba, v, &mut want);
                    assert!(
                        blk == want.as_slice(),
                        "unit {unit} block {lba}: not version {v}"
                    );
                    checked_blocks += 1;
                }
            }
            busy[unit as usize] = false;
            free.push(slot);
        }
    }
    assert!(checked_blocks > 0, "some reads were checked");
    // The media: every unit holds its last version, nothing outside the units was written.
    let mut want = vec![0u8; BS];
    for u in 0..UNITS {
        let disk = emu.disk(unit_lba(u) as usize * BS, IO_BLOCKS as usize * BS);
        for (b, blk) in disk.chunks_exact(BS).enumerate() {
            fill_block(unit_lba(u) + b as u64, version[u as usize], &mut want);
            assert!(blk == want.as_slice(), "media: unit {u} block {b}");
        }
        let gap = emu.disk((u * SPACING) as usize * BS, BS);
        assert!(
            gap.iter().all(|&x| x == 0),
            "media: gap before unit {u} written"
        );
    }
    assert_eq!(q.busy_tags(pmio::HctxType::Default), 0);
    // With 4 tags and 16 children per I/O, submitters are told to wait now and then.
    if depth < 16 && !sched {
        assert!(busy_answers > 0, "a full queue answered busy");
    }
    drop(q);
    c.detach().unwrap();
    drop(region);
}

#[test]
fn nvme_emulator_64k_mdts_1m_io_split_and_verified() {
    run(false, 8, 60, 0x5eed);
}

#[test]
fn nvme_emulator_64k_mdts_1m_io_on_a_queue_shallower_than_one_split() {
    run(false, 3, 40, 0xbeef);
}

#[test]
fn nvme_emulator_64k_mdts_1m_io_with_mq_deadline() {
    run(true, 4, 40, 0xf00d);
}
