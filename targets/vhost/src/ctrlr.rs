//! A vhost-user-blk controller: a bdev served on a unix socket. Its control thread
//! (`vhost.NAME`) accepts one front end at a time and answers its messages through a
//! [`Session`]; the data path runs on the reactors of the controller's cpumask (queue `i` on
//! core `cores[i % n]`), reached by message only.
//!
//! The control path blocks (a stop waits for in-flight I/O), so it has its own thread rather
//! than a reactor: a reactor must never wait for itself.

use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pmio::bdev::Registry;
use pmio_reactors::{CoreMask, ReactorsHandle};
use vhost::vhost_user::{BackendReqHandler, Error};

use crate::blk::DevFacts;
use crate::error::VhostError;
use crate::session::Session;
use crate::spec::ID_BYTES;
use crate::sys::{EventFd, Ready, wait_readable};

/// What a controller is, shared by its control thread and sessions.
pub struct CtrlrInfo {
    /// Unique among the target's controllers, ever.
    pub id: u64,
    pub name: String,
    pub(crate) name_arc: Arc<str>,
    pub bdev: String,
    pub cpumask: CoreMask,
    pub readonly: bool,
    pub socket: PathBuf,
    pub(crate) reactors: ReactorsHandle,
    pub(crate) registry: Arc<Registry>,
    /// Whether a front end is connected.
    pub connected: AtomicBool,
    /// Sessions served so far.
    pub sessions: AtomicU64,
    /// Each ring's count of completed requests, ever (a ring's reactor stores its count once
    /// per poll in which it completed some; readers sum them).
    ring_requests: Mutex<Vec<Arc<AtomicU64>>>,
}

impl CtrlrInfo {
    /// Requests completed on the controller's rings, every session so far.
    pub fn requests(&self) -> u64 {
        let rings = self.ring_requests.lock().unwrap_or_else(|p| p.into_inner());
        rings.iter().map(|r| r.load(Ordering::Relaxed)).sum()
    }

    /// A new ring's count of completed requests, summed into [`CtrlrInfo::requests`].
    pub(crate) fn new_ring_counter(&self) -> Arc<AtomicU64> {
        let c = Arc::new(AtomicU64::new(0));
        let mut rings = self.ring_requests.lock().unwrap_or_else(|p| p.into_inner());
        rings.push(Arc::clone(&c));
        c
    }

    /// The bdev's facts as requests are checked against them (a bdev that went away: none
    /// of its blocks).
    pub fn facts(&self) -> DevFacts {
        match self.registry.get(&self.bdev) {
            Some(d) => {
                let i = d.info();
                DevFacts {
                    block_size: i.block_size,
                    num_blocks: i.num_blocks,
                    ops: i.supported_ops,
                    readonly: self.readonly,
                }
            }
            None => DevFacts {
                block_size: 512,
                num_blocks: 0,
                ops: pmio::OpSet::EMPTY,
                readonly: true,
            },
        }
    }

    /// The reactor that runs queue `index`.
    pub fn core_of(&self, index: usize) -> u32 {
        let cores = self.cpumask.cores();
        cores[index % cores.len()]
    }

    /// GET_ID's serial: the bdev's name, NUL-padded (not NUL-terminated at 20 bytes).
    pub fn serial(&self) -> [u8; ID_BYTES] {
        let mut s = [0u8; ID_BYTES];
        let n = self.bdev.len().min(ID_BYTES);
        s[..n].copy_from_slice(&self.bdev.as_bytes()[..n]);
        s
    }
}

/// A running controller. Dropping it without [`Controller::stop`] leaves the thread running.
pub struct Controller {
    pub info: Arc<CtrlrInfo>,
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

/// Options of a new controller.
pub struct CtrlrOptions {
    pub id: u64,
    pub name: String,
    pub bdev: String,
    pub cpumask: CoreMask,
    pub readonly: bool,
    pub socket: PathBuf,
}

impl Controller {
    /// Listens on `opts.socket` and starts the control thread.
    pub fn start(
        opts: CtrlrOptions,
        reactors: ReactorsHandle,
        registry: Arc<Registry>,
    ) -> Result<Controller, VhostError> {
        let listener = bind(&opts.socket)?;
        let stop = Arc::new(EventFd::new().map_err(|source| VhostError::Socket {
            path: opts.socket.display().to_string(),
            source,
        })?);
        let info = Arc::new(CtrlrInfo {
            id: opts.id,
            name_arc: Arc::from(opts.name.as_str()),
            name: opts.name,
            bdev: opts.bdev,
            cpumask: opts.cpumask,
            readonly: opts.readonly,
            socket: opts.socket,
            reactors,
            registry,
            connected: AtomicBool::new(false),
            sessions: AtomicU64::new(0),
            ring_requests: Mutex::new(Vec::new()),
        });
        let (i, s) = (Arc::clone(&info), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name(format!("vhost.{}", info.name))
            .spawn(move || serve(&i, &listener, &s))
            .map_err(|source| VhostError::Socket {
                path: info.socket.display().to_string(),
                source,
            })?;
        log::info!(
            "vhost {}: serving bdev {} on {} (cores {}{})",
            info.name,
            info.bdev,
            info.socket.display(),
            info.cpumask.to_list(),
            if info.readonly { ", read-only" } else { "" }
        );
        Ok(Controller {
            info,
            stop,
            thread: Some(thread),
        })
    }

    /// Ends the session (its rings stop after their in-flight I/O), stops listening and
    /// removes the socket.
    pub fn stop(mut self) {
        self.stop.notify();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            log::error!("vhost {}: the control thread panicked", self.info.name);
        }
    }
}

/// Binds the controller's socket; a stale socket (nobody listening) is replaced.
fn bind(path: &Path) -> Result<UnixListener, VhostError> {
    let err = |source| VhostError::Socket {
        path: path.display().to_string(),
        source,
    };
    if path.exists() {
        use std::os::unix::fs::FileTypeExt;
        let is_socket = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket || UnixStream::connect(path).is_ok() {
            return Err(err(std::io::Error::from_raw_os_error(libc::EEXIST)));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let l = UnixListener::bind(path).map_err(err)?;
    l.set_nonblocking(true).map_err(err)?;
    Ok(l)
}

/// Whether a control-channel error ends the session (the peer went away or spoke nonsense);
/// otherwise the request was refused and the session goes on.
fn ends_session(e: &Error) -> bool {
    !matches!(
        e,
        Error::InvalidParam
            | Error::InvalidOperation(_)
            | Error::InactiveFeature(_)
            | Error::InactiveOperation(_)
            | Error::ReqHandlerError(_)
            | Error::BackendInternalError
            | Error::FeatureMismatch
    )
}

/// The control thread: one session at a time until stopped.
fn serve(info: &Arc<CtrlrInfo>, listener: &UnixListener, stop: &EventFd) {
    'accept: loop {
        if wait_readable(listener.as_raw_fd(), stop.as_raw_fd()) == Ready::Stop {
            break;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                log::warn!("vhost {}: accept: {e}", info.name);
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if let Err(e) = stream.set_nonblocking(false) {
            log::warn!("vhost {}: {e}", info.name);
            continue;
        }
        let n = info.sessions.fetch_add(1, Ordering::Relaxed) + 1;
        info.connected.store(true, Ordering::Relaxed);
        log::info!("vhost {}: front end connected (session {n})", info.name);
        let session = Arc::new(Mutex::new(Session::new(Arc::clone(info))));
        let mut handler = BackendReqHandler::from_stream(stream, Arc::clone(&session));
        let conn = match handler.try_clone_connection() {
            Ok(c) => c,
            Err(e) => {
                log::warn!("vhost {}: {e}", info.name);
                continue;
            }
        };
        let mut stopping = false;
        loop {
            if wait_readable(conn.as_raw_fd(), stop.as_raw_fd()) == Ready::Stop {
                stopping = true;
                break;
            }
            match handler.handle_request() {
                Ok(()) => {}
                Err(Error::Disconnected) | Err(Error::PartialMessage) => {
                    log::info!("vhost {}: front end disconnected", info.name);
                    break;
                }
                Err(e) if ends_session(&e) => {
                    log::warn!("vhost {}: closing the connection: {e}", info.name);
                    break;
                }
                Err(e) => log::debug!("vhost {}: request refused: {e}", info.name),
            }
        }
        session.lock().unwrap_or_else(|p| p.into_inner()).stop_all();
        drop(handler);
        drop(conn);
        info.connected.store(false, Ordering::Relaxed);
        log::info!("vhost {}: session {n} ended", info.name);
        if stopping {
            break 'accept;
        }
    }
    if let Err(e) = std::fs::remove_file(&info.socket) {
        log::debug!(
            "vhost {}: removing {}: {e}",
            info.name,
            info.socket.display()
        );
    }
}
