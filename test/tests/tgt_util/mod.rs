//! Shared helpers of the pmio-tgt end-to-end tests: build the binaries once, run a daemon on a
//! temporary socket, talk to it with pmio-rpc or raw bytes.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace's root directory.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test/ lives in the workspace")
        .to_path_buf()
}

/// `cargo build -q ARGS` in the workspace; the debug directory of its target directory
/// (CARGO_TARGET_DIR honoured).
fn cargo_build(args: &[&str]) -> PathBuf {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .arg("build")
        .arg("-q")
        .args(args)
        .current_dir(&root)
        .status()
        .unwrap_or_else(|e| panic!("run cargo build {args:?}: {e}"));
    assert!(status.success(), "cargo build {args:?} failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_relative() { root.join(t) } else { t })
        .unwrap_or_else(|| root.join("target"));
    target.join("debug")
}

/// Directory holding debug pmio-tgt and pmio-rpc built from this workspace (built once per
/// test binary).
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = cargo_build(&["-p", "pmio-tgt", "-p", "pmio-rpc"]);
        for b in ["pmio-tgt", "pmio-rpc"] {
            assert!(dir.join(b).exists(), "{} not found", dir.join(b).display());
        }
        dir
    })
}

/// Example `name` of `package`, built (debug) from this workspace.
pub fn example(package: &str, name: &str) -> PathBuf {
    let bin = cargo_build(&["-p", package, "--example", name])
        .join("examples")
        .join(name);
    assert!(bin.exists(), "{} not found", bin.display());
    bin
}

/// A pmio-tgt process (or another daemon) on a socket in a temporary directory.
pub struct Daemon {
    pub child: Child,
    pub sock: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts pmio-tgt with `-r sock` and `args`, and waits until it answers.
    pub fn start(sock: &Path, args: &[&str]) -> Daemon {
        let d = Daemon::spawn(sock, args);
        d.wait_ready();
        d
    }

    /// Starts pmio-tgt without waiting.
    pub fn spawn(sock: &Path, args: &[&str]) -> Daemon {
        let mut full = vec!["-r".as_ref(), sock.as_os_str()];
        full.extend(args.iter().map(OsStr::new));
        Daemon::spawn_program(&bin_dir().join("pmio-tgt"), sock, &full)
    }

    /// Starts another daemon, `program` with `args` (which name `sock` as it expects), and
    /// waits until it answers on `sock`.
    pub fn start_program(program: &Path, sock: &Path, args: &[&OsStr]) -> Daemon {
        let d = Daemon::spawn_program(program, sock, args);
        d.wait_ready();
        d
    }

    fn spawn_program(program: &Path, sock: &Path, args: &[&OsStr]) -> Daemon {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = sock.with_extension(format!("{}.{n}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).expect("create daemon log");
        let child = Command::new(program)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        Daemon {
            child,
            sock: sock.to_path_buf(),
            log,
        }
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if UnixStream::connect(&self.sock).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the daemon did not come up on {}:\n{}",
            self.sock.display(),
            self.log()
        );
    }

    /// Runs pmio-rpc against this daemon.
    pub fn rpc(&self, args: &[&str]) -> Output {
        rpc(&self.sock, args)
    }

    /// Runs pmio-rpc, asserts success and returns stdout.
    pub fn rpc_ok(&self, args: &[&str]) -> String {
        let out = self.rpc(args);
        assert!(
            out.status.success(),
            "pmio-rpc {args:?} failed: {}\n{}\ndaemon log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Runs pmio-rpc and parses its JSON output.
    pub fn rpc_json(&self, args: &[&str]) -> serde_json::Value {
        let s = self.rpc_ok(args);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {s}"))
    }

    /// Sends raw bytes on a fresh connection, half-closes, returns everything received.
    pub fn raw(&self, bytes: &[u8]) -> String {
        raw(&self.sock, bytes)
    }

    /// Sends `sig` and waits (up to 20 s) for the exit status.
    pub fn signal(mut self, sig: i32) -> ExitStatus {
        // SAFETY: kill on a child process id we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        self.wait_exit()
    }

    /// Waits (up to 20 s) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait for the daemon") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the daemon did not exit:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs pmio-rpc on socket `sock`.
pub fn rpc(sock: &Path, args: &[&str]) -> Output {
    Command::new(bin_dir().join("pmio-rpc"))
        .arg("-s")
        .arg(sock)
        .args(args)
        .output()
        .expect("run pmio-rpc")
}

/// Sends raw bytes on a fresh connection, half-closes, returns everything received until the
/// server closes.
pub fn raw(sock: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may close early (syntax error): keep what it answered.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8(out).expect("UTF-8 response")
}

/// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick for port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A minimal NVMe/TCP host written from the spec's byte layouts (not the target's codec):
/// ICReq/ICResp, then a Fabrics Connect of the admin queue. Returns the socket and the
/// CapsuleResp's CQE fields (DW0, status field without the phase bit).
pub fn nvme_tcp_admin_connect(
    port: u16,
    subnqn: &str,
    hostnqn: &str,
    hostid: [u8; 16],
) -> (std::net::TcpStream, u32, u16) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    // ICReq: type 0, HLEN 128, PLEN 128, PFV 0, HPDA 0, no digests, MAXR2T 0.
    let mut icreq = [0u8; 128];
    icreq[2] = 128;
    icreq[4..8].copy_from_slice(&128u32.to_le_bytes());
    s.write_all(&icreq).unwrap();
    let mut icresp = [0u8; 128];
    s.read_exact(&mut icresp).unwrap();
    assert_eq!((icresp[0], icresp[2]), (1, 128), "ICResp");
    // CapsuleCmd (type 4, HLEN 72, PDO 72) with the 1024-byte Connect data in the capsule.
    let mut pdu = vec![0u8; 72 + 1024];
    pdu[0] = 4;
    pdu[2] = 72;
    pdu[3] = 72;
    pdu[4..8].copy_from_slice(&(72u32 + 1024).to_le_bytes());
    let sqe = &mut pdu[8..72];
    sqe[0] = 0x7f; // Fabrics
    sqe[1] = 0x40; // SGL
    sqe[2..4].copy_from_slice(&1u16.to_le_bytes()); // CID
    sqe[4] = 0x01; // FCTYPE Connect
    sqe[32..36].copy_from_slice(&1024u32.to_le_bytes()); // SGL length
    sqe[39] = 0x01; // SGL data block, offset (in-capsule)
    sqe[44..46].copy_from_slice(&31u16.to_le_bytes()); // QID 0 in CDW10; SQSIZE 31 in CDW11
    let data = &mut pdu[72..];
    data[..16].copy_from_slice(&hostid);
    data[16..18].copy_from_slice(&0xffffu16.to_le_bytes()); // dynamic controller
    data[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    data[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    s.write_all(&pdu).unwrap();
    // CapsuleResp: type 5, HLEN 24; the CQE at 8.
    let mut resp = [0u8; 24];
    s.read_exact(&mut resp).unwrap();
    assert_eq!((resp[0], resp[2]), (5, 24), "CapsuleResp");
    let dw0 = u32::from_le_bytes(resp[8..12].try_into().unwrap());
    assert_eq!(u16::from_le_bytes([resp[20], resp[21]]), 1, "CID echoed");
    let status = u16::from_le_bytes([resp[22], resp[23]]) >> 1;
    (s, dw0, status)
}
