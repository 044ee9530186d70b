//! The register file ([`RegisterIo`]): CAP, VS, CC, CSTS, AQA / ASQ / ACQ and the doorbells
//! (an admin doorbell, or an I/O one in inline mode, runs the queue at once), and the
//! controller's reaction to CC: enable, disable (a controller reset: every queue and held
//! command is gone) and shutdown, with CSTS.RDY following after the configured delay.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::queues::{Cq, Sq};
use super::{Emu, State};
use crate::regs::{RegisterIo, off};

impl RegisterIo for Emu {
    fn read32(&self, o: usize) -> u32 {
        if self.vanished.load(Ordering::Acquire) {
            return u32::MAX;
        }
        let mut s = self.lock();
        s.settle_ready();
        match o {
            off::CAP => s.cap as u32,
            0x04 => (s.cap >> 32) as u32,
            off::VS => s.cfg.version,
            off::CC => s.cc,
            off::CSTS => s.csts,
            off::AQA => s.aqa,
            off::ASQ => s.asq as u32,
            0x2c => (s.asq >> 32) as u32,
            off::ACQ => s.acq as u32,
            0x34 => (s.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write32(&self, o: usize, v: u32) {
        if self.vanished.load(Ordering::Acquire) {
            return;
        }
        if o >= off::DOORBELLS {
            let idx = (o - off::DOORBELLS) / 4;
            let Some(db) = self.doorbells.get(idx) else {
                return;
            };
            db.store(v, Ordering::Release);
            let qid = (idx / 2) as u16;
            // With I/O processed by `step` (the emulator thread), an I/O doorbell is only
            // recorded: `step` fetches commands and posts backlogged completions.
            if qid != 0 && !self.inline_io.load(Ordering::Acquire) {
                return;
            }
            let mut s = self.lock();
            if idx % 2 == 1 {
                // CQ head moved: room for backlogged completions.
                s.flush_cq(qid, &self.doorbells);
            } else {
                self.process_sq(&mut s, qid);
            }
            return;
        }
        let mut s = self.lock();
        match o {
            off::CC => {
                let was = s.cc & 1 != 0;
                s.cc = v;
                if (v & 1 != 0) != was {
                    s.set_enabled(v & 1 != 0, &self.doorbells);
                }
                if (v >> 14) & 3 != 0 {
                    s.csts = (s.csts & !(3 << 2)) | 2 << 2;
                }
            }
            off::AQA => s.aqa = v,
            off::ASQ => s.asq = (s.asq & !0xffff_ffff) | u64::from(v),
            0x2c => s.asq = (s.asq & 0xffff_ffff) | u64::from(v) << 32,
            off::ACQ => s.acq = (s.acq & !0xffff_ffff) | u64::from(v),
            0x34 => s.acq = (s.acq & 0xffff_ffff) | u64::from(v) << 32,
            _ => {}
        }
    }

    fn len(&self) -> usize {
        off::DOORBELLS + self.doorbells.len() * 4
    }
}

impl Emu {
    /// How long CSTS.RDY takes to become 0 after CC.EN is cleared (`disable`) and 1 after it
    /// is set (`enable`), from the next change of CC.EN on; `Duration::MAX`: never.
    pub fn set_ready_delays(&self, disable: Duration, enable: Duration) {
        self.lock().ready_delay = [disable, enable];
    }

    /// CSTS.SHST.
    pub fn shst(&self) -> u32 {
        (self.lock().csts >> 2) & 3
    }
}

impl State {
    /// CC.EN changed to `en`: the controller enables or resets, and CSTS.RDY follows after
    /// the configured delay (at once without one).
    fn set_enabled(&mut self, en: bool, db: &[AtomicU32]) {
        let was_ready = self.csts & 1 != 0;
        self.ready_pending = None;
        if !en {
            // The controller stops at once; RDY stays 1 until its reset is "done".
            self.disable(db);
        }
        let delay = self.ready_delay[usize::from(en)];
        if delay.is_zero() {
            if en {
                self.enable();
            }
            return;
        }
        if !en && was_ready {
            self.csts |= 1;
        }
        self.ready_pending = Some((en, Instant::now().checked_add(delay)));
    }

    /// Makes a delayed CSTS.RDY change visible once due.
    fn settle_ready(&mut self) {
        let Some((en, due)) = self.ready_pending else {
            return;
        };
        if due.is_none_or(|d| Instant::now() < d) {
            return;
        }
        self.ready_pending = None;
        if en {
            self.enable();
        } else {
            self.csts &= !1;
        }
    }

    /// CSTS.RDY becomes 1: the admin queues are where AQA / ASQ / ACQ say.
    fn enable(&mut self) {
        self.delete_queues();
        self.sqs[0] = Some(Sq::new(self.asq, (self.aqa & 0xfff) + 1, 0));
        self.cqs[0] = Some(Cq::new(self.acq, ((self.aqa >> 16) & 0xfff) + 1));
        self.csts = (self.csts & !2) | 1;
    }

    /// Controller reset (CC.EN 1 → 0): every queue and held command is gone.
    fn disable(&mut self, db: &[AtomicU32]) {
        self.stats.disables += 1;
        self.csts &= !(1 | 2 | 3 << 2);
        self.delete_queues();
        self.held.clear();
        for d in db {
            d.store(0, Ordering::Release);
        }
    }

    fn delete_queues(&mut self) {
        for q in self.sqs.iter_mut() {
            *q = None;
        }
        for q in self.cqs.iter_mut() {
            *q = None;
        }
    }
}
