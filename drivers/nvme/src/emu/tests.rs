//! The driver against the emulator: normal operation, then each fault (`fault_…`).

use std::sync::Arc;

use pmio::bdev::DriverQueue;
use pmio::dma::DmaRegion;
use pmio::request::{Io, IoBuf, IoStatus, Op, Request};

use super::*;
use crate::ctrlr::{Controller, NvmeOptions};
use crate::qpair::NvmeQpair;

pub(super) fn attach(emu: &Arc<Emu>, opts: NvmeOptions) -> Controller {
    Controller::attach_with(emu.clone(), emu.clone(), opts).expect("attach")
}

pub(super) struct Buf {
    pub region: DmaRegion,
}

impl Buf {
    pub fn new(ctrlr: &Controller, len: usize) -> Buf {
        let region = DmaRegion::new(len).unwrap();
        // SAFETY: the region outlives the controller in every test (declared after it is
        // dropped... the controller unmaps it when it goes).
        unsafe { ctrlr.dma_register(region.as_ptr(), region.len()).unwrap() };
        Buf { region }
    }

    pub fn io(&self, off: usize, len: usize) -> IoBuf {
        assert!(off + len <= self.region.len());
        // SAFETY: in bounds; the test does not touch the bytes while the I/O runs.
        unsafe { IoBuf::from_raw_parts(self.region.as_ptr().add(off), len as u32) }
    }

    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: in bounds; called only when no I/O to the range is in flight.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(off), len) }
    }

    pub fn fill(&self, off: usize, data: &[u8]) {
        // SAFETY: in bounds; no I/O to the range is in flight.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.as_ptr().add(off), data.len())
        };
    }
}

#[test]
fn emu_attach_io_round_trip_and_detach() {
    let emu = Emu::new(EmuConfig::default());
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.io_queues(), 8);
    let b = c.bdev(1).unwrap();
    let mut q: NvmeQpair = b.open_qpair(16).unwrap();
    assert_eq!(emu.io_queues(), (1, 1));
    let buf = Buf::new(&c, 64 << 10);
    let pattern: Vec<u8> = (0..24 << 10).map(|i| (i * 13 + 5) as u8).collect();
    buf.fill(512, &pattern);
    let mut rqs = vec![Request::default(); 16];
    let ios = [
        Io {
            op: Op::Write,
            lba: 100,
            nblocks: 48,
            buf: buf.io(512, 24 << 10),
            ..Io::default()
        },
        Io {
            op: Op::Flush,
            ..Io::default()
        },
    ];
    for (i, io) in ios.iter().enumerate() {
        rqs[i].tag = i as u16;
        rqs[i].prepare(io, 0);
    }
    q.submit(&mut rqs, &[0, 1]);
    let mut done = Vec::new();
    while done.len() < 2 {
        q.poll(&mut rqs, &mut done, 16);
    }
    assert_eq!(rqs[0].status, IoStatus::Success);
    assert_eq!(rqs[1].status, IoStatus::Success);
    assert_eq!(emu.disk(100 * 512, 24 << 10), pattern);
    let read = Io {
        op: Op::Read,
        lba: 100,
        nblocks: 48,
        buf: buf.io(32 << 10, 24 << 10),
        ..Io::default()
    };
    rqs[2].tag = 2;
    rqs[2].prepare(&read, 0);
    // Stepped mode: nothing happens until the emulator steps.
    emu.set_inline(false);
    q.submit(&mut rqs, &[2]);
    done.clear();
    assert_eq!(q.poll(&mut rqs, &mut done, 16), 0);
    assert_eq!(emu.step(), 1);
    q.poll(&mut rqs, &mut done, 16);
    assert_eq!(done, vec![2]);
    assert_eq!(buf.bytes(32 << 10, 24 << 10), &pattern[..]);
    drop(q);
    assert_eq!(emu.io_queues(), (0, 0));
    c.detach().unwrap();
    assert_eq!(emu.shst(), 2);
}
