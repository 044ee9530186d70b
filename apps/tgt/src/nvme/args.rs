//! `bdev_nvme_attach_controller`'s parameters decoded once, for the method and for
//! `--check-config` alike: SPDK's keys (rpc.py sends its `store_true` flags as `false`, and a
//! saved configuration carries keys such as `hostnqn` and the reconnect knobs for every
//! controller), and what each transport takes. (SPDK's rules between the reconnect knobs are
//! the driver's `TcpOptions::validate`.)

use serde_json::{Map, Value, json};

use super::trid::{Adrfam, Trid};
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::params::Params;

/// SPDK's reconnect knobs (`bdev_nvme_set_options` and the attach's own), each `None` when not
/// given: an attach's value wins over `bdev_nvme_set_options`', which wins over the driver's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reconnect {
    /// Seconds to keep reconnecting a lost controller before deleting it (0: never reconnect,
    /// -1: forever).
    pub ctrlr_loss_timeout_sec: Option<i32>,
    /// Seconds between reconnect attempts.
    pub reconnect_delay_sec: Option<u32>,
    /// Seconds after which I/O held during a reconnect fails (0: held until the controller is
    /// deleted).
    pub fast_io_fail_timeout_sec: Option<u32>,
}

impl Reconnect {
    /// Each knob from `self`, else from `base`.
    pub fn or(self, base: Reconnect) -> Reconnect {
        Reconnect {
            ctrlr_loss_timeout_sec: self.ctrlr_loss_timeout_sec.or(base.ctrlr_loss_timeout_sec),
            reconnect_delay_sec: self.reconnect_delay_sec.or(base.reconnect_delay_sec),
            fast_io_fail_timeout_sec: self
                .fast_io_fail_timeout_sec
                .or(base.fast_io_fail_timeout_sec),
        }
    }

    /// Takes the three keys out of `p`.
    fn take(p: &mut Params) -> Result<Reconnect, RpcError> {
        Ok(Reconnect {
            ctrlr_loss_timeout_sec: p.opt("ctrlr_loss_timeout_sec")?,
            reconnect_delay_sec: p.opt("reconnect_delay_sec")?,
            fast_io_fail_timeout_sec: p.opt("fast_io_fail_timeout_sec")?,
        })
    }
}

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

/// Parameters only NVMe-oF controllers take: refused for PCIe when given. (`hostnqn` and the
/// reconnect knobs are not among them: SPDK's `save_config` writes them for every controller,
/// PCIe ones included, and SPDK accepts them back.)
const FABRICS_ONLY: [&str; 9] = [
    "adrfam",
    "trsvcid",
    "subnqn",
    "hostaddr",
    "hostsvcid",
    "psk",
    "dhchap_key",
    "dhchap_ctrlr_key",
    "priority",
];

/// Decodes `params`. Errors are SPDK's: `-32603` for a bad or unknown key, `-22` for a value
/// that does not fit the transport, `-95` for what pmio does not do.
pub fn parse(params: Option<&Value>) -> Result<AttachArgs, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let trtype: String = p.req("trtype")?;
    let traddr: String = p.req("traddr")?;
    let num_io_queues: Option<u16> = p.opt("num_io_queues")?;
    for k in ["prchk_reftag", "prchk_guard", "allow_unrecognized_csi"] {
        p.accept_default(k, json!(false))?;
    }
    // Newer SPDK clients always send it.
    p.accept_default("disable_sq_flow_control", json!(false))?;
    let multipath = match p.opt::<String>("multipath")?.as_deref() {
        None | Some("disable") => false,
        Some("failover" | "multipath") => true,
        Some(m) => {
            return Err(RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("multipath \"{m}\" is not disable, failover or multipath"),
            ));
        }
    };
    if let Some(o) = p.opt::<Map<String, Value>>("multipath_opts")?
        && !o.is_empty()
    {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            "multipath_opts: pmio attaches one path per controller",
        ));
    }
    let hdgst = p.opt::<bool>("hdgst")?.unwrap_or(false);
    let ddgst = p.opt::<bool>("ddgst")?.unwrap_or(false);
    let hostnqn: Option<String> = p.opt("hostnqn")?;
    let reconnect = Reconnect::take(&mut p)?;
    // SPDK's connect timeout and its cap on the names returned: the driver has its own
    // connect timeout, and pmio answers every namespace.
    p.opt::<u64>("fabrics_connect_timeout_us")?;
    p.opt::<u32>("max_bdevs")?;
    let mut given = Map::new();
    for k in FABRICS_ONLY {
        if let Some(v) = p.opt::<Value>(k)? {
            given.insert(k.to_string(), v);
        }
    }
    p.finish()?;
    let (trid, tcp) = if trtype.eq_ignore_ascii_case("pcie") {
        if let Some(k) = given.keys().next() {
            return Err(RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("parameter \"{k}\" does not apply to trtype PCIe"),
            ));
        }
        for (k, on) in [("hdgst", hdgst), ("ddgst", ddgst)] {
            if on {
                return Err(RpcError::errno_detail(
                    -libc::EINVAL,
                    format_args!("parameter \"{k}\" (digests) does not apply to trtype PCIe"),
                ));
            }
        }
        (Trid::Pcie { traddr }, None)
    } else if trtype.eq_ignore_ascii_case("tcp") {
        let trid = tcp_trid(traddr, &mut given)?;
        let args = TcpArgs {
            hostnqn,
            hdgst,
            ddgst,
            reconnect,
        };
        (trid, Some(args))
    } else {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("trtype {trtype}: pmio attaches PCIe and TCP controllers"),
        ));
    };
    if num_io_queues == Some(0) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            "num_io_queues must be at least 1",
        ));
    }
    Ok(AttachArgs {
        name,
        trid,
        num_io_queues,
        multipath,
        tcp,
    })
}

/// A TCP controller's transport ID from `traddr` and the fabrics keys given; refuses the keys
/// pmio's host has no use for.
fn tcp_trid(traddr: String, given: &mut Map<String, Value>) -> Result<Trid, RpcError> {
    let mut string = |k: &str| -> Result<Option<String>, RpcError> {
        match given.remove(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(RpcError::decode(format_args!(
                "parameter \"{k}\": {v} is not a string"
            ))),
        }
    };
    let adrfam = match string("adrfam")? {
        None => Adrfam::of_addr(&traddr),
        Some(a) => Adrfam::parse(&a).ok_or_else(|| {
            RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("adrfam {a}: NVMe/TCP addresses are ipv4 or ipv6"),
            )
        })?,
    };
    let trsvcid = string("trsvcid")?.ok_or_else(|| {
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
    let subnqn = string("subnqn")?.ok_or_else(|| {
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
    if let Some(prio) = string("priority")?
        && prio != "0"
    {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("priority {prio}: pmio's sockets keep the default priority 0"),
        ));
    }
    for (k, why) in [
        (
            "hostaddr",
            "pmio's host lets the kernel pick the source address",
        ),
        (
            "hostsvcid",
            "pmio's host lets the kernel pick the source port",
        ),
        ("psk", "pmio's host has no TLS"),
        (
            "dhchap_key",
            "pmio's host has no DH-HMAC-CHAP authentication",
        ),
        (
            "dhchap_ctrlr_key",
            "pmio's host has no DH-HMAC-CHAP authentication",
        ),
    ] {
        if given.remove(k).is_some() {
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
            ("psk", json!("key0"), -libc::EOPNOTSUPP, "TLS"),
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

    #[test]
    fn attach_knobs_win_over_defaults() {
        let a = Reconnect {
            ctrlr_loss_timeout_sec: Some(5),
            ..Default::default()
        };
        let b = Reconnect {
            ctrlr_loss_timeout_sec: Some(9),
            reconnect_delay_sec: Some(1),
            fast_io_fail_timeout_sec: None,
        };
        assert_eq!(
            a.or(b),
            Reconnect {
                ctrlr_loss_timeout_sec: Some(5),
                reconnect_delay_sec: Some(1),
                fast_io_fail_timeout_sec: None
            }
        );
    }
}
