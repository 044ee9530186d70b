//! NVMe/TCP attaches: the decoded parameters made into the driver's [`TcpTarget`] and
//! [`TcpOptions`] (the attach's own knobs over `bdev_nvme_set_options`' over the driver's
//! defaults, which are SPDK's), and the parameters `save_config` writes back, as SPDK writes
//! them for a TCP controller (`nvme_ctrlr_config_json`): the effective knobs, so a restart from
//! the file connects as this attach did.

use pmio_jsonrpc::RpcError;
use serde_json::{Value, json};

use super::args::{AttachArgs, TcpArgs};
use super::context::Attached;
use super::defaults::NvmeDefaults;
use super::error::nvme_error;
use super::trid::Trid;
use crate::tcp::{TcpOptions, TcpTarget};

/// The driver's options for `tcp` under `defaults`.
fn options(a: &AttachArgs, tcp: &TcpArgs, defaults: &NvmeDefaults) -> TcpOptions {
    let d = TcpOptions::default();
    let r = tcp.reconnect.or(defaults.reconnect);
    TcpOptions {
        hostnqn: tcp.hostnqn.clone(),
        hdgst: tcp.hdgst,
        ddgst: tcp.ddgst,
        io_queues: a.num_io_queues.unwrap_or(d.io_queues),
        keep_alive_timeout_ms: defaults
            .keep_alive_timeout_ms
            .unwrap_or(d.keep_alive_timeout_ms),
        ctrlr_loss_timeout_sec: r.ctrlr_loss_timeout_sec.unwrap_or(d.ctrlr_loss_timeout_sec),
        reconnect_delay_sec: r.reconnect_delay_sec.unwrap_or(d.reconnect_delay_sec),
        fast_io_fail_timeout_sec: r
            .fast_io_fail_timeout_sec
            .unwrap_or(d.fast_io_fail_timeout_sec),
        ..d
    }
}

/// Connects to the subsystem of `a` (blocking: the TCP connection, ICReq, fabrics Connect,
/// identify; the driver's connect timeout bounds it), with `defaults` under the attach's own
/// knobs.
pub fn attach(
    a: &AttachArgs,
    tcp: &TcpArgs,
    defaults: &NvmeDefaults,
    keyring: &pmio_keyring::Keyring,
) -> Result<Attached, RpcError> {
    let Trid::Tcp {
        traddr,
        trsvcid,
        subnqn,
        ..
    } = &a.trid
    else {
        unreachable!("TCP parameters come with a TCP transport ID");
    };
    let target = TcpTarget {
        traddr: traddr.clone(),
        trsvcid: trsvcid.clone(),
        subnqn: subnqn.clone(),
    };
    let opts = TcpOptions {
        dhchap: dhchap_keys(tcp, keyring)?,
        psk: tls_key(tcp, keyring)?,
        ..options(a, tcp, defaults)
    };
    opts.validate().map_err(|e| nvme_error(&e))?;
    let ctrlr = crate::tcp::connect(&a.name, &target, opts.clone()).map_err(|e| nvme_error(&e))?;
    let hostnqn = ctrlr.hostnqn().unwrap_or_default().to_string();
    Ok(Attached {
        saved: saved(a, tcp, &opts, &hostnqn),
        hostnqn,
        ctrlr,
    })
}

/// The keyring keys `--dhchap-key` and `--dhchap-ctrlr-key` name: an unknown name is SPDK's
/// `-ENOKEY`, a controller key without a host key `-EINVAL`.
fn dhchap_keys(
    tcp: &TcpArgs,
    keyring: &pmio_keyring::Keyring,
) -> Result<Option<crate::tcp::DhchapKeys>, RpcError> {
    let get = |name: &str| {
        keyring.get(name).map_err(|_| {
            RpcError::errno_detail(-libc::ENOKEY, format_args!("no key {name} in the keyring"))
        })
    };
    let ctrlr_key = tcp.dhchap_ctrlr_key.as_deref().map(get).transpose()?;
    match &tcp.dhchap_key {
        Some(name) => Ok(Some(crate::tcp::DhchapKeys {
            key: get(name)?,
            ctrlr_key,
        })),
        None if ctrlr_key.is_some() => Err(RpcError::errno_detail(
            -libc::EINVAL,
            "dhchap_ctrlr_key needs a dhchap_key",
        )),
        None => Ok(None),
    }
}

/// The keyring key `--psk` names, checked now to be a TLS PSK: an unknown name is SPDK's
/// `-ENOKEY`, another kind of key `-EINVAL`.
fn tls_key(
    tcp: &TcpArgs,
    keyring: &pmio_keyring::Keyring,
) -> Result<Option<crate::tcp::TlsKey>, RpcError> {
    let Some(name) = &tcp.psk else {
        return Ok(None);
    };
    let key = keyring.get(name).map_err(|_| {
        RpcError::errno_detail(-libc::ENOKEY, format_args!("no key {name} in the keyring"))
    })?;
    key.tls_psk()
        .map_err(|e| RpcError::errno_detail(-libc::EINVAL, format_args!("psk {name}: {e}")))?;
    Ok(Some(crate::tcp::TlsKey(key)))
}

/// The attach call that reconnects as this one did, keys in SPDK's order.
fn saved(a: &AttachArgs, tcp: &TcpArgs, o: &TcpOptions, hostnqn: &str) -> Value {
    let mut p = serde_json::Map::new();
    p.insert("name".into(), json!(a.name));
    p.extend(a.trid.json());
    let mut rest = json!({
        "prchk_reftag": false,
        "prchk_guard": false,
        "ctrlr_loss_timeout_sec": o.ctrlr_loss_timeout_sec,
        "reconnect_delay_sec": o.reconnect_delay_sec,
        "fast_io_fail_timeout_sec": o.fast_io_fail_timeout_sec,
        "hostnqn": hostnqn,
        "hdgst": o.hdgst,
        "ddgst": o.ddgst
    });
    if let Some(m) = rest.as_object_mut() {
        p.append(m);
    }
    if let Some(n) = a.num_io_queues {
        p.insert("num_io_queues".into(), json!(n));
    }
    // The keys' names (their texts stay in their files).
    for (k, v) in [
        ("dhchap_key", &tcp.dhchap_key),
        ("dhchap_ctrlr_key", &tcp.dhchap_ctrlr_key),
        ("psk", &tcp.psk),
    ] {
        if let Some(name) = v {
            p.insert(k.into(), json!(name));
        }
    }
    Value::Object(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::args;
    use crate::rpc::defaults::Reconnect;

    fn parse(v: Value) -> (AttachArgs, TcpArgs) {
        let a = args::parse(Some(&v)).unwrap();
        let t = a.tcp.clone().unwrap();
        (a, t)
    }

    #[test]
    fn attach_knobs_over_set_options_over_spdk_defaults() {
        let (a, t) = parse(json!({"name": "N", "trtype": "tcp", "traddr": "127.0.0.1",
            "trsvcid": "4420", "subnqn": "nqn.s", "reconnect_delay_sec": 2, "hdgst": true}));
        let none = options(&a, &t, &NvmeDefaults::default());
        assert_eq!(none.ctrlr_loss_timeout_sec, 0);
        assert_eq!(none.reconnect_delay_sec, 2);
        assert!(
            none.validate().is_err(),
            "SPDK's rules: a delay without a loss timeout"
        );
        let defaults = NvmeDefaults {
            reconnect: Reconnect {
                ctrlr_loss_timeout_sec: Some(30),
                reconnect_delay_sec: Some(5),
                fast_io_fail_timeout_sec: Some(10),
            },
            keep_alive_timeout_ms: Some(4000),
            ..NvmeDefaults::default()
        };
        let o = options(&a, &t, &defaults);
        assert_eq!(
            (
                o.ctrlr_loss_timeout_sec,
                o.reconnect_delay_sec,
                o.fast_io_fail_timeout_sec,
                o.keep_alive_timeout_ms
            ),
            (30, 2, 10, 4000)
        );
        assert!(o.hdgst && !o.ddgst);
        o.validate().unwrap();
        let s = saved(&a, &t, &o, "nqn.h");
        assert_eq!(
            s.to_string(),
            r#"{"name":"N","trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"4420","subnqn":"nqn.s","prchk_reftag":false,"prchk_guard":false,"ctrlr_loss_timeout_sec":30,"reconnect_delay_sec":2,"fast_io_fail_timeout_sec":10,"hostnqn":"nqn.h","hdgst":true,"ddgst":false}"#
        );
        // What save_config wrote decodes to the same attach.
        let (a2, t2) = parse(s);
        assert_eq!(a2.trid, a.trid);
        assert_eq!(
            options(&a2, &t2, &NvmeDefaults::default()).ctrlr_loss_timeout_sec,
            30
        );
    }
}
