//! Asynchronous Event Requests on an NVMe/TCP controller's admin queue, kept by the
//! controller's thread (it owns the admin connection; `ctrlr.rs`). On each association it
//! enables namespace attribute notices (when OAES says the controller sends them) and keeps
//! one AER outstanding, as Linux's host does. A namespace attribute notice makes it read the
//! Changed Namespace List log (which lets the controller send the next notice) and the
//! active namespace list, and log what was added or removed.
//!
//! The controller's namespaces and bdevs stay those found at attach: a bdev list that changes
//! under its users needs a way to tell them, which the `Controller` API does not have. A new
//! namespace is logged, to be used once the controller is attached again; I/O to a removed
//! one fails with the controller's status (Invalid Namespace).

use crate::ctrlr::CtrlrInner;
use crate::error::NvmeError;
use crate::spec::{IdentifyController, IdentifyNamespace, Sqe, admin_opc, cns, fid, lid};

use super::ctrlr::TcpCtrlr;

/// Asynchronous event type (CQE dword 0 bits 2:0): notice.
const AE_TYPE_NOTICE: u32 = 0x2;
/// Notice information (dword 0 bits 15:8): namespace attribute changed.
const AE_INFO_NS_ATTR: u32 = 0x0;
/// Entries of one page of the active namespace list or of the Changed Namespace List log.
const NSIDS_PER_PAGE: usize = 1024;

/// The controller thread's AER.
#[derive(Default)]
pub(super) struct Aer {
    /// The outstanding AER's admin command identifier (`None`: not posted on this
    /// association yet, or the controller refused it).
    cid: Option<u16>,
    /// Posted (or refused) on the current association.
    armed: bool,
}

impl Aer {
    /// Looks once for the AER's completion (posting it first on a new association), acts on
    /// it and posts the next. Fails when the admin connection does (the caller reconnects).
    pub(super) fn step(&mut self, inner: &CtrlrInner, t: &TcpCtrlr) -> Result<(), NvmeError> {
        if !self.armed {
            self.armed = true;
            enable_notices(inner, t);
            self.post(inner, t)?;
        }
        let Some(cid) = self.cid else {
            return Ok(());
        };
        let Some(cqe) = t.admin.poll_for(cid) else {
            return Ok(());
        };
        self.cid = None;
        if !cqe.status().is_success() {
            // Refused (more than AERL + 1, or not supported): no AER on this association.
            log::debug!(
                "{}: Asynchronous Event Request ended: {}",
                inner.name,
                cqe.status()
            );
            return Ok(());
        }
        let (ty, info, log_page) = (cqe.dw0 & 0x7, (cqe.dw0 >> 8) & 0xff, (cqe.dw0 >> 16) & 0xff);
        if ty == AE_TYPE_NOTICE && info == AE_INFO_NS_ATTR {
            namespaces_changed(inner)?;
        } else {
            log::info!(
                "{}: asynchronous event type {ty:#x}, information {info:#x}, log page {log_page:#04x}",
                inner.name
            );
        }
        self.post(inner, t)
    }

    /// The admin connection is going: the AER goes with it; post one on the next.
    pub(super) fn clear(&mut self) {
        *self = Aer::default();
    }

    fn post(&mut self, inner: &CtrlrInner, t: &TcpCtrlr) -> Result<(), NvmeError> {
        let sqe = Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0);
        let cid = t.admin.send(sqe).ok_or_else(|| NvmeError::Disconnected {
            ctrlr: inner.name.clone(),
            reason: "no admin command slot or connection for an Asynchronous Event Request".into(),
        })?;
        self.cid = Some(cid);
        Ok(())
    }
}

/// Set Features Asynchronous Event Configuration: namespace attribute notices, when the
/// controller sends them (a refusal is logged: the AER still reports other events).
fn enable_notices(inner: &CtrlrInner, t: &TcpCtrlr) {
    if inner.id.oaes & IdentifyController::OAES_NS_ATTR == 0 {
        return;
    }
    let mut sqe = Sqe::new(admin_opc::SET_FEATURES, 0);
    sqe.cdw10 = fid::ASYNC_EVENT_CONFIG;
    sqe.cdw11 = IdentifyController::OAES_NS_ATTR;
    const WHAT: &str = "Set Features Asynchronous Event Configuration";
    if let Err(e) = t
        .admin
        .exec(sqe, inner.opts.admin_timeout, &inner.name, WHAT)
    {
        log::warn!("{e}");
    }
}

/// A namespace attribute notice: reads the Changed Namespace List log (the next notice may
/// come then) and the active namespace list, and logs what was added or removed.
fn namespaces_changed(inner: &CtrlrInner) -> Result<(), NvmeError> {
    let changed = read_changed_ns_log(inner)?;
    let active = read_active_nsids(inner)?;
    log::info!(
        "{}: namespaces changed (Changed Namespace List: {changed:?})",
        inner.name
    );
    for &nsid in &active {
        if inner.namespaces.iter().all(|ns| ns.nsid != nsid) {
            let size = identify_namespace(inner, nsid)?;
            log::info!(
                "{}: namespace {nsid} added ({} blocks of {} bytes); it becomes a bdev when \
                 the controller is attached again",
                inner.name,
                size.0,
                size.1
            );
        }
    }
    for ns in &inner.namespaces {
        if !active.contains(&ns.nsid) {
            log::info!(
                "{}: namespace {} removed; I/O to {}n{} fails",
                inner.name,
                ns.nsid,
                inner.name,
                ns.nsid
            );
        }
    }
    Ok(())
}

/// Runs `sqe` with the admin data buffer (cleared first) and copies the data out as a `T`;
/// the admin queue's lock is held throughout, so no other command takes the buffer.
fn admin_read<T: Copy>(
    inner: &CtrlrInner,
    mut sqe: Sqe,
    what: &'static str,
) -> Result<T, NvmeError> {
    let mut admin = inner.admin();
    admin.fill_data(0);
    admin.point_data(&mut sqe);
    admin.exec(
        &*inner.regs,
        sqe,
        inner.opts.admin_timeout,
        &inner.name,
        what,
    )?;
    Ok(admin.read_data())
}

/// The Changed Namespace List log page (04h; read without Retain Asynchronous Event, so
/// notices are sent again): the NSIDs changed, or `[u32::MAX]` when more changed than it
/// holds.
fn read_changed_ns_log(inner: &CtrlrInner) -> Result<Vec<u32>, NvmeError> {
    let mut sqe = Sqe::new(admin_opc::GET_LOG_PAGE, 0);
    sqe.nsid = u32::MAX;
    // NUMDL (0-based dwords) in bits 31:16, the log page identifier in 7:0.
    sqe.cdw10 = ((NSIDS_PER_PAGE as u32 - 1) << 16) | lid::CHANGED_NS_LIST;
    let page: [u32; NSIDS_PER_PAGE] = admin_read(inner, sqe, "Get Log Page Changed Namespaces")?;
    Ok(nsid_list(&page))
}

/// Every active NSID (Identify active namespace ID list, page by page).
fn read_active_nsids(inner: &CtrlrInner) -> Result<Vec<u32>, NvmeError> {
    let mut all = Vec::new();
    loop {
        let mut sqe = Sqe::new(admin_opc::IDENTIFY, 0);
        sqe.nsid = all.last().copied().unwrap_or(0);
        sqe.cdw10 = cns::ACTIVE_NS_LIST;
        let page: [u32; NSIDS_PER_PAGE] = admin_read(inner, sqe, "Identify active namespace list")?;
        let ids = nsid_list(&page);
        let full = ids.len() == NSIDS_PER_PAGE;
        all.extend(ids.into_iter().filter(|&n| n != u32::MAX));
        if !full {
            return Ok(all);
        }
    }
}

/// A new namespace's size: blocks and block size.
fn identify_namespace(inner: &CtrlrInner, nsid: u32) -> Result<(u64, u64), NvmeError> {
    let mut sqe = Sqe::new(admin_opc::IDENTIFY, 0);
    sqe.nsid = nsid;
    sqe.cdw10 = cns::NAMESPACE;
    let ns: IdentifyNamespace = admin_read(inner, sqe, "Identify Namespace")?;
    Ok((ns.nsze, 1u64 << ns.format().lbads()))
}

/// The NSIDs of a list page, up to the first zero.
fn nsid_list(page: &[u32; NSIDS_PER_PAGE]) -> Vec<u32> {
    page.iter()
        .map(|&n| u32::from_le(n))
        .take_while(|&n| n != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nsid_list_ends_at_the_first_zero() {
        let mut page = [0u32; NSIDS_PER_PAGE];
        page[..3].copy_from_slice(&[1u32.to_le(), 2u32.to_le(), 7u32.to_le()]);
        page[5] = 9;
        assert_eq!(nsid_list(&page), vec![1, 2, 7]);
        assert!(nsid_list(&[0; NSIDS_PER_PAGE]).is_empty());
    }
}
