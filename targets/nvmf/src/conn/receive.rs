//! Receiving: PDUs parsed in place from the receive buffer and dispatched by the connection's
//! phase; bad PDUs answered as the spec says (a TermReq, or one command failed).

use super::*;

/// Bytes one read into the receive buffer asks for at most (see `receive`).
const RX_READ_MAX: usize = 64 << 10;
/// H2CData with at least this much data not yet received is read straight into its
/// command's buffer.
const DIRECT_MIN: usize = 8 << 10;

impl Conn {
    /// Reads what the socket has and handles every whole PDU in it. Returns whether anything
    /// arrived.
    pub fn receive(&mut self, sh: &mut GroupShared, now_ns: u64) -> bool {
        if matches!(self.phase, Phase::Closing { .. } | Phase::Connecting(_)) {
            return false;
        }
        let _ = now_ns;
        match self.sock.handshake() {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                self.close(&format!("{e}"));
                return true;
            }
        }
        let mut busy = false;
        // At most two reads a poll: a connection that streams cannot starve the others.
        for _ in 0..2 {
            if self.direct.is_some_and(|d| d.placed < d.len) {
                match self.read_direct() {
                    Ok(0) => {
                        self.close("the host closed the connection");
                        return true;
                    }
                    Ok(_) => busy = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.close(&format!("read: {e}"));
                        return true;
                    }
                }
                if let Err(Fatal(why)) = self.handle_pdus(sh) {
                    self.close(&why);
                    return true;
                }
                continue;
            }
            if self.rx_start == self.rx_end {
                self.rx_start = 0;
                self.rx_end = 0;
            } else if self.rx_end == self.rx.len() {
                self.rx.copy_within(self.rx_start..self.rx_end, 0);
                self.rx_end -= self.rx_start;
                self.rx_start = 0;
            }
            // A bounded read: a large H2CData is then seen before all of its data is here, and
            // the rest goes straight into its command's buffer (`read_direct`).
            let end = self.rx.len().min(self.rx_end + RX_READ_MAX);
            let n = match self.sock.read(&mut self.rx[self.rx_end..end]) {
                Ok(0) => {
                    self.close("the host closed the connection");
                    return true;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(&format!("read: {e}"));
                    return true;
                }
            };
            busy = true;
            self.rx_end += n;
            if let Err(Fatal(why)) = self.handle_pdus(sh) {
                self.close(&why);
                return true;
            }
            if matches!(self.phase, Phase::Closing { .. }) || n < end - (self.rx_end - n) {
                break;
            }
        }
        busy
    }

    /// Handles every whole PDU in the receive buffer.
    pub(super) fn handle_pdus(&mut self, sh: &mut GroupShared) -> Result<(), Fatal> {
        if self.direct.is_some() && !self.finish_direct(sh)? {
            return Ok(());
        }
        while !matches!(self.phase, Phase::Closing { .. } | Phase::Connecting(_)) {
            let buf = &self.rx[self.rx_start..self.rx_end];
            let parsed = pdu::parse(buf, &self.link);
            let (header, data_range, used) = match parsed {
                Ok(None) => {
                    self.start_direct()?;
                    return Ok(());
                }
                Ok(Some((p, used))) => {
                    let off = p.data.as_ptr() as usize - buf.as_ptr() as usize;
                    (p.header, off..off + p.data.len(), used)
                }
                Err(e) => {
                    // A damaged data digest costs one command, not the stream: go on with
                    // the PDUs behind it.
                    self.pdu_error(sh, &e)?;
                    continue;
                }
            };
            let start = self.rx_start;
            self.rx_start += used;
            let data = start + data_range.start..start + data_range.end;
            self.handle_pdu(sh, header, data, start)?;
        }
        Ok(())
    }

    /// Answers a PDU the codec refused, as the spec says.
    pub(super) fn pdu_error(
        &mut self,
        sh: &mut GroupShared,
        e: &pdu::PduError,
    ) -> Result<(), Fatal> {
        match e.action() {
            pdu::ErrorAction::Terminate(fatal) => {
                let echoed = pdu::offending_header(&self.rx[self.rx_start..self.rx_end]).to_vec();
                self.queue_owned(&fatal.term_req(Side::Controller), echoed);
                Err(Fatal(format!("bad PDU from the host: {e}")))
            }
            pdu::ErrorAction::Close => Err(Fatal(format!("bad PDU from the host: {e}"))),
            pdu::ErrorAction::FailCommand { cid, consumed } => {
                log::warn!("nvmf: connection {} ({}): {e}", self.id, self.peer);
                let start = self.rx_start;
                self.rx_start += consumed;
                let pdu = start..start + consumed;
                match e.pdu_type() {
                    Some(pdu::PduType::CapsuleCmd) => self.damaged_capsule(cid, pdu),
                    Some(pdu::PduType::H2CData) => self.damaged_h2c_data(sh, pdu),
                    _ => Err(Fatal(format!("bad PDU from the host: {e}"))),
                }
            }
        }
    }

    /// A command capsule whose in-capsule data failed its digest: the command is answered
    /// with Transient Transport Error and never executed. It takes a slot like any command (the
    /// host counts it outstanding until its response), so a host over its queue size is still
    /// caught.
    #[cold]
    pub(super) fn damaged_capsule(
        &mut self,
        cid: u16,
        pdu: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        // The codec checked the header (and its digest): the SQE is sound.
        let at = pdu.start + pdu::field::CAPSULE;
        let sqe_bytes: &[u8; spec::SQE_LEN] = self.rx[at..at + spec::SQE_LEN]
            .try_into()
            .expect("a capsule's header holds its SQE");
        let sqe = Sqe::from_bytes(sqe_bytes);
        debug_assert_eq!(sqe.cid(), cid);
        if self.qp.is_none() {
            // A Connect: the host may send it again.
            self.send_cqe(cid, 0, Status::TRANSIENT_TRANSPORT_ERROR, 0, 0);
            return Ok(());
        }
        let Some(slot) = self.free.pop() else {
            return Err(Fatal(format!(
                "the host sent more than the {} commands its queue holds",
                self.slots.len()
            )));
        };
        self.slots[usize::from(slot)] = CmdSlot {
            state: CmdState::Executing,
            sqe,
            ..CmdSlot::free()
        };
        let qid = self.qid();
        self.respond(slot, qid, Status::TRANSIENT_TRANSPORT_ERROR, 0, 0);
        Ok(())
    }

    /// H2CData whose data failed its digest: taken like good data (offsets, LAST), but its
    /// command is then answered with Transient Transport Error instead of being executed
    /// (SPDK's rule): answering at once would leave the host's further H2CData for it without
    /// a command.
    #[cold]
    pub(super) fn damaged_h2c_data(
        &mut self,
        sh: &mut GroupShared,
        pdu: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        // The codec checked everything but the data digest: the header parses alone.
        let head = pdu::parse_head(&self.rx[pdu.clone()], &self.link)
            .ok()
            .flatten()
            .expect("a PDU refused only for its data digest has a sound header");
        let Header::H2CData(d) = head.header else {
            unreachable!("damaged_h2c_data is called for H2CData only");
        };
        let data = pdu.start + head.data_start..pdu.start + head.data_end;
        self.h2c_data(sh, &d, data, pdu.start, true)
    }

    pub(super) fn handle_pdu(
        &mut self,
        sh: &mut GroupShared,
        header: Header,
        data: std::ops::Range<usize>,
        pdu_start: usize,
    ) -> Result<(), Fatal> {
        match (self.phase, header) {
            (Phase::AwaitIcReq, Header::IcReq(req)) => self.icreq(&req),
            (Phase::Ready, Header::CapsuleCmd(cmd)) => self.command(sh, cmd.command(), data),
            (Phase::Ready, Header::H2CData(d)) => self.h2c_data(sh, &d, data, pdu_start, false),
            (_, Header::H2CTermReq(t)) => Err(Fatal(format!(
                "the host terminated the connection (FES {:#x}, FEI {:#x})",
                t.fes, t.fei
            ))),
            (_, h) => {
                let fatal = pdu::FatalError {
                    fes: pdu::Fes::PduSequenceError,
                    fei: 0,
                };
                let echoed = pdu::offending_header(&self.rx[pdu_start..self.rx_end]).to_vec();
                self.queue_owned(&fatal.term_req(Side::Controller), echoed);
                Err(Fatal(format!(
                    "{:?} not allowed in state {:?}",
                    h.pdu_type(),
                    self.phase
                )))
            }
        }
    }

    pub(super) fn icreq(&mut self, req: &pdu::IcReq) -> Result<(), Fatal> {
        // The codec refused any PFV but 0 and any HPDA over 31.
        let resp = pdu::IcResp::answer(req, pdu::Pda::ZERO, self.max_io);
        self.link = self.link.after_ic(req, &resp);
        self.queue_owned(&Header::IcResp(resp), Vec::new());
        self.phase = Phase::Ready;
        log::debug!(
            "nvmf: connection {}: ICReq: header digest {}, data digest {}",
            self.id,
            req.digests.header,
            req.digests.data
        );
        Ok(())
    }

    /// A new command capsule.
    pub(super) fn command(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        if self.qp.is_none() {
            return self.connect(sh, sqe, data);
        }
        if sqe.opcode() == spec::admin_opc::FABRICS
            && matches!(
                sqe.fctype(),
                spec::fctype::AUTH_SEND | spec::fctype::AUTH_RECV
            )
        {
            self.auth_command(sh, sqe, data);
            return Ok(());
        }
        if self.auth_pending() {
            self.refuse_unauthenticated(&sqe);
            return Ok(());
        }
        let Some(slot) = self.free.pop() else {
            return Err(Fatal(format!(
                "the host sent more than the {} commands its queue holds",
                self.slots.len()
            )));
        };
        let s = &mut self.slots[usize::from(slot)];
        *s = CmdSlot {
            state: CmdState::Executing,
            sqe,
            ..CmdSlot::free()
        };
        let qid = self.qid();
        if qid == 0 {
            self.admin_command(sh, slot, data);
            return Ok(());
        }
        self.io_command(sh, slot, data)
    }

    /// Write data for an R2T; `damaged` data (a wrong data digest) is counted but not kept,
    /// and fails its command once all of it arrived. H2CData that names no command awaiting
    /// data, or data outside what the R2T asked for, ends the connection with a C2HTermReq
    /// (Invalid Header Field naming TTAG or CCCID, as SPDK; Data Transfer Out of Range).
    pub(super) fn h2c_data(
        &mut self,
        sh: &mut GroupShared,
        d: &pdu::H2CData,
        data: std::ops::Range<usize>,
        pdu_start: usize,
        damaged: bool,
    ) -> Result<(), Fatal> {
        let n = (data.end - data.start) as u32;
        self.h2c_check(d, n, pdu_start)?;
        if !damaged {
            let s = &mut self.slots[usize::from(d.ttag)];
            let off = s.got as usize;
            s.buf
                .as_mut()
                .expect("a write awaiting data has its buffer")
                .fill(off, &self.rx[data]);
        }
        self.h2c_arrived(sh, d.ttag, n, damaged);
        Ok(())
    }

    /// Checks H2CData of `n` bytes against the command it names; a mismatch is answered with a
    /// TermReq (its header, at `pdu_start`, echoed) and ends the connection.
    fn h2c_check(&mut self, d: &pdu::H2CData, n: u32, pdu_start: usize) -> Result<(), Fatal> {
        let refusal = match self.slots.get(usize::from(d.ttag)) {
            Some(s) if s.state == CmdState::AwaitData && s.sqe.cid() == d.cccid => {
                d.check(n, s.got, s.len).err().map(|fatal| {
                    let why = format!(
                        "H2CData offset {} length {n} (last {}) for command {} with {} of {} \
                         bytes",
                        d.datao, d.last, d.cccid, s.got, s.len
                    );
                    (fatal, why)
                })
            }
            Some(s) if s.state == CmdState::AwaitData => Some((
                pdu::FatalError::invalid_field(pdu::field::CCCID),
                format!(
                    "H2CData for command {} with the tag {} of command {}",
                    d.cccid,
                    d.ttag,
                    s.sqe.cid()
                ),
            )),
            _ => Some((
                pdu::FatalError::invalid_field(pdu::field::TTAG),
                format!(
                    "H2CData for command {} with tag {}, which awaits no data",
                    d.cccid, d.ttag
                ),
            )),
        };
        let Some((fatal, why)) = refusal else {
            return Ok(());
        };
        let echoed = pdu::offending_header(&self.rx[pdu_start..self.rx_end]).to_vec();
        self.queue_owned(&fatal.term_req(Side::Controller), echoed);
        Err(Fatal(why))
    }

    /// `n` more bytes of command `ttag`'s data are in its buffer (or were `damaged`): once all
    /// of it is, the write starts, or fails with Transient Transport Error if any was damaged.
    fn h2c_arrived(&mut self, sh: &mut GroupShared, ttag: u16, n: u32, damaged: bool) {
        let qid = self.qid();
        let s = &mut self.slots[usize::from(ttag)];
        if damaged {
            s.status = Status::TRANSIENT_TRANSPORT_ERROR;
        }
        s.got += n;
        if s.got == s.len {
            s.state = CmdState::Executing;
            if s.status.is_success() {
                self.start(sh, ttag);
            } else {
                let st = s.status;
                self.respond(ttag, qid, st, 0, 0);
            }
        }
    }

    /// When the receive buffer starts with a large H2CData whose data is still coming: takes
    /// what arrived into the command's buffer and reads the rest straight there (the data lands
    /// in the DMA buffer handed to the bdev, not in the receive buffer first).
    fn start_direct(&mut self) -> Result<(), Fatal> {
        let buf = &self.rx[self.rx_start..self.rx_end];
        // A bad header is refused by `parse` once the whole PDU is here.
        let Ok(Some(head)) = pdu::parse_head(buf, &self.link) else {
            return Ok(());
        };
        let Header::H2CData(d) = head.header else {
            return Ok(());
        };
        let len = head.data_end - head.data_start;
        let have = (buf.len() - head.data_start).min(len);
        if len - have < DIRECT_MIN {
            return Ok(());
        }
        self.h2c_check(&d, len as u32, self.rx_start)?;
        let at = self.rx_start + head.data_start;
        let s = &mut self.slots[usize::from(d.ttag)];
        let base = s.got as usize;
        s.buf
            .as_mut()
            .expect("a write awaiting data has its buffer")
            .fill(base, &self.rx[at..at + have]);
        self.rx_start = at + have;
        self.direct = Some(Direct {
            ttag: d.ttag,
            base,
            len,
            placed: have,
            digest: head.data_digest,
        });
        Ok(())
    }

    /// Reads more of the direct H2CData's data into its command's buffer.
    fn read_direct(&mut self) -> io::Result<usize> {
        let d = self.direct.as_mut().expect("called in direct mode");
        let dst = self.slots[usize::from(d.ttag)]
            .buf
            .as_mut()
            .expect("a write awaiting data has its buffer")
            .bytes_mut(d.base + d.placed, d.len - d.placed);
        let n = self.sock.read(dst)?;
        d.placed += n;
        Ok(n)
    }

    /// Ends the direct H2CData once its data and its digest (from the receive buffer) are
    /// here; returns whether it ended.
    fn finish_direct(&mut self, sh: &mut GroupShared) -> Result<bool, Fatal> {
        let d = self.direct.expect("called in direct mode");
        if d.placed < d.len {
            return Ok(false);
        }
        let mut damaged = false;
        if d.digest {
            if self.rx_end - self.rx_start < pdu::DIGEST_LEN {
                return Ok(false);
            }
            let got = &self.rx[self.rx_start..self.rx_start + pdu::DIGEST_LEN];
            let data = self.slots[usize::from(d.ttag)]
                .buf
                .as_ref()
                .expect("a write awaiting data has its buffer")
                .bytes(d.base, d.len);
            damaged = pdu::data_digest([data]) != got;
            self.rx_start += pdu::DIGEST_LEN;
            if damaged {
                log::warn!(
                    "nvmf: connection {} ({}): H2CData for tag {}: data digest mismatch",
                    self.id,
                    self.peer,
                    d.ttag
                );
            }
        }
        self.direct = None;
        self.h2c_arrived(sh, d.ttag, d.len as u32, damaged);
        Ok(true)
    }
}
