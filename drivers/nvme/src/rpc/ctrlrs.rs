//! The methods on attached controllers: `bdev_nvme_detach_controller`,
//! `bdev_nvme_reset_controller`, `bdev_nvme_get_controllers`.

use std::sync::Arc;

use pmio_jsonrpc::{RpcError, decl};
use serde_json::{Value, json};

use super::context::{CtrlrRecord, NvmeRpc};
use super::error::nvme_error;
use super::params::{NvmeDetach, NvmeGetControllers, NvmeReset};
use super::trid::{Adrfam, Trid};

/// SPDK's `bdev_nvme_detach_controller`: `name`, and optionally which path
/// (`trtype`, `traddr`, `adrfam`, `trsvcid`, `subnqn`, `hostaddr`, `hostsvcid`): the controller
/// goes only if every key given matches it.
pub fn bdev_nvme_detach_controller(
    m: &NvmeRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: NvmeDetach = decl::decode(params)?;
    let name = &p.name;
    let mut ctrlrs = m.ctrlrs_mut();
    let Some(pos) = ctrlrs
        .iter()
        .position(|c| c.name == *name && path_matches(&c.trid, &p))
    else {
        return Err(RpcError::errno(-libc::ENODEV));
    };
    if let Some(b) = ctrlrs[pos].bdevs.iter().find(|b| m.bdevs.is_claimed(b)) {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {b} of controller {name} is running perform_tests"),
        ));
    }
    // No namespace may take one of its bdevs between this check and the detach.
    let owners = m.bdevs.hold_bdev_owners();
    for b in &ctrlrs[pos].bdevs {
        m.bdevs.check_no_user(b)?;
    }
    let c = ctrlrs.remove(pos);
    drop(ctrlrs);
    let r = m.detach(c);
    drop(owners);
    r.map_err(|e| nvme_error(&e))?;
    Ok(Value::Bool(true))
}

/// Whether every path key of a detach names `trid`'s path: the transport, address and family
/// in any case, port and subsystem exactly. pmio's host picks no source address, so
/// `hostaddr`/`hostsvcid` match only when empty.
fn path_matches(trid: &Trid, p: &NvmeDetach) -> bool {
    let any_case = |given: &Option<String>, have: Option<&str>| {
        given
            .as_ref()
            .is_none_or(|g| have.is_some_and(|h| h.eq_ignore_ascii_case(g)))
    };
    let exact = |given: &Option<String>, have: Option<&str>| {
        given.as_ref().is_none_or(|g| have == Some(g.as_str()))
    };
    let unset = |given: &Option<String>| given.as_ref().is_none_or(|g| g.is_empty());
    any_case(&p.trtype, Some(trid.trtype()))
        && any_case(&p.traddr, Some(trid.traddr()))
        && any_case(&p.adrfam, trid.adrfam().map(Adrfam::name))
        && exact(&p.trsvcid, trid.trsvcid())
        && exact(&p.subnqn, trid.subnqn())
        && unset(&p.hostaddr)
        && unset(&p.hostsvcid)
}

/// SPDK's `bdev_nvme_reset_controller` (`name`, optional `cntlid`, which must then be the
/// controller's): resets the controller and answers `true` once the reset is over.
pub fn bdev_nvme_reset_controller(
    m: &NvmeRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let NvmeReset { name, cntlid } = decl::decode(params)?;
    let ctrlr = m
        .ctrlrs_mut()
        .iter()
        .find(|c| c.name == name)
        .map(|c| Arc::clone(&c.ctrlr))
        .ok_or_else(|| {
            RpcError::errno_detail(-libc::ENODEV, format_args!("no NVMe controller {name}"))
        })?;
    if let Some(id) = cntlid
        && id != ctrlr.identify().cntlid
    {
        return Err(RpcError::errno_detail(
            -libc::ENODEV,
            format_args!(
                "controller {name} has cntlid {}, not {id}",
                ctrlr.identify().cntlid
            ),
        ));
    }
    ctrlr.reset().map_err(|e| nvme_error(&e))?;
    log::info!("reset NVMe controller {name}");
    Ok(Value::Bool(true))
}

/// SPDK's `bdev_nvme_get_controllers` (optional `name`): each controller with its one path,
/// `{"name", "ctrlrs": [{"state", "trid", "cntlid", "host"}]}`.
pub fn bdev_nvme_get_controllers(
    m: &NvmeRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let NvmeGetControllers { name } = decl::decode(params)?;
    let all = m.ctrlrs();
    let picked: Vec<&CtrlrRecord> = all
        .iter()
        .filter(|c| name.as_ref().is_none_or(|n| *n == c.name))
        .collect();
    if name.is_some() && picked.is_empty() {
        return Err(RpcError::errno(-libc::ENODEV));
    }
    Ok(Value::Array(picked.into_iter().map(ctrlr_json).collect()))
}

/// One controller as SPDK lists it, with SPDK's state names: `enabled`, `resetting` (an
/// NVMe/TCP controller reconnecting), `failed` (its reconnects ran past
/// `ctrlr_loss_timeout_sec`, or its reset failed: only detaching is left).
fn ctrlr_json(c: &CtrlrRecord) -> Value {
    let state = c.ctrlr.state().as_str();
    json!({
        "name": c.name,
        "ctrlrs": [{
            "state": state,
            "trid": c.trid.json(),
            "cntlid": c.ctrlr.identify().cntlid,
            "host": {"nqn": c.hostnqn, "addr": "", "svcid": ""}
        }]
    })
}
