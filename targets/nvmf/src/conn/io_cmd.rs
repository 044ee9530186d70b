//! I/O commands: checked against their namespace, data fetched (R2T) when needed, run as bdev
//! I/O, answered when the last of it completes.

use super::*;

impl Conn {
    /// Namespace `nsid` of this queue's subsystem and the status its commands get through
    /// this queue's listener (`Some`: ANA Inaccessible), from a per-connection table sorted
    /// by NSID (no string hashing per I/O), rebuilt when the group's snapshot changed.
    fn namespace(&mut self, sh: &GroupShared, nsid: u32) -> Option<(NsRef, Option<Status>)> {
        if self.ns_generation != sh.generation {
            self.ns_generation = sh.generation;
            self.ns_table.clear();
            let subnqn = &self.qp.as_ref().expect("connected").subnqn;
            if let Some(m) = sh.ns.get(subnqn) {
                let listener = self.listener.as_ref();
                self.ns_table.extend(m.iter().map(|(&id, &n)| {
                    let path =
                        listener.and_then(|l| sh.ana_state(subnqn, l, n.anagrpid).path_status());
                    (id, n, path)
                }));
                self.ns_table.sort_unstable_by_key(|&(id, _, _)| id);
            }
        }
        let t = &self.ns_table;
        t.binary_search_by_key(&nsid, |&(id, _, _)| id)
            .ok()
            .map(|i| (t[i].1, t[i].2))
    }

    /// An I/O command: checked against its namespace, then its data fetched (R2T) or its
    /// bdev I/O started.
    pub(super) fn io_command(
        &mut self,
        sh: &mut GroupShared,
        slot: u16,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        let qid = self.qid();
        let sqe = self.slots[usize::from(slot)].sqe;
        let Some((ns, path_status)) = self.namespace(sh, sqe.nsid) else {
            self.respond(slot, qid, Status::INVALID_NAMESPACE, 0, 0);
            return Ok(());
        };
        if let Some(st) = path_status {
            // Not through this port now: a multipath host retries on another path. Write
            // data the host sends anyway (in-capsule) is dropped with the command.
            self.respond(slot, qid, st, 0, 0);
            return Ok(());
        }
        let len = match io_shape(&sqe, &ns, self.max_io) {
            Ok(len) => len,
            Err(st) => {
                self.respond(slot, qid, st, 0, 0);
                return Ok(());
            }
        };
        let in_capsule = data.end - data.start;
        let s = &mut self.slots[usize::from(slot)];
        s.ns = Some(ns);
        s.len = len;
        let host_to_ctrlr = matches!(sqe.opcode(), spec::nvm_opc::WRITE | spec::nvm_opc::DSM);
        if len == 0 {
            if in_capsule != 0 {
                return Err(Fatal("data for a command that carries none".into()));
            }
            self.start(sh, slot);
            return Ok(());
        }
        let (buf, grew) = sh
            .pool
            .get()
            .map_err(|e| Fatal(format!("no buffer memory: {e}")))?;
        if grew {
            sh.register_pool();
        }
        let s = &mut self.slots[usize::from(slot)];
        s.buf = Some(buf);
        if !host_to_ctrlr {
            if in_capsule != 0 {
                return Err(Fatal("data in the capsule of a read".into()));
            }
            self.start(sh, slot);
            return Ok(());
        }
        if sqe.sgl().sgl_type == spec::sgl_type::DATA_BLOCK_OFFSET {
            if in_capsule != len as usize || len > self.in_capsule {
                self.respond(slot, qid, Status::DATA_SGL_LENGTH_INVALID, 0, 0);
                return Ok(());
            }
            let bytes = &self.rx[data];
            s.buf.as_mut().expect("set").fill(0, bytes);
            s.got = len;
            self.start(sh, slot);
            return Ok(());
        }
        if in_capsule != 0 {
            return Err(Fatal("in-capsule data with a transport SGL".into()));
        }
        // Ask for all of it at once: Linux's host allows one R2T per command.
        s.state = CmdState::AwaitData;
        let r2t = Header::R2T(pdu::R2T {
            cccid: sqe.cid(),
            ttag: slot,
            r2to: 0,
            r2tl: len,
        });
        self.queue_head(&r2t);
        Ok(())
    }

    /// Starts the bdev I/O of command `slot` (all its data is here), or answers it.
    pub(super) fn start(&mut self, sh: &mut GroupShared, slot: u16) {
        let qid = self.qid();
        let s = &mut self.slots[usize::from(slot)];
        let ns = s.ns.expect("checked");
        let sqe = s.sqe;
        let token = (self.id as u64) << 16 | u64::from(slot);
        let mut ios: [Io; 1] = [Io::default()];
        let mut dsm: Vec<Io> = Vec::new();
        let todo: &[Io] = match sqe.opcode() {
            spec::nvm_opc::READ | spec::nvm_opc::WRITE => {
                let op = if sqe.opcode() == spec::nvm_opc::READ {
                    Op::Read
                } else {
                    Op::Write
                };
                ios[0] = Io {
                    op,
                    lba: slba(&sqe),
                    nblocks: nlb(&sqe),
                    buf: s.buf.as_ref().expect("data command").io(s.len),
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::FLUSH => {
                if !ns.ops.contains(Op::Flush) {
                    // Nothing volatile to write back.
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                ios[0] = Io {
                    op: Op::Flush,
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::WRITE_ZEROES => {
                ios[0] = Io {
                    op: Op::WriteZeroes,
                    lba: slba(&sqe),
                    nblocks: nlb(&sqe),
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::DSM => {
                if sqe.cdw11 & spec::DSM_ATTR_DEALLOCATE == 0 {
                    // Only hints (no deallocate): nothing to do.
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                let ranges = s
                    .buf
                    .as_ref()
                    .expect("DSM has data")
                    .bytes(0, s.len as usize);
                for r in ranges.chunks_exact(16) {
                    let nlb = u32::from_le_bytes(r[4..8].try_into().expect("16-byte range"));
                    let slba = u64::from_le_bytes(r[8..16].try_into().expect("16-byte range"));
                    if nlb == 0 {
                        continue;
                    }
                    if slba
                        .checked_add(u64::from(nlb))
                        .is_none_or(|e| e > ns.num_blocks)
                    {
                        self.respond(slot, qid, Status::LBA_OUT_OF_RANGE, 0, 0);
                        return;
                    }
                    dsm.push(Io {
                        op: Op::Discard,
                        lba: slba,
                        nblocks: nlb,
                        token,
                        ..Io::default()
                    });
                }
                if dsm.is_empty() {
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                &dsm
            }
            _ => unreachable!("io_shape refuses other opcodes"),
        };
        let Some(q) = GroupShared::queue(&mut sh.queues, &ns) else {
            // Its namespace was removed while the command waited.
            self.respond(slot, qid, Status::INVALID_NAMESPACE, 0, 0);
            return;
        };
        let s = &mut self.slots[usize::from(slot)];
        s.state = CmdState::Executing;
        for io in todo {
            match q.submit(&mut sh.plug, io) {
                Ok(_) => {
                    s.pending += 1;
                    self.inflight += 1;
                    sh.stats.pending_bdev_io += 1;
                }
                Err(e) if e.is_busy() && s.pending == 0 && todo.len() == 1 => {
                    s.state = CmdState::Waiting;
                    self.waiting.push_back(slot);
                    return;
                }
                Err(e) => {
                    log::warn!("nvmf: connection {}: command {}: {e}", self.id, sqe.cid());
                    if s.status.is_success() {
                        s.status = Status::INTERNAL_ERROR;
                    }
                }
            }
        }
        if s.pending == 0 {
            let st = s.status;
            self.respond(slot, qid, st, 0, 0);
        }
    }

    /// Starts the commands that found their bdev queue full. Returns whether any started.
    pub fn retry_waiting(&mut self, sh: &mut GroupShared) -> bool {
        let mut any = false;
        for _ in 0..self.waiting.len() {
            let Some(slot) = self.waiting.pop_front() else {
                break;
            };
            self.start(sh, slot);
            if self.slots[usize::from(slot)].state == CmdState::Waiting {
                // Still full: keep the order, try again next poll.
                let last = self.waiting.pop_back().expect("just pushed");
                self.waiting.push_front(last);
                break;
            }
            any = true;
        }
        any
    }

    /// A bdev I/O of command `slot` completed.
    pub fn io_done(&mut self, slot: u16, st: IoStatus, sh: &mut GroupShared) {
        sh.stats.completed_nvme_io += 1;
        self.inflight -= 1;
        let qid = self.qid();
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            log::error!("nvmf: completion for slot {slot} of connection {}", self.id);
            return;
        };
        s.pending -= 1;
        if !st.is_success() && s.status.is_success() {
            s.status = nvme_status(st);
        }
        if s.pending > 0 {
            return;
        }
        if matches!(self.phase, Phase::Closing { .. }) {
            if let Some(b) = s.buf.take() {
                sh.pool.put(b);
            }
            s.state = CmdState::Free;
            return;
        }
        let status = s.status;
        if status.is_success() && s.sqe.opcode() == spec::nvm_opc::READ {
            let c2h = Header::C2HData(pdu::C2HData {
                cccid: s.sqe.cid(),
                datao: 0,
                last: true,
                success: self.c2h_success,
            });
            let len = s.len;
            if self.c2h_success {
                s.state = CmdState::Responding;
                self.queue_data(&c2h, slot, len, Some(slot));
                return;
            }
            self.queue_data(&c2h, slot, len, None);
        } else if let Some(b) = s.buf.take() {
            // A write's data is no longer needed.
            sh.pool.put(b);
        }
        self.respond(slot, qid, status, 0, 0);
    }

    // ---------------------------------------------------------------------------------------
    // Sending.
}

/// The data length of an I/O command and whether it is acceptable for namespace `ns`.
fn io_shape(sqe: &Sqe, ns: &NsRef, max_io: u32) -> Result<u32, Status> {
    let in_range = || {
        let end = slba(sqe).checked_add(u64::from(nlb(sqe)));
        if end.is_none_or(|end| end > ns.num_blocks) {
            Err(Status::LBA_OUT_OF_RANGE)
        } else {
            Ok(0)
        }
    };
    match sqe.opcode() {
        spec::nvm_opc::READ | spec::nvm_opc::WRITE => {
            in_range()?;
            let bytes = u64::from(nlb(sqe)) * u64::from(ns.block_size);
            // MDTS comes from max_io; above the bdev's own limit the block layer splits.
            if bytes > u64::from(max_io) {
                return Err(Status::INVALID_FIELD);
            }
            if u64::from(sqe.sgl().len) != bytes {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            Ok(bytes as u32)
        }
        spec::nvm_opc::FLUSH => Ok(0),
        spec::nvm_opc::WRITE_ZEROES if ns.ops.contains(Op::WriteZeroes) => in_range(),
        spec::nvm_opc::DSM if ns.ops.contains(Op::Discard) => {
            let bytes = ((sqe.cdw10 & 0xff) + 1) * 16;
            if sqe.sgl().len != bytes {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            Ok(bytes)
        }
        _ => Err(Status::INVALID_OPCODE),
    }
}

/// The first logical block of a Read, Write or Write Zeroes.
fn slba(sqe: &Sqe) -> u64 {
    u64::from(sqe.cdw10) | u64::from(sqe.cdw11) << 32
}

/// The number of logical blocks of a Read, Write or Write Zeroes (NLB is 0-based).
fn nlb(sqe: &Sqe) -> u32 {
    (sqe.cdw12 & 0xffff) + 1
}

/// The NVMe status a failed bdev I/O is answered with.
fn nvme_status(st: IoStatus) -> Status {
    match st {
        IoStatus::Nvme(n) => Status::from_nvme_status(n),
        _ => Status::INTERNAL_ERROR,
    }
}
