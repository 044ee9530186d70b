//! A tiny software NVMe controller for unit tests: registers, enable/disable/shutdown, the
//! admin commands the driver uses, and NVM I/O against RAM, processed synchronously when a
//! doorbell is written. DMA goes through the mappings the driver made (anything else fails with
//! a data transfer error, as an IOMMU would). Tests can inject a status or a duplicate
//! completion for the next I/O commands.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::regs::{RegisterIo, off};
use crate::spec::{
    Cqe, DsmRange, IdentifyController, IdentifyNamespace, LbaFormat, Sqe, Status, admin_opc, cns,
    nvm_opc, sct,
};

pub const BLOCK: usize = 512;

struct Sq {
    base: u64,
    entries: u32,
    head: u32,
    cqid: u16,
}

struct Cq {
    base: u64,
    entries: u32,
    tail: u32,
    phase: bool,
}

/// Test knobs and observations.
#[derive(Default)]
pub struct Knobs {
    /// Complete the next I/O commands with these statuses (front first).
    pub statuses: Vec<Status>,
    /// Post the next I/O completion twice.
    pub duplicate_next: bool,
    /// Never set CSTS.RDY.
    pub stuck_not_ready: bool,
    /// Behave as an NVMe 1.0 controller (no active namespace list).
    pub legacy: bool,
    /// Times the controller was disabled (EN 1 → 0).
    pub disables: u32,
    /// Commands seen, by (queue, opcode).
    pub commands: Vec<(u16, u8)>,
}

struct State {
    cap: u64,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: HashMap<u16, Sq>,
    cqs: HashMap<u16, Cq>,
    disk: Vec<u8>,
    mapped: Vec<(u64, usize)>,
    knobs: Knobs,
}

/// The fake controller: register access and DMA mapping in one.
pub struct FakeCtrl {
    st: Mutex<State>,
}

impl FakeCtrl {
    /// A controller with one namespace of `blocks` 512-byte blocks, MDTS 5 (128 KiB),
    /// MQES 255, TO 1 (500 ms).
    pub fn new(blocks: usize) -> FakeCtrl {
        FakeCtrl {
            st: Mutex::new(State {
                cap: 255 | 1 << 16 | 1 << 24 | 1 << 37 | 4 << 52,
                cc: 0,
                csts: 0,
                aqa: 0,
                asq: 0,
                acq: 0,
                sqs: HashMap::new(),
                cqs: HashMap::new(),
                disk: vec![0; blocks * BLOCK],
                mapped: Vec::new(),
                knobs: Knobs::default(),
            }),
        }
    }

    /// Changes test knobs / reads observations.
    pub fn with<R>(&self, f: impl FnOnce(&mut Knobs) -> R) -> R {
        f(&mut self.st.lock().unwrap().knobs)
    }

    /// Leaves the controller enabled and ready, as a crashed previous user would.
    pub fn force_enabled(&self) {
        let mut s = self.st.lock().unwrap();
        s.cc |= 1;
        s.csts |= 1;
    }

    /// I/O queues currently created.
    pub fn io_queues(&self) -> (usize, usize) {
        let s = self.st.lock().unwrap();
        (
            s.sqs.keys().filter(|&&q| q != 0).count(),
            s.cqs.keys().filter(|&&q| q != 0).count(),
        )
    }

    /// CSTS.SHST.
    pub fn shst(&self) -> u32 {
        (self.st.lock().unwrap().csts >> 2) & 3
    }

    /// Bytes of the namespace.
    pub fn disk(&self, offset: usize, len: usize) -> Vec<u8> {
        self.st.lock().unwrap().disk[offset..offset + len].to_vec()
    }

    /// DMA ranges currently mapped.
    pub fn mapped(&self) -> usize {
        self.st.lock().unwrap().mapped.len()
    }
}

impl State {
    fn dma_ok(&self, iova: u64, len: usize) -> bool {
        self.mapped
            .iter()
            .any(|&(a, l)| a <= iova && iova + len as u64 <= a + l as u64)
    }

    fn read_mem(&self, iova: u64, out: &mut [u8]) -> bool {
        if !self.dma_ok(iova, out.len()) {
            return false;
        }
        // SAFETY: the range lies in memory the driver mapped for DMA (IOVA = VA) and keeps
        // alive while mapped.
        unsafe { std::ptr::copy_nonoverlapping(iova as *const u8, out.as_mut_ptr(), out.len()) };
        true
    }

    fn write_mem(&self, iova: u64, data: &[u8]) -> bool {
        if !self.dma_ok(iova, data.len()) {
            return false;
        }
        // SAFETY: as read_mem.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), iova as *mut u8, data.len()) };
        true
    }

    /// The (address, length) segments a command's PRPs describe.
    fn prp_segments(&self, sqe: &Sqe, len: usize) -> Option<Vec<(u64, usize)>> {
        let page = 4096u64;
        let first = ((page - (sqe.prp1 & (page - 1))) as usize).min(len);
        let mut segs = vec![(sqe.prp1, first)];
        let mut left = len - first;
        if left == 0 {
            return Some(segs);
        }
        if left <= page as usize {
            segs.push((sqe.prp2, left));
            return Some(segs);
        }
        let n = left.div_ceil(page as usize);
        let mut list = vec![0u8; n * 8];
        if !self.read_mem(sqe.prp2, &mut list) {
            return None;
        }
        for e in list.chunks(8) {
            let a = u64::from_le_bytes(e.try_into().unwrap());
            let l = left.min(page as usize);
            segs.push((a, l));
            left -= l;
        }
        Some(segs)
    }

    fn post(&mut self, cqid: u16, sqid: u16, cid: u16, st: Status, dw0: u32) {
        let sqhd = self.sqs.get(&sqid).map(|s| s.head).unwrap_or(0) as u16;
        let Some(cq) = self.cqs.get_mut(&cqid) else {
            return;
        };
        let cqe = Cqe {
            dw0,
            dw1: 0,
            sqhd,
            sqid,
            cid,
            status: st.0 << 1 | cq.phase as u16,
        };
        let addr = cq.base + u64::from(cq.tail) * 16;
        cq.tail += 1;
        if cq.tail == cq.entries {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
        // SAFETY: Cqe is 16 bytes of plain integers.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(cqe) };
        self.write_mem(addr, &bytes);
    }

    fn enable(&mut self) {
        self.sqs.clear();
        self.cqs.clear();
        let n = (self.aqa & 0xfff) + 1;
        self.sqs.insert(
            0,
            Sq {
                base: self.asq,
                entries: n,
                head: 0,
                cqid: 0,
            },
        );
        self.cqs.insert(
            0,
            Cq {
                base: self.acq,
                entries: ((self.aqa >> 16) & 0xfff) + 1,
                tail: 0,
                phase: true,
            },
        );
        if !self.knobs.stuck_not_ready {
            self.csts |= 1;
        }
    }

    fn sq_doorbell(&mut self, qid: u16, tail: u32) {
        loop {
            let Some(sq) = self.sqs.get_mut(&qid) else {
                return;
            };
            if sq.head == tail % sq.entries {
                return;
            }
            let addr = sq.base + u64::from(sq.head) * 64;
            sq.head = (sq.head + 1) % sq.entries;
            let cqid = sq.cqid;
            let mut raw = [0u8; 64];
            if !self.read_mem(addr, &mut raw) {
                return;
            }
            // SAFETY: Sqe is 64 bytes of plain integers; any bytes are valid.
            let sqe: Sqe = unsafe { std::mem::transmute(raw) };
            self.knobs.commands.push((qid, sqe.opcode()));
            let (st, dw0) = if qid == 0 {
                self.admin(&sqe)
            } else {
                self.io(&sqe)
            };
            self.post(cqid, qid, sqe.cid(), st, dw0);
            if qid != 0 && std::mem::take(&mut self.knobs.duplicate_next) {
                self.post(cqid, qid, sqe.cid(), st, dw0);
            }
        }
    }

    fn admin(&mut self, sqe: &Sqe) -> (Status, u32) {
        let invalid = (Status::new(sct::GENERIC, 0x02, true), 0);
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        match sqe.opcode() {
            admin_opc::IDENTIFY => {
                let mut page = [0u8; 4096];
                match sqe.cdw10 & 0xff {
                    cns::CONTROLLER => {
                        let mut id = IdentifyController::zeroed();
                        id.mn[..4].copy_from_slice(b"FAKE");
                        id.mdts = 5;
                        id.nn = 1;
                        id.oncs =
                            IdentifyController::ONCS_DSM | IdentifyController::ONCS_WRITE_ZEROES;
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyController, [u8; 4096]>(id) };
                    }
                    cns::ACTIVE_NS_LIST if self.knobs.legacy => return invalid,
                    cns::ACTIVE_NS_LIST => {
                        if sqe.nsid < 1 {
                            page[..4].copy_from_slice(&1u32.to_le_bytes());
                        }
                    }
                    cns::NAMESPACE if sqe.nsid == 1 => {
                        let mut ns = IdentifyNamespace::zeroed();
                        ns.nsze = (self.disk.len() / BLOCK) as u64;
                        ns.ncap = ns.nsze;
                        ns.lbaf[0] = LbaFormat(9 << 16);
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyNamespace, [u8; 4096]>(ns) };
                    }
                    _ => return invalid,
                }
                if self.write_mem(sqe.prp1, &page) {
                    (Status::SUCCESS, 0)
                } else {
                    xfer_err
                }
            }
            admin_opc::SET_FEATURES => (Status::SUCCESS, 3 << 16 | 3),
            admin_opc::CREATE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as u16;
                let entries = (sqe.cdw10 >> 16) + 1;
                if qid == 0 || qid > 4 || self.cqs.contains_key(&qid) {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0);
                }
                self.cqs.insert(
                    qid,
                    Cq {
                        base: sqe.prp1,
                        entries,
                        tail: 0,
                        phase: true,
                    },
                );
                (Status::SUCCESS, 0)
            }
            admin_opc::CREATE_IO_SQ => {
                let qid = (sqe.cdw10 & 0xffff) as u16;
                let cqid = (sqe.cdw11 >> 16) as u16;
                if qid == 0 || self.sqs.contains_key(&qid) || !self.cqs.contains_key(&cqid) {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0);
                }
                self.sqs.insert(
                    qid,
                    Sq {
                        base: sqe.prp1,
                        entries: (sqe.cdw10 >> 16) + 1,
                        head: 0,
                        cqid,
                    },
                );
                (Status::SUCCESS, 0)
            }
            admin_opc::DELETE_IO_SQ => match self.sqs.remove(&((sqe.cdw10 & 0xffff) as u16)) {
                Some(_) => (Status::SUCCESS, 0),
                None => (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0),
            },
            admin_opc::DELETE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as u16;
                if self.sqs.values().any(|s| s.cqid == qid) {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x0c, true), 0);
                }
                match self.cqs.remove(&qid) {
                    Some(_) => (Status::SUCCESS, 0),
                    None => (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0),
                }
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }

    fn io(&mut self, sqe: &Sqe) -> (Status, u32) {
        if !self.knobs.statuses.is_empty() {
            return (self.knobs.statuses.remove(0), 0);
        }
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        let lba_range = (Status::new(sct::GENERIC, 0x80, true), 0);
        let blocks = self.disk.len() / BLOCK;
        let nlb = (sqe.cdw12 & 0xffff) as usize + 1;
        let slba = sqe.slba() as usize;
        match sqe.opcode() {
            nvm_opc::FLUSH => (Status::SUCCESS, 0),
            nvm_opc::READ | nvm_opc::WRITE | nvm_opc::WRITE_ZEROES => {
                if slba + nlb > blocks {
                    return lba_range;
                }
                let (start, len) = (slba * BLOCK, nlb * BLOCK);
                if sqe.opcode() == nvm_opc::WRITE_ZEROES {
                    self.disk[start..start + len].fill(0);
                    return (Status::SUCCESS, 0);
                }
                let Some(segs) = self.prp_segments(sqe, len) else {
                    return xfer_err;
                };
                let mut pos = start;
                for (a, l) in segs {
                    let ok = if sqe.opcode() == nvm_opc::READ {
                        let chunk = self.disk[pos..pos + l].to_vec();
                        self.write_mem(a, &chunk)
                    } else {
                        let mut chunk = vec![0u8; l];
                        let ok = self.read_mem(a, &mut chunk);
                        self.disk[pos..pos + l].copy_from_slice(&chunk);
                        ok
                    };
                    if !ok {
                        return xfer_err;
                    }
                    pos += l;
                }
                (Status::SUCCESS, 0)
            }
            nvm_opc::DSM => {
                let n = (sqe.cdw10 & 0xff) as usize + 1;
                let mut raw = vec![0u8; n * 16];
                if !self.read_mem(sqe.prp1, &mut raw) {
                    return xfer_err;
                }
                for r in raw.chunks(16) {
                    let r = DsmRange {
                        cattr: u32::from_le_bytes(r[0..4].try_into().unwrap()),
                        nlb: u32::from_le_bytes(r[4..8].try_into().unwrap()),
                        slba: u64::from_le_bytes(r[8..16].try_into().unwrap()),
                    };
                    let (s, l) = (r.slba as usize, r.nlb as usize);
                    if s + l > blocks {
                        return lba_range;
                    }
                    self.disk[s * BLOCK..(s + l) * BLOCK].fill(0);
                }
                (Status::SUCCESS, 0)
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }
}

impl RegisterIo for FakeCtrl {
    fn read32(&self, o: usize) -> u32 {
        let s = self.st.lock().unwrap();
        match o {
            off::CAP => s.cap as u32,
            0x04 => (s.cap >> 32) as u32,
            off::VS if s.knobs.legacy => 0x0001_0000,
            off::VS => 0x0001_0400,
            off::CC => s.cc,
            off::CSTS => s.csts,
            off::AQA => s.aqa,
            _ => 0,
        }
    }

    fn write32(&self, o: usize, v: u32) {
        let mut s = self.st.lock().unwrap();
        match o {
            off::CC => {
                let was = s.cc & 1 != 0;
                s.cc = v;
                if v & 1 != 0 && !was {
                    s.enable();
                } else if v & 1 == 0 && was {
                    s.knobs.disables += 1;
                    s.csts &= !1;
                    s.csts &= !(3 << 2);
                    s.sqs.clear();
                    s.cqs.clear();
                }
                if (v >> 14) & 3 == 1 {
                    s.csts = (s.csts & !(3 << 2)) | 2 << 2;
                }
            }
            off::AQA => s.aqa = v,
            off::ASQ => s.asq = (s.asq & !0xffff_ffff) | u64::from(v),
            0x2c => s.asq = (s.asq & 0xffff_ffff) | u64::from(v) << 32,
            off::ACQ => s.acq = (s.acq & !0xffff_ffff) | u64::from(v),
            0x34 => s.acq = (s.acq & 0xffff_ffff) | u64::from(v) << 32,
            o if o >= off::DOORBELLS => {
                let idx = (o - off::DOORBELLS) / 4;
                if idx.is_multiple_of(2) && s.csts & 1 != 0 {
                    s.sq_doorbell((idx / 2) as u16, v);
                }
            }
            _ => {}
        }
    }

    fn len(&self) -> usize {
        0x2000
    }
}

impl DmaMapper for FakeCtrl {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut s = self.st.lock().unwrap();
        let (a, end) = (vaddr as u64, vaddr as u64 + len as u64);
        // As VFIO type1: an overlap with an existing mapping is EEXIST.
        if s.mapped.iter().any(|&(m, l)| m < end && a < m + l as u64) {
            return Err(NvmeError::DmaMap {
                op: "map",
                iova: a,
                len,
                source: std::io::Error::from_raw_os_error(libc::EEXIST),
            });
        }
        s.mapped.push((a, len));
        Ok(())
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut s = self.st.lock().unwrap();
        match s.mapped.iter().position(|&m| m == (vaddr as u64, len)) {
            Some(i) => {
                s.mapped.swap_remove(i);
                Ok(())
            }
            None => Err(NvmeError::DmaMap {
                op: "unmap",
                iova: vaddr as u64,
                len,
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            }),
        }
    }
}

/// The driver against the fake controller: bring-up, I/O, errors, shutdown.
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use pmio::bdev::{BlockDevice, DriverQueue};
    use pmio::dma::DmaRegion;
    use pmio::hctx::HctxType;
    use pmio::request::{Io, IoBuf, IoStatus, Op, Request};

    use super::*;
    use crate::ctrlr::{Controller, InitState, NvmeOptions};
    use crate::error::IoError;
    use crate::qpair::NvmeQpair;

    fn attach(fake: &Arc<FakeCtrl>) -> Controller {
        Controller::attach_with(fake.clone(), fake.clone(), NvmeOptions::default()).expect("attach")
    }

    struct Buf {
        region: DmaRegion,
        ctrlr_len: usize,
    }

    impl Buf {
        fn new(ctrlr: &Controller, len: usize) -> Buf {
            let region = DmaRegion::new(len).unwrap();
            // SAFETY: the region outlives the mapping (unregistered in Drop... by the test end).
            unsafe { ctrlr.dma_register(region.as_ptr(), region.len()).unwrap() };
            let ctrlr_len = region.len();
            Buf { region, ctrlr_len }
        }

        fn io(&self, off: usize, len: usize) -> IoBuf {
            assert!(off + len <= self.ctrlr_len);
            // SAFETY: in bounds; the test does not touch the bytes while the I/O runs.
            unsafe { IoBuf::from_raw_parts(self.region.as_ptr().add(off), len as u32) }
        }
    }

    /// Runs requests to completion: returns their statuses.
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
    fn attach_finds_namespace_and_limits() {
        let fake = Arc::new(FakeCtrl::new(4096));
        let c = attach(&fake);
        assert_eq!(c.namespaces().len(), 1);
        assert_eq!(c.io_queues(), 4);
        assert_eq!(c.max_transfer_bytes(), 4096 << 5);
        let b = c.bdevs();
        let info = b[0].info();
        assert_eq!(info.name, "Nvme0n1");
        assert_eq!(info.block_size, 512);
        assert_eq!(info.num_blocks, 4096);
        assert_eq!(info.max_transfer_blocks, 256);
        assert!(info.supported_ops.contains(Op::Discard));
        assert!(info.supported_ops.contains(Op::WriteZeroes));
        assert_eq!(fake.with(|k| k.disables), 0);
        assert!(!c.reset_at_attach());
        // The UUID is derived from the controller's identity: the same on every attach.
        let again = attach(&fake);
        assert_eq!(again.bdevs()[0].info().uuid, info.uuid);
        assert_eq!(info.uuid.0[6] >> 4, 4, "version 4 layout");
    }

    #[test]
    fn controller_left_enabled_is_reset() {
        let fake = Arc::new(FakeCtrl::new(64));
        fake.force_enabled();
        let c = attach(&fake);
        assert_eq!(fake.with(|k| k.disables), 1);
        assert!(c.reset_at_attach());
    }

    #[test]
    fn nvme_1_0_controller_enumerates_namespaces_without_the_active_list() {
        let fake = Arc::new(FakeCtrl::new(64));
        fake.with(|k| k.legacy = true);
        let c = attach(&fake);
        assert_eq!(c.version(), 0x0001_0000);
        assert_eq!(c.bdevs().len(), 1);
        assert_eq!(c.bdevs()[0].info().name, "Nvme0n1");
    }

    #[test]
    fn ready_timeout_is_reported() {
        let fake = Arc::new(FakeCtrl::new(64));
        fake.with(|k| k.stuck_not_ready = true);
        let t = std::time::Instant::now();
        match Controller::attach_with(fake.clone(), fake.clone(), NvmeOptions::default()) {
            Err(NvmeError::Timeout { state, ms, .. }) => {
                assert_eq!(state, InitState::EnableWaitForReady1.describe());
                assert_eq!(ms, 500);
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("attach succeeded without CSTS.RDY"),
        }
        assert!(t.elapsed() >= Duration::from_millis(500));
    }

    #[test]
    fn io_round_trip_with_prp_list() {
        let fake = Arc::new(FakeCtrl::new(4096));
        let c = attach(&fake);
        let bdev = c.bdev(1).unwrap();
        let mut q = bdev.open_qpair(8).unwrap();
        assert_eq!(fake.io_queues(), (1, 1));
        let buf = Buf::new(&c, 64 << 10);
        // 24 KiB starting 512 bytes into a page: PRP1 + a 6-entry list.
        let src = buf.region.as_ptr();
        for i in 0..(24 << 10) {
            // SAFETY: inside the region; no I/O in flight.
            unsafe { *src.add(512 + i) = (i * 7 + 3) as u8 };
        }
        let st = run(&mut q, &[io(Op::Write, 10, 48, buf.io(512, 24 << 10))]);
        assert_eq!(st, vec![IoStatus::Success]);
        let disk = fake.disk(10 * 512, 24 << 10);
        assert!(
            disk.iter()
                .enumerate()
                .all(|(i, &b)| b == (i * 7 + 3) as u8)
        );
        let st = run(&mut q, &[io(Op::Read, 10, 48, buf.io(32 << 10, 24 << 10))]);
        assert_eq!(st, vec![IoStatus::Success]);
        // SAFETY: the read completed; nothing else writes the region.
        let back = unsafe { std::slice::from_raw_parts(src.add(32 << 10), 24 << 10) };
        assert_eq!(back, &disk[..]);

        // Write zeroes, deallocate and flush.
        let st = run(
            &mut q,
            &[
                io(Op::WriteZeroes, 10, 8, IoBuf::EMPTY),
                io(Op::Discard, 20, 8, IoBuf::EMPTY),
                io(Op::Flush, 0, 0, IoBuf::EMPTY),
            ],
        );
        assert_eq!(st, vec![IoStatus::Success; 3]);
        assert!(fake.disk(10 * 512, 8 * 512).iter().all(|&b| b == 0));
        assert!(fake.disk(20 * 512, 8 * 512).iter().all(|&b| b == 0));
        assert!(fake.disk(18 * 512, 2 * 512).iter().any(|&b| b != 0));
        assert_eq!(q.stats().submitted, 5);
        drop(q);
        assert_eq!(fake.io_queues(), (0, 0), "queues deleted on close");
    }

    #[test]
    fn bad_requests_are_rejected_not_sent() {
        let fake = Arc::new(FakeCtrl::new(4096));
        let c = attach(&fake);
        let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
        let buf = Buf::new(&c, 1 << 20);
        let mut other = vec![0u64; 64];
        // SAFETY: `other` outlives the request, which is rejected before reaching the device.
        let unregistered = unsafe { IoBuf::from_raw_parts(other.as_mut_ptr().cast(), 512) };
        let st = run(
            &mut q,
            &[
                io(Op::Read, 0, 257, buf.io(0, 257 * 512)),
                io(Op::Read, 4095, 2, buf.io(0, 1024)),
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

    #[test]
    fn retryable_status_is_retried_then_reported() {
        let fake = Arc::new(FakeCtrl::new(4096));
        let c = attach(&fake);
        let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
        let buf = Buf::new(&c, 4096);
        let not_ready = Status::new(sct::GENERIC, 0x82, false);
        fake.with(|k| k.statuses = vec![not_ready, not_ready]);
        let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
        assert_eq!(st, vec![IoStatus::Success]);
        assert_eq!(q.stats().retries, 2);
        // More failures than the retry budget (4): reported with the device's status.
        fake.with(|k| k.statuses = vec![not_ready; 5]);
        let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
        assert_eq!(st, vec![IoStatus::Nvme(not_ready.to_nvme_status())]);
        // A media error is not retried.
        let media = Status::new(sct::MEDIA, 0x81, false);
        fake.with(|k| k.statuses = vec![media]);
        let before = q.stats().retries;
        let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
        assert_eq!(st, vec![IoStatus::Nvme(media.to_nvme_status())]);
        assert_eq!(q.stats().retries, before);
        assert_eq!(q.last_error(), Some(IoError::Status(media)));
    }

    #[test]
    fn duplicate_completion_is_ignored() {
        let fake = Arc::new(FakeCtrl::new(4096));
        let c = attach(&fake);
        let mut q = c.bdev(1).unwrap().open_qpair(8).unwrap();
        let buf = Buf::new(&c, 4096);
        fake.with(|k| k.duplicate_next = true);
        let st = run(&mut q, &[io(Op::Read, 0, 1, buf.io(0, 512))]);
        assert_eq!(st, vec![IoStatus::Success]);
        assert_eq!(q.stats().duplicates, 1, "counted as a duplicate");
        assert_eq!(q.stats().unknown_completions, 0);
        assert_eq!(q.stats().completed, 1);
        // The queue keeps working afterwards.
        let st = run(&mut q, &[io(Op::Read, 1, 1, buf.io(0, 512))]);
        assert_eq!(st, vec![IoStatus::Success]);
    }

    #[test]
    fn detach_shuts_down_and_unmaps() {
        let fake = Arc::new(FakeCtrl::new(64));
        let c = attach(&fake);
        let bdev = c.bdev(1).unwrap();
        let q = bdev.open_queue(HctxType::Default, 0, 4).unwrap();
        let mem = DmaRegion::new(4096).unwrap();
        // SAFETY: `mem` outlives the controller (dropped at the end of the test).
        unsafe { bdev.register_memory(&[(mem.as_ptr(), mem.len()), (mem.as_ptr(), 4096)]) };
        assert_eq!(fake.mapped(), 3, "admin, qpair, and the region once");
        drop(q);
        c.detach().unwrap();
        assert_eq!(fake.shst(), 2);
        assert!(matches!(
            bdev.open_queue(HctxType::Default, 0, 4),
            Err(pmio::BdevError::Removed(_))
        ));
        drop(bdev);
        drop(c);
        assert_eq!(fake.mapped(), 0, "every DMA mapping removed");
        // A second attach of the same controller works.
        let c = attach(&fake);
        assert_eq!(c.bdevs().len(), 1);
    }

    #[test]
    fn stale_registrations_are_replaced_when_their_address_is_reused() {
        let fake = Arc::new(FakeCtrl::new(64));
        let m = crate::dma::Mappings::new(fake.clone());
        let (a, len) = (0x1000_0000usize, 0x20_0000usize);
        // SAFETY: the fake never touches memory on map; nothing does I/O to these addresses.
        unsafe { m.register(&[(a as *mut u8, len)]).unwrap() };
        assert_eq!(fake.mapped(), 1);
        // Registering again (new memory at a reused address) replaces the mapping.
        // SAFETY: as above.
        unsafe { m.register(&[((a + 4096) as *mut u8, 4096)]).unwrap() };
        assert_eq!(fake.mapped(), 1);
        // Driver memory over a stale registration evicts it.
        // SAFETY: as above.
        unsafe { m.map((a + 4096) as *mut u8, len).unwrap() };
        assert_eq!(fake.mapped(), 1);
        // An overlap with memory that is not a registration still fails.
        // SAFETY: as above.
        let e = unsafe { m.map((a + 8192) as *mut u8, 4096) }.unwrap_err();
        assert!(e.to_string().contains("File exists"), "{e}");
        fake.unmap((a + 4096) as *mut u8, len).unwrap();
        // Two registrations, both removed by unregister_all; unregister of an unknown range
        // is a no-op.
        // SAFETY: as above.
        unsafe {
            m.register(&[(a as *mut u8, 4096), ((a + len) as *mut u8, 4096)])
                .unwrap()
        };
        assert_eq!(fake.mapped(), 2);
        m.unregister(a as *mut u8, 8192).unwrap();
        assert_eq!(fake.mapped(), 2);
        m.unregister(a as *mut u8, 4096).unwrap();
        assert_eq!(fake.mapped(), 1);
        m.unregister_all();
        assert_eq!(fake.mapped(), 0);
    }

    #[test]
    fn queue_ids_run_out_cleanly() {
        let fake = Arc::new(FakeCtrl::new(64));
        let c = attach(&fake);
        let b = c.bdev(1).unwrap();
        let qs: Vec<_> = (0..4).map(|_| b.open_qpair(4).unwrap()).collect();
        assert!(matches!(
            b.open_qpair(4),
            Err(NvmeError::NoQueues { granted: 4, .. })
        ));
        drop(qs);
        assert!(b.open_qpair(4).is_ok());
    }
}
