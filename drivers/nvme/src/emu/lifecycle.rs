//! The driver against the emulator, one request at a time: bring-up (limits, a controller left
//! enabled, NVMe 1.0, one that never gets ready), the commands besides read and write, the
//! requests refused before they reach the device, status retries, queue IDs, DMA
//! registrations and detach. The emulator processes each command when its doorbell is written.

use std::time::Duration;

use pmio::bdev::{BlockDevice, DriverQueue};
use pmio::dma::DmaRegion;
use pmio::hctx::HctxType;
use pmio::request::{Io, IoBuf, IoStatus, Op, Request};

use super::tests::{Buf, attach};
use super::*;
use crate::ctrlr::{Controller, InitState, NvmeOptions};
use crate::dma::DmaMapper;
use crate::error::{IoError, NvmeError};
use crate::qpair::NvmeQpair;
use crate::regs::RegisterIo;
use crate::spec::{Status, sct};

/// The default controller: 8192 blocks of 512 bytes, MDTS 5 (128 KiB), 8 I/O queue pairs.
fn emu() -> Arc<Emu> {
    Emu::new(EmuConfig::default())
}

/// Submits `ios` (tags 0..) in one batch and polls until each has completed exactly once:
/// returns their statuses.
fn run(q: &mut NvmeQpair, ios: &[Io]) -> Vec<IoStatus> {
    let mut rqs = vec![Request::default(); 8];
    let tags: Vec<u16> = (0..ios.len() as u16).collect();
    for (i, io) in ios.iter().enumerate() {
        rqs[i].tag = i as u16;
        rqs[i].prepare(io, 0);
    }
    q.submit(&mut rqs, &tags);
    let mut done = Vec::with_capacity(8);
    for _ in 0..100 {
        q.poll(&mut rqs, &mut done, 8);
        if done.len() == ios.len() {
            break;
        }
    }
    assert_eq!(done.len(), ios.len(), "all requests completed once");
    let mut sorted = done.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), done.len(), "no tag completed twice: {done:?}");
    assert_eq!(q.outstanding(), 0);
    (0..ios.len()).map(|i| rqs[i].status).collect()
}

fn io(op: Op, lba: u64, nblocks: u32, buf: IoBuf) -> Io {
    Io {
        op,
        lba,
        nblocks,
        buf,
        ..Io::default()
    }
}

#[test]
fn emu_attach_finds_namespace_and_limits() {
    let emu = emu();
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.namespaces().len(), 1);
    assert_eq!(c.max_transfer_bytes(), 4096 << 5, "MDTS 5");
    let b = c.bdevs();
    let info = b[0].info();
    assert_eq!(info.name, "Nvme0n1");
    assert_eq!(info.block_size, 512);
    assert_eq!(info.num_blocks, 8192);
    assert_eq!(info.max_transfer_blocks, 256);
    assert!(info.supported_ops.contains(Op::Discard));
    assert!(info.supported_ops.contains(Op::WriteZeroes));
    assert_eq!(
        emu.stats().disables,
        0,
        "a disabled controller is not reset"
    );
    assert!(!c.reset_at_attach());
    // The UUID is derived from the controller's identity: the same on every attach.
    let again = attach(&emu, NvmeOptions::default());
    assert_eq!(again.bdevs()[0].info().uuid, info.uuid);
    assert_eq!(info.uuid.0[6] >> 4, 4, "version 4 layout");
}

#[test]
fn emu_controller_left_enabled_is_reset() {
    let emu = emu();
    // A previous user crashed with the controller enabled (and ready).
    emu.write32(crate::regs::off::CC, 1);
    assert_eq!(emu.read32(crate::regs::off::CSTS) & 1, 1);
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(emu.stats().disables, 1);
    assert!(c.reset_at_attach());
}

#[test]
fn emu_nvme_1_0_controller_enumerates_namespaces_without_the_active_list() {
    let emu = Emu::new(EmuConfig {
        version: 0x0001_0000,
        ..EmuConfig::default()
    });
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.version(), 0x0001_0000);
    assert_eq!(c.bdevs().len(), 1);
    assert_eq!(c.bdevs()[0].info().name, "Nvme0n1");
}

#[test]
fn emu_ready_timeout_at_attach_is_reported() {
    let emu = emu();
    // CSTS.RDY never follows CC.EN = 1; CAP.TO is 1 (500 ms).
    emu.set_ready_delays(Duration::ZERO, Duration::MAX);
    let t = std::time::Instant::now();
    match Controller::attach_with(emu.clone(), emu.clone(), NvmeOptions::default()) {
        Err(NvmeError::Timeout { state, ms, .. }) => {
            assert_eq!(state, InitState::EnableWaitForReady1.describe());
            assert_eq!(ms, 500);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("attach succeeded without CSTS.RDY"),
    }
    assert!(t.elapsed() >= Duration::from_millis(500));
}

/// Write Zeroes and Deallocate zero exactly their blocks; Flush succeeds; each is one command.
#[test]
fn emu_write_zeroes_discard_and_flush() {
    let emu = emu();
    let c = attach(&emu, NvmeOptions::default());
    let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
    let buf = Buf::new(&c, 16 << 10);
    buf.fill(0, &[0x5a; 16 << 10]);
    let st = run(&mut q, &[io(Op::Write, 10, 20, buf.io(0, 20 * 512))]);
    assert_eq!(st, vec![IoStatus::Success]);
    let st = run(
        &mut q,
        &[
            io(Op::WriteZeroes, 10, 8, IoBuf::EMPTY),
            io(Op::Discard, 20, 8, IoBuf::EMPTY),
            io(Op::Flush, 0, 0, IoBuf::EMPTY),
        ],
    );
    assert_eq!(st, vec![IoStatus::Success; 3]);
    assert!(emu.disk(10 * 512, 8 * 512).iter().all(|&b| b == 0));
    assert!(emu.disk(20 * 512, 8 * 512).iter().all(|&b| b == 0));
    assert!(emu.disk(18 * 512, 2 * 512).iter().all(|&b| b == 0x5a));
    assert!(emu.disk(28 * 512, 2 * 512).iter().all(|&b| b == 0x5a));
    assert_eq!(q.stats().submitted, 4);
    assert_eq!(emu.stats().io_commands, 4);
}

#[test]
fn emu_bad_requests_are_rejected_not_sent() {
    let emu = emu();
    let c = attach(&emu, NvmeOptions::default());
    let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
    let buf = Buf::new(&c, 1 << 20);
    let mut other = vec![0u64; 64];
    // SAFETY: `other` outlives the request, which is rejected before reaching the device.
    let unregistered = unsafe { IoBuf::from_raw_parts(other.as_mut_ptr().cast(), 512) };
    let st = run(
        &mut q,
        &[
            io(Op::Read, 0, 257, buf.io(0, 257 * 512)),
            io(Op::Read, 8191, 2, buf.io(0, 1024)),
            io(Op::Write, 0, 4, buf.io(0, 1024)),
            io(Op::Read, 0, 1, buf.io(2, 512)),
            io(Op::Read, 0, 1, unregistered),
        ],
    );
    assert_eq!(
        st,
        vec![
            IoStatus::Errno(libc::EINVAL),
            IoStatus::Errno(libc::ERANGE),
            IoStatus::Errno(libc::EINVAL),
            IoStatus::Errno(libc::EINVAL),
            IoStatus::Errno(libc::EFAULT),
        ]
    );
    assert_eq!(q.stats().rejected, 5);
    assert_eq!(q.stats().submitted, 0);
    assert_eq!(emu.stats().io_commands, 0);
    assert!(matches!(
        q.last_error(),
        Some(IoError::NotRegistered { .. })
    ));
    let too_large = IoError::TooLarge {
        bytes: 257 * 512,
        max: 128 << 10,
    };
    assert!(too_large.to_string().contains("MDTS"));
}

/// A retryable status is retried within the budget (4) and reported with the device's status
/// beyond it; a media error is never retried.
#[test]
fn emu_retryable_status_is_retried_then_reported() {
    let emu = emu();
    let c = attach(&emu, NvmeOptions::default());
    let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
    let buf = Buf::new(&c, 4096);
    let not_ready = Status::new(sct::GENERIC, 0x82, false);
    emu.inject(FaultRule::new(Fault::Status(not_ready)).times(Some(2)));
    let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
    assert_eq!(st, vec![IoStatus::Success]);
    assert_eq!(q.stats().retries, 2);
    emu.inject(FaultRule::new(Fault::Status(not_ready)).times(Some(5)));
    let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
    assert_eq!(st, vec![IoStatus::Nvme(not_ready.to_nvme_status())]);
    assert_eq!(q.stats().retries, 2 + 4);
    let media = Status::new(sct::MEDIA, 0x81, false);
    emu.inject(FaultRule::new(Fault::Status(media)));
    let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
    assert_eq!(st, vec![IoStatus::Nvme(media.to_nvme_status())]);
    assert_eq!(q.stats().retries, 2 + 4);
    assert_eq!(q.last_error(), Some(IoError::Status(media)));
    assert_eq!(emu.stats().status_injected, 2 + 5 + 1);
}

#[test]
fn emu_queue_ids_run_out_cleanly() {
    let emu = Emu::new(EmuConfig {
        max_io_queues: 4,
        ..EmuConfig::default()
    });
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.io_queues(), 4);
    let b = c.bdev(1).unwrap();
    let qs: Vec<_> = (0..4).map(|_| b.open_qpair(4).unwrap()).collect();
    assert!(matches!(
        b.open_qpair(4),
        Err(NvmeError::NoQueues { granted: 4, .. })
    ));
    drop(qs);
    assert!(b.open_qpair(4).is_ok());
}

#[test]
fn emu_detach_shuts_down_and_unmaps() {
    let emu = emu();
    let c = attach(&emu, NvmeOptions::default());
    let bdev = c.bdev(1).unwrap();
    let q = bdev.open_queue(HctxType::Default, 0, 4).unwrap();
    let mem = DmaRegion::new(4096).unwrap();
    // SAFETY: `mem` outlives the controller (dropped at the end of the test).
    unsafe { bdev.register_memory(&[(mem.as_ptr(), mem.len()), (mem.as_ptr(), 4096)]) };
    assert_eq!(emu.mapped(), 3, "admin, qpair, and the region once");
    drop(q);
    c.detach().unwrap();
    assert_eq!(emu.shst(), 2);
    assert!(matches!(
        bdev.open_queue(HctxType::Default, 0, 4),
        Err(pmio::BdevError::Removed(_))
    ));
    drop(bdev);
    drop(c);
    assert_eq!(emu.mapped(), 0, "every DMA mapping removed");
    // A second attach of the same controller works.
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.bdevs().len(), 1);
}

#[test]
fn emu_stale_registrations_are_replaced_when_their_address_is_reused() {
    let emu = emu();
    let m = crate::dma::Mappings::new(emu.clone());
    let (a, len) = (0x1000_0000usize, 0x20_0000usize);
    // SAFETY: the emulator never touches memory on map; nothing does I/O to these addresses.
    unsafe { m.register(&[(a as *mut u8, len)]).unwrap() };
    assert_eq!(emu.mapped(), 1);
    // Registering again (new memory at a reused address) replaces the mapping.
    // SAFETY: as above.
    unsafe { m.register(&[((a + 4096) as *mut u8, 4096)]).unwrap() };
    assert_eq!(emu.mapped(), 1);
    // Driver memory over a stale registration evicts it.
    // SAFETY: as above.
    unsafe { m.map((a + 4096) as *mut u8, len).unwrap() };
    assert_eq!(emu.mapped(), 1);
    // An overlap with memory that is not a registration still fails.
    // SAFETY: as above.
    let e = unsafe { m.map((a + 8192) as *mut u8, 4096) }.unwrap_err();
    assert!(e.to_string().contains("File exists"), "{e}");
    emu.unmap((a + 4096) as *mut u8, len).unwrap();
    // Two registrations, both removed by unregister_all; unregister of an unknown range is a
    // no-op.
    // SAFETY: as above.
    unsafe {
        m.register(&[(a as *mut u8, 4096), ((a + len) as *mut u8, 4096)])
            .unwrap()
    };
    assert_eq!(emu.mapped(), 2);
    m.unregister(a as *mut u8, 8192).unwrap();
    assert_eq!(emu.mapped(), 2);
    m.unregister(a as *mut u8, 4096).unwrap();
    assert_eq!(emu.mapped(), 1);
    m.unregister_all();
    assert_eq!(emu.mapped(), 0);
}
