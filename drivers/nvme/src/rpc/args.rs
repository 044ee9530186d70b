//! `bdev_nvme_attach_controller`'s parameters checked once, for the method and for
//! `--check-config` alike: SPDK's keys ([`NvmeAttach`]: rpc.py sends its `store_true` flags as
//! `false`, and a saved configuration carries keys such as `hostnqn` and the reconnect knobs for
//! every controller), and what each transport takes. (SPDK's rules between the reconnect knobs
//! are the driver's `TcpOptions::validate`.)

use pmio_jsonrpc::{RpcError, decl};
use serde_json::Value;

use super::defaults::Reconnect;
use super::params::NvmeAttach;
use super::trid::{Adrfam, Trid};

/// What an NVMe/TCP attach asks beyond its transport ID.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TcpArgs {
    /// `hostnqn` (absent: the driver's).
    pub hostnqn: Option<String>,
    /// `hdgst`: header digests.
    pub hdgst: bool,
    /// `ddgst`: data digests.
    pub ddgst: bool,
    /// The knobs given with the attach.
    pub reconnect: Reconnect,
    /// `dhchap_key`: the keyring key the host authenticates with.
    pub dhchap_key: Option<String>,
    /// `dhchap_ctrlr_key`: the keyring key the controller must prove it holds.
    pub dhchap_ctrlr_key: Option<String>,
    /// `psk`: the keyring key (a TLS PSK) every connection's TLS handshake uses.
    pub psk: Option<String>,
}

/// One `bdev_nvme_attach_controller` call, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachArgs {
    /// Controller name; its bdevs are `<name>n<nsid>`.
    pub name: String,
    /// Where the controller is.
    pub trid: Trid,
    /// `num_io_queues`.
    pub num_io_queues: Option<u16>,
    /// `multipath` other than `disable`: a second path under the same name is asked for (pmio
    /// attaches one path per controller; the first path is an ordinary attach).
    pub multipath: bool,
    /// TCP's parameters (`None` for PCIe).
    pub tcp: Option<TcpArgs>,
}

/// Decodes `params`. Errors are SPDK's: `-32603` for a bad or unknown key, `-22` for a value
/// that does not fit the transport, `-95` for what pmio does not do.
pub fn parse(params: Option<&Value>) -> Result<AttachArgs, RpcError> {
    let p: NvmeAttach = decl::decode(params)?;
    check(p)
}

/// Checks a decoded attach against what its transport takes.
pub fn check(p: NvmeAttach) -> Result<AttachArgs, RpcError> {
    let multipath = match p.multipath.as_deref() {
        None | Some("disable") => false,
        Some("failover" | "multipath") => true,
        Some(m) => {
            return Err(RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("multipath \"{m}\" is not disable, failover or multipath"),
            ));
        }
    };
    if p.multipath_opts.as_ref().is_some_and(|o| !o.is_empty()) {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            "multipath_opts: pmio attaches one path per controller",
        ));
    }
    let (trid, tcp) = if p.trtype.eq_ignore_ascii_case("pcie") {
        check_pcie(&p)?;
        (
            Trid::Pcie {
                traddr: p.traddr.clone(),
            },
            None,
        )
    } else if p.trtype.eq_ignore_ascii_case("tcp") {
        let trid = tcp_trid(&p)?;
        let args = TcpArgs {
            hostnqn: p.hostnqn.clone(),
            hdgst: p.hdgst,
            ddgst: p.ddgst,
            reconnect: Reconnect {
                ctrlr_loss_timeout_sec: p.ctrlr_loss_timeout_sec,
                reconnect_delay_sec: p.reconnect_delay_sec,
                fast_io_fail_timeout_sec: p.fast_io_fail_timeout_sec,
            },
            dhchap_key: p.dhchap_key.clone(),
            dhchap_ctrlr_key: p.dhchap_ctrlr_key.clone(),
            psk: p.psk.clone(),
        };
        (trid, Some(args))
    } else {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!(
                "trtype {}: pmio attaches PCIe and TCP controllers",
                p.trtype
            ),
        ));
    };
    if p.num_io_queues == Some(0) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            "num_io_queues must be at least 1",
        ));
    }
    Ok(AttachArgs {
        name: p.name,
        trid,
        num_io_queues: p.num_io_queues,
        multipath,
        tcp,
    })
}

/// Refuses the parameters only NVMe-oF controllers take, and digests. (`hostnqn` and the
/// reconnect knobs are not among them: SPDK's `save_config` writes them for every controller,
/// PCIe ones included, and SPDK accepts them back.)
fn check_pcie(p: &NvmeAttach) -> Result<(), RpcError> {
    let fabrics_only = [
        ("adrfam", p.adrfam.is_some()),
        ("trsvcid", p.trsvcid.is_some()),
        ("subnqn", p.subnqn.is_some()),
        ("hostaddr", p.hostaddr.is_some()),
        ("hostsvcid", p.hostsvcid.is_some()),
        ("psk", p.psk.is_some()),
        ("dhchap_key", p.dhchap_key.is_some()),
        ("dhchap_ctrlr_key", p.dhchap_ctrlr_key.is_some()),
        ("priority", p.priority.is_some()),
    ];
    if let Some((k, _)) = fabrics_only.iter().find(|(_, given)| *given) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            format_args!("parameter \"{k}\" does not apply to trtype PCIe"),
        ));
    }
    for (k, on) in [("hdgst", p.hdgst), ("ddgst", p.ddgst)] {
        if on {
            return Err(RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("parameter \"{k}\" (digests) does not apply to trtype PCIe"),
            ));
        }
    }
    Ok(())
}

/// A TCP controller's transport ID from the attach; refuses the keys pmio's host has no use
/// for.
fn tcp_trid(p: &NvmeAttach) -> Result<Trid, RpcError> {
    let traddr = p.traddr.clone();
    let adrfam = match &p.adrfam {
        None => Adrfam::of_addr(&traddr),
        Some(a) => Adrfam::parse(a).ok_or_else(|| {
            RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("adrfam {a}: NVMe/TCP addresses are ipv4 or ipv6"),
            )
        })?,
    };
    let trsvcid = p.trsvcid.clone().ok_or_else(|| {
        RpcError::errno_detail(
            -libc::EINVAL,
            "trsvcid (the target's port, e.g. 4420) is required for trtype TCP",
        )
    })?;
    if trsvcid.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            format_args!("trsvcid {trsvcid}: not a TCP port"),
        ));
    }
    let subnqn = p.subnqn.clone().ok_or_else(|| {
        RpcError::errno_detail(
            -libc::EINVAL,
            "subnqn (the subsystem's NQN) is required for trtype TCP",
        )
    })?;
    if traddr.is_empty() || subnqn.is_empty() {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            "traddr and subnqn must not be empty",
        ));
    }
    if let Some(prio) = &p.priority
        && prio != "0"
    {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("priority {prio}: pmio's sockets keep the default priority 0"),
        ));
    }
    for (k, given, why) in [
        (
            "hostaddr",
            &p.hostaddr,
            "pmio's host lets the kernel pick the source address",
        ),
        (
            "hostsvcid",
            &p.hostsvcid,
            "pmio's host lets the kernel pick the source port",
        ),
    ] {
        if given.is_some() {
            return Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!("parameter \"{k}\": {why}"),
            ));
        }
    }
    Ok(Trid::Tcp {
        adrfam,
        traddr,
        trsvcid,
        subnqn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_v(v: Value) -> Result<AttachArgs, RpcError> {
        parse(Some(&v))
    }

    /// What rpc.py sends for `bdev_nvme_attach_controller -b Nvme0 -t tcp -a 127.0.0.1
    /// -f ipv4 -s 4420 -n NQN -q HOSTNQN -l 30 -o 2 -u 10 --hdgst`.
    #[test]
    fn rpc_py_tcp_attach() {
        let a = parse_v(json!({
            "name": "Nvme0", "trtype": "tcp", "traddr": "127.0.0.1", "hostnqn": "nqn.h",
            "adrfam": "ipv4", "trsvcid": "4420", "subnqn": "nqn.s", "prchk_reftag": false,
            "prchk_guard": false, "hdgst": true, "ddgst": false, "ctrlr_loss_timeout_sec": 30,
            "reconnect_delay_sec": 2, "fast_io_fail_timeout_sec": 10,
            "allow_unrecognized_csi": false}))
        .unwrap();
        assert_eq!(a.name, "Nvme0");
        assert_eq!(
            a.trid,
            Trid::Tcp {
                adrfam: Adrfam::Ipv4,
                traddr: "127.0.0.1".into(),
                trsvcid: "4420".into(),
                subnqn: "nqn.s".into()
            }
        );
        let t = a.tcp.unwrap();
        assert_eq!(t.hostnqn.as_deref(), Some("nqn.h"));
        assert!(t.hdgst && !t.ddgst);
        assert_eq!(
            t.reconnect,
            Reconnect {
                ctrlr_loss_timeout_sec: Some(30),
                reconnect_delay_sec: Some(2),
                fast_io_fail_timeout_sec: Some(10)
            }
        );
    }

    /// SPDK's own `save_config` of a TCP controller loads (trtype and adrfam as SPDK prints
    /// them; multipath and the knobs it writes).
    #[test]
    fn spdk_saved_tcp_attach() {
        let a = parse_v(json!({
            "name": "Nvme0", "trtype": "TCP", "adrfam": "IPv4", "traddr": "10.0.0.2",
            "trsvcid": "4420", "subnqn": "nqn.s", "prchk_reftag": false, "prchk_guard": false,
            "ctrlr_loss_timeout_sec": 0, "reconnect_delay_sec": 0,
            "fast_io_fail_timeout_sec": 0, "hostnqn": "nqn.h", "hdgst": false, "ddgst": false,
            "multipath": "multipath"}))
        .unwrap();
        assert!(a.multipath);
        assert_eq!(a.trid.trtype(), "TCP");
    }

    #[test]
    fn pcie_keeps_refusing_fabrics_keys() {
        let a = parse_v(
            json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "0000:00:04.0",
            "hostnqn": "nqn.h", "ctrlr_loss_timeout_sec": 0, "hdgst": false}),
        )
        .unwrap();
        assert_eq!(
            a.trid,
            Trid::Pcie {
                traddr: "0000:00:04.0".into()
            }
        );
        assert!(a.tcp.is_none());
        for (k, v) in [("subnqn", json!("nqn.s")), ("hdgst", json!(true))] {
            let mut p = json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "0000:00:04.0"});
            p[k] = v;
            let e = parse_v(p).unwrap_err();
            assert_eq!(e.code, -libc::EINVAL);
            assert!(e.message.contains(k), "{}", e.message);
        }
    }

    #[test]
    fn tcp_refusals_name_the_key() {
        let base = json!({"name": "N", "trtype": "tcp", "traddr": "127.0.0.1",
            "trsvcid": "4420", "subnqn": "nqn.s"});
        for (k, v, code, needle) in [
            ("trsvcid", Value::Null, -libc::EINVAL, "trsvcid"),
            ("subnqn", Value::Null, -libc::EINVAL, "subnqn"),
            ("trsvcid", json!("http"), -libc::EINVAL, "not a TCP port"),
            ("adrfam", json!("ib"), -libc::EINVAL, "adrfam ib"),
            ("hostaddr", json!("10.0.0.1"), -libc::EOPNOTSUPP, "hostaddr"),
            ("priority", json!("3"), -libc::EOPNOTSUPP, "priority 3"),
            ("num_io_queues", json!(0), -libc::EINVAL, "num_io_queues"),
            ("prchk_guard", json!(true), -libc::EOPNOTSUPP, "prchk_guard"),
            ("multipath", json!("x"), -libc::EINVAL, "multipath"),
            ("bogus", json!(1), -32603, "bogus"),
            ("trtype", json!("rdma"), -libc::EOPNOTSUPP, "trtype rdma"),
        ] {
            let mut p = base.clone();
            if v.is_null() {
                p.as_object_mut().unwrap().remove(k);
            } else {
                p[k] = v;
            }
            let e = parse_v(p).unwrap_err();
            assert_eq!(e.code, code, "{k}: {}", e.message);
            assert!(e.message.contains(needle), "{k}: {}", e.message);
        }
        let mut p = base.clone();
        p["priority"] = json!("0");
        parse_v(p).unwrap();
    }
}
