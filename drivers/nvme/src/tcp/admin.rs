//! The admin queue of an NVMe/TCP controller: one connection (QID 0), replaced on each
//! reconnect, used by blocking callers only (attach, detach, the controller's own thread).
//! It also gives the controller model its registers: [`RegisterIo`] by Fabrics Property
//! Get/Set (SPDK's `nvme_fabric_prop_get_cmd_sync`), a dead connection reading all ones as a
//! removed PCIe device does.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::admin::DATA_BYTES;
use crate::error::NvmeError;
use crate::regs::RegisterIo;
use crate::spec::pdu::Digests;
use crate::spec::{
    Answering, CNTLID_DYNAMIC, ConnectCmd, ConnectData, Cqe, Sqe, property_get_sqe,
    property_set_sqe,
};

use super::conn::{Conn, ConnError};
use super::sock::Connecting;

/// Admin queue entries (SQSIZE 31 in Connect, as Linux's host).
pub(crate) const ADMIN_ENTRIES: u16 = 32;

/// The CID of the Fabrics Connect on a new connection (one past the queue's entries).
const CONNECT_CID: u16 = ADMIN_ENTRIES;

/// Completions of other commands kept while waiting for one.
const STASH_MAX: usize = 64;

/// What a connection is opened with.
pub(crate) struct ConnectParams<'a> {
    pub addr: SocketAddr,
    pub digests: Digests,
    pub data: ConnectData,
    pub qid: u16,
    pub sqsize: u16,
    pub kato_ms: u32,
    pub max_data: u32,
    pub cids: usize,
    pub timeout: Duration,
    pub what: &'a str,
    /// The host side of an in-band authentication, asked for only when the Connect's
    /// response requires one.
    pub auth: &'a dyn Fn() -> Result<pmio_auth::host::HostConfig, ConnError>,
    /// TLS with this PSK before the ICReq (`None`: plain TCP).
    pub tls: Option<pmio_tls::ClientPsk>,
}

/// How a queue's connection proves who it is: the in-band authentication the subsystem may
/// ask for, and TLS before anything else when attached with a PSK.
pub(crate) struct QueueSecurity<'a> {
    pub auth: &'a dyn Fn() -> Result<pmio_auth::host::HostConfig, ConnError>,
    pub tls: Option<pmio_tls::ClientPsk>,
}

/// Opens a connection and runs ICReq/ICResp and Fabrics Connect, waiting (at most
/// `p.timeout`): for blocking callers. Returns the connection and Connect's dword 0.
pub(crate) fn connect_blocking(p: ConnectParams<'_>) -> Result<(Conn, u32), ConnError> {
    let deadline = Instant::now() + p.timeout;
    let timed_out = || ConnError::Io(std::io::ErrorKind::TimedOut.into());
    let pending = Connecting::start(p.addr)?;
    while pending.poll()?.is_none() {
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut conn = Conn::new(pending.into_stream()?, p.cids, p.digests, p.max_data, p.tls)?;
    if !conn.wait(deadline, |_, _| {}, Conn::ready)? {
        return Err(timed_out());
    }
    let cid = (p.cids - 1) as u16;
    let cmd = ConnectCmd {
        recfmt: 0,
        qid: p.qid,
        sqsize: p.sqsize,
        cattr: 0,
        kato_ms: p.kato_ms,
    };
    conn.submit_connect(cid, cmd.sqe(), &p.data.encode());
    let resp = Cell::new(None);
    conn.wait(
        deadline,
        |c, cqe| {
            if c == cid {
                resp.set(Some(cqe));
            }
        },
        |_| resp.get().is_some(),
    )?;
    match resp.get() {
        Some(cqe) if cqe.status().is_success() && crate::spec::connect_requires_auth(cqe.dw0) => {
            let cfg = (p.auth)()?;
            super::auth::authenticate_blocking(&mut conn, cid, cfg, deadline)?;
            log::info!("nvme-tcp: {}: authenticated (DH-HMAC-CHAP)", p.what);
            Ok((conn, cqe.dw0))
        }
        Some(cqe) if cqe.status().is_success() => Ok((conn, cqe.dw0)),
        Some(cqe) => {
            log::error!(
                "nvme-tcp: {} refused: {}",
                p.what,
                cqe.status().answering(Answering::Connect)
            );
            Err(ConnError::Protocol {
                what: "Fabrics Connect refused",
                cid,
            })
        }
        None => Err(timed_out()),
    }
}

/// The admin connection and what it serves.
struct State {
    conn: Option<Conn>,
    next_cid: u16,
    /// Completions of commands not waited for yet.
    stash: Vec<Cqe>,
    /// Identify data, read by the command [`TcpAdmin::arm_data`] armed.
    data: Vec<u8>,
    data_armed: bool,
}

/// The admin queue of an NVMe/TCP controller.
pub(crate) struct TcpAdmin {
    name: String,
    state: Mutex<State>,
    /// Deadline of one Property Get/Set.
    timeout: Duration,
}

impl TcpAdmin {
    /// An admin queue with no connection yet.
    pub(crate) fn new(name: &str, timeout: Duration) -> TcpAdmin {
        TcpAdmin {
            name: name.to_string(),
            state: Mutex::new(State {
                conn: None,
                next_cid: 0,
                stash: Vec::new(),
                data: vec![0; DATA_BYTES],
                data_armed: false,
            }),
            timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every step leaves the state consistent: a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects the admin queue as `host` (a new controller: its CNTLID is set to 0xFFFF
    /// here): returns the controller ID.
    pub(crate) fn connect(
        &self,
        addr: SocketAddr,
        digests: Digests,
        host: ConnectData,
        kato_ms: u32,
        timeout: Duration,
        security: QueueSecurity<'_>,
    ) -> Result<u16, ConnError> {
        self.disconnect();
        let QueueSecurity { auth, tls } = security;
        let p = ConnectParams {
            addr,
            digests,
            data: ConnectData {
                cntlid: CNTLID_DYNAMIC,
                ..host
            },
            qid: 0,
            sqsize: ADMIN_ENTRIES - 1,
            kato_ms,
            max_data: DATA_BYTES as u32,
            cids: usize::from(CONNECT_CID) + 1,
            timeout,
            what: "admin queue Connect",
            auth,
            tls,
        };
        let (conn, dw0) = connect_blocking(p)?;
        let mut st = self.lock();
        st.conn = Some(conn);
        st.stash.clear();
        st.data_armed = false;
        Ok(dw0 as u16)
    }

    /// Drops the connection (the target frees the controller).
    pub(crate) fn disconnect(&self) {
        self.lock().conn = None;
    }

    /// Whether the connection is up.
    pub(crate) fn connected(&self) -> bool {
        self.lock().conn.is_some()
    }

    /// Reads whatever arrived without waiting (the controller's thread: a connection the
    /// target closed is noticed even when no command is in flight). False when it is down.
    pub(crate) fn check_stream(&self) -> bool {
        let mut st = self.lock();
        let st = &mut *st;
        let Some(conn) = st.conn.as_mut() else {
            return false;
        };
        let stash = &mut st.stash;
        match conn.poll(|_, cqe| stash_push(stash, cqe)) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("{}: admin connection lost: {e}", self.name);
                st.conn = None;
                false
            }
        }
    }

    pub(crate) fn check_connected(&self, ctrlr: &str) -> Result<(), NvmeError> {
        if self.connected() {
            Ok(())
        } else {
            Err(NvmeError::Disconnected {
                ctrlr: ctrlr.to_string(),
                reason: "the admin connection is down".into(),
            })
        }
    }

    pub(crate) fn fill_data(&self, byte: u8) {
        self.lock().data.fill(byte);
    }

    /// The next command submitted reads [`DATA_BYTES`] into the data buffer.
    pub(crate) fn arm_data(&self) {
        self.lock().data_armed = true;
    }

    pub(crate) fn read_data<T: Copy>(&self) -> T {
        const { assert!(size_of::<T>() <= DATA_BYTES) };
        let st = self.lock();
        // SAFETY: the buffer holds DATA_BYTES initialised bytes; `T` is a plain data structure
        // for which any bytes are valid (Identify layouts are integers only); unaligned read.
        unsafe { st.data.as_ptr().cast::<T>().read_unaligned() }
    }

    /// Submits `sqe` (with the data buffer when armed) and sends it; `None` when the
    /// connection is down or every CID is in flight.
    pub(crate) fn submit(&self, sqe: Sqe) -> Option<u16> {
        self.submit_with(sqe, true)
    }

    /// Submits `sqe`, a command without data (the controller thread's Aborts), and sends it;
    /// a data buffer armed meanwhile stays armed for the command it was armed for.
    pub(crate) fn send(&self, sqe: Sqe) -> Option<u16> {
        self.submit_with(sqe, false)
    }

    fn submit_with(&self, sqe: Sqe, may_read_data: bool) -> Option<u16> {
        let mut st = self.lock();
        let st = &mut *st;
        let armed = may_read_data && std::mem::take(&mut st.data_armed);
        let conn = st.conn.as_mut()?;
        let cid = (0..ADMIN_ENTRIES)
            .map(|i| (st.next_cid + i) % ADMIN_ENTRIES)
            .find(|&c| !conn.active(c))?;
        st.next_cid = (cid + 1) % ADMIN_ENTRIES;
        let (buf, len) = if armed {
            (st.data.as_mut_ptr(), DATA_BYTES as u32)
        } else {
            (std::ptr::null_mut(), 0)
        };
        // SAFETY: the data buffer lives in this admin queue for its life; it is read only
        // after the command completed (or, once given up, reused only by a new command of a
        // new connection: `forget` never frees a command with data still to come on this one
        // because a timed-out command's connection is dropped).
        unsafe { conn.submit(cid, sqe, buf, len, true, false, 0) };
        if let Err(e) = conn.flush() {
            log::warn!("{}: admin connection lost: {e}", self.name);
            st.conn = None;
            return None;
        }
        Some(cid)
    }

    /// The completion of `cid` if it arrived (others are stashed).
    pub(crate) fn poll_for(&self, cid: u16) -> Option<Cqe> {
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(i) = st.stash.iter().position(|c| c.cid == cid) {
            return Some(st.stash.swap_remove(i));
        }
        let conn = st.conn.as_mut()?;
        let stash = &mut st.stash;
        let r = conn
            .poll(|_, cqe| stash_push(stash, cqe))
            .and_then(|()| conn.flush());
        if let Err(e) = r {
            log::warn!("{}: admin connection lost: {e}", self.name);
            st.conn = None;
        }
        let i = st.stash.iter().position(|c| c.cid == cid)?;
        Some(st.stash.swap_remove(i))
    }

    /// Submits `sqe` and waits (at most `timeout`) for its completion. A command that times
    /// out takes the connection with it: its data may still arrive, and nothing else may
    /// land in the buffer meanwhile.
    pub(crate) fn exec(
        &self,
        sqe: Sqe,
        timeout: Duration,
        ctrlr: &str,
        what: &'static str,
    ) -> Result<Cqe, NvmeError> {
        let down = |reason: String| NvmeError::Disconnected {
            ctrlr: ctrlr.to_string(),
            reason,
        };
        let cid = self
            .submit(sqe)
            .ok_or_else(|| down(format!("{what}: the admin connection is down")))?;
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        let st = &mut *st;
        let found = Cell::new(take_stashed(&mut st.stash, cid));
        if found.get().is_none() {
            let Some(conn) = st.conn.as_mut() else {
                return Err(down(format!("{what}: the admin connection is down")));
            };
            let stash = &mut st.stash;
            let r = conn.wait(
                deadline,
                |c, cqe| {
                    if c == cid {
                        found.set(Some(cqe));
                    } else {
                        stash_push(stash, cqe);
                    }
                },
                |_| found.get().is_some(),
            );
            match r {
                Ok(true) => {}
                Ok(false) => {
                    st.conn = None;
                    return Err(NvmeError::Timeout {
                        ctrlr: ctrlr.to_string(),
                        state: what,
                        ms: timeout.as_millis() as u64,
                    });
                }
                Err(e) => {
                    st.conn = None;
                    return Err(down(format!("{what}: {e}")));
                }
            }
        }
        let cqe = found.get().expect("found above");
        if !cqe.status().is_success() {
            return Err(NvmeError::AdminCommand {
                ctrlr: ctrlr.to_string(),
                what,
                status: cqe.status(),
            });
        }
        Ok(cqe)
    }

    /// A Property Get or Set, waited for; `None` when the connection is down or the command
    /// failed.
    fn property(&self, sqe: Sqe) -> Option<Cqe> {
        self.exec(sqe, self.timeout, &self.name, "Property Get/Set")
            .inspect_err(|e| log::debug!("{e}"))
            .ok()
    }
}

fn take_stashed(stash: &mut Vec<Cqe>, cid: u16) -> Option<Cqe> {
    let i = stash.iter().position(|c| c.cid == cid)?;
    Some(stash.swap_remove(i))
}

fn stash_push(stash: &mut Vec<Cqe>, cqe: Cqe) {
    if stash.len() == STASH_MAX {
        let old = stash.remove(0);
        log::warn!("admin completion for command {} ignored", old.cid);
    }
    stash.push(cqe);
}

/// Registers of a fabrics controller are properties: one round trip each, never on a
/// reactor. A connection that is down, or a refused Property Get, reads all ones.
impl RegisterIo for TcpAdmin {
    fn read32(&self, off: usize) -> u32 {
        self.property(property_get_sqe(off as u32, false))
            .map_or(u32::MAX, |c| c.dw0)
    }

    fn write32(&self, off: usize, val: u32) {
        self.property(property_set_sqe(off as u32, val));
    }

    fn read64(&self, off: usize) -> u64 {
        self.property(property_get_sqe(off as u32, true))
            .map_or(u64::MAX, |c| u64::from(c.dw0) | u64::from(c.dw1) << 32)
    }

    fn len(&self) -> usize {
        // Properties end before the doorbells a PCIe controller would have.
        crate::regs::off::DOORBELLS
    }
}
