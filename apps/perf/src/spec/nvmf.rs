//! `--dev nvmf:traddr=ADDR,trsvcid=PORT,subnqn=NQN[,...]`: a namespace of a remote NVMe/TCP
//! subsystem, through the NVMe driver's TCP host. Keys are case-insensitive and take SPDK's
//! transport-ID names (`spdk_nvme_perf -r 'trtype:tcp adrfam:IPv4 traddr:… trsvcid:…
//! subnqn:…'`), so `TRADDR=` and `trtype=tcp` work too.

use pmio_nvme::tcp::{TcpOptions, TcpTarget};

use super::{Created, SpecArgs, bool_key, namespace_bdev};

/// The `nvmf` keys, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmfSpec {
    /// Controller name (the bdev is `<name>n<ns>`).
    pub name: String,
    /// Target address.
    pub traddr: String,
    /// Target port.
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Namespace ID.
    pub nsid: u32,
    /// Host NQN (absent: the driver's).
    pub hostnqn: Option<String>,
    /// Header digests.
    pub hdgst: bool,
    /// Data digests.
    pub ddgst: bool,
    /// I/O queues (connections) asked of the controller (absent: the driver's).
    pub io_queues: Option<u16>,
    /// Entries per I/O queue (absent: the driver's).
    pub queue_size: Option<u32>,
    /// Seconds to keep reconnecting a lost connection (-1: forever; absent: the driver's).
    pub ctrlr_loss_timeout_sec: Option<i32>,
    /// Seconds between reconnect attempts.
    pub reconnect_delay_sec: Option<u32>,
    /// Seconds after which I/O held during a reconnect fails (0: never).
    pub fast_io_fail_timeout_sec: Option<u32>,
    /// File of the host's DH-HMAC-CHAP secret (`DHHC-1:…`, owner-only, absolute path).
    pub dhchap_key: Option<String>,
    /// File of the controller's secret (bidirectional authentication).
    pub dhchap_ctrlr_key: Option<String>,
    /// File of the TLS PSK (`NVMeTLSkey-1:…`, owner-only, absolute path): TLS 1.3 on every
    /// connection.
    pub psk: Option<String>,
}

/// The help line of `--dev nvmf`.
pub const HELP: &str = "nvmf:traddr=ADDR,trsvcid=PORT,subnqn=NQN[,ns=1,hostnqn=NQN,hdgst=0|1,\
ddgst=0|1,queues=N,queue_size=N,ctrlr_loss_timeout_sec=S,reconnect_delay_sec=S,\
fast_io_fail_timeout_sec=S,dhchap_key=FILE,dhchap_ctrlr_key=FILE,psk=FILE,name=Nvme0] (NVMe/TCP; \
keys as spdk_nvme_perf -r, any case; hostnqn= sends an empty host NQN, as spdk_nvme_perf does \
without one; dhchap_key: a DHHC-1 secret in an owner-only file, for DH-HMAC-CHAP; psk: an \
NVMeTLSkey-1 PSK in an owner-only file, for TLS 1.3)";

/// Takes the `nvmf` keys out of `a`; `name` is the default controller name.
pub fn parse(a: &mut SpecArgs, name: String) -> Result<NvmfSpec, String> {
    a.lowercase_keys()?;
    if let Some(t) = a.str("trtype")
        && !t.eq_ignore_ascii_case("tcp")
    {
        return Err(format!(
            "trtype={t}: nvmf devices are NVMe/TCP (trtype=tcp)"
        ));
    }
    if let Some(f) = a.str("adrfam")
        && !(f.eq_ignore_ascii_case("ipv4") || f.eq_ignore_ascii_case("ipv6"))
    {
        return Err(format!("adrfam={f}: must be ipv4 or ipv6"));
    }
    let traddr = a.str("traddr").ok_or("traddr=ADDRESS is required")?;
    let trsvcid = a
        .str("trsvcid")
        .ok_or("trsvcid=PORT is required (the target's port, e.g. 4420)")?;
    if trsvcid.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("trsvcid={trsvcid}: not a TCP port"));
    }
    let subnqn = a.str("subnqn").ok_or("subnqn=NQN is required")?;
    let nsid = a.nsid()?;
    let io_queues = a.bounded("queues", 1, "not in 1..=65535")?;
    let queue_size = a.bounded("queue_size", 2, "not in 2..=2^32-1")?;
    let ctrlr_loss_timeout_sec = match a.str("ctrlr_loss_timeout_sec") {
        None => None,
        Some(v) => Some(v.parse::<i32>().ok().filter(|&l| l >= -1).ok_or(format!(
            "ctrlr_loss_timeout_sec={v}: -1 (forever) or seconds"
        ))?),
    };
    let secs = |a: &mut SpecArgs, k: &str| -> Result<Option<u32>, String> {
        a.u64(k)?
            .map(|v| u32::try_from(v).map_err(|_| format!("{k}={v}: too large")))
            .transpose()
    };
    Ok(NvmfSpec {
        name: a.str("name").unwrap_or(name),
        traddr,
        trsvcid,
        subnqn,
        nsid,
        hostnqn: a.str("hostnqn"),
        hdgst: bool_key(a, "hdgst", false)?,
        ddgst: bool_key(a, "ddgst", false)?,
        io_queues,
        queue_size,
        ctrlr_loss_timeout_sec,
        reconnect_delay_sec: secs(a, "reconnect_delay_sec")?,
        fast_io_fail_timeout_sec: secs(a, "fast_io_fail_timeout_sec")?,
        dhchap_key: a.str("dhchap_key"),
        dhchap_ctrlr_key: a.str("dhchap_ctrlr_key"),
        psk: a.str("psk"),
    })
}

/// The TLS PSK of `s`, from its file (checked as the keyring checks it, and read now: a file
/// that holds no `NVMeTLSkey-1` key is refused before connecting).
fn tls_key(s: &NvmfSpec) -> Result<Option<pmio_nvme::tcp::TlsKey>, String> {
    let Some(p) = &s.psk else { return Ok(None) };
    let ring = pmio_keyring::Keyring::new();
    ring.file_add_key("psk", std::path::Path::new(p))
        .map_err(|e| format!("psk={p}: {e}"))?;
    let key = ring.get("psk").map_err(|e| e.to_string())?;
    key.tls_psk().map_err(|e| format!("psk={p}: {e}"))?;
    Ok(Some(pmio_nvme::tcp::TlsKey(key)))
}

/// The DH-HMAC-CHAP keys of `s`, from their files (checked as the keyring checks them: an
/// absolute path to a file only its owner may read).
fn dhchap_keys(s: &NvmfSpec) -> Result<Option<pmio_nvme::tcp::DhchapKeys>, String> {
    let ring = pmio_keyring::Keyring::new();
    let add = |name: &str, path: &Option<String>| -> Result<_, String> {
        let Some(p) = path else { return Ok(None) };
        ring.file_add_key(name, std::path::Path::new(p))
            .map_err(|e| format!("{name}={p}: {e}"))?;
        ring.get(name).map(Some).map_err(|e| e.to_string())
    };
    let key = add("dhchap_key", &s.dhchap_key)?;
    let ctrlr_key = add("dhchap_ctrlr_key", &s.dhchap_ctrlr_key)?;
    match key {
        Some(key) => Ok(Some(pmio_nvme::tcp::DhchapKeys { key, ctrlr_key })),
        None if ctrlr_key.is_some() => Err("dhchap_ctrlr_key needs a dhchap_key".into()),
        None => Ok(None),
    }
}

impl NvmfSpec {
    /// The driver's options: the keys given, the driver's (SPDK's) defaults for the rest.
    pub fn options(&self) -> TcpOptions {
        let d = TcpOptions::default();
        TcpOptions {
            hostnqn: self.hostnqn.clone(),
            hdgst: self.hdgst,
            ddgst: self.ddgst,
            io_queues: self.io_queues.unwrap_or(d.io_queues),
            queue_size: self.queue_size.unwrap_or(d.queue_size),
            ctrlr_loss_timeout_sec: self
                .ctrlr_loss_timeout_sec
                .unwrap_or(d.ctrlr_loss_timeout_sec),
            reconnect_delay_sec: self.reconnect_delay_sec.unwrap_or(d.reconnect_delay_sec),
            fast_io_fail_timeout_sec: self
                .fast_io_fail_timeout_sec
                .unwrap_or(d.fast_io_fail_timeout_sec),
            ..d
        }
    }
}

/// `--dev nvmf:…`: connects to the subsystem (the controller lives as long as its bdev) and
/// takes namespace `ns`.
pub fn create(a: &mut SpecArgs, name: String) -> Result<Created, String> {
    let s = parse(a, name)?;
    let opts = TcpOptions {
        dhchap: dhchap_keys(&s)?,
        psk: tls_key(&s)?,
        ..s.options()
    };
    opts.validate().map_err(|e| e.to_string())?;
    let target = TcpTarget {
        traddr: s.traddr.clone(),
        trsvcid: s.trsvcid.clone(),
        subnqn: s.subnqn.clone(),
    };
    let at = format!("{} at {}:{}", s.subnqn, s.traddr, s.trsvcid);
    let ctrlr = pmio_nvme::tcp::connect(&s.name, &target, opts)
        .map_err(|e| format!("connecting to {at}: {e}"))?;
    Ok(Created {
        dev: namespace_bdev(&ctrlr, s.nsid, &at)?,
        stores_data: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Result<NvmfSpec, String> {
        let mut a = SpecArgs::parse(s)?;
        let r = parse(&mut a, "Nvme0".into())?;
        a.finish()?;
        Ok(r)
    }

    #[test]
    fn keys_and_defaults() {
        let s = spec("traddr=127.0.0.1,trsvcid=4420,subnqn=nqn.s").unwrap();
        assert_eq!(
            s,
            NvmfSpec {
                name: "Nvme0".into(),
                traddr: "127.0.0.1".into(),
                trsvcid: "4420".into(),
                subnqn: "nqn.s".into(),
                nsid: 1,
                hostnqn: None,
                hdgst: false,
                ddgst: false,
                io_queues: None,
                queue_size: None,
                ctrlr_loss_timeout_sec: None,
                reconnect_delay_sec: None,
                fast_io_fail_timeout_sec: None,
                dhchap_key: None,
                dhchap_ctrlr_key: None,
                psk: None,
            }
        );
        let s = spec(
            "TRTYPE=tcp,ADRFAM=IPv4,TRADDR=::1,trsvcid=4421,SubNQN=nqn.s,ns=2,hostnqn=nqn.h,\
             hdgst=1,ddgst=1,queues=2,queue_size=64,ctrlr_loss_timeout_sec=-1,\
             reconnect_delay_sec=1,fast_io_fail_timeout_sec=0,name=R",
        )
        .unwrap();
        assert_eq!(
            (s.name.as_str(), s.traddr.as_str(), s.nsid),
            ("R", "::1", 2)
        );
        assert!(s.hdgst && s.ddgst);
        assert_eq!((s.io_queues, s.queue_size), (Some(2), Some(64)));
        assert_eq!(s.ctrlr_loss_timeout_sec, Some(-1));
        assert_eq!(s.reconnect_delay_sec, Some(1));
        assert_eq!(s.fast_io_fail_timeout_sec, Some(0));
        let o = s.options();
        assert_eq!(
            (o.io_queues, o.queue_size, o.ctrlr_loss_timeout_sec),
            (2, 64, -1)
        );
        o.validate().unwrap();
        let o = spec("traddr=a,trsvcid=1,subnqn=n,reconnect_delay_sec=1")
            .unwrap()
            .options();
        assert!(o.validate().is_err(), "a delay without a loss timeout");
    }

    #[test]
    fn nothing_listening_fails_clearly() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut a =
            SpecArgs::parse(&format!("traddr=127.0.0.1,trsvcid={port},subnqn=nqn.s")).unwrap();
        let e = create(&mut a, "Nvme0".into()).err().unwrap();
        assert!(
            e.starts_with(&format!("connecting to nqn.s at 127.0.0.1:{port}: ")),
            "{e}"
        );
    }

    #[test]
    fn bad_keys_name_the_problem() {
        let base = "traddr=127.0.0.1,trsvcid=4420,subnqn=nqn.s";
        for (s, needle) in [
            ("trsvcid=4420,subnqn=nqn.s", "traddr=ADDRESS is required"),
            ("traddr=a,subnqn=nqn.s", "trsvcid=PORT is required"),
            ("traddr=a,trsvcid=4420", "subnqn=NQN is required"),
            (
                "traddr=a,trsvcid=http,subnqn=n",
                "trsvcid=http: not a TCP port",
            ),
            (&format!("{base},trtype=rdma"), "trtype=rdma"),
            (&format!("{base},adrfam=ib"), "adrfam=ib"),
            (&format!("{base},ns=0"), "ns=0"),
            (&format!("{base},queues=0"), "queues=0"),
            (&format!("{base},hdgst=yes"), "hdgst=yes: must be 0 or 1"),
            (&format!("{base},ctrlr_loss_timeout_sec=-2"), "-1 (forever)"),
            (&format!("{base},TRADDR=b"), "given twice"),
            (&format!("{base},color=red"), "unknown key \"color\""),
        ] {
            let e = spec(s).unwrap_err();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }
}
