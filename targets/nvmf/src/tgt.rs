//! The target as RPC sees it: one [`NvmfTarget`] per daemon, holding the configuration
//! ([`Config`]), the listening sockets and the record of connected controllers. Everything here
//! is the control path: RPC threads and connections being set up take its lock; the I/O path
//! never does (poll groups keep snapshots, refreshed when [`NvmfTarget::generation`] moves).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pmio::Uuid;
use pmio::bdev::Registry;
use pmio_reactors::ReactorsHandle;

use crate::ana::{AnaState, ListenerAna};
use crate::error::NvmfError;
use crate::sock::SockOptions;
use crate::stats::GroupStatsCell;
use crate::subsystem::{
    DISCOVERY_NQN, HostKeys, ListenAddr, Namespace, SubType, Subsystem, SubsystemParams,
    TransportOpts,
};
use pmio_auth::crypto::{DhGroup, Hash};

/// The configuration RPC changes.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `None` until `nvmf_create_transport`.
    pub transport: Option<TransportOpts>,
    /// The discovery subsystem first, then NVM subsystems in creation order.
    pub subsystems: Vec<Subsystem>,
    /// What DH-HMAC-CHAP may use (`nvmf_set_config`'s `dhchap_digests`, `dhchap_dhgroups`).
    pub dhchap: DhchapPolicy,
}

/// The hashes and DH groups in-band authentication may choose from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhchapPolicy {
    pub digests: Vec<Hash>,
    pub dhgroups: Vec<DhGroup>,
}

impl Default for DhchapPolicy {
    /// Every hash and group, as SPDK allows by default.
    fn default() -> DhchapPolicy {
        DhchapPolicy {
            digests: vec![Hash::Sha256, Hash::Sha384, Hash::Sha512],
            dhgroups: vec![
                DhGroup::Null,
                DhGroup::Ffdhe2048,
                DhGroup::Ffdhe3072,
                DhGroup::Ffdhe4096,
                DhGroup::Ffdhe6144,
                DhGroup::Ffdhe8192,
            ],
        }
    }
}

impl Config {
    /// The subsystem `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<&Subsystem> {
        self.subsystems.iter().find(|s| s.nqn == nqn)
    }

    fn subsystem_mut(&mut self, nqn: &str) -> Result<&mut Subsystem, NvmfError> {
        self.subsystems
            .iter_mut()
            .find(|s| s.nqn == nqn)
            .ok_or_else(|| NvmfError::NotFound(format!("subsystem {nqn}")))
    }
}

/// A connected controller, as `nvmf_subsystem_get_controllers` reports it.
#[derive(Clone, Debug)]
pub struct CtrlrRecord {
    pub subnqn: String,
    pub cntlid: u16,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// The reactor that owns the admin queue and the controller's admin state.
    pub core: u32,
    /// I/O queues granted by Set Features Number of Queues (I/O Connects beyond are refused).
    pub io_queues: u16,
    /// Keep-alive timeout in ms (0: none).
    pub kato_ms: u32,
    /// The listener the admin queue came in on: the controller's port, whose ANA states
    /// its host sees; its I/O queues must come in there too.
    pub listener: ListenAddr,
    /// Connected queue pairs.
    pub qpairs: Vec<QpairRecord>,
}

/// A connected queue pair (`nvmf_subsystem_get_qpairs`).
#[derive(Clone, Debug)]
pub struct QpairRecord {
    pub qid: u16,
    pub core: u32,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// A bound listening socket, shared by the subsystems that listen on its address.
pub(crate) struct Bound {
    pub addr: ListenAddr,
    pub sock: Arc<TcpListener>,
    /// Its connections speak TLS 1.3 (a secure channel) from their first byte.
    pub secure: bool,
}

pub(crate) struct Inner {
    pub config: Config,
    pub bound: Vec<Bound>,
    pub ctrlrs: Vec<CtrlrRecord>,
    /// The controller ID handed out last (0: none yet); see [`NvmfTarget::alloc_cntlid`].
    pub last_cntlid: u16,
    /// Options of the connections accepted from now on.
    pub sock: SockOptions,
}

/// The NVMe/TCP target of one daemon.
pub struct NvmfTarget {
    pub(crate) reactors: ReactorsHandle,
    pub(crate) registry: Arc<Registry>,
    pub(crate) inner: Mutex<Inner>,
    /// Bumped at every change a poll group or controller must notice (namespaces, hosts,
    /// subsystems): they compare it with one atomic load per poll.
    generation: AtomicU64,
    /// Where the next connection goes (round robin over the reactors).
    next_core: AtomicUsize,
    /// Per reactor, in core order: what its poll group counts.
    pub(crate) group_stats: Vec<Arc<GroupStatsCell>>,
    /// The last DH-HMAC-CHAP sequence number handed out (random at start, as SPDK's).
    auth_seqnum: AtomicU32,
    /// Failed in-band authentications, since start.
    auth_failures: AtomicU64,
}

/// 32 random bits (the first sequence number, as SPDK draws it with RAND_bytes).
fn random_u32() -> u32 {
    pmio_auth::crypto::random(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NvmfTarget {
    /// A target serving bdevs of `registry` on `reactors`. Nothing listens until a transport
    /// exists and a subsystem gets a listener.
    pub fn new(reactors: ReactorsHandle, registry: Arc<Registry>) -> Arc<NvmfTarget> {
        let tgt = Self::new_idle(reactors, registry);
        crate::listener::start(&tgt);
        tgt
    }

    fn new_idle(reactors: ReactorsHandle, registry: Arc<Registry>) -> Arc<NvmfTarget> {
        let group_stats = reactors
            .cores()
            .iter()
            .map(|_| Arc::new(GroupStatsCell::default()))
            .collect();
        Arc::new(NvmfTarget {
            reactors,
            registry,
            inner: Mutex::new(Inner {
                config: Config {
                    transport: None,
                    subsystems: vec![Subsystem::discovery()],
                    dhchap: DhchapPolicy::default(),
                },
                bound: Vec::new(),
                ctrlrs: Vec::new(),
                last_cntlid: 0,
                sock: SockOptions::default(),
            }),
            generation: AtomicU64::new(1),
            next_core: AtomicUsize::new(0),
            group_stats,
            auth_seqnum: AtomicU32::new(random_u32()),
            auth_failures: AtomicU64::new(0),
        })
    }

    /// The next DH-HMAC-CHAP challenge's sequence number (never 0).
    pub(crate) fn next_auth_seqnum(&self) -> u32 {
        loop {
            let s = self
                .auth_seqnum
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1);
            if s != 0 {
                return s;
            }
        }
    }

    /// Counts a failed in-band authentication.
    pub(crate) fn auth_failed(&self) {
        self.auth_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed in-band authentications since start.
    pub fn auth_failures(&self) -> u64 {
        self.auth_failures.load(Ordering::Relaxed)
    }

    /// `nvmf_set_config`'s `dhchap_digests` and `dhchap_dhgroups`: for authentications that
    /// start from now on.
    pub fn set_dhchap_policy(&self, p: DhchapPolicy) -> Result<(), NvmfError> {
        if p.digests.is_empty() || p.dhgroups.is_empty() {
            return Err(NvmfError::InvalidParam(
                "DH-HMAC-CHAP needs at least one digest and one DH group".into(),
            ));
        }
        self.lock().config.dhchap = p;
        self.changed();
        Ok(())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// The configuration generation (see the type's docs).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The reactors' cores.
    pub fn cores(&self) -> &[u32] {
        self.reactors.cores()
    }

    /// The core the next connection goes to.
    pub(crate) fn next_core(&self) -> u32 {
        let cores = self.reactors.cores();
        cores[self.next_core.fetch_add(1, Ordering::Relaxed) % cores.len()]
    }

    /// A copy of the configuration (for `nvmf_get_subsystems`, `save_config`).
    pub fn config(&self) -> Config {
        self.lock().config.clone()
    }

    /// `nvmf_create_transport -t TCP`.
    pub fn create_transport(&self, opts: TransportOpts) -> Result<(), NvmfError> {
        opts.validate()?;
        let mut g = self.lock();
        if g.config.transport.is_some() {
            return Err(NvmfError::Exists("the TCP transport".into()));
        }
        g.config.transport = Some(opts);
        Ok(())
    }

    /// `sock_impl_set_options -i posix`: the options of connections accepted from now on
    /// (buffer sizes below SPDK's minimum raised to it). Connections already open keep theirs.
    pub fn set_sock_options(&self, opts: SockOptions) {
        self.lock().sock = opts.clamped();
    }

    /// `sock_impl_get_options -i posix`: the options new connections get.
    pub fn sock_options(&self) -> SockOptions {
        self.lock().sock
    }

    /// The transport's options, once created.
    pub fn transport(&self) -> Option<TransportOpts> {
        self.lock().config.transport.clone()
    }

    /// `nvmf_create_subsystem`.
    pub fn create_subsystem(&self, p: &SubsystemParams) -> Result<(), NvmfError> {
        let s = Subsystem::new(p)?;
        let mut g = self.lock();
        if g.config.subsystem(&s.nqn).is_some() {
            return Err(NvmfError::Exists(format!("subsystem {}", s.nqn)));
        }
        g.config.subsystems.push(s);
        drop(g);
        self.changed();
        Ok(())
    }

    /// `nvmf_delete_subsystem`: its listeners stop taking connections for it, its controllers
    /// are disconnected.
    pub fn delete_subsystem(&self, nqn: &str) -> Result<(), NvmfError> {
        if nqn == DISCOVERY_NQN {
            return Err(NvmfError::InvalidParam(
                "the discovery subsystem cannot be deleted".into(),
            ));
        }
        let mut g = self.lock();
        let at = g
            .config
            .subsystems
            .iter()
            .position(|s| s.nqn == nqn)
            .ok_or_else(|| NvmfError::NotFound(format!("subsystem {nqn}")))?;
        g.config.subsystems.remove(at);
        Self::unbind_unused(&mut g);
        drop(g);
        self.changed();
        self.disconnect_subsystem(nqn);
        Ok(())
    }

    /// `nvmf_subsystem_add_ns`: the bdev `bdev_name` as namespace `nsid` (0: the lowest free)
    /// in ANA group `anagrpid` (0: the NSID); returns the NSID. Connected hosts are told
    /// (Asynchronous Event).
    #[allow(clippy::too_many_arguments)]
    pub fn add_ns(
        &self,
        nqn: &str,
        bdev_name: &str,
        nsid: u32,
        uuid: Option<Uuid>,
        nguid: Option<[u8; 16]>,
        eui64: Option<[u8; 8]>,
        anagrpid: u32,
    ) -> Result<u32, NvmfError> {
        let bdev = self
            .registry
            .get(bdev_name)
            .ok_or_else(|| NvmfError::NotFound(format!("bdev {bdev_name}")))?;
        let mut g = self.lock();
        let s = g.config.subsystem_mut(nqn)?;
        let id = s.add_ns(bdev, nsid, uuid, nguid, eui64, anagrpid)?;
        drop(g);
        self.changed();
        Ok(id)
    }

    /// `nvmf_subsystem_remove_ns`.
    pub fn remove_ns(&self, nqn: &str, nsid: u32) -> Result<Namespace, NvmfError> {
        let mut g = self.lock();
        let ns = g.config.subsystem_mut(nqn)?.remove_ns(nsid)?;
        drop(g);
        self.changed();
        Ok(ns)
    }

    /// Bdev `dev.info().name` was replaced by `dev` (a resize): every namespace on it moves to
    /// `dev`; its controllers' hosts get a Namespace Attribute Changed notice (SPDK's resize
    /// event: `nvmf_ns_resize`), and the poll groups open queues on `dev` for new I/O while
    /// what is in flight on the old object completes there.
    pub fn bdev_replaced(&self, dev: &Arc<dyn pmio::BlockDevice>) {
        let name = dev.info().name.clone();
        let mut g = self.lock();
        let mut moved = false;
        for s in g.config.subsystems.iter_mut() {
            let mut here = false;
            for n in s.namespaces.iter_mut().filter(|n| n.bdev_name() == name) {
                n.bdev = dev.clone();
                here = true;
            }
            if here {
                s.ns_generation += 1;
                moved = true;
            }
        }
        drop(g);
        if moved {
            log::info!(
                "nvmf: bdev {name} replaced ({} blocks): its namespaces follow",
                dev.info().num_blocks
            );
            self.changed();
        }
    }

    /// Whether a namespace of any subsystem is on bdev `name` (a bdev in use is not deleted).
    pub fn bdev_in_use(&self, name: &str) -> Option<(String, u32)> {
        let g = self.lock();
        g.config.subsystems.iter().find_map(|s| {
            s.namespaces
                .iter()
                .find(|n| n.bdev_name() == name)
                .map(|n| (s.nqn.clone(), n.nsid))
        })
    }

    /// `nvmf_subsystem_add_host`.
    pub fn add_host(&self, nqn: &str, host: &str) -> Result<(), NvmfError> {
        self.add_host_with_keys(nqn, host, None)
    }

    /// `nvmf_subsystem_add_host` with DH-HMAC-CHAP keys: the host must authenticate every
    /// queue (`keys.host` must be `host`).
    pub fn add_host_with_keys(
        &self,
        nqn: &str,
        host: &str,
        keys: Option<HostKeys>,
    ) -> Result<(), NvmfError> {
        crate::subsystem::check_nqn(host)?;
        let mut g = self.lock();
        let s = g.config.subsystem_mut(nqn)?;
        if s.hosts.iter().any(|h| h == host) {
            return Err(NvmfError::Exists(format!("host {host} of {nqn}")));
        }
        s.hosts.push(host.to_string());
        s.host_keys.extend(keys);
        drop(g);
        self.changed();
        Ok(())
    }

    /// `nvmf_subsystem_add_host --psk`: the listed host `host` connects over TLS with `psk`
    /// (its secure-channel connections find the key by their PSK identity).
    pub fn set_host_psk(
        &self,
        nqn: &str,
        host: &str,
        psk: Arc<pmio_keyring::Key>,
    ) -> Result<(), NvmfError> {
        let mut g = self.lock();
        let s = g.config.subsystem_mut(nqn)?;
        if !s.hosts.iter().any(|h| h == host) {
            return Err(NvmfError::NotFound(format!("host {host} of {nqn}")));
        }
        s.host_psks.retain(|k| k.host != host);
        s.host_psks.push(crate::subsystem::HostPsk {
            host: host.to_string(),
            psk,
        });
        drop(g);
        self.changed();
        Ok(())
    }

    /// `nvmf_subsystem_remove_host`: the host's controllers on the subsystem are disconnected.
    pub fn remove_host(&self, nqn: &str, host: &str) -> Result<(), NvmfError> {
        let mut g = self.lock();
        let s = g.config.subsystem_mut(nqn)?;
        let at = s
            .hosts
            .iter()
            .position(|h| h == host)
            .ok_or_else(|| NvmfError::NotFound(format!("host {host} of {nqn}")))?;
        s.hosts.remove(at);
        s.host_keys.retain(|k| k.host != host);
        s.host_psks.retain(|k| k.host != host);
        let still = s.allow_any_host;
        drop(g);
        self.changed();
        if !still {
            self.disconnect_where(|c| c.subnqn == nqn && c.hostnqn == host);
        }
        Ok(())
    }

    /// `nvmf_subsystem_allow_any_host`.
    pub fn allow_any_host(&self, nqn: &str, allow: bool) -> Result<(), NvmfError> {
        let mut g = self.lock();
        g.config.subsystem_mut(nqn)?.allow_any_host = allow;
        drop(g);
        self.changed();
        Ok(())
    }

    /// `nvmf_subsystem_add_listener`: binds the address if no subsystem listens there yet.
    pub fn add_listener(&self, nqn: &str, addr: ListenAddr) -> Result<(), NvmfError> {
        self.add_listener_with(nqn, addr, false, AnaState::Optimized)
    }

    /// `nvmf_subsystem_add_listener`: a secure channel (TLS) when `secure`, every ANA
    /// group of the listener in `state` (its `ana_state`). An address is TLS or plain
    /// for every subsystem on it: its connections start with a ClientHello or with an
    /// ICReq before anyone knows which subsystem they are for.
    pub fn add_listener_with(
        &self,
        nqn: &str,
        addr: ListenAddr,
        secure: bool,
        state: AnaState,
    ) -> Result<(), NvmfError> {
        let mut g = self.lock();
        if g.config.transport.is_none() {
            return Err(NvmfError::NoTransport);
        }
        let s = g.config.subsystem_mut(nqn)?;
        if s.listeners.contains(&addr) {
            return Err(NvmfError::Exists(format!(
                "listener {}:{} of {nqn}",
                addr.traddr, addr.trsvcid
            )));
        }
        match g.bound.iter().find(|b| b.addr == addr) {
            Some(b) if b.secure != secure => {
                return Err(NvmfError::InvalidParam(format!(
                    "{}:{} is {} a secure channel for other subsystems",
                    addr.traddr,
                    addr.trsvcid,
                    if b.secure { "already" } else { "not" }
                )));
            }
            Some(_) => {}
            None => {
                let sock = bind(&addr)?;
                log::info!(
                    "nvmf: listening on {}:{}{}",
                    addr.traddr,
                    addr.trsvcid,
                    if secure { " (TLS)" } else { "" }
                );
                g.bound.push(Bound {
                    addr: addr.clone(),
                    sock: Arc::new(sock),
                    secure,
                });
            }
        }
        g.config
            .subsystem_mut(nqn)?
            .add_listener(addr, state, secure);
        drop(g);
        self.changed();
        Ok(())
    }

    /// `nvmf_subsystem_listener_set_ana_state`: group `anagrpid` (0: every group) of listener
    /// `addr` of subsystem `nqn` to `state`. The controllers connected through that listener
    /// tell their hosts (ANA change notice); their I/O queues follow the new state.
    pub fn set_ana_state(
        &self,
        nqn: &str,
        addr: &ListenAddr,
        state: AnaState,
        anagrpid: u32,
    ) -> Result<(), NvmfError> {
        let mut g = self.lock();
        let changed = g
            .config
            .subsystem_mut(nqn)?
            .set_ana_state(addr, state, anagrpid)?;
        drop(g);
        if changed {
            log::info!(
                "nvmf: {nqn} listener {}:{}: ANA group {} {}",
                addr.traddr,
                addr.trsvcid,
                crate::ana::group_name(anagrpid),
                state.name()
            );
            self.changed();
        }
        Ok(())
    }

    /// `nvmf_subsystem_remove_listener`: new connections to the subsystem on that address are
    /// refused; connected hosts stay (as SPDK).
    pub fn remove_listener(&self, nqn: &str, addr: &ListenAddr) -> Result<(), NvmfError> {
        let mut g = self.lock();
        let s = g.config.subsystem_mut(nqn)?;
        if !s.remove_listener(addr) {
            return Err(NvmfError::NotFound(format!(
                "listener {}:{} of {nqn}",
                addr.traddr, addr.trsvcid
            )));
        }
        Self::unbind_unused(&mut g);
        drop(g);
        self.changed();
        Ok(())
    }

    fn unbind_unused(g: &mut Inner) {
        let Inner { config, bound, .. } = g;
        bound.retain(|b| {
            let used = config
                .subsystems
                .iter()
                .any(|s| s.listeners.contains(&b.addr));
            if !used {
                log::info!(
                    "nvmf: no longer listening on {}:{}",
                    b.addr.traddr,
                    b.addr.trsvcid
                );
            }
            used
        });
    }

    /// The listening sockets (the acceptor polls them), and whether each is a secure channel.
    pub(crate) fn listening(&self) -> Vec<(Arc<TcpListener>, bool)> {
        self.lock()
            .bound
            .iter()
            .map(|b| (Arc::clone(&b.sock), b.secure))
            .collect()
    }

    /// The connected controllers of subsystem `nqn` (`nvmf_subsystem_get_controllers`).
    pub fn controllers(&self, nqn: &str) -> Result<Vec<CtrlrRecord>, NvmfError> {
        let g = self.lock();
        if g.config.subsystem(nqn).is_none() {
            return Err(NvmfError::NotFound(format!("subsystem {nqn}")));
        }
        Ok(g.ctrlrs
            .iter()
            .filter(|c| c.subnqn == nqn)
            .cloned()
            .collect())
    }

    /// Per reactor (core order): poll group statistics (`nvmf_get_stats`).
    pub fn group_stats(&self) -> Vec<(u32, crate::stats::GroupStats)> {
        self.reactors
            .cores()
            .iter()
            .zip(&self.group_stats)
            .map(|(&c, s)| (c, s.load()))
            .collect()
    }

    /// Disconnects every controller of subsystem `nqn`.
    fn disconnect_subsystem(&self, nqn: &str) {
        self.disconnect_where(|c| c.subnqn == nqn);
    }

    /// Closes the I/O queue pairs of controller (`nqn`, `cntlid`) (a reset, a shutdown, its
    /// admin queue gone).
    pub(crate) fn disconnect_io_queues(&self, nqn: &str, cntlid: u16) {
        self.disconnect(|c| c.subnqn == nqn && c.cntlid == cntlid, true);
    }

    /// Closes the queue pairs of every controller `pick` selects, on their reactors.
    pub(crate) fn disconnect_where(&self, pick: impl Fn(&CtrlrRecord) -> bool) {
        self.disconnect(pick, false);
    }

    fn disconnect(&self, pick: impl Fn(&CtrlrRecord) -> bool, io_only: bool) {
        let victims: Vec<(String, u16, Vec<u32>)> = {
            let g = self.lock();
            g.ctrlrs
                .iter()
                .filter(|c| pick(c))
                .map(|c| {
                    let mut cores: Vec<u32> = c.qpairs.iter().map(|q| q.core).collect();
                    cores.push(c.core);
                    cores.sort_unstable();
                    cores.dedup();
                    (c.subnqn.clone(), c.cntlid, cores)
                })
                .collect()
        };
        for (nqn, cntlid, cores) in victims {
            for core in cores {
                let nqn = nqn.clone();
                let _ = self.reactors.send(core, move |ctx| {
                    crate::group::close_controller(ctx, &nqn, cntlid, io_only);
                });
            }
        }
    }

    /// Closes every connection and stops listening (call before the reactors stop).
    pub fn shutdown(&self) {
        {
            let mut g = self.lock();
            g.bound.clear();
        }
        let _ = self.reactors.run_on_all(crate::group::shut_down);
    }

    // --- controller records (connection set-up, cold path) ---

    /// A new controller ID in the subsystem's range, not in use: the first free one after the
    /// last handed out, round robin (SPDK's rule). An ID comes back only once the range went
    /// round, so a late message about a controller that is gone (its admin queue closing its
    /// I/O queues, by controller ID, on other reactors) cannot reach a new controller.
    pub(crate) fn alloc_cntlid(g: &mut Inner, s: &Subsystem) -> Option<u16> {
        let used: std::collections::HashSet<u16> = g
            .ctrlrs
            .iter()
            .filter(|c| c.subnqn == s.nqn)
            .map(|c| c.cntlid)
            .collect();
        let (lo, hi) = (u32::from(s.min_cntlid), u32::from(s.max_cntlid));
        let n = hi.checked_sub(lo)? + 1;
        let last = u32::from(g.last_cntlid);
        let first = if (lo..=hi).contains(&last) {
            last - lo + 1
        } else {
            0
        };
        let id = (0..n)
            .map(|i| (lo + (first + i) % n) as u16)
            .find(|id| !used.contains(id))?;
        g.last_cntlid = id;
        Some(id)
    }

    /// Forgets controller (`nqn`, `cntlid`) (its admin queue closed).
    pub(crate) fn remove_ctrlr(&self, nqn: &str, cntlid: u16) {
        let mut g = self.lock();
        g.ctrlrs
            .retain(|c| !(c.subnqn == nqn && c.cntlid == cntlid));
    }

    /// Forgets queue pair `qid` of controller (`nqn`, `cntlid`).
    pub(crate) fn remove_qpair(&self, nqn: &str, cntlid: u16, qid: u16) {
        let mut g = self.lock();
        if let Some(c) = g
            .ctrlrs
            .iter_mut()
            .find(|c| c.subnqn == nqn && c.cntlid == cntlid)
        {
            c.qpairs.retain(|q| q.qid != qid);
        }
    }

    /// Records how many I/O queues controller (`nqn`, `cntlid`) was granted.
    pub(crate) fn set_io_queues(&self, nqn: &str, cntlid: u16, n: u16) {
        let mut g = self.lock();
        if let Some(c) = g
            .ctrlrs
            .iter_mut()
            .find(|c| c.subnqn == nqn && c.cntlid == cntlid)
        {
            c.io_queues = n;
        }
    }

    /// Subsystem NQN → its namespaces and the ANA states of its listeners (empty without
    /// ANA reporting: every path is optimized), for a poll group's snapshot.
    pub(crate) fn ns_snapshot(&self) -> HashMap<String, (Vec<Namespace>, Vec<ListenerAna>)> {
        let g = self.lock();
        g.config
            .subsystems
            .iter()
            .filter(|s| s.subtype == SubType::Nvme)
            .map(|s| {
                let ana = if s.ana_reporting {
                    s.ana.clone()
                } else {
                    Vec::new()
                };
                (s.nqn.clone(), (s.namespaces.clone(), ana))
            })
            .collect()
    }
}

/// A non-blocking listening socket on `addr`. std sets SO_REUSEADDR on Unix, so a restarted
/// daemon binds the port its predecessor's connections still linger on.
fn bind(addr: &ListenAddr) -> Result<TcpListener, NvmfError> {
    let err = |source: std::io::Error| NvmfError::Listen {
        addr: format!("{}:{}", addr.traddr, addr.trsvcid),
        source,
    };
    let sock = TcpListener::bind(addr.socket_addr()).map_err(err)?;
    sock.set_nonblocking(true).map_err(err)?;
    Ok(sock)
}
