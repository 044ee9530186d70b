//! What the target serves: the transport's options, the subsystems with their namespaces,
//! admitted hosts and listen addresses. Changed by RPC under one lock (`Config` inside
//! [`crate::NvmfTarget`]); read by a connection at Connect and by the admin path (Identify, log
//! pages), never per I/O: an I/O queue keeps what it needs of a namespace (its bdev queue,
//! block size, block count) on its own reactor.

use std::sync::Arc;

use pmio::{BlockDevice, Uuid};

use crate::ana::{AnaState, ListenerAna};
use crate::error::NvmfError;

/// The well-known NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

pub use crate::spec::NQN_MAX_LEN;

/// Options of the TCP transport (`nvmf_create_transport`), SPDK's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportOpts {
    /// Entries of an I/O queue the target grants at most (CAP.MQES + 1).
    pub max_queue_depth: u16,
    /// I/O queues one controller may have.
    pub max_io_qpairs_per_ctrlr: u16,
    /// Write data up to this size travels inside the command capsule (IOCCSZ).
    pub in_capsule_data_size: u32,
    /// Largest I/O (MDTS is derived from it; also MAXH2CDATA).
    pub max_io_size: u32,
    /// SPDK's buffer unit; kept for its RPC (pmio allocates one buffer per command).
    pub io_unit_size: u32,
    /// Entries of the admin queue the target grants at most.
    pub max_aq_depth: u16,
    /// Reads end with C2HData carrying SUCCESS instead of a CapsuleResp.
    pub c2h_success: bool,
    /// Seconds an Abort waits (reported only; commands are answered, not aborted).
    pub abort_timeout_sec: u32,
}

impl Default for TransportOpts {
    fn default() -> TransportOpts {
        TransportOpts {
            max_queue_depth: 128,
            max_io_qpairs_per_ctrlr: 127,
            in_capsule_data_size: 4096,
            max_io_size: 131072,
            io_unit_size: 131072,
            max_aq_depth: 128,
            c2h_success: true,
            abort_timeout_sec: 1,
        }
    }
}

impl TransportOpts {
    /// Checks the options against what the protocol and this target can do.
    pub fn validate(&self) -> Result<(), NvmfError> {
        let bad = |what: String| Err(NvmfError::InvalidParam(what));
        if !(2..=4096).contains(&self.max_queue_depth) {
            return bad(format!(
                "max_queue_depth {} outside 2..=4096",
                self.max_queue_depth
            ));
        }
        if !(2..=4096).contains(&self.max_aq_depth) {
            return bad(format!(
                "max_aq_depth {} outside 2..=4096",
                self.max_aq_depth
            ));
        }
        if self.max_io_qpairs_per_ctrlr == 0 {
            return bad("max_io_qpairs_per_ctrlr must be at least 1".into());
        }
        if self.max_io_size < 4096 || !self.max_io_size.is_power_of_two() {
            return bad(format!(
                "max_io_size {} must be a power of two of at least 4096",
                self.max_io_size
            ));
        }
        if !self.in_capsule_data_size.is_multiple_of(16)
            || self.in_capsule_data_size > self.max_io_size
        {
            return bad(format!(
                "in_capsule_data_size {} must be a multiple of 16 up to max_io_size",
                self.in_capsule_data_size
            ));
        }
        Ok(())
    }
}

/// Address family of a listen address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdrFam {
    /// IPv4 (`ipv4`, discovery log ADRFAM 1).
    Ipv4,
    /// IPv6 (`ipv6`, discovery log ADRFAM 2).
    Ipv6,
}

impl AdrFam {
    /// SPDK's spelling in RPC replies.
    pub fn name(self) -> &'static str {
        match self {
            AdrFam::Ipv4 => "IPv4",
            AdrFam::Ipv6 => "IPv6",
        }
    }
}

/// A TCP address a subsystem is reachable on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenAddr {
    pub adrfam: AdrFam,
    /// The address as given (`127.0.0.1`).
    pub traddr: String,
    /// The port as given (`4420`).
    pub trsvcid: String,
}

impl ListenAddr {
    /// Parses an address and port; the family is taken from the address when not given.
    pub fn new(traddr: &str, trsvcid: &str, adrfam: Option<&str>) -> Result<ListenAddr, NvmfError> {
        let ip: std::net::IpAddr = traddr.parse().map_err(|_| {
            NvmfError::InvalidParam(format!("traddr {traddr:?} is not an IP address"))
        })?;
        let port: u16 =
            trsvcid.parse().ok().filter(|&p| p != 0).ok_or_else(|| {
                NvmfError::InvalidParam(format!("trsvcid {trsvcid:?} is not a port"))
            })?;
        let fam = if ip.is_ipv4() {
            AdrFam::Ipv4
        } else {
            AdrFam::Ipv6
        };
        if let Some(given) = adrfam {
            let want = match given.to_ascii_lowercase().as_str() {
                "ipv4" => AdrFam::Ipv4,
                "ipv6" => AdrFam::Ipv6,
                other => {
                    return Err(NvmfError::InvalidParam(format!(
                        "adrfam {other:?}: TCP takes ipv4 or ipv6"
                    )));
                }
            };
            if want != fam {
                return Err(NvmfError::InvalidParam(format!(
                    "traddr {traddr} is not an {} address",
                    want.name()
                )));
            }
        }
        Ok(ListenAddr {
            adrfam: fam,
            traddr: traddr.to_string(),
            trsvcid: port.to_string(),
        })
    }

    /// The socket address to bind.
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        let ip: std::net::IpAddr = self.traddr.parse().expect("checked by ListenAddr::new");
        let port: u16 = self.trsvcid.parse().expect("checked by ListenAddr::new");
        std::net::SocketAddr::new(ip, port)
    }
}

/// A namespace: a bdev exposed under an NSID.
#[derive(Clone)]
pub struct Namespace {
    pub nsid: u32,
    pub bdev: Arc<dyn BlockDevice>,
    /// Namespace UUID (from the bdev's unless given).
    pub uuid: Uuid,
    /// Namespace globally unique identifier (the UUID's bytes unless given).
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier, when given.
    pub eui64: Option<[u8; 8]>,
    /// ANA group (1..=max_namespaces; the NSID unless given, as SPDK's).
    pub anagrpid: u32,
}

impl Namespace {
    /// The bdev's name.
    pub fn bdev_name(&self) -> &str {
        &self.bdev.info().name
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("bdev", &self.bdev_name())
            .field("uuid", &self.uuid)
            .field("anagrpid", &self.anagrpid)
            .finish()
    }
}

/// The DH-HMAC-CHAP keys of one host of a subsystem: keyring keys, held while the host is
/// listed (a key removed from the keyring stays usable by the host, as SPDK's references).
#[derive(Clone, Debug)]
pub struct HostKeys {
    /// Host NQN.
    pub host: String,
    /// The key the host proves it holds.
    pub dhchap_key: Arc<pmio_keyring::Key>,
    /// The key the controller proves it holds, to a host that asks (bidirectional).
    pub dhchap_ctrlr_key: Option<Arc<pmio_keyring::Key>>,
}

/// The TLS PSK of one host of a subsystem (`nvmf_subsystem_add_host --psk`): a keyring key
/// in the interchange format, read when the host's handshake looks it up.
#[derive(Clone, Debug)]
pub struct HostPsk {
    /// Host NQN.
    pub host: String,
    pub psk: Arc<pmio_keyring::Key>,
}

/// The kind of a subsystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubType {
    /// The discovery subsystem (CNTRLTYPE 2, the discovery log page).
    Discovery,
    /// An NVM subsystem with namespaces.
    Nvme,
}

/// One subsystem.
#[derive(Clone, Debug)]
pub struct Subsystem {
    pub nqn: String,
    pub subtype: SubType,
    /// Identify Controller SN (20 ASCII bytes).
    pub serial_number: String,
    /// Identify Controller MN (40 ASCII bytes).
    pub model_number: String,
    pub allow_any_host: bool,
    /// Host NQNs admitted when `allow_any_host` is off.
    pub hosts: Vec<String>,
    /// The DH-HMAC-CHAP keys of hosts that must authenticate (`nvmf_subsystem_add_host
    /// --dhchap-key`), by host NQN.
    pub host_keys: Vec<HostKeys>,
    /// The TLS PSKs of hosts that connect over a secure channel, by host NQN.
    pub host_psks: Vec<HostPsk>,
    /// Most namespaces (NN); NSIDs run 1..=max_namespaces.
    pub max_namespaces: u32,
    pub min_cntlid: u16,
    pub max_cntlid: u16,
    /// Ordered by NSID.
    pub namespaces: Vec<Namespace>,
    pub listeners: Vec<ListenAddr>,
    /// Asymmetric Namespace Access reporting (`nvmf_create_subsystem --ana-reporting`).
    pub ana_reporting: bool,
    /// Per listener, the ANA state of each group (kept with or without reporting, as SPDK).
    pub ana: Vec<ListenerAna>,
    /// Those of `listeners` that are secure channels (TLS 1.3 with a PSK,
    /// `nvmf_subsystem_add_listener --secure-channel`).
    pub secure_listeners: Vec<ListenAddr>,
    /// Bumped at every namespace change: controllers compare it to announce the change
    /// (Asynchronous Event, Changed Namespace List log).
    pub ns_generation: u64,
}

/// Parameters of `nvmf_create_subsystem`.
#[derive(Clone, Debug, Default)]
pub struct SubsystemParams {
    pub nqn: String,
    pub serial_number: Option<String>,
    pub model_number: Option<String>,
    pub allow_any_host: bool,
    /// 0: SPDK's default (32).
    pub max_namespaces: u32,
    pub min_cntlid: Option<u16>,
    pub max_cntlid: Option<u16>,
    pub ana_reporting: bool,
}

/// SPDK's default model number.
pub const DEFAULT_MODEL: &str = "SPDK bdev Controller";
/// SPDK's default serial number.
pub const DEFAULT_SERIAL: &str = "00000000000000000000";
/// SPDK's default namespace limit for a subsystem created without one.
pub const DEFAULT_MAX_NAMESPACES: u32 = 32;
/// Highest dynamic controller ID (SPDK's, below the reserved 0xFFF0..).
pub const MAX_CNTLID: u16 = 0xFFEF;

impl Subsystem {
    /// The discovery subsystem, which exists from the start.
    pub fn discovery() -> Subsystem {
        Subsystem {
            nqn: DISCOVERY_NQN.to_string(),
            subtype: SubType::Discovery,
            serial_number: DEFAULT_SERIAL.to_string(),
            model_number: DEFAULT_MODEL.to_string(),
            allow_any_host: true,
            hosts: Vec::new(),
            host_keys: Vec::new(),
            host_psks: Vec::new(),
            max_namespaces: 0,
            min_cntlid: 1,
            max_cntlid: MAX_CNTLID,
            namespaces: Vec::new(),
            listeners: Vec::new(),
            ana_reporting: false,
            ana: Vec::new(),
            secure_listeners: Vec::new(),
            ns_generation: 0,
        }
    }

    /// A new NVM subsystem from `p`, checked.
    pub fn new(p: &SubsystemParams) -> Result<Subsystem, NvmfError> {
        check_nqn(&p.nqn)?;
        if p.nqn == DISCOVERY_NQN {
            return Err(NvmfError::Exists(format!("subsystem {}", p.nqn)));
        }
        let serial = p
            .serial_number
            .clone()
            .unwrap_or_else(|| DEFAULT_SERIAL.to_string());
        check_ascii("serial_number", &serial, 20)?;
        let model = p
            .model_number
            .clone()
            .unwrap_or_else(|| DEFAULT_MODEL.to_string());
        check_ascii("model_number", &model, 40)?;
        let min_cntlid = p.min_cntlid.unwrap_or(1);
        let max_cntlid = p.max_cntlid.unwrap_or(MAX_CNTLID);
        if min_cntlid == 0 || min_cntlid > max_cntlid || max_cntlid > MAX_CNTLID {
            return Err(NvmfError::InvalidParam(format!(
                "controller ID range {min_cntlid}..={max_cntlid} outside 1..={MAX_CNTLID}"
            )));
        }
        Ok(Subsystem {
            nqn: p.nqn.clone(),
            subtype: SubType::Nvme,
            serial_number: serial,
            model_number: model,
            allow_any_host: p.allow_any_host,
            hosts: Vec::new(),
            host_keys: Vec::new(),
            host_psks: Vec::new(),
            max_namespaces: if p.max_namespaces == 0 {
                DEFAULT_MAX_NAMESPACES
            } else {
                p.max_namespaces
            },
            min_cntlid,
            max_cntlid,
            namespaces: Vec::new(),
            listeners: Vec::new(),
            ana_reporting: p.ana_reporting,
            ana: Vec::new(),
            secure_listeners: Vec::new(),
            ns_generation: 0,
        })
    }

    /// The keys `hostnqn` authenticates with, if it must.
    pub fn host_keys(&self, hostnqn: &str) -> Option<&HostKeys> {
        self.host_keys.iter().find(|k| k.host == hostnqn)
    }

    /// The TLS PSK `hostnqn` connects with, if it has one.
    pub fn host_psk(&self, hostnqn: &str) -> Option<&HostPsk> {
        self.host_psks.iter().find(|k| k.host == hostnqn)
    }

    /// Whether `l` is one of its secure channels.
    pub fn is_secure(&self, l: &ListenAddr) -> bool {
        self.secure_listeners.contains(l)
    }

    /// Whether `hostnqn` may connect (SPDK's rule: the list, unless any host is allowed).
    pub fn admits(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }

    /// The namespace `nsid`, if active.
    pub fn namespace(&self, nsid: u32) -> Option<&Namespace> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }

    /// Adds a namespace on `bdev` at `nsid` (0: the lowest free one) in ANA group `anagrpid`
    /// (0: the NSID, SPDK's default; else 1..=max_namespaces); returns the NSID.
    pub fn add_ns(
        &mut self,
        bdev: Arc<dyn BlockDevice>,
        nsid: u32,
        uuid: Option<Uuid>,
        nguid: Option<[u8; 16]>,
        eui64: Option<[u8; 8]>,
        anagrpid: u32,
    ) -> Result<u32, NvmfError> {
        if anagrpid > self.max_namespaces {
            return Err(NvmfError::InvalidParam(format!(
                "anagrpid {anagrpid} outside 1..={}",
                self.max_namespaces
            )));
        }
        if self.subtype == SubType::Discovery {
            return Err(NvmfError::InvalidParam(
                "the discovery subsystem has no namespaces".into(),
            ));
        }
        let nsid = if nsid == 0 {
            (1..=self.max_namespaces)
                .find(|&id| self.namespace(id).is_none())
                .ok_or_else(|| {
                    NvmfError::InvalidParam(format!(
                        "{} has all its {} namespaces",
                        self.nqn, self.max_namespaces
                    ))
                })?
        } else if nsid > self.max_namespaces || nsid == u32::MAX {
            return Err(NvmfError::InvalidParam(format!(
                "nsid {nsid} outside 1..={}",
                self.max_namespaces
            )));
        } else if self.namespace(nsid).is_some() {
            return Err(NvmfError::Exists(format!(
                "namespace {nsid} of {}",
                self.nqn
            )));
        } else {
            nsid
        };
        let uuid = uuid.unwrap_or(bdev.info().uuid);
        let ns = Namespace {
            nsid,
            uuid,
            nguid: nguid.unwrap_or(uuid.0),
            eui64,
            anagrpid: if anagrpid == 0 { nsid } else { anagrpid },
            bdev,
        };
        let at = self.namespaces.partition_point(|n| n.nsid < nsid);
        self.namespaces.insert(at, ns);
        self.ns_generation += 1;
        Ok(nsid)
    }

    /// Removes namespace `nsid`.
    pub fn remove_ns(&mut self, nsid: u32) -> Result<Namespace, NvmfError> {
        let at = self
            .namespaces
            .iter()
            .position(|n| n.nsid == nsid)
            .ok_or_else(|| NvmfError::NotFound(format!("namespace {nsid} of {}", self.nqn)))?;
        self.ns_generation += 1;
        Ok(self.namespaces.remove(at))
    }
}

impl Subsystem {
    /// Adds listen address `addr` with every ANA group in `state`.
    pub fn add_listener(&mut self, addr: ListenAddr, state: AnaState, secure: bool) {
        self.ana
            .push(ListenerAna::new(addr.clone(), self.max_namespaces, state));
        if secure {
            self.secure_listeners.push(addr.clone());
        }
        self.listeners.push(addr);
    }

    /// Removes listen address `addr` and its ANA states; whether it was there.
    pub fn remove_listener(&mut self, addr: &ListenAddr) -> bool {
        self.ana.retain(|l| &l.addr != addr);
        self.secure_listeners.retain(|l| l != addr);
        let before = self.listeners.len();
        self.listeners.retain(|l| l != addr);
        self.listeners.len() != before
    }

    /// The listener of this subsystem a connection to local address `local` came in on: the
    /// same address, or a wildcard address on the same port.
    pub fn listener_for(&self, local: std::net::SocketAddr) -> Option<&ListenAddr> {
        let exact = self.listeners.iter().find(|l| l.socket_addr() == local);
        exact.or_else(|| {
            self.listeners.iter().find(|l| {
                let a = l.socket_addr();
                a.port() == local.port() && a.ip().is_unspecified()
            })
        })
    }

    /// The ANA states of listener `addr`, if it is one.
    pub fn listener_ana(&self, addr: &ListenAddr) -> Option<&ListenerAna> {
        self.ana.iter().find(|l| &l.addr == addr)
    }

    /// The ANA state of group `anagrpid` through listener `addr`: Optimized without ANA
    /// reporting, Inaccessible through an address that is no listener (any more), as
    /// SPDK's `nvmf_ctrlr_get_ana_state`.
    pub fn ana_state(&self, addr: &ListenAddr, anagrpid: u32) -> AnaState {
        if !self.ana_reporting {
            return AnaState::Optimized;
        }
        crate::ana::state_through(&self.ana, addr, anagrpid)
    }

    /// `nvmf_subsystem_listener_set_ana_state`: group `anagrpid` (0: every group) of listener
    /// `addr` to `state`. Whether anything changed.
    pub fn set_ana_state(
        &mut self,
        addr: &ListenAddr,
        state: AnaState,
        anagrpid: u32,
    ) -> Result<bool, NvmfError> {
        if !self.ana_reporting {
            return Err(NvmfError::InvalidParam(format!(
                "{}: ANA reporting is disabled",
                self.nqn
            )));
        }
        if anagrpid > self.max_namespaces {
            return Err(NvmfError::InvalidParam(format!(
                "ANA group {anagrpid} is more than the maximum {}",
                self.max_namespaces
            )));
        }
        let nqn = &self.nqn;
        let l = self
            .ana
            .iter_mut()
            .find(|l| &l.addr == addr)
            .ok_or_else(|| {
                NvmfError::NotFound(format!(
                    "listener {}:{} of {nqn}",
                    addr.traddr, addr.trsvcid
                ))
            })?;
        Ok(l.set(state, anagrpid))
    }
}

/// An NQN as the spec writes them: `nqn.yyyy-mm.reverse-domain:...` or the UUID form, at most
/// 223 bytes of UTF-8.
pub fn check_nqn(nqn: &str) -> Result<(), NvmfError> {
    let ok = nqn.len() <= NQN_MAX_LEN
        && nqn.starts_with("nqn.")
        && nqn.len() > 4
        && !nqn.bytes().any(|b| b.is_ascii_control());
    if ok {
        Ok(())
    } else {
        Err(NvmfError::InvalidParam(format!(
            "{nqn:?} is not an NQN (nqn.yyyy-mm.domain:name, at most {NQN_MAX_LEN} bytes)"
        )))
    }
}

fn check_ascii(what: &str, s: &str, max: usize) -> Result<(), NvmfError> {
    if s.len() > max || !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(NvmfError::InvalidParam(format!(
            "{what} {s:?}: at most {max} printable ASCII characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nqn_rules() {
        assert!(check_nqn("nqn.2016-06.io.spdk:cnode1").is_ok());
        assert!(check_nqn("nqn.").is_err());
        assert!(check_nqn("iqn.2016-06.io.spdk:cnode1").is_err());
        assert!(check_nqn(&format!("nqn.{}", "a".repeat(220))).is_err());
    }

    #[test]
    fn listen_addresses() {
        let a = ListenAddr::new("127.0.0.1", "4420", Some("ipv4")).unwrap();
        assert_eq!(a.socket_addr().port(), 4420);
        assert!(ListenAddr::new("127.0.0.1", "4420", Some("ipv6")).is_err());
        assert!(ListenAddr::new("localhost", "4420", None).is_err());
        assert!(ListenAddr::new("::1", "0", None).is_err());
        assert_eq!(
            ListenAddr::new("::1", "4420", None).unwrap().adrfam,
            AdrFam::Ipv6
        );
    }

    #[test]
    fn subsystem_params_checked() {
        let p = SubsystemParams {
            nqn: "nqn.2016-06.io.spdk:cnode1".into(),
            ..SubsystemParams::default()
        };
        let s = Subsystem::new(&p).unwrap();
        assert_eq!(s.max_namespaces, DEFAULT_MAX_NAMESPACES);
        assert!(!s.admits("nqn.2014-08.org.nvmexpress:uuid:1"));
        let bad = SubsystemParams {
            serial_number: Some("x".repeat(21)),
            ..p.clone()
        };
        assert!(Subsystem::new(&bad).is_err());
        let bad = SubsystemParams {
            min_cntlid: Some(10),
            max_cntlid: Some(5),
            ..p
        };
        assert!(Subsystem::new(&bad).is_err());
    }
}
