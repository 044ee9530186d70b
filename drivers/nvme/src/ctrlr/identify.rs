//! Identify: the controller's data, its active namespace list (or, on NVMe 1.0, every NSID
//! up to NN) and each namespace, kept as a [`Namespace`] when its format is usable. Admin
//! commands only: nothing here depends on the transport.

use super::{Init, InitState};
use crate::error::NvmeError;
use crate::spec::{IdentifyController, IdentifyNamespace, Sqe, admin_opc, cns};

/// One active namespace, as Identify Namespace described it.
#[derive(Clone, Debug)]
pub struct Namespace {
    pub nsid: u32,
    /// Blocks.
    pub num_blocks: u64,
    /// log2 of the block size.
    pub block_shift: u8,
    /// Metadata bytes per block (namespaces with metadata are not exposed).
    pub metadata: u16,
    /// NGUID (all zero when the controller reports none).
    pub nguid: [u8; 16],
    /// NOIOB: I/O should not cross a multiple of this many blocks (0: no boundary).
    pub boundary_blocks: u32,
}

impl Namespace {
    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_shift
    }
}

impl Init {
    /// Identify Controller.
    pub(super) fn identify_controller(&mut self) -> Result<Option<InitState>, NvmeError> {
        let sqe = self.next_identify(cns::CONTROLLER, 0);
        if self.admin_cmd(sqe, "Identify Controller")?.is_some() {
            let id: IdentifyController = self.admin_ref().read_data();
            log::info!(
                "{}: {} (serial {}, firmware {}), {} namespaces, MDTS {}",
                self.name,
                id.model(),
                id.serial(),
                id.firmware(),
                id.nn,
                id.mdts
            );
            self.id = Some(Box::new(id));
            self.nsids.clear();
            return Ok(Some(InitState::IdentifyActiveNs));
        }
        Ok(None)
    }

    /// Identify active namespace ID list, page by page; NVMe 1.0 controllers have none.
    pub(super) fn identify_active_ns(&mut self) -> Result<Option<InitState>, NvmeError> {
        let start = self.nsids.last().copied().unwrap_or(0);
        let sqe = self.next_identify(cns::ACTIVE_NS_LIST, start);
        let done = match self.admin_cmd(sqe, "Identify active namespace list") {
            Ok(c) => c.is_some(),
            // NVMe 1.0 controllers have no active namespace list: every NSID up to
            // NN is a candidate (inactive ones identify as size 0 and are skipped).
            Err(NvmeError::AdminCommand { status, .. })
                if self.vs < 0x0001_0100 && status.sct() == 0 && status.sc() == 0x02 =>
            {
                let nn = self.id.as_ref().map_or(0, |id| id.nn).min(1024);
                self.nsids = (1..=nn).collect();
                self.ns_index = 0;
                return Ok(Some(InitState::IdentifyNamespace));
            }
            Err(e) => return Err(e),
        };
        if !done {
            return Ok(None);
        }
        let list: [u32; 1024] = self.admin_ref().read_data();
        let before = self.nsids.len();
        for &nsid in list.iter().take_while(|&&n| n != 0) {
            if nsid > start && nsid != u32::MAX {
                self.nsids.push(nsid);
            }
        }
        let full = list[1023] != 0 && self.nsids.len() > before;
        if full {
            // More may follow: ask again from the last NSID (new deadline).
            return Ok(Some(InitState::IdentifyActiveNs));
        }
        self.ns_index = 0;
        Ok(Some(InitState::IdentifyNamespace))
    }

    /// Identify Namespace of each active NSID; unusable formats are skipped.
    pub(super) fn identify_namespace(&mut self) -> Result<Option<InitState>, NvmeError> {
        let Some(&nsid) = self.nsids.get(self.ns_index) else {
            return Ok(Some(InitState::SetNumQueues));
        };
        let sqe = self.next_identify(cns::NAMESPACE, nsid);
        if self.admin_cmd(sqe, "Identify Namespace")?.is_some() {
            let ns: IdentifyNamespace = self.admin_ref().read_data();
            let fmt = ns.format();
            if ns.nsze == 0 || !(9..=16).contains(&fmt.lbads()) {
                log::warn!(
                    "{}: namespace {nsid} skipped (size {} blocks, block size 2^{})",
                    self.name,
                    ns.nsze,
                    fmt.lbads()
                );
            } else {
                self.namespaces.push(Namespace {
                    nsid,
                    num_blocks: ns.nsze,
                    block_shift: fmt.lbads(),
                    metadata: fmt.ms(),
                    nguid: ns.nguid,
                    boundary_blocks: u32::from(ns.noiob),
                });
            }
            self.ns_index += 1;
            // The next one, with a new deadline.
            return Ok(Some(InitState::IdentifyNamespace));
        }
        Ok(None)
    }

    /// The Identify command to submit, or None while one is pending (its data buffer must not
    /// be touched then).
    fn next_identify(&self, cns: u32, nsid: u32) -> Option<Sqe> {
        self.pending.is_none().then(|| self.identify_sqe(cns, nsid))
    }

    fn identify_sqe(&self, cns: u32, nsid: u32) -> Sqe {
        let admin = self.admin_ref();
        admin.fill_data(0);
        let mut sqe = Sqe::new(admin_opc::IDENTIFY, 0);
        sqe.nsid = nsid;
        admin.point_data(&mut sqe);
        sqe.cdw10 = cns;
        sqe
    }
}
