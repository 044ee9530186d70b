//! The JSON-RPC server: a unix stream socket, one thread per connection.
//!
//! The accept loop and connection threads are ordinary threads, never reactors: a method that
//! needs a reactor sends it a message and waits for the answer on a channel, so a slow or hostile
//! client can only ever stall its own connection. Limits: [`ServerOptions::max_connections`]
//! connections at once (one more is answered with -16 and closed), one request at most
//! [`MAX_REQUEST_BYTES`](crate::frame::MAX_REQUEST_BYTES), nesting at most
//! [`MAX_DEPTH`](crate::frame::MAX_DEPTH). A syntax error, an oversized or too deeply nested
//! request is answered with -32700 and closes that connection only.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{RpcError, code};
use crate::frame::Decoder;
use crate::message::{Call, Step, encode_response, handle_value};

/// Why the server could not bind or start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Something accepts connections on the path already (another daemon, or this one twice).
    #[error(
        "another process is already serving RPC on {} (is pmio-tgt or an SPDK app running?); \
         stop it or pick another socket",
        .0.display()
    )]
    InUse(PathBuf),
    /// The path exists and is a regular file, directory or other non-socket: never replaced.
    #[error("{} exists and is not a socket; refusing to replace it", .0.display())]
    NotASocket(PathBuf),
    /// A system call on the socket failed; `what` is the step, with the path where there is one.
    #[error("{what}")]
    Io {
        /// The step that failed ("binding /var/tmp/pmio.sock").
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Adds the step that failed to an I/O error (the server's `anyhow::Context`).
trait WithStep<T> {
    fn step(self, what: impl FnOnce() -> String) -> Result<T, ServerError>;
}

impl<T> WithStep<T> for io::Result<T> {
    fn step(self, what: impl FnOnce() -> String) -> Result<T, ServerError> {
        self.map_err(|source| ServerError::Io {
            what: what(),
            source,
        })
    }
}

/// What the server calls for each valid request.
pub trait Handler: Send + Sync + 'static {
    /// Runs one method and returns its result or error. Runs on a connection thread.
    fn call(&self, call: &Call) -> Result<Value, RpcError>;

    /// Runs after the reply to `call` has been written (e.g. `spdk_kill_instance` shuts the
    /// daemon down only once its `true` has reached the client).
    fn after_reply(&self, _call: &Call) {}
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Socket path.
    pub path: PathBuf,
    /// File mode of the socket (0600 by default: only the daemon's user may connect).
    pub mode: u32,
    /// Connections served at once.
    pub max_connections: usize,
    /// A connection with part of a request buffered and no bytes for this long is closed.
    pub partial_timeout: Duration,
    /// A client that does not read its replies for this long is disconnected.
    pub write_timeout: Duration,
}

impl ServerOptions {
    /// Defaults for `path`: mode 0600, 64 connections, 30 s partial-request timeout, 10 s write
    /// timeout.
    pub fn new(path: impl Into<PathBuf>) -> ServerOptions {
        ServerOptions {
            path: path.into(),
            mode: 0o600,
            max_connections: 64,
            partial_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Rejected connections served at once (each gets an error reply); more are simply closed.
const MAX_REJECTERS: usize = 8;

struct Shared {
    opts: ServerOptions,
    stopping: AtomicBool,
    active: AtomicUsize,
    rejecting: AtomicUsize,
    conns: Mutex<HashMap<u64, (UnixStream, JoinHandle<()>)>>,
}

/// A bound socket, not yet serving. Dropped without [`Server::start`], it removes the socket.
pub struct Server {
    listener: Option<UnixListener>,
    shared: Arc<Shared>,
    ino: (u64, u64),
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.listener.take().is_some() {
            remove_if_ours(&self.shared.opts.path, self.ino);
        }
    }
}

/// Removes the socket file at `path` if it is still the one we created (`ino`).
fn remove_if_ours(path: &Path, ino: (u64, u64)) {
    match std::fs::metadata(path) {
        Ok(md) if (md.dev(), md.ino()) == ino => {
            if let Err(e) = std::fs::remove_file(path) {
                log::warn!("removing {}: {e}", path.display());
            }
        }
        _ => log::warn!(
            "{} is no longer our socket; not removing it",
            path.display()
        ),
    }
}

/// A running server; [`ServerHandle::stop`] ends it and removes the socket.
pub struct ServerHandle {
    shared: Arc<Shared>,
    wake: UnixStream,
    accept: Option<JoinHandle<()>>,
    ino: (u64, u64),
}

impl Server {
    /// Creates the socket at `opts.path` with `opts.mode`.
    ///
    /// A live server on that path (one that accepts a connection) is an error; a stale socket
    /// file (nobody listening) is replaced; any other kind of file is left alone and is an error.
    pub fn bind(opts: ServerOptions) -> Result<Server, ServerError> {
        let path = opts.path.clone();
        match std::fs::symlink_metadata(&path) {
            Ok(md) if md.file_type().is_socket() => match UnixStream::connect(&path) {
                Ok(_) => return Err(ServerError::InUse(path)),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    log::warn!("replacing stale socket {}", path.display());
                    std::fs::remove_file(&path)
                        .step(|| format!("removing stale socket {}", path.display()))?;
                }
                Err(e) => {
                    return Err(e)
                        .step(|| format!("checking whether {} is in use", path.display()));
                }
            },
            Ok(_) => return Err(ServerError::NotASocket(path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).step(|| format!("inspecting {}", path.display())),
        }
        // Create the socket with no permissions beyond the owner's, then set the asked mode: no
        // window in which anyone else may connect.
        // SAFETY: umask only changes the process's file-creation mask; it cannot fail.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(&path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let listener = bound.step(|| format!("binding {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(opts.mode))
            .step(|| format!("setting mode {:o} on {}", opts.mode, path.display()))?;
        listener
            .set_nonblocking(true)
            .step(|| "making the listener non-blocking".into())?;
        let md = std::fs::metadata(&path).step(|| format!("inspecting {}", path.display()))?;
        Ok(Server {
            listener: Some(listener),
            ino: (md.dev(), md.ino()),
            shared: Arc::new(Shared {
                opts,
                stopping: AtomicBool::new(false),
                active: AtomicUsize::new(0),
                rejecting: AtomicUsize::new(0),
                conns: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.shared.opts.path
    }

    /// Starts the accept thread.
    pub fn start(mut self, handler: Arc<dyn Handler>) -> Result<ServerHandle, ServerError> {
        let (wake, wake_rx) = UnixStream::pair().step(|| "creating the wake-up pair".into())?;
        let shared = self.shared.clone();
        let listener = self
            .listener
            .take()
            .expect("a bound server has its listener");
        let accept = std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || accept_loop(listener, wake_rx, shared, handler))
            .step(|| "spawning the RPC accept thread".into())?;
        Ok(ServerHandle {
            shared: self.shared.clone(),
            wake,
            accept: Some(accept),
            ino: self.ino,
        })
    }
}

impl ServerHandle {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.shared.opts.path
    }

    /// Connections being served now.
    pub fn active_connections(&self) -> usize {
        self.shared.active.load(Ordering::Acquire)
    }

    /// Stops accepting, disconnects every client (a method already running finishes or fails
    /// first, up to `grace`), and removes the socket file if it is still ours.
    pub fn stop(mut self, grace: Duration) {
        self.stop_inner(grace);
    }

    fn stop_inner(&mut self, grace: Duration) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::Release);
        let _ = self.wake.write_all(b"x");
        let _ = accept.join();
        let conns: Vec<(UnixStream, JoinHandle<()>)> = {
            let mut map = lock(&self.shared.conns);
            map.drain().map(|(_, c)| c).collect()
        };
        for (s, _) in &conns {
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
        let deadline = Instant::now() + grace;
        for (s, t) in conns {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
            if t.is_finished() {
                let _ = t.join();
            } else {
                log::warn!("an RPC connection did not finish within {grace:?}; leaving it");
            }
        }
        let path = &self.shared.opts.path;
        match std::fs::metadata(path) {
            Ok(md) if (md.dev(), md.ino()) == self.ino => {
                if let Err(e) = std::fs::remove_file(path) {
                    log::warn!("removing {}: {e}", path.display());
                }
            }
            _ => log::warn!(
                "{} is no longer our socket; not removing it",
                path.display()
            ),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_inner(Duration::from_secs(5));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn accept_loop(
    listener: UnixListener,
    wake: UnixStream,
    shared: Arc<Shared>,
    handler: Arc<dyn Handler>,
) {
    let mut next_id = 0u64;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call, and both
        // descriptors stay open (owned by this function) while poll runs.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            log::error!("RPC accept loop: poll: {e}");
            return;
        }
        if shared.stopping.load(Ordering::Acquire) || fds[1].revents != 0 {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    next_id += 1;
                    admit(stream, next_id, &shared, &handler);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    log::warn!("RPC accept: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

fn admit(stream: UnixStream, id: u64, shared: &Arc<Shared>, handler: &Arc<dyn Handler>) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_write_timeout(Some(shared.opts.write_timeout));
    let limit = shared.opts.max_connections;
    if shared.active.fetch_add(1, Ordering::AcqRel) >= limit {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        reject(stream, shared, limit);
        return;
    }
    let Ok(clone) = stream.try_clone() else {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        return;
    };
    let sh = shared.clone();
    let h = handler.clone();
    // Hold the map lock across spawn so the thread's own removal happens after insertion.
    let mut conns = lock(&shared.conns);
    let spawned = std::thread::Builder::new()
        .name(format!("rpc-conn-{id}"))
        .spawn(move || {
            serve(stream, &sh, &*h);
            lock(&sh.conns).remove(&id);
            sh.active.fetch_sub(1, Ordering::AcqRel);
        });
    match spawned {
        Ok(t) => {
            conns.insert(id, (clone, t));
        }
        Err(e) => {
            log::warn!("cannot spawn an RPC connection thread: {e}");
            shared.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Answers the first request of a connection over the limit with -16 and closes it.
fn reject(stream: UnixStream, shared: &Arc<Shared>, limit: usize) {
    if shared.rejecting.fetch_add(1, Ordering::AcqRel) >= MAX_REJECTERS {
        shared.rejecting.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let sh = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("rpc-reject".into())
        .spawn(move || {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut dec = Decoder::default();
            let mut buf = [0u8; 4096];
            let err = RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("too many RPC connections (limit {limit})"),
            );
            let id = loop {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break Value::Null,
                    Ok(n) => dec.feed(&buf[..n]),
                }
                match dec.next_value() {
                    Ok(Some(v)) => break v.get("id").cloned().unwrap_or(Value::Null),
                    Ok(None) => continue,
                    Err(_) => break Value::Null,
                }
            };
            let mut out = Vec::new();
            encode_response(&mut out, &id, &Err(err));
            let _ = stream.write_all(&out);
            sh.rejecting.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        shared.rejecting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one connection until EOF, an error, a fatal framing error or server stop.
fn serve(mut stream: UnixStream, shared: &Shared, handler: &dyn Handler) {
    let mut dec = Decoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    let _ = stream.set_read_timeout(Some(shared.opts.partial_timeout));
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if dec.is_idle() {
                    continue;
                }
                log::info!("RPC client sent part of a request and went quiet; disconnecting");
                return;
            }
            Err(_) => return,
        };
        dec.feed(&buf[..n]);
        loop {
            if shared.stopping.load(Ordering::Acquire) {
                return;
            }
            match dec.next_value() {
                Ok(Some(v)) => {
                    out.clear();
                    let mut done: Option<Call> = None;
                    let step = handle_value(v, &mut out, |call| {
                        let r = std::panic::catch_unwind(AssertUnwindSafe(|| handler.call(call)))
                            .unwrap_or_else(|_| {
                                log::error!("RPC method {} panicked", call.method);
                                Err(RpcError::new(
                                    code::INTERNAL_ERROR,
                                    format!("internal error in {}", call.method),
                                ))
                            });
                        done = Some(call.clone());
                        r
                    });
                    if matches!(step, Step::Reply) && stream.write_all(&out).is_err() {
                        return;
                    }
                    if let Some(call) = done {
                        handler.after_reply(&call);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    log::info!("RPC client: {e}; closing the connection");
                    out.clear();
                    encode_response(&mut out, &Value::Null, &Err(e.to_rpc()));
                    let _ = stream.write_all(&out);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::io::BufRead;

    struct Echo;

    impl Handler for Echo {
        fn call(&self, call: &Call) -> Result<Value, RpcError> {
            match call.method.as_str() {
                "echo" => Ok(call.params.clone().unwrap_or(Value::Null)),
                "sleep" => {
                    std::thread::sleep(Duration::from_millis(300));
                    Ok(Value::Bool(true))
                }
                "panic" => panic!("test panic"),
                _ => Err(RpcError::method_not_found()),
            }
        }
    }

    fn start(dir: &Path, opts: impl FnOnce(&mut ServerOptions)) -> ServerHandle {
        let mut o = ServerOptions::new(dir.join("t.sock"));
        opts(&mut o);
        Server::bind(o).unwrap().start(Arc::new(Echo)).unwrap()
    }

    fn call(s: &mut UnixStream, req: &str) -> Value {
        s.write_all(req.as_bytes()).unwrap();
        read_one(s)
    }

    fn read_one(s: &mut UnixStream) -> Value {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = io::BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(
            line.ends_with('\n'),
            "response not newline-terminated: {line:?}"
        );
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn socket_is_0600_and_removed_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let md = std::fs::metadata(h.path()).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o600);
        let path = h.path().to_path_buf();
        h.stop(Duration::from_secs(1));
        assert!(!path.exists());
    }

    #[test]
    fn mode_can_be_widened() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |o| o.mode = 0o660);
        let md = std::fs::metadata(h.path()).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o660);
    }

    #[test]
    fn live_socket_refused_stale_replaced_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let err = Server::bind(ServerOptions::new(h.path())).err().unwrap();
        assert!(format!("{err:#}").contains("already serving"), "{err:#}");
        // A socket file nobody listens on is replaced.
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let h2 = Server::bind(ServerOptions::new(&stale)).unwrap();
        drop(h2);
        // A regular file is never replaced.
        let file = dir.path().join("file");
        std::fs::write(&file, b"keep").unwrap();
        assert!(Server::bind(ServerOptions::new(&file)).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }

    #[test]
    fn pipelined_pretty_and_split_requests() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let mut s = UnixStream::connect(h.path()).unwrap();
        let a = serde_json::to_string_pretty(
            &json!({"jsonrpc":"2.0","method":"echo","id":1,"params":{"a":1}}),
        )
        .unwrap();
        let b = r#"{"jsonrpc":"2.0","method":"echo","id":"two","params":[2]}"#;
        let all = format!("{a}{b}");
        let (x, y) = all.split_at(a.len() + 7);
        s.write_all(x.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.write_all(y.as_bytes()).unwrap();
        let mut r = io::BufReader::new(s.try_clone().unwrap());
        let mut l1 = String::new();
        let mut l2 = String::new();
        r.read_line(&mut l1).unwrap();
        r.read_line(&mut l2).unwrap();
        assert_eq!(l1, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":1}}\n");
        assert_eq!(l2, "{\"jsonrpc\":\"2.0\",\"id\":\"two\",\"result\":[2]}\n");
        // A notification gets no reply: the next answer is for id 3.
        s.write_all(
            br#"{"jsonrpc":"2.0","method":"echo"}{"jsonrpc":"2.0","method":"echo","id":3}"#,
        )
        .unwrap();
        let mut l3 = String::new();
        r.read_line(&mut l3).unwrap();
        assert_eq!(l3, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":null}\n");
    }

    #[test]
    fn garbage_closes_only_that_connection() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let mut good = UnixStream::connect(h.path()).unwrap();
        let mut bad = UnixStream::connect(h.path()).unwrap();
        let v = call(&mut bad, "{\"a\":}");
        assert_eq!(v["error"]["code"], -32700);
        assert_eq!(v["id"], Value::Null);
        let mut rest = Vec::new();
        bad.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        let v = call(
            &mut good,
            r#"{"jsonrpc":"2.0","method":"echo","id":1,"params":{}}"#,
        );
        assert_eq!(v["result"], json!({}));
        // A panicking method is an error reply, not a dead server.
        let v = call(&mut good, r#"{"jsonrpc":"2.0","method":"panic","id":2}"#);
        assert_eq!(v["error"]["code"], -32603);
        let v = call(&mut good, r#"{"jsonrpc":"2.0","method":"echo","id":3}"#);
        assert_eq!(v["id"], 3);
    }

    #[test]
    fn too_deep_and_too_large_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let mut s = UnixStream::connect(h.path()).unwrap();
        let v = call(&mut s, &"[".repeat(10_000));
        assert_eq!(v["error"]["code"], -32700);
        assert!(v["error"]["message"].as_str().unwrap().contains("nested"));
        let mut s = UnixStream::connect(h.path()).unwrap();
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"id\":1,\"params\":{{\"s\":\"{}",
            "x".repeat(crate::frame::MAX_REQUEST_BYTES + 10)
        );
        // The server may close before all bytes are written.
        let _ = s.write_all(big.as_bytes());
        let v = read_one(&mut s);
        assert_eq!(v["error"]["code"], -32700);
        assert!(v["error"]["message"].as_str().unwrap().contains("larger"));
    }

    #[test]
    fn connection_limit_is_enforced_and_freed() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |o| o.max_connections = 4);
        let mut held: Vec<UnixStream> = (0..4)
            .map(|_| UnixStream::connect(h.path()).unwrap())
            .collect();
        for s in &mut held {
            assert_eq!(call(s, r#"{"method":"echo","id":0}"#)["id"], 0);
        }
        let mut extra = UnixStream::connect(h.path()).unwrap();
        let v = call(&mut extra, r#"{"method":"echo","id":9}"#);
        assert_eq!(v["id"], 9);
        assert_eq!(v["error"]["code"], -16);
        assert!(v["error"]["message"].as_str().unwrap().contains("limit 4"));
        drop(held.pop());
        let deadline = Instant::now() + Duration::from_secs(5);
        while h.active_connections() >= 4 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut again = UnixStream::connect(h.path()).unwrap();
        assert_eq!(call(&mut again, r#"{"method":"echo","id":5}"#)["id"], 5);
    }

    #[test]
    fn stop_lets_running_method_finish() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let mut s = UnixStream::connect(h.path()).unwrap();
        s.write_all(br#"{"method":"sleep","id":1}"#).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        h.stop(Duration::from_secs(5));
        let v = read_one(&mut s);
        assert_eq!(v["result"], true);
    }

    fn mutated_requests() -> impl Strategy<Value = Vec<u8>> {
        let valid = r#"{"jsonrpc":"2.0","method":"echo","id":1,"params":{"a":[1,2,{"b":"c\"}"}]}}"#;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            (0..valid.len()).prop_map(move |n| valid.as_bytes()[..n].to_vec()),
            (0..valid.len(), any::<u8>()).prop_map(move |(i, b)| {
                let mut v = valid.as_bytes().to_vec();
                v[i] = b;
                v
            }),
            (0..valid.len(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(
                move |(i, ins)| {
                    let mut v = valid.as_bytes().to_vec();
                    v.splice(i..i, ins);
                    v
                }
            ),
            (1usize..200).prop_map(|d| "[{\"a\":".repeat(d).into_bytes()),
            Just(b"[]".to_vec()),
            Just(b"\xff\xfe{}".to_vec()),
        ]
    }

    /// Thousands of random and malformed streams against a live server; meanwhile and afterwards
    /// well-formed requests are answered correctly.
    #[test]
    fn prop_live_server_survives_malformed_streams() {
        let dir = tempfile::tempdir().unwrap();
        let h = start(dir.path(), |_| {});
        let path = h.path().to_path_buf();
        let good = std::cell::RefCell::new(UnixStream::connect(&path).unwrap());
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
        let count = std::cell::Cell::new(0u64);
        runner
            .run(
                &(mutated_requests(), any::<bool>(), 1usize..4),
                |(bytes, half_close, chunks)| {
                    let mut s = UnixStream::connect(&path).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let step = bytes.len().div_ceil(chunks).max(1);
                    for c in bytes.chunks(step) {
                        // The server may already have closed after a syntax error.
                        if s.write_all(c).is_err() {
                            break;
                        }
                    }
                    if half_close {
                        let _ = s.shutdown(std::net::Shutdown::Write);
                        let mut out = Vec::new();
                        let _ = s.read_to_end(&mut out);
                        for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                            let v: Value = serde_json::from_slice(line).unwrap();
                            prop_assert_eq!(&v["jsonrpc"], "2.0");
                        }
                    }
                    let n = count.get() + 1;
                    count.set(n);
                    if n.is_multiple_of(200) {
                        let v = call(
                            &mut good.borrow_mut(),
                            &format!(r#"{{"method":"echo","id":{n},"params":[{n}]}}"#),
                        );
                        prop_assert_eq!(&v["result"], &json!([n]));
                    }
                    Ok(())
                },
            )
            .unwrap();
        let mut fresh = UnixStream::connect(&path).unwrap();
        let v = call(
            &mut fresh,
            r#"{"jsonrpc":"2.0","method":"echo","id":"end","params":{"ok":true}}"#,
        );
        assert_eq!(v, json!({"jsonrpc":"2.0","id":"end","result":{"ok":true}}));
        let v = call(
            &mut good.borrow_mut(),
            r#"{"jsonrpc":"2.0","method":"nope","id":1}"#,
        );
        assert_eq!(v["error"]["code"], -32601);
    }
}
