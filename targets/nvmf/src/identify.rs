//! The data structures the admin commands return: Identify Controller (NVM and discovery),
//! Identify Namespace, the active namespace list, the namespace identification descriptors, the
//! discovery log page and the small fixed log pages. Pure builders over [`Subsystem`] and
//! [`TransportOpts`]; which command asked and how much of the result the host reads is
//! [`crate::ctrlr`]'s business.
//!
//! Every field goes through [`IdWriter`] at an offset named in [`crate::spec`].

use pmio::Op;

use crate::spec::{IdentifyController, IdentifyNamespace, disc, id_ctrl, id_ns, nidt, prop};
use crate::subsystem::{AdrFam, Namespace, SubType, Subsystem, TransportOpts};

pub use crate::spec::IDENTIFY_LEN;

/// Length of the SMART / Health Information log page.
pub const SMART_LOG_LEN: usize = 512;

/// Length of the Firmware Slot Information log page.
pub const FIRMWARE_LOG_LEN: usize = 512;

/// Length of the Changed Namespace List log page (1024 NSIDs).
pub const CHANGED_NS_LOG_LEN: usize = 4096;

/// Length of the Commands Supported and Effects log page.
pub const EFFECTS_LOG_LEN: usize = 4096;

/// Length of one error log entry (the log is ELPE + 1 of them).
pub const ERROR_LOG_ENTRY_LEN: usize = 64;

/// Abort commands a controller accepts at once, 0-based (ACL): the spec's recommended 4.
pub const ACL: u8 = 3;

/// Asynchronous Event Requests a controller holds at once, 0-based (AERL): 4, as SPDK and
/// Linux's target.
pub const AERL: u8 = 3;

/// Keep Alive granularity in 100 ms units (KAS): 1 s, so KATO is kept in whole seconds.
pub const KAS: u16 = 10;

/// The Keep Alive granularity in milliseconds.
pub const KAS_MS: u32 = KAS as u32 * 100;

/// Warning and critical composite temperature thresholds (kelvin): the NVMe 1.3d recommended
/// values SPDK reports; there is no sensor behind them.
const WCTEMP: u16 = 0x0157;
const CCTEMP: u16 = 0x0175;

/// CAP.MPSMIN: the memory page size MDTS is counted in.
const MIN_PAGE_SIZE: u32 = 4096;

/// Writes little-endian fields at byte offsets into a zeroed buffer.
#[derive(Clone, Debug)]
pub struct IdWriter {
    buf: Vec<u8>,
}

impl IdWriter {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> IdWriter {
        IdWriter { buf: vec![0; len] }
    }

    pub fn u8(&mut self, at: usize, v: u8) -> &mut IdWriter {
        self.buf[at] = v;
        self
    }

    pub fn u16(&mut self, at: usize, v: u16) -> &mut IdWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    pub fn u32(&mut self, at: usize, v: u32) -> &mut IdWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    pub fn u64(&mut self, at: usize, v: u64) -> &mut IdWriter {
        self.bytes(at, &v.to_le_bytes())
    }

    pub fn bytes(&mut self, at: usize, v: &[u8]) -> &mut IdWriter {
        self.buf[at..at + v.len()].copy_from_slice(v);
        self
    }

    /// An ASCII string field of `len` bytes, padded with spaces (SN, MN, FR, TRADDR, TRSVCID);
    /// a longer string is cut at `len`.
    pub fn ascii(&mut self, at: usize, len: usize, s: &str) -> &mut IdWriter {
        let field = &mut self.buf[at..at + len];
        field.fill(b' ');
        let n = s.len().min(len);
        field[..n].copy_from_slice(&s.as_bytes()[..n]);
        self
    }

    /// A string field of `len` bytes padded with NULs (NQNs); a longer string is cut so that
    /// one NUL always ends it.
    pub fn nul_str(&mut self, at: usize, len: usize, s: &str) -> &mut IdWriter {
        let field = &mut self.buf[at..at + len];
        field.fill(0);
        let n = s.len().min(len - 1);
        field[..n].copy_from_slice(&s.as_bytes()[..n]);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// What the namespaces' bdevs let a controller advertise (ONCS, VWC). Read at Identify time,
/// as SPDK does: a command set feature is advertised only when every namespace supports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NsCaps {
    /// Dataset Management (deallocate): every bdev supports discard.
    pub dsm: bool,
    /// Write Zeroes: every bdev supports write zeroes.
    pub write_zeroes: bool,
    /// A volatile write cache (Flush): some bdev supports flush, or there is no namespace yet
    /// (SPDK's rule, so that a cached namespace added later is flushed). A Flush to a
    /// namespace whose bdev has no cache is completed at once by the I/O path.
    pub vwc: bool,
}

impl NsCaps {
    /// The capabilities of `subsys`'s namespaces (none for the discovery subsystem).
    pub fn of(subsys: &Subsystem) -> NsCaps {
        if subsys.subtype == SubType::Discovery {
            return NsCaps::default();
        }
        let ns = &subsys.namespaces;
        let all = |op| ns.iter().all(|n| n.bdev.info().supported_ops.contains(op));
        NsCaps {
            dsm: all(Op::Discard),
            write_zeroes: all(Op::WriteZeroes),
            vwc: ns.is_empty()
                || ns
                    .iter()
                    .any(|n| n.bdev.info().supported_ops.contains(Op::Flush)),
        }
    }

    /// The ONCS field for these capabilities.
    pub fn oncs(self) -> u16 {
        let mut oncs = 0;
        if self.dsm {
            oncs |= IdentifyController::ONCS_DSM;
        }
        if self.write_zeroes {
            oncs |= IdentifyController::ONCS_WRITE_ZEROES;
        }
        oncs
    }
}

/// MDTS for a transport's `max_io_size`: log2 of the size in CAP.MPSMIN (4 KiB) pages.
pub fn mdts(max_io_size: u32) -> u8 {
    (max_io_size / MIN_PAGE_SIZE).max(1).ilog2() as u8
}

/// The Firmware Revision (FR): "pmio" and the crate's major.minor version, cut to 8 bytes.
pub fn firmware_revision() -> String {
    let mut fr = format!(
        "pmio{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    fr.truncate(id_ctrl::FR_LEN);
    fr
}

/// Identify Controller (CNS 01h) for controller `cntlid` of `subsys`: an I/O controller for an
/// NVM subsystem, a discovery controller (CNTRLTYPE 2, NVM command set fields 0) for the
/// discovery subsystem.
///
/// Field choices follow SPDK's `spdk_nvmf_ctrlr_identify_ctrlr` and Linux's
/// `nvmet_execute_identify_ctrl`, limited to what this target does: VID/SSVID and IEEE OUI 0
/// (pmio has none; Linux's target reports 0 too), no Compare/reservations/fused. With ANA
/// reporting, SPDK's ANA fields (see `ana_fields`).
pub fn identify_ctrlr(
    cntlid: u16,
    subsys: &Subsystem,
    opts: &TransportOpts,
    caps: NsCaps,
) -> Vec<u8> {
    let mut w = IdWriter::new(IDENTIFY_LEN);
    // Common to I/O and discovery controllers.
    w.ascii(id_ctrl::SN, id_ctrl::SN_LEN, &subsys.serial_number)
        .ascii(id_ctrl::MN, id_ctrl::MN_LEN, &subsys.model_number)
        .ascii(id_ctrl::FR, id_ctrl::FR_LEN, &firmware_revision())
        .u8(id_ctrl::MDTS, mdts(opts.max_io_size))
        .u16(id_ctrl::CNTLID, cntlid)
        .u32(id_ctrl::VER, prop::VS_1_3)
        .u8(id_ctrl::AERL, AERL)
        // One (always empty) error log entry: this target keeps no error log.
        .u8(id_ctrl::ELPE, 0)
        .u16(id_ctrl::KAS, KAS)
        .u16(id_ctrl::MAXCMD, opts.max_queue_depth)
        // Checked by Linux's TCP host for every controller, discovery included.
        .u32(
            id_ctrl::SGLS,
            IdentifyController::SGLS_SUPPORTED | IdentifyController::SGLS_OFFSET,
        )
        .nul_str(id_ctrl::SUBNQN, id_ctrl::SUBNQN_LEN, &subsys.nqn)
        // Fabrics attributes: SQE + in-capsule data per command capsule, a bare CQE per
        // response, data right after the SQE (ICDOFF 0), dynamic controller model (FCATT 0),
        // one SGL data block descriptor per command.
        .u32(id_ctrl::IOCCSZ, (64 + opts.in_capsule_data_size) / 16)
        .u32(id_ctrl::IORCSZ, 1)
        .u16(id_ctrl::ICDOFF, 0)
        .u8(id_ctrl::FCATT, 0)
        .u8(id_ctrl::MSDBD, 1);

    if subsys.subtype == SubType::Discovery {
        // No Discovery Log Change notices (OAES bit 31): this target never sends them.
        w.u8(id_ctrl::CNTRLTYPE, IdentifyController::CNTRLTYPE_DISCOVERY)
            .u8(id_ctrl::LPA, IdentifyController::LPA_EXTENDED);
        return w.finish();
    }

    w.u8(id_ctrl::RAB, 6)
        .u8(
            id_ctrl::CMIC,
            IdentifyController::CMIC_MULTI_PORT | IdentifyController::CMIC_MULTI_CTRLR,
        )
        .u32(id_ctrl::OAES, IdentifyController::OAES_NS_ATTR)
        .u32(id_ctrl::CTRATT, IdentifyController::CTRATT_HOST_ID_128)
        .u8(id_ctrl::CNTRLTYPE, IdentifyController::CNTRLTYPE_IO)
        .u8(id_ctrl::ACL, ACL)
        // Slot 1 read-only, one slot.
        .u8(id_ctrl::FRMW, (1 << 0) | (1 << 1))
        .u8(
            id_ctrl::LPA,
            IdentifyController::LPA_EFFECTS | IdentifyController::LPA_EXTENDED,
        )
        .u16(id_ctrl::WCTEMP, WCTEMP)
        .u16(id_ctrl::CCTEMP, CCTEMP)
        // 64-byte SQEs and 16-byte CQEs, minimum and maximum.
        .u8(id_ctrl::SQES, 0x66)
        .u8(id_ctrl::CQES, 0x44)
        .u32(id_ctrl::NN, subsys.max_namespaces)
        .u16(id_ctrl::ONCS, caps.oncs())
        .u8(
            id_ctrl::VWC,
            if caps.vwc {
                IdentifyController::VWC_PRESENT
            } else {
                0
            },
        );
    if subsys.ana_reporting {
        ana_fields(&mut w, subsys);
    }
    w.finish()
}

/// The ANA fields of Identify Controller, as SPDK sets them: CMIC ANA reporting, OAES ANA
/// change notices, ANATT, ANACAP (Optimized, Non-Optimized, Inaccessible; groups do not
/// change while attached), one group per possible namespace (ANAGRPMAX = NANAGRPID = MNAN =
/// max_namespaces). Linux's host wants MNAN non-zero and at most NN, and the log page these
/// sizes give (16 + 32 per group + 4 per namespace bytes) within MDTS.
fn ana_fields(w: &mut IdWriter, subsys: &Subsystem) {
    let groups = subsys.max_namespaces;
    w.u8(
        id_ctrl::CMIC,
        IdentifyController::CMIC_MULTI_PORT
            | IdentifyController::CMIC_MULTI_CTRLR
            | IdentifyController::CMIC_ANA,
    )
    .u32(
        id_ctrl::OAES,
        IdentifyController::OAES_NS_ATTR | IdentifyController::OAES_ANA_CHANGE,
    )
    .u8(id_ctrl::ANATT, crate::ana::ANATT_SECS)
    .u8(
        id_ctrl::ANACAP,
        IdentifyController::ANACAP_OPTIMIZED
            | IdentifyController::ANACAP_NON_OPTIMIZED
            | IdentifyController::ANACAP_INACCESSIBLE
            | IdentifyController::ANACAP_GRPID_STATIC,
    )
    .u32(id_ctrl::ANAGRPMAX, groups)
    .u32(id_ctrl::NANAGRPID, groups)
    .u32(id_ctrl::MNAN, groups);
}

/// Identify Namespace (CNS 00h) for an active namespace: sizes from the bdev (no thin
/// provisioning: NSZE = NCAP = NUSE), one LBA format without metadata, shared (NMIC), the
/// NGUID and EUI-64 the namespace was given. DLFEAT stays 0: pmio makes no promise about what
/// a deallocated block reads back. An inactive NSID answers all zeros (the caller's job).
///
/// `ana`: with ANA reporting, the namespace's state through the asking controller: ANAGRPID
/// is reported, and NUSE is 0 where the namespace is Inaccessible (SPDK's rule).
pub fn identify_ns(ns: &Namespace, opts: &TransportOpts, ana: Option<crate::AnaState>) -> Vec<u8> {
    let info = ns.bdev.info();
    let lbads = info.block_size.ilog2() as u8;
    // NOWS (0-based, in blocks): the transport's largest I/O.
    let max_blocks = (opts.max_io_size / info.block_size).max(1);
    let nows = u16::try_from(max_blocks - 1).unwrap_or(u16::MAX);
    let mut w = IdWriter::new(IDENTIFY_LEN);
    w.u64(id_ns::NSZE, info.num_blocks)
        .u64(id_ns::NCAP, info.num_blocks)
        .u64(id_ns::NUSE, info.num_blocks)
        // NPWG, NPWA, NPDG, NPDA 0 (one block) and NOWS valid.
        .u8(id_ns::NSFEAT, IdentifyNamespace::NSFEAT_OPTPERF)
        .u8(id_ns::NLBAF, 0)
        .u8(id_ns::FLBAS, 0)
        .u8(id_ns::NMIC, IdentifyNamespace::NMIC_SHARED)
        .u16(id_ns::NOWS, nows)
        // The bdev's boundary (an NVMe bdev's own NOIOB), when it fits: Linux's host splits
        // at it (chunk_sectors), as pmio's block layer would anyway.
        .u16(
            id_ns::NOIOB,
            u16::try_from(info.boundary_blocks).unwrap_or(0),
        )
        .bytes(id_ns::NGUID, &ns.nguid)
        .u8(id_ns::LBAF0_LBADS, lbads);
    if let Some(eui64) = ns.eui64 {
        w.bytes(id_ns::EUI64, &eui64);
    }
    if let Some(state) = ana {
        w.u32(id_ns::ANAGRPID, ns.anagrpid);
        if state.path_status().is_some() {
            w.u64(id_ns::NUSE, 0);
        }
    }
    w.finish()
}

/// Active Namespace ID list (CNS 02h): up to 1024 active NSIDs greater than `after`,
/// ascending, zero-terminated.
pub fn active_ns_list(subsys: &Subsystem, after: u32) -> Vec<u8> {
    let mut w = IdWriter::new(IDENTIFY_LEN);
    let ids = subsys
        .namespaces
        .iter()
        .map(|n| n.nsid)
        .filter(|&id| id > after)
        .take(IDENTIFY_LEN / 4);
    for (i, id) in ids.enumerate() {
        w.u32(4 * i, id);
    }
    w.finish()
}

/// Namespace Identification Descriptor list (CNS 03h): EUI-64 when given, NGUID and UUID when
/// not all zero, and the command set (CSI 0, NVM), each as NIDT, NIDL, 2 reserved bytes, then
/// the identifier; a zero NIDT ends the list.
pub fn ns_id_descriptors(ns: &Namespace) -> Vec<u8> {
    let mut w = IdWriter::new(IDENTIFY_LEN);
    let mut at = 0;
    let mut add = |kind: u8, id: &[u8]| {
        w.u8(at, kind).u8(at + 1, id.len() as u8).bytes(at + 4, id);
        at += 4 + id.len();
    };
    if let Some(eui64) = ns.eui64.filter(|e| e.iter().any(|&b| b != 0)) {
        add(nidt::EUI64, &eui64);
    }
    if ns.nguid.iter().any(|&b| b != 0) {
        add(nidt::NGUID, &ns.nguid);
    }
    if ns.uuid.0.iter().any(|&b| b != 0) {
        add(nidt::UUID, &ns.uuid.0);
    }
    add(nidt::CSI, &[0]);
    w.finish()
}

/// The discovery log page (log 70h) as `hostnqn` sees it: one entry per (subsystem that admits
/// the host, listen address), in the order given, each as NVMe/TCP with no security. The
/// discovery subsystem's own addresses are entries of SUBTYPE 3 (current discovery subsystem),
/// NVM subsystems' of SUBTYPE 2.
///
/// PORTID numbers the distinct addresses from 1 in order of first appearance; ASQSZ is the
/// transport's `max_aq_depth`. GENCTR is a hash of the entries, so it changes exactly when
/// what the host would read changes (the host compares it before and after reading the page).
pub fn discovery_log<'a>(
    subsystems: impl IntoIterator<Item = &'a Subsystem>,
    hostnqn: &str,
    max_aq_depth: u16,
) -> Vec<u8> {
    let mut ports: Vec<(AdrFam, &str, &str)> = Vec::new();
    let mut entries: Vec<Vec<u8>> = Vec::new();
    for s in subsystems.into_iter().filter(|s| s.admits(hostnqn)) {
        for l in &s.listeners {
            let key = (l.adrfam, l.traddr.as_str(), l.trsvcid.as_str());
            let portid = match ports.iter().position(|p| *p == key) {
                Some(i) => i + 1,
                None => {
                    ports.push(key);
                    ports.len()
                }
            };
            entries.push(discovery_entry(s, l, portid as u16, max_aq_depth));
        }
    }
    let mut page = IdWriter::new(disc::HEADER_LEN);
    page.u64(disc::NUMREC, entries.len() as u64)
        .u16(disc::RECFMT, 0);
    let mut page = page.finish();
    for e in &entries {
        page.extend_from_slice(e);
    }
    let genctr = fnv1a(&page[disc::HEADER_LEN..]) ^ entries.len() as u64;
    page[disc::GENCTR..disc::GENCTR + 8].copy_from_slice(&genctr.to_le_bytes());
    page
}

fn discovery_entry(
    s: &Subsystem,
    l: &crate::subsystem::ListenAddr,
    portid: u16,
    max_aq_depth: u16,
) -> Vec<u8> {
    let (subtype, eflags) = match s.subtype {
        SubType::Discovery => (
            disc::SUBTYPE_CURRENT_DISCOVERY,
            disc::EFLAGS_DUPLICATE_RETURNED_INFO,
        ),
        SubType::Nvme => (disc::SUBTYPE_NVME, 0),
    };
    let adrfam = match l.adrfam {
        AdrFam::Ipv4 => disc::ADRFAM_IPV4,
        AdrFam::Ipv6 => disc::ADRFAM_IPV6,
    };
    // A secure channel says so (TREQ required, TSAS SECTYPE TLS 1.3), as Linux's nvmet does:
    // `nvme discover` then connects to it with TLS.
    let (treq, sectype) = if s.is_secure(l) {
        (disc::TREQ_SECURE_CHANNEL_REQUIRED, disc::SECTYPE_TLS13)
    } else {
        (disc::TREQ_SECURE_CHANNEL_NOT_REQUIRED, 0)
    };
    let mut e = IdWriter::new(disc::ENTRY_LEN);
    e.u8(disc::TRTYPE, disc::TRTYPE_TCP)
        .u8(disc::ADRFAM, adrfam)
        .u8(disc::SUBTYPE, subtype)
        .u8(disc::TREQ, treq)
        .u8(disc::TSAS, sectype)
        .u16(disc::PORTID, portid)
        // Dynamic controller model: the host asks for any controller.
        .u16(disc::CNTLID, 0xFFFF)
        .u16(disc::ASQSZ, max_aq_depth)
        .u16(disc::EFLAGS, eflags)
        .ascii(disc::TRSVCID, disc::TRSVCID_LEN, &l.trsvcid)
        .nul_str(disc::SUBNQN, disc::SUBNQN_LEN, &s.nqn)
        .ascii(disc::TRADDR, disc::TRADDR_LEN, &l.traddr);
    // The rest of TSAS is reserved: left zero.
    e.finish()
}

/// 64-bit FNV-1a: a cheap, stable digest for GENCTR.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The window `[offset, offset + len)` of a log page, zero-filled past its end; `None` when
/// `offset` lies beyond the page (the command fails with Invalid Field).
pub fn log_window(page: &[u8], offset: u64, len: usize) -> Option<Vec<u8>> {
    let start = usize::try_from(offset).ok().filter(|&o| o <= page.len())?;
    let mut out = vec![0; len];
    let n = len.min(page.len() - start);
    out[..n].copy_from_slice(&page[start..start + n]);
    Some(out)
}

/// The Firmware Slot Information log page (03h): slot 1 active, holding [`firmware_revision`].
pub fn firmware_slot_log() -> Vec<u8> {
    let mut w = IdWriter::new(FIRMWARE_LOG_LEN);
    // AFI: active slot 1 (bits 2:0).
    w.u8(0, 1).ascii(8, 8, &firmware_revision());
    w.finish()
}

/// The Commands Supported and Effects log page (05h): the admin commands this target answers
/// and the I/O commands its namespaces support (CSUPP bit 0; LBCC bit 1 for those that change
/// blocks), from Linux's and SPDK's targets.
pub fn commands_effects_log(caps: NsCaps) -> Vec<u8> {
    use crate::spec::{admin_opc, nvm_opc};
    const CSUPP: u32 = 1 << 0;
    const LBCC: u32 = 1 << 1;
    const IOCS: usize = 1024;
    let mut w = IdWriter::new(EFFECTS_LOG_LEN);
    for opc in [
        admin_opc::GET_LOG_PAGE,
        admin_opc::IDENTIFY,
        admin_opc::ABORT,
        admin_opc::SET_FEATURES,
        admin_opc::GET_FEATURES,
        admin_opc::ASYNC_EVENT_REQUEST,
        admin_opc::KEEP_ALIVE,
    ] {
        w.u32(4 * usize::from(opc), CSUPP);
    }
    w.u32(IOCS + 4 * usize::from(nvm_opc::READ), CSUPP)
        .u32(IOCS + 4 * usize::from(nvm_opc::WRITE), CSUPP | LBCC)
        .u32(IOCS + 4 * usize::from(nvm_opc::FLUSH), CSUPP);
    if caps.write_zeroes {
        w.u32(IOCS + 4 * usize::from(nvm_opc::WRITE_ZEROES), CSUPP | LBCC);
    }
    if caps.dsm {
        w.u32(IOCS + 4 * usize::from(nvm_opc::DSM), CSUPP | LBCC);
    }
    w.finish()
}

/// Test doubles shared by this crate's unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use std::sync::Arc;

    use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, OpSet, Uuid};

    use crate::subsystem::{ListenAddr, Subsystem, SubsystemParams};

    /// A bdev that only has facts: enough for Identify.
    pub struct FactsOnly(pub BdevInfo);

    impl BlockDevice for FactsOnly {
        fn info(&self) -> &BdevInfo {
            &self.0
        }

        fn open_queue(
            &self,
            ty: HctxType,
            index: u16,
            _depth: u32,
        ) -> Result<Box<dyn DriverQueue>, BdevError> {
            Err(BdevError::QueueOpen {
                name: self.0.name.clone(),
                ty,
                index,
                reason: "test double".into(),
            })
        }
    }

    /// A bdev named `name` of `num_blocks` blocks of `block_size` bytes supporting `ops`.
    pub fn bdev(name: &str, block_size: u32, num_blocks: u64, ops: OpSet) -> Arc<dyn BlockDevice> {
        let mut uuid = [0u8; 16];
        for (i, b) in name.bytes().enumerate() {
            uuid[i % 16] ^= b;
        }
        uuid[15] ^= 0x5a;
        Arc::new(FactsOnly(BdevInfo {
            name: name.to_string(),
            uuid: Uuid(uuid),
            product_name: "Test disk".into(),
            block_size,
            num_blocks,
            supported_ops: ops,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 128,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        }))
    }

    /// An NVM subsystem `nqn` open to any host, listening on 127.0.0.1:4420.
    pub fn nvm_subsys(nqn: &str) -> Subsystem {
        let mut s = Subsystem::new(&SubsystemParams {
            nqn: nqn.to_string(),
            serial_number: Some("PMIO0001".into()),
            allow_any_host: true,
            ..SubsystemParams::default()
        })
        .unwrap();
        s.add_listener(
            ListenAddr::new("127.0.0.1", "4420", None).unwrap(),
            crate::AnaState::Optimized,
            false,
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pmio::{BlockDevice, OpSet};

    use super::testutil::{FactsOnly, bdev, nvm_subsys};
    use super::*;
    use crate::subsystem::ListenAddr;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn nul_str(b: &[u8]) -> &str {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        std::str::from_utf8(&b[..end]).unwrap()
    }

    #[test]
    fn writer_pads_strings() {
        let mut w = IdWriter::new(16);
        w.ascii(0, 4, "ab").nul_str(4, 4, "xyzzy").u16(8, 0x1234);
        let b = w.finish();
        assert_eq!(&b[..4], b"ab  ");
        assert_eq!(&b[4..8], b"xyz\0", "NQN fields always end in a NUL");
        assert_eq!(&b[8..10], &[0x34, 0x12]);
    }

    #[test]
    fn mdts_counts_4k_pages() {
        assert_eq!(mdts(4096), 0);
        assert_eq!(mdts(131072), 5);
        assert_eq!(mdts(1 << 20), 8);
    }

    #[test]
    fn identify_ctrlr_fields_at_their_offsets() {
        let opts = TransportOpts::default();
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        s.add_ns(
            bdev("Malloc0", 512, 2048, OpSet::ALL),
            0,
            None,
            None,
            None,
            0,
        )
        .unwrap();
        let caps = NsCaps::of(&s);
        assert_eq!(
            caps,
            NsCaps {
                dsm: true,
                write_zeroes: true,
                vwc: true
            }
        );
        let d = identify_ctrlr(0x1234, &s, &opts, caps);
        assert_eq!(d.len(), 4096);
        // Offsets as Linux's struct nvme_id_ctrl lays them out.
        assert_eq!(u16_at(&d, 0), 0, "VID");
        assert_eq!(&d[4..24], b"PMIO0001            ", "SN");
        assert_eq!(
            &d[24..64],
            format!("{:<40}", "SPDK bdev Controller").as_bytes()
        );
        assert_eq!(&d[64..72], b"pmio0.1 ", "FR");
        assert_eq!(d[72], 6, "RAB");
        assert_eq!(d[76], 0x03, "CMIC: multi-port, multi-controller");
        assert_eq!(d[77], 5, "MDTS: 128 KiB in 4 KiB pages");
        assert_eq!(u16_at(&d, 78), 0x1234, "CNTLID");
        assert_eq!(u32_at(&d, 80), 0x0001_0300, "VER");
        assert_eq!(u32_at(&d, 92), 1 << 8, "OAES: namespace attribute notices");
        assert_eq!(u32_at(&d, 96), 1, "CTRATT: 128-bit host ID");
        assert_eq!(d[111], 1, "CNTRLTYPE: I/O");
        assert_eq!(d[258], 3, "ACL");
        assert_eq!(d[259], 3, "AERL");
        assert_eq!(d[260], 0x03, "FRMW");
        assert_eq!(d[261], 0x06, "LPA: effects log, extended data");
        assert_eq!(u16_at(&d, 320), 10, "KAS");
        assert_eq!(d[512], 0x66, "SQES");
        assert_eq!(d[513], 0x44, "CQES");
        assert_eq!(u16_at(&d, 514), 128, "MAXCMD");
        assert_eq!(u32_at(&d, 516), 32, "NN");
        assert_eq!(u16_at(&d, 520), 0x0c, "ONCS: DSM and Write Zeroes");
        assert_eq!(u16_at(&d, 522), 0, "FUSES");
        assert_eq!(d[525], 1, "VWC");
        assert_eq!(u16_at(&d, 526), 0, "AWUN");
        assert_eq!(u16_at(&d, 528), 0, "AWUPF");
        assert_eq!(u32_at(&d, 536), (1 << 20) | 1, "SGLS");
        assert_eq!(nul_str(&d[768..1024]), "nqn.2016-06.io.spdk:cnode1");
        assert_eq!(u32_at(&d, 1792), (64 + 4096) / 16, "IOCCSZ");
        assert_eq!(u32_at(&d, 1796), 1, "IORCSZ");
        assert_eq!(u16_at(&d, 1800), 0, "ICDOFF");
        assert_eq!(d[1802], 0, "FCATT: dynamic model");
        assert_eq!(d[1803], 1, "MSDBD");
        assert_eq!(u16_at(&d, 1804), 0, "OFCS");
    }

    #[test]
    fn identify_ctrlr_oncs_follows_the_bdevs() {
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        s.add_ns(bdev("A", 512, 8, OpSet::ALL), 0, None, None, None, 0)
            .unwrap();
        s.add_ns(bdev("B", 512, 8, OpSet::READ_WRITE), 0, None, None, None, 0)
            .unwrap();
        let caps = NsCaps::of(&s);
        assert!(!caps.dsm && !caps.write_zeroes && caps.vwc);
        let d = identify_ctrlr(1, &s, &TransportOpts::default(), caps);
        assert_eq!(u16_at(&d, 520), 0);
        assert_eq!(d[525], 1);
        s.remove_ns(1).unwrap();
        let caps = NsCaps::of(&s);
        assert_eq!(caps, NsCaps::default(), "no flush, no cache");
        assert_eq!(
            identify_ctrlr(1, &s, &TransportOpts::default(), caps)[525],
            0
        );
    }

    #[test]
    fn identify_discovery_ctrlr() {
        let s = Subsystem::discovery();
        let d = identify_ctrlr(3, &s, &TransportOpts::default(), NsCaps::of(&s));
        assert_eq!(d[111], 2, "CNTRLTYPE: discovery");
        assert_eq!(u16_at(&d, 78), 3);
        assert_eq!(u32_at(&d, 516), 0, "NN");
        assert_eq!(d[512], 0, "SQES reserved");
        assert_eq!(u32_at(&d, 92), 0, "OAES");
        assert_ne!(
            u32_at(&d, 536) & 1,
            0,
            "SGLS: Linux checks it on every controller"
        );
        assert_eq!(u16_at(&d, 1800), 0, "ICDOFF");
        assert_eq!(nul_str(&d[768..1024]), crate::subsystem::DISCOVERY_NQN);
    }

    #[test]
    fn identify_namespace_sizes_and_format() {
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        let eui = [1, 2, 3, 4, 5, 6, 7, 8];
        s.add_ns(
            bdev("M", 4096, 1000, OpSet::ALL),
            0,
            None,
            None,
            Some(eui),
            0,
        )
        .unwrap();
        let ns = s.namespace(1).unwrap();
        let d = identify_ns(ns, &TransportOpts::default(), None);
        assert_eq!(u64_at(&d, 0), 1000, "NSZE");
        assert_eq!(u64_at(&d, 8), 1000, "NCAP");
        assert_eq!(u64_at(&d, 16), 1000, "NUSE");
        assert_eq!(d[25], 0, "NLBAF");
        assert_eq!(d[26], 0, "FLBAS");
        assert_eq!(d[30], 1, "NMIC shared");
        assert_eq!(d[33], 0, "DLFEAT: nothing claimed");
        assert_eq!(u16_at(&d, 72), 31, "NOWS: 128 KiB in 4 KiB blocks, 0-based");
        assert_eq!(u16_at(&d, 46), 0, "NOIOB: the bdev has no boundary");
        assert_eq!(&d[104..120], &ns.nguid, "NGUID");
        assert_eq!(&d[120..128], &eui, "EUI64");
        assert_eq!(u32_at(&d, 128), 12 << 16, "LBAF0: LBADS 12, no metadata");
        let s512 = {
            let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode2");
            s.add_ns(bdev("N", 512, 7, OpSet::ALL), 0, None, None, None, 0)
                .unwrap();
            s
        };
        let d = identify_ns(s512.namespace(1).unwrap(), &TransportOpts::default(), None);
        assert_eq!(d[130], 9);
        assert_eq!(&d[120..128], &[0; 8], "no EUI-64 given");
    }

    #[test]
    fn identify_namespace_reports_the_bdevs_boundary_as_noiob() {
        let with_boundary = |blocks| {
            let mut info = bdev("B", 512, 1 << 20, OpSet::ALL).info().clone();
            info.boundary_blocks = blocks;
            let dev: Arc<dyn BlockDevice> = Arc::new(FactsOnly(info));
            let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
            s.add_ns(dev, 0, None, None, None, 0).unwrap();
            u16_at(
                &identify_ns(s.namespace(1).unwrap(), &TransportOpts::default(), None),
                46,
            )
        };
        assert_eq!(with_boundary(256), 256, "an NVMe bdev's NOIOB passed on");
        assert_eq!(
            with_boundary(1 << 16),
            0,
            "too large for the field: none reported"
        );
    }

    #[test]
    fn active_list_windows() {
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        for nsid in [1, 3, 7] {
            s.add_ns(bdev("X", 512, 8, OpSet::ALL), nsid, None, None, None, 0)
                .unwrap();
        }
        let ids = |after| {
            let d = active_ns_list(&s, after);
            assert_eq!(d.len(), 4096);
            d.chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .take_while(|&id| id != 0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(0), [1, 3, 7]);
        assert_eq!(ids(1), [3, 7]);
        assert_eq!(ids(6), [7]);
        assert!(ids(7).is_empty());
    }

    #[test]
    fn descriptor_list() {
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        let uuid = pmio::Uuid([0x11; 16]);
        let nguid = [0x22; 16];
        let eui = [0x33; 8];
        s.add_ns(
            bdev("X", 512, 8, OpSet::ALL),
            0,
            Some(uuid),
            Some(nguid),
            Some(eui),
            0,
        )
        .unwrap();
        let d = ns_id_descriptors(s.namespace(1).unwrap());
        assert_eq!(&d[0..4], &[1, 8, 0, 0]);
        assert_eq!(&d[4..12], &eui);
        assert_eq!(&d[12..16], &[2, 16, 0, 0]);
        assert_eq!(&d[16..32], &nguid);
        assert_eq!(&d[32..36], &[3, 16, 0, 0]);
        assert_eq!(&d[36..52], &uuid.0);
        assert_eq!(&d[52..57], &[4, 1, 0, 0, 0], "CSI: NVM");
        assert!(d[57..].iter().all(|&b| b == 0), "terminated");

        // Without an EUI-64 the list starts with the NGUID.
        let mut s = nvm_subsys("nqn.2016-06.io.spdk:cnode2");
        s.add_ns(bdev("Y", 512, 8, OpSet::ALL), 0, None, None, None, 0)
            .unwrap();
        let ns = s.namespace(1).unwrap();
        let d = ns_id_descriptors(ns);
        assert_eq!(&d[0..4], &[2, 16, 0, 0]);
        assert_eq!(&d[4..20], &ns.nguid);
        assert_eq!(d[20], 3);
        assert_eq!(&d[24..40], &ns.uuid.0);
    }

    #[test]
    fn discovery_log_header_and_entries() {
        let host = "nqn.2014-08.org.nvmexpress:uuid:1";
        let mut disc_s = Subsystem::discovery();
        disc_s
            .listeners
            .push(ListenAddr::new("127.0.0.1", "4420", None).unwrap());
        let open = nvm_subsys("nqn.2016-06.io.spdk:cnode1");
        let mut closed = nvm_subsys("nqn.2016-06.io.spdk:cnode2");
        closed.allow_any_host = false;
        let mut v6 = nvm_subsys("nqn.2016-06.io.spdk:cnode3");
        v6.listeners = vec![ListenAddr::new("::1", "4421", None).unwrap()];

        let page = discovery_log([&disc_s, &open, &closed, &v6], host, 128);
        assert_eq!(page.len(), 1024 + 3 * 1024);
        assert_eq!(
            u64_at(&page, 8),
            3,
            "NUMREC: the closed subsystem is not listed"
        );
        assert_eq!(u16_at(&page, 16), 0, "RECFMT");

        let e = &page[1024..2048];
        assert_eq!(e[0], 3, "TRTYPE TCP");
        assert_eq!(e[1], 1, "ADRFAM IPv4");
        assert_eq!(e[2], 3, "SUBTYPE: this discovery subsystem");
        assert_eq!(e[3], 2, "TREQ: secure channel not required");
        assert_eq!(u16_at(e, 4), 1, "PORTID");
        assert_eq!(u16_at(e, 6), 0xFFFF, "CNTLID");
        assert_eq!(u16_at(e, 8), 128, "ASQSZ");
        assert_eq!(&e[32..36], b"4420");
        assert_eq!(e[36], b' ', "TRSVCID space padded");
        assert_eq!(nul_str(&e[256..512]), crate::subsystem::DISCOVERY_NQN);
        assert_eq!(&e[512..521], b"127.0.0.1");
        assert_eq!(e[521], b' ', "TRADDR space padded");
        assert!(e[768..].iter().all(|&b| b == 0), "TSAS: no security");

        let e = &page[2048..3072];
        assert_eq!(e[2], 2, "SUBTYPE NVM");
        assert_eq!(u16_at(e, 4), 1, "same address, same port ID");
        assert_eq!(nul_str(&e[256..512]), "nqn.2016-06.io.spdk:cnode1");

        let e = &page[3072..4096];
        assert_eq!(e[1], 2, "ADRFAM IPv6");
        assert_eq!(u16_at(e, 4), 2);
        assert_eq!(&e[512..515], b"::1");
        assert_eq!(e[3], 2, "TREQ: not required");

        // A secure channel: TREQ required, TSAS SECTYPE TLS 1.3.
        let mut tls = v6.clone();
        tls.secure_listeners = tls.listeners.clone();
        let tls_page = discovery_log([&disc_s, &tls], host, 128);
        let e = &tls_page[2048..3072];
        assert_eq!((e[3], e[768]), (1, 1), "TREQ required, SECTYPE TLS 1.3");
        assert!(e[769..].iter().all(|&b| b == 0));

        // GENCTR is stable while nothing changes, and moves when an entry does.
        let again = discovery_log([&disc_s, &open, &closed, &v6], host, 128);
        assert_eq!(u64_at(&again, 0), u64_at(&page, 0));
        closed.allow_any_host = true;
        let more = discovery_log([&disc_s, &open, &closed, &v6], host, 128);
        assert_eq!(u64_at(&more, 8), 4);
        assert_ne!(u64_at(&more, 0), u64_at(&page, 0));
    }

    #[test]
    fn log_windows() {
        let page: Vec<u8> = (0..100u8).collect();
        assert_eq!(log_window(&page, 0, 4).unwrap(), [0, 1, 2, 3]);
        assert_eq!(
            log_window(&page, 96, 8).unwrap(),
            [96, 97, 98, 99, 0, 0, 0, 0]
        );
        assert_eq!(log_window(&page, 100, 4).unwrap(), [0, 0, 0, 0]);
        assert!(log_window(&page, 104, 4).is_none());
        assert!(log_window(&page, u64::MAX, 4).is_none());
    }

    #[test]
    fn effects_log_lists_what_is_served() {
        let d = commands_effects_log(NsCaps {
            dsm: false,
            write_zeroes: true,
            vwc: true,
        });
        assert_eq!(u32_at(&d, 4 * 0x06), 1, "Identify");
        assert_eq!(u32_at(&d, 4 * 0x7F), 0, "fabrics commands are not listed");
        assert_eq!(u32_at(&d, 1024 + 4 * 2), 1, "Read");
        assert_eq!(u32_at(&d, 1024 + 4), 3, "Write (opcode 1) changes blocks");
        assert_eq!(u32_at(&d, 1024 + 4 * 0x08), 3, "Write Zeroes");
        assert_eq!(u32_at(&d, 1024 + 4 * 0x09), 0, "no DSM");
    }
}
