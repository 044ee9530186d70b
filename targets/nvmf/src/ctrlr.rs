//! The admin state of one controller: what Connect carried, the properties (CC, CSTS), the
//! features the host set, held Asynchronous Event Requests, the changed-namespace log and the
//! keep-alive timer. It lives on one reactor; that reactor's connection code hands it the
//! admin queue's commands and polls it for events. No socket, no reactor, no clock here: the
//! caller passes the time.
//!
//! The owner's duties, in order:
//! 1. At Connect: [`ConnectCmd::parse`], [`ConnectData::parse`], [`ConnectCmd::check`], then
//!    for the admin queue [`admit_admin_connect`] and [`Controller::new`], for an I/O queue
//!    [`Controller::check_io_connect`] on the controller its CNTLID names. A refusal is a
//!    [`ConnectReject`], whose status and dword 0 go into the response as they are.
//! 2. Property Get/Set: [`Controller::property_get`] / [`Controller::property_set`]; on
//!    [`CcChange::Reset`] or [`CcChange::Shutdown`] it disconnects the controller's I/O queues.
//! 3. Every other admin command: [`Controller::admin`]. [`AdminOutcome::Held`] means no
//!    response now (an Asynchronous Event Request).
//! 4. From a poller: [`Controller::poll_events`] (completes a held AER when namespaces
//!    or the ANA states of its listener changed) and [`Controller::keep_alive_expired`] (then tear the controller down).

use crate::ana::{self, AnaState};
use crate::identify::{self, IDENTIFY_LEN, KAS_MS, NsCaps};
use crate::spec::{Sqe, Status, admin_opc, cns, fid, lid, prop};
use crate::subsystem::{ListenAddr, SubType, Subsystem, TransportOpts};

mod connect;
#[cfg(test)]
mod tests;

pub use connect::{
    CONNECT_DATA_LEN, ConnectCheck, ConnectCmd, ConnectData, ConnectReject, admit_admin_connect,
    connect_field,
};

/// Keep Alive Timeout of a discovery controller connected with KATO 0: discovery sessions
/// that go quiet are still reaped (SPDK's and Linux's targets use the same 2 minutes).
pub const DISCOVERY_KATO_MS: u32 = 120_000;

/// How long past KATO a silent host keeps its controller: one KAS unit, the granularity the
/// controller promised to keep time in.
pub const KEEP_ALIVE_GRACE_MS: u32 = KAS_MS;

/// CAP.TO in 500 ms units: how long the host waits for CSTS.RDY (SPDK's 15 s; RDY follows
/// CC.EN at once here).
const CAP_TO: u64 = 30;

/// The Asynchronous Event of a namespace change: type 2 (notice), information 0 (namespace
/// attribute changed), log page 04h.
pub const AEN_NS_CHANGED: u32 = 0x2 | (lid::CHANGED_NS_LIST << 16);

/// AEC bit 8: namespace attribute notices enabled.
const AEC_NS_ATTR: u32 = 1 << 8;

/// The Asynchronous Event of an ANA change: type 2 (notice), information 03h (asymmetric
/// namespace access change), log page 0Ch.
pub const AEN_ANA_CHANGED: u32 = 0x2 | (0x03 << 8) | (lid::ANA << 16);

/// AEC bit 11: ANA change notices enabled.
const AEC_ANA_CHANGE: u32 = 1 << 11;

/// How many NSIDs the Changed Namespace List log holds before it reports an overflow.
const CHANGED_NS_MAX: usize = 1024;

/// What a Property Set of CC did, for the owner to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CcChange {
    /// Nothing the owner needs to act on.
    None,
    /// CC.EN 0 -> 1: CSTS.RDY is 1, I/O queues may connect.
    Enabled,
    /// CC.EN 1 -> 0: a controller reset; the owner disconnects the I/O queues.
    Reset,
    /// CC.SHN set: shutdown is complete (CSTS.SHST 2); the owner disconnects the I/O queues
    /// and the keep-alive timer stops.
    Shutdown,
}

/// The result of one admin command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminOutcome {
    /// Complete now with `status`, CQE dwords 0 and 1, and `data` for the host to read
    /// (empty when the command returns none or failed; else exactly the command's SGL
    /// length, the structure cut or zero-filled to it).
    Done {
        status: Status,
        dw0: u32,
        dw1: u32,
        data: Vec<u8>,
    },
    /// An Asynchronous Event Request the controller holds: no response now;
    /// [`Controller::poll_events`] completes it later with this command's CID.
    Held,
}

impl AdminOutcome {
    /// The status of a `Done` (`None` for `Held`).
    pub fn status(&self) -> Option<Status> {
        match self {
            AdminOutcome::Done { status, .. } => Some(*status),
            AdminOutcome::Held => None,
        }
    }
}

/// Where a controller is in its life, as CC and CSTS show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CtrlrState {
    /// CC.EN 0 (after Connect or a reset): only fabrics commands are served.
    Disabled,
    /// CC.EN 1, CSTS.RDY 1: serving.
    Ready,
    /// CC.SHN was set: CSTS.SHST 2, keep-alive stopped.
    ShutDown,
}

/// The values of the features a host may set.
#[derive(Clone, Copy, Debug)]
struct Features {
    arbitration: u32,
    power_management: u32,
    error_recovery: u32,
    write_atomicity: u32,
    async_event_config: u32,
    kato_ms: u32,
    /// Granted I/O submission and completion queues (NSQA + 1, NCQA + 1).
    io_sq: u16,
    io_cq: u16,
}

/// The Changed Namespace List log: NSIDs in increasing order, or an overflow (the log then
/// reads FFFFFFFFh).
#[derive(Clone, Debug, Default)]
struct ChangedNs {
    nsids: Vec<u32>,
    overflow: bool,
}

impl ChangedNs {
    fn record(&mut self, nsid: u32) {
        if self.overflow {
            return;
        }
        if let Err(at) = self.nsids.binary_search(&nsid) {
            if self.nsids.len() == CHANGED_NS_MAX {
                self.overflow = true;
                self.nsids.clear();
            } else {
                self.nsids.insert(at, nsid);
            }
        }
    }

    fn is_empty(&self) -> bool {
        !self.overflow && self.nsids.is_empty()
    }

    /// The log page, and the log cleared (reading it clears it).
    fn take_page(&mut self) -> Vec<u8> {
        let mut page = vec![0u8; identify::CHANGED_NS_LOG_LEN];
        if self.overflow {
            page[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        for (i, id) in self.nsids.iter().enumerate() {
            page[4 * i..4 * i + 4].copy_from_slice(&id.to_le_bytes());
        }
        *self = ChangedNs::default();
        page
    }
}

/// A command's reply before it is fitted to the transfer length.
struct Reply {
    status: Status,
    dw0: u32,
    data: Vec<u8>,
}

impl Reply {
    fn ok() -> Reply {
        Reply::dw0(0)
    }

    fn dw0(dw0: u32) -> Reply {
        Reply {
            status: Status::SUCCESS,
            dw0,
            data: Vec::new(),
        }
    }

    fn data(data: Vec<u8>) -> Reply {
        Reply {
            status: Status::SUCCESS,
            dw0: 0,
            data,
        }
    }

    fn err(status: Status) -> Reply {
        Reply {
            status,
            dw0: 0,
            data: Vec::new(),
        }
    }

    /// The outcome, with data cut or zero-filled to `xfer` bytes.
    fn fit(mut self, xfer: usize) -> AdminOutcome {
        if !self.status.is_success() {
            self.data.clear();
        } else if !self.data.is_empty() {
            self.data.resize(xfer, 0);
        }
        AdminOutcome::Done {
            status: self.status,
            dw0: self.dw0,
            dw1: 0,
            data: self.data,
        }
    }
}

/// The admin state of one controller.
#[derive(Debug)]
pub struct Controller {
    cntlid: u16,
    subtype: SubType,
    hostnqn: String,
    hostid: [u8; 16],
    opts: TransportOpts,
    state: CtrlrState,
    /// The CC register as last written (the fields this target keeps).
    cc: u32,
    feat: Features,
    /// CIDs of held Asynchronous Event Requests, oldest first.
    aers: Vec<u16>,
    /// The subsystem's namespaces as this controller last saw them (NSID, UUID), and the
    /// generation it saw them at.
    ns_seen: Vec<NsSeen>,
    ns_generation: u64,
    changed_ns: ChangedNs,
    /// A namespace notice was reported and the host has not read the log since: further
    /// changes wait (the spec's AEN masking).
    ns_notice_masked: bool,
    /// The listener the host connected through (its ANA states are this controller's).
    listener: Option<ListenAddr>,
    /// The listener's ANA change count this controller last told its host about.
    ana_seen: u64,
    /// The listener's ANA states changed since the host last read the ANA log.
    ana_changed: bool,
    /// An ANA notice was reported and the host has not read the ANA log since.
    ana_notice_masked: bool,
    last_keep_alive_ns: u64,
}

impl Controller {
    /// A controller `cntlid` of `subsys` for the host of `connect`, disabled (CC.EN 0) until
    /// the host enables it. `kato_ms` is the Connect's KATO: rounded up to the Keep Alive
    /// granularity (1 s); 0 disables the timer, except on a discovery controller, which then
    /// gets [`DISCOVERY_KATO_MS`]. Namespace attribute notices start enabled (as SPDK's).
    pub fn new(
        cntlid: u16,
        subsys: &Subsystem,
        connect: &ConnectData,
        kato_ms: u32,
        opts: &TransportOpts,
        now_ns: u64,
    ) -> Controller {
        let discovery = subsys.subtype == SubType::Discovery;
        let kato_ms = match round_up_kato(kato_ms) {
            0 if discovery => DISCOVERY_KATO_MS,
            k => k,
        };
        let io = if discovery {
            0
        } else {
            opts.max_io_qpairs_per_ctrlr
        };
        Controller {
            cntlid,
            subtype: subsys.subtype,
            hostnqn: connect.hostnqn.clone(),
            hostid: connect.hostid,
            opts: opts.clone(),
            state: CtrlrState::Disabled,
            cc: 0,
            feat: Features {
                arbitration: 0,
                power_management: 0,
                error_recovery: 0,
                write_atomicity: 0,
                // SPDK enables ANA change notices from the start too.
                async_event_config: match (discovery, subsys.ana_reporting) {
                    (true, _) => 0,
                    (false, false) => AEC_NS_ATTR,
                    (false, true) => AEC_NS_ATTR | AEC_ANA_CHANGE,
                },
                kato_ms,
                io_sq: io,
                io_cq: io,
            },
            aers: Vec::new(),
            ns_seen: ns_snapshot(subsys),
            ns_generation: subsys.ns_generation,
            changed_ns: ChangedNs::default(),
            ns_notice_masked: false,
            listener: None,
            ana_seen: 0,
            ana_changed: false,
            ana_notice_masked: false,
            last_keep_alive_ns: now_ns,
        }
    }

    /// This controller, connected through `listener` of `subsys`: the ANA states it
    /// reports are that listener's.
    pub fn through(mut self, listener: ListenAddr, subsys: &Subsystem) -> Controller {
        self.ana_seen = subsys.listener_ana(&listener).map_or(0, |l| l.change_count);
        self.listener = Some(listener);
        self
    }

    /// The ANA state of group `anagrpid` for this controller's host: Optimized without ANA
    /// reporting; Inaccessible when the controller's listener is gone (or unknown).
    pub fn ana_state(&self, subsys: &Subsystem, anagrpid: u32) -> AnaState {
        match &self.listener {
            _ if !subsys.ana_reporting => AnaState::Optimized,
            Some(l) => subsys.ana_state(l, anagrpid),
            None => AnaState::Inaccessible,
        }
    }

    /// The ANA state of namespace `nsid` for this controller's host: Optimized for an NSID
    /// that is no active namespace (SPDK's rule).
    fn ns_ana_state(&self, subsys: &Subsystem, nsid: u32) -> AnaState {
        subsys
            .namespace(nsid)
            .map_or(AnaState::Optimized, |n| self.ana_state(subsys, n.anagrpid))
    }

    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    pub fn is_discovery(&self) -> bool {
        self.subtype == SubType::Discovery
    }

    /// The host NQN of the Connect that created this controller.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// The host identifier of the Connect that created this controller.
    pub fn hostid(&self) -> [u8; 16] {
        self.hostid
    }

    /// The Keep Alive Timeout in force, in milliseconds (0: none).
    pub fn kato_ms(&self) -> u32 {
        self.feat.kato_ms
    }

    /// Whether the controller is enabled and ready (CC.EN 1, CSTS.RDY 1, not shut down).
    pub fn is_enabled(&self) -> bool {
        self.state == CtrlrState::Ready
    }

    /// Whether the host shut the controller down (CC.SHN set).
    pub fn is_shut_down(&self) -> bool {
        self.state == CtrlrState::ShutDown
    }

    /// I/O queue pairs the host may connect (QIDs 1..=n): what Set Features Number of Queues
    /// granted, or the transport's `max_io_qpairs_per_ctrlr` before it is sent.
    pub fn io_queues_granted(&self) -> u16 {
        self.feat.io_sq.min(self.feat.io_cq)
    }

    /// CIDs of the held Asynchronous Event Requests. They are answered by
    /// [`Controller::poll_events`] or dropped with the connection.
    pub fn held_aers(&self) -> &[u16] {
        &self.aers
    }

    fn set_state(&mut self, new: CtrlrState) {
        if self.state != new {
            log::debug!("nvmf ctrlr {}: {:?} -> {:?}", self.cntlid, self.state, new);
            self.state = new;
        }
    }

    /// The CAP property: MQES = max_queue_depth - 1, CQR 1, TO, CSS NVM only (bit 37; bit 43
    /// would make Linux switch to I/O command set identifiers), MPSMIN = MPSMAX = 0 (4 KiB).
    fn cap(&self) -> u64 {
        let mqes = u64::from(self.opts.max_queue_depth - 1);
        mqes | (1 << 16) | (CAP_TO << 24) | (1 << 37)
    }

    /// The CSTS property: RDY follows CC.EN; SHST reads 2 once a shutdown was asked for.
    fn csts(&self) -> u32 {
        let mut csts = self.cc & prop::CC_EN;
        if self.state == CtrlrState::ShutDown {
            csts |= prop::CSTS_SHST_COMPLETE << prop::CSTS_SHST_SHIFT;
        }
        csts
    }

    /// Fabrics Property Get of `offset`, 8 bytes if `size8`: CAP (8 bytes, or either half in
    /// 4), VS, CC, CSTS, NSSR (4 bytes). Anything else is Invalid Field, as Linux's target.
    pub fn property_get(&self, offset: u32, size8: bool) -> Result<u64, Status> {
        let v = match (offset, size8) {
            (prop::CAP, true) => self.cap(),
            (prop::CAP, false) => self.cap() & 0xFFFF_FFFF,
            (o, false) if o == prop::CAP + 4 => self.cap() >> 32,
            (prop::VS, false) => u64::from(prop::VS_1_3),
            (prop::CC, false) => u64::from(self.cc),
            (prop::CSTS, false) => u64::from(self.csts()),
            (prop::NSSR, false) => 0,
            _ => return Err(Status::INVALID_FIELD),
        };
        Ok(v)
    }

    /// Fabrics Property Set: only CC (4 bytes) is writable. Refused (Invalid Field, nothing
    /// changed): a command set other than NVM (0) or admin-only (7), a memory page size other
    /// than 4 KiB, an arbitration mechanism other than round robin, the reserved SHN 11b.
    pub fn property_set(
        &mut self,
        offset: u32,
        size8: bool,
        value: u64,
    ) -> Result<CcChange, Status> {
        if offset != prop::CC || size8 {
            return Err(Status::INVALID_FIELD);
        }
        self.set_cc(value as u32)
    }

    fn set_cc(&mut self, new: u32) -> Result<CcChange, Status> {
        let field = |shift: u32, bits: u32| (new >> shift) & ((1 << bits) - 1);
        let css = field(prop::CC_CSS_SHIFT, 3);
        let shn = field(prop::CC_SHN_SHIFT, 2);
        if !(css == 0 || css == 7)
            || field(prop::CC_MPS_SHIFT, 4) != 0
            || field(prop::CC_AMS_SHIFT, 3) != 0
            || shn == 3
        {
            return Err(Status::INVALID_FIELD);
        }
        let old = self.cc;
        // EN, CSS, MPS, AMS, SHN, IOSQES, IOCQES; reserved bits are dropped.
        self.cc = new & 0x00FF_FFF1;
        let was_en = old & prop::CC_EN != 0;
        let is_en = new & prop::CC_EN != 0;
        let old_shn = (old >> prop::CC_SHN_SHIFT) & 3;
        if shn != 0 && old_shn == 0 {
            self.set_state(CtrlrState::ShutDown);
            return Ok(CcChange::Shutdown);
        }
        match (was_en, is_en) {
            (true, false) => {
                self.set_state(CtrlrState::Disabled);
                Ok(CcChange::Reset)
            }
            (false, true) => {
                self.set_state(CtrlrState::Ready);
                Ok(CcChange::Enabled)
            }
            _ => Ok(CcChange::None),
        }
    }

    /// Checks an I/O-queue Connect naming this controller: the controller is an enabled I/O
    /// controller with 64/16-byte queue entries (IOSQES 6, IOCQES 4), the host NQN is the
    /// admin queue's, and the QID is within the queues granted (else Invalid Queue
    /// Identifier).
    pub fn check_io_connect(
        &self,
        cmd: &ConnectCmd,
        data: &ConnectData,
    ) -> Result<(), ConnectReject> {
        let iosqes = (self.cc >> prop::CC_IOSQES_SHIFT) & 0xF;
        let iocqes = (self.cc >> prop::CC_IOCQES_SHIFT) & 0xF;
        if self.is_discovery() || !self.is_enabled() || iosqes != 6 || iocqes != 4 {
            return Err(ConnectReject::invalid_cmd_field(connect_field::QID));
        }
        if data.hostnqn != self.hostnqn {
            return Err(ConnectReject::invalid_data_field(connect_field::HOSTNQN));
        }
        if cmd.qid == 0 || cmd.qid > self.io_queues_granted() {
            return Err(ConnectReject::new(Status::INVALID_QUEUE_IDENTIFIER));
        }
        Ok(())
    }

    /// Refreshes the keep-alive timer: the owner calls it for any command on the admin queue
    /// that [`Controller::admin`] does not see (Property Get/Set).
    pub fn touch(&mut self, now_ns: u64) {
        self.last_keep_alive_ns = self.last_keep_alive_ns.max(now_ns);
    }

    /// Whether the host has been silent on the admin queue for longer than KATO plus
    /// [`KEEP_ALIVE_GRACE_MS`] (Keep Alive and every other admin command count). Never with
    /// KATO 0 or after a shutdown.
    pub fn keep_alive_expired(&self, now_ns: u64) -> bool {
        if self.feat.kato_ms == 0 || self.state == CtrlrState::ShutDown {
            return false;
        }
        let limit_ns = (u64::from(self.feat.kato_ms) + u64::from(KEEP_ALIVE_GRACE_MS)) * 1_000_000;
        now_ns.saturating_sub(self.last_keep_alive_ns) > limit_ns
    }

    /// One admin command, not Connect and not Property Get/Set (those are fabrics commands the
    /// owner routes to [`ConnectCmd`] and [`Controller::property_get`]/[`property_set`]; a
    /// fabrics command here is Invalid Opcode).
    ///
    /// `subsys` is this controller's subsystem; `subsystems` every subsystem of the target
    /// (only a discovery controller reads it, for its log page; the discovery subsystem may
    /// be among them or not). `data_in` is the command's in-capsule data: none of the
    /// commands served takes any, so it is ignored. The reply's data is exactly the SGL
    /// length of the command; a SGL length over the transport's `max_io_size` is Data SGL
    /// Length Invalid. Before CC.EN is set every command is Command Sequence Error.
    ///
    /// [`property_set`]: Controller::property_set
    pub fn admin<'a>(
        &mut self,
        sqe: &Sqe,
        data_in: &[u8],
        subsys: &Subsystem,
        subsystems: impl IntoIterator<Item = &'a Subsystem>,
        now_ns: u64,
    ) -> AdminOutcome {
        // Set Features that carry data (Host Identifier, Timestamp) are refused without it.
        let _ = data_in;
        self.touch(now_ns);
        let xfer = sqe.sgl().len as usize;
        if self.cc & prop::CC_EN == 0 {
            return Reply::err(Status::COMMAND_SEQUENCE_ERROR).fit(xfer);
        }
        if xfer > (self.opts.max_io_size as usize).max(IDENTIFY_LEN) {
            return Reply::err(Status::DATA_SGL_LENGTH_INVALID).fit(xfer);
        }
        let reply = match sqe.opcode() {
            admin_opc::IDENTIFY => self.identify(sqe, subsys),
            admin_opc::GET_LOG_PAGE => self.get_log_page(sqe, subsys, subsystems),
            admin_opc::SET_FEATURES => self.set_features(sqe, subsys),
            admin_opc::GET_FEATURES => self.get_features(sqe, subsys),
            admin_opc::ASYNC_EVENT_REQUEST => return self.async_event_request(sqe, subsys),
            admin_opc::KEEP_ALIVE => Reply::ok(),
            // Nothing is ever aborted: dword 0 bit 0 set says "command not aborted".
            admin_opc::ABORT => Reply::dw0(1),
            _ => Reply::err(Status::INVALID_OPCODE),
        };
        reply.fit(xfer)
    }

    fn identify(&self, sqe: &Sqe, subsys: &Subsystem) -> Reply {
        if (sqe.sgl().len as usize) < IDENTIFY_LEN {
            return Reply::err(Status::INVALID_FIELD);
        }
        let cns = sqe.cdw10 & 0xff;
        if self.is_discovery() && cns != cns::CONTROLLER {
            return Reply::err(Status::INVALID_FIELD);
        }
        let nsid = sqe.nsid;
        let valid_nsid = nsid != 0 && nsid <= subsys.max_namespaces;
        match cns {
            cns::CONTROLLER => Reply::data(identify::identify_ctrlr(
                self.cntlid,
                subsys,
                &self.opts,
                NsCaps::of(subsys),
            )),
            cns::NAMESPACE if !valid_nsid => Reply::err(Status::INVALID_NAMESPACE),
            // An inactive NSID reads all zeros.
            cns::NAMESPACE => Reply::data(match subsys.namespace(nsid) {
                Some(ns) => identify::identify_ns(
                    ns,
                    &self.opts,
                    subsys
                        .ana_reporting
                        .then(|| self.ana_state(subsys, ns.anagrpid)),
                ),
                None => vec![0; IDENTIFY_LEN],
            }),
            cns::ACTIVE_NS_LIST if nsid >= 0xFFFF_FFFE => Reply::err(Status::INVALID_NAMESPACE),
            cns::ACTIVE_NS_LIST => Reply::data(identify::active_ns_list(subsys, nsid)),
            cns::NS_ID_DESCRIPTORS => match subsys.namespace(nsid).filter(|_| valid_nsid) {
                Some(ns) => Reply::data(identify::ns_id_descriptors(ns)),
                None => Reply::err(Status::INVALID_NAMESPACE),
            },
            // NVM command set specific Identify Controller: no limits to report.
            cns::CTRLR_CSI if sqe.cdw11 >> 24 == 0 => Reply::data(vec![0; IDENTIFY_LEN]),
            _ => Reply::err(Status::INVALID_FIELD),
        }
    }

    fn get_log_page<'a>(
        &mut self,
        sqe: &Sqe,
        subsys: &Subsystem,
        subsystems: impl IntoIterator<Item = &'a Subsystem>,
    ) -> Reply {
        let lid = sqe.cdw10 & 0xff;
        // Retain Asynchronous Event: reading the log does not unmask its notices.
        let rae = sqe.cdw10 & (1 << 15) != 0;
        let numd = ((u64::from(sqe.cdw11 & 0xFFFF) << 16) | u64::from(sqe.cdw10 >> 16)) + 1;
        let len = numd * 4;
        let offset = (u64::from(sqe.cdw13) << 32) | u64::from(sqe.cdw12);
        if !offset.is_multiple_of(4) || len > u64::from(sqe.sgl().len) {
            return Reply::err(Status::INVALID_FIELD);
        }
        let page = match (self.is_discovery(), lid) {
            (true, lid::DISCOVERY) => {
                // This discovery subsystem first, whether or not `subsystems` holds it.
                let mut all = vec![subsys];
                for s in subsystems {
                    if s.subtype == SubType::Nvme {
                        all.push(s);
                    }
                }
                identify::discovery_log(all, &self.hostnqn, self.opts.max_aq_depth)
            }
            (false, lid::ERROR) => vec![0; identify::ERROR_LOG_ENTRY_LEN],
            (false, lid::SMART) => vec![0; identify::SMART_LOG_LEN],
            (false, lid::FIRMWARE_SLOT) => identify::firmware_slot_log(),
            (false, lid::CHANGED_NS_LIST) => {
                self.sync_namespaces(subsys);
                if !rae {
                    self.ns_notice_masked = false;
                }
                self.changed_ns.take_page()
            }
            (false, lid::COMMANDS_EFFECTS) => identify::commands_effects_log(NsCaps::of(subsys)),
            (false, lid::ANA) if subsys.ana_reporting => {
                // LSP bit 0: Return Groups Only.
                let rgo = (sqe.cdw10 >> 8) & 1 != 0;
                // The host sees the states as they are now: no notice for what it read.
                self.sync_ana(subsys);
                self.ana_changed = false;
                if !rae {
                    self.ana_notice_masked = false;
                }
                ana::ana_log_page(&subsys.namespaces, |g| self.ana_state(subsys, g), rgo)
            }
            _ => return Reply::err(Status::INVALID_LOG_PAGE),
        };
        match identify::log_window(&page, offset, len as usize) {
            Some(data) => Reply::data(data),
            None => Reply::err(Status::INVALID_FIELD),
        }
    }

    fn check_feature_nsid(&self, sqe: &Sqe, subsys: &Subsystem) -> Result<u32, Status> {
        let nsid = sqe.nsid;
        if nsid != u32::MAX && nsid > subsys.max_namespaces {
            return Err(Status::INVALID_NAMESPACE);
        }
        let fid = sqe.cdw10 & 0xff;
        // A discovery controller has only these two features.
        if self.is_discovery() && !matches!(fid, fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG) {
            return Err(Status::INVALID_FIELD);
        }
        // The namespace-specific features of a namespace not reachable through this port
        // get the path status, as SPDK's Get/Set Features; the others are served.
        if matches!(fid, fid::ERROR_RECOVERY | fid::WRITE_ATOMICITY)
            && let Some(st) = self.ns_ana_state(subsys, nsid).path_status()
        {
            return Err(st);
        }
        Ok(fid)
    }

    fn set_features(&mut self, sqe: &Sqe, subsys: &Subsystem) -> Reply {
        // Save (SV): no feature is saveable.
        if sqe.cdw10 & (1 << 31) != 0 {
            return Reply::err(Status::FEATURE_NOT_SAVEABLE);
        }
        let fid = match self.check_feature_nsid(sqe, subsys) {
            Ok(fid) => fid,
            Err(status) => return Reply::err(status),
        };
        let v = sqe.cdw11;
        let f = &mut self.feat;
        match fid {
            // Bits 7:3 reserved.
            fid::ARBITRATION => f.arbitration = v & !0xF8,
            // Only power state 0 exists (NPSS 0).
            fid::POWER_MANAGEMENT if v & 0x1F != 0 => return Reply::err(Status::INVALID_FIELD),
            fid::POWER_MANAGEMENT => f.power_management = v & 0xFF,
            // No sensor: valid thresholds are accepted and forgotten.
            fid::TEMPERATURE_THRESHOLD if !temp_threshold_valid(v) => {
                return Reply::err(Status::INVALID_FIELD);
            }
            fid::TEMPERATURE_THRESHOLD => {}
            // DULBE (bit 16) is not offered.
            fid::ERROR_RECOVERY if v & (1 << 16) != 0 => return Reply::err(Status::INVALID_FIELD),
            fid::ERROR_RECOVERY => f.error_recovery = v & 0xFFFF,
            fid::VOLATILE_WRITE_CACHE if !NsCaps::of(subsys).vwc => {
                return Reply::err(Status::INVALID_FIELD);
            }
            // The cache cannot be turned off (SPDK: the bdevs cannot bypass theirs).
            fid::VOLATILE_WRITE_CACHE if v & 1 == 0 => {
                return Reply::err(Status::FEATURE_NOT_CHANGEABLE);
            }
            fid::VOLATILE_WRITE_CACHE => {}
            fid::NUMBER_OF_QUEUES => return self.set_number_of_queues(v),
            fid::INTERRUPT_COALESCING => return Reply::err(Status::FEATURE_NOT_CHANGEABLE),
            fid::WRITE_ATOMICITY => f.write_atomicity = v & 1,
            fid::ASYNC_EVENT_CONFIG => f.async_event_config = v,
            fid::KEEP_ALIVE_TIMER => {
                f.kato_ms = match round_up_kato(v) {
                    0 if self.subtype == SubType::Discovery => DISCOVERY_KATO_MS,
                    k => k,
                }
            }
            // Only Connect sets the host identifier.
            fid::HOST_IDENTIFIER => return Reply::err(Status::COMMAND_SEQUENCE_ERROR),
            _ => return Reply::err(Status::INVALID_FIELD),
        }
        Reply::ok()
    }

    /// Number of Queues: grants min(requested, max_io_qpairs_per_ctrlr) of each kind; dword 0
    /// holds NSQA (15:0) and NCQA (31:16), 0-based.
    fn set_number_of_queues(&mut self, v: u32) -> Reply {
        let (nsqr, ncqr) = (v & 0xFFFF, v >> 16);
        if nsqr == 0xFFFF || ncqr == 0xFFFF {
            return Reply::err(Status::INVALID_FIELD);
        }
        let max = u32::from(self.opts.max_io_qpairs_per_ctrlr);
        self.feat.io_sq = (nsqr + 1).min(max) as u16;
        self.feat.io_cq = (ncqr + 1).min(max) as u16;
        Reply::dw0(self.number_of_queues_dw0())
    }

    fn number_of_queues_dw0(&self) -> u32 {
        u32::from(self.feat.io_sq.saturating_sub(1))
            | (u32::from(self.feat.io_cq.saturating_sub(1)) << 16)
    }

    /// Get Features: the current value (SEL is not looked at: current, default and saved
    /// values are the same for every feature but the ones the host set).
    fn get_features(&self, sqe: &Sqe, subsys: &Subsystem) -> Reply {
        let fid = match self.check_feature_nsid(sqe, subsys) {
            Ok(fid) => fid,
            Err(status) => return Reply::err(status),
        };
        let v = sqe.cdw11;
        let f = &self.feat;
        let dw0 = match fid {
            fid::ARBITRATION => f.arbitration,
            fid::POWER_MANAGEMENT => f.power_management,
            fid::TEMPERATURE_THRESHOLD if !temp_threshold_valid(v) => {
                return Reply::err(Status::INVALID_FIELD);
            }
            fid::TEMPERATURE_THRESHOLD => 0,
            fid::ERROR_RECOVERY => f.error_recovery,
            fid::VOLATILE_WRITE_CACHE if !NsCaps::of(subsys).vwc => {
                return Reply::err(Status::INVALID_FIELD);
            }
            fid::VOLATILE_WRITE_CACHE => 1,
            fid::NUMBER_OF_QUEUES => self.number_of_queues_dw0(),
            fid::INTERRUPT_COALESCING => 0,
            // The vector asked for, coalescing disabled (CD, bit 16).
            fid::INTERRUPT_VECTOR_CONFIG => (v & 0xFFFF) | (1 << 16),
            fid::WRITE_ATOMICITY => f.write_atomicity,
            fid::ASYNC_EVENT_CONFIG => f.async_event_config,
            fid::KEEP_ALIVE_TIMER => f.kato_ms,
            // The 128-bit host identifier (EXHID, bit 0, must ask for it).
            fid::HOST_IDENTIFIER if v & 1 == 0 => return Reply::err(Status::INVALID_FIELD),
            fid::HOST_IDENTIFIER => return Reply::data(self.hostid.to_vec()),
            _ => return Reply::err(Status::INVALID_FIELD),
        };
        Reply::dw0(dw0)
    }

    /// Holds the request until there is news, or answers it at once when a notice is already
    /// pending; more than AERL + 1 held is Asynchronous Event Request Limit Exceeded.
    fn async_event_request(&mut self, sqe: &Sqe, subsys: &Subsystem) -> AdminOutcome {
        if self.aers.len() > usize::from(identify::AERL) {
            return Reply::err(Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED).fit(0);
        }
        self.sync_namespaces(subsys);
        self.sync_ana(subsys);
        if let Some(dw0) = self.take_notice() {
            return Reply::dw0(dw0).fit(0);
        }
        self.aers.push(sqe.cid());
        AdminOutcome::Held
    }

    /// Called from the owner's poller. When `subsys`'s namespaces changed since this
    /// controller last looked, records the changed NSIDs in the Changed Namespace List log;
    /// then, if namespace attribute notices are enabled (AEC bit 8), not masked by an earlier
    /// unread notice, and an AER is held, completes the oldest: returns its CID and CQE dword 0
    /// ([`AEN_NS_CHANGED`]), to be sent with status Success. Likewise for a change of the ANA
    /// states of the controller's listener (AEC bit 11, [`AEN_ANA_CHANGED`]).
    pub fn poll_events(&mut self, subsys: &Subsystem) -> Option<(u16, u32)> {
        if self.is_discovery() {
            return None;
        }
        self.sync_namespaces(subsys);
        self.sync_ana(subsys);
        if self.aers.is_empty() {
            return None;
        }
        let dw0 = self.take_notice()?;
        Some((self.aers.remove(0), dw0))
    }

    /// The pending notice (a namespace change first, then an ANA change), masking further
    /// ones of its kind until the host reads its log.
    fn take_notice(&mut self) -> Option<u32> {
        let aec = self.feat.async_event_config;
        if aec & AEC_NS_ATTR != 0 && !self.ns_notice_masked && !self.changed_ns.is_empty() {
            self.ns_notice_masked = true;
            return Some(AEN_NS_CHANGED);
        }
        if aec & AEC_ANA_CHANGE != 0 && !self.ana_notice_masked && self.ana_changed {
            self.ana_notice_masked = true;
            self.ana_changed = false;
            return Some(AEN_ANA_CHANGED);
        }
        None
    }

    /// Notes a change of the ANA states of this controller's listener since the last look.
    fn sync_ana(&mut self, subsys: &Subsystem) {
        if !subsys.ana_reporting {
            return;
        }
        let Some(l) = self.listener.as_ref().and_then(|l| subsys.listener_ana(l)) else {
            return;
        };
        if l.change_count != self.ana_seen {
            self.ana_seen = l.change_count;
            self.ana_changed = true;
        }
    }

    /// Records every NSID added, removed, replaced (another UUID) or resized since the last
    /// look.
    fn sync_namespaces(&mut self, subsys: &Subsystem) {
        if subsys.ns_generation == self.ns_generation || self.is_discovery() {
            return;
        }
        let now = ns_snapshot(subsys);
        for seen in self.ns_seen.iter().chain(now.iter()) {
            if self.ns_seen.contains(seen) != now.contains(seen) {
                self.changed_ns.record(seen.nsid);
            }
        }
        self.ns_seen = now;
        self.ns_generation = subsys.ns_generation;
    }
}

/// What a controller remembers of a namespace to tell its host what changed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct NsSeen {
    nsid: u32,
    uuid: pmio::Uuid,
    num_blocks: u64,
}

fn ns_snapshot(subsys: &Subsystem) -> Vec<NsSeen> {
    subsys
        .namespaces
        .iter()
        .map(|n| NsSeen {
            nsid: n.nsid,
            uuid: n.uuid,
            num_blocks: n.bdev.info().num_blocks,
        })
        .collect()
}

/// KATO rounded up to the Keep Alive granularity.
fn round_up_kato(kato_ms: u32) -> u32 {
    kato_ms.div_ceil(KAS_MS).saturating_mul(KAS_MS)
}

/// Temperature Threshold: TMPSEL (19:16) a sensor 0..=8 or all (15), THSEL (21:20) over or
/// under.
fn temp_threshold_valid(v: u32) -> bool {
    let tmpsel = (v >> 16) & 0xF;
    let thsel = (v >> 20) & 0x3;
    (tmpsel <= 8 || tmpsel == 15) && thsel <= 1
}
