//! pmio-tgt: the pmio daemon. Starts reactors, serves SPDK-compatible JSON-RPC on a unix socket,
//! creates bdevs from a `-c` configuration and by RPC, and shuts down cleanly on SIGINT/SIGTERM or
//! `spdk_kill_instance`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use pmio_config::{self as config, settings::ReactorMode};
use pmio_jsonrpc::RpcState;
use pmio_jsonrpc::server::{Server, ServerError, ServerOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use pmio_tgt::methods::Rpc;
use pmio_tgt::metrics::MetricsServer;
use pmio_tgt::target::Target;

/// pmio-tgt: reactors + bdevs + JSON-RPC 2.0 on a unix socket (spdk_tgt's flags and methods).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Reactor core mask: hex (0x3 or 3, as spdk_tgt), list [0,1] or ranges 0-3,6.
    #[arg(short = 'm', long = "cpumask", default_value = "0x1")]
    cpumask: String,
    /// RPC listen socket path.
    #[arg(short = 'r', long = "rpc-socket", default_value = "/var/tmp/pmio.sock")]
    rpc_socket: PathBuf,
    /// Start-up configuration in the shape save_config prints (pmio's or SPDK's, unchanged).
    #[arg(short = 'c', long = "json")]
    json: Option<PathBuf>,
    /// Check a configuration without starting anything: print what would be created, mapped,
    /// ignored and refused; exit 0 if it would load, 1 if not.
    #[arg(long = "check-config", value_name = "FILE", conflicts_with = "json")]
    check_config: Option<PathBuf>,
    /// Wait for framework_start_init before initialising (only start-up methods until then).
    #[arg(long = "wait-for-rpc")]
    wait_for_rpc: bool,
    /// File mode of the RPC socket, octal (default 0600: only this user may connect; e.g. 0660
    /// lets the socket's group in).
    #[arg(long = "rpc-socket-mode", default_value = "0600", value_parser = parse_mode)]
    rpc_socket_mode: u32,
    /// Busy-poll instead of sleeping when idle (lower wake-up latency, one core at 100%).
    #[arg(long = "no-interrupt")]
    no_interrupt: bool,
    /// Directory where vhost-user controllers' sockets are created (SPDK's `-S`; default: the
    /// current directory).
    #[arg(short = 'S', long = "vhost-socket-dir")]
    vhost_socket_dir: Option<PathBuf>,
    /// Idle time after which a reactor sleeps until woken (interrupt mode), in microseconds.
    #[arg(long = "idle-sleep-us", default_value_t = 1000)]
    idle_sleep_us: u64,
    /// Serve Prometheus metrics on http://ADDR:PORT/metrics (e.g. 127.0.0.1:9283).
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    metrics_listen: Option<std::net::SocketAddr>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!(
            "\"{s}\" is not an octal file mode from 0000 to 0777"
        )),
    }
}

const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGQUIT, libc::SIGHUP];

/// Blocks the shutdown signals in this thread (and every thread spawned after), so the main
/// thread can take them synchronously with sigwait.
fn block_signals() -> anyhow::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame; the signal numbers are valid.
    let rc = unsafe {
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        bail!("pthread_sigmask: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok(set)
}

fn wait_signal(set: &libc::sigset_t) -> i32 {
    loop {
        let mut sig = 0;
        // SAFETY: `set` is initialised and `sig` is a valid out pointer for the call.
        if unsafe { libc::sigwait(set, &mut sig) } == 0 {
            return sig;
        }
    }
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    if let Some(path) = &args.check_config {
        // No socket, no reactors, no device: safe beside a running SPDK.
        match pmio_config::check::run(path, pmio_tgt::methods::all_methods().names(None)) {
            Ok((report, ok)) => {
                print!("{report}");
                std::process::exit(if ok { 0 } else { 1 });
            }
            Err(e) => {
                eprintln!("pmio-tgt: {e:#}");
                std::process::exit(1);
            }
        }
    }
    if let Err(e) = run(args) {
        eprintln!("pmio-tgt: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let set = block_signals()?;
    let mask = CoreMask::parse(&args.cpumask).with_context(|| format!("-m {}", args.cpumask))?;
    let doc = match &args.json {
        Some(p) => {
            let doc = pmio_config::read(p)?;
            // What pmio cannot create stops us here, before the socket and the reactors.
            let r = config::check::check(
                &doc,
                config::check::World::with_methods(pmio_tgt::methods::all_methods().names(None)),
            );
            if r.count(config::report::Verdict::Refuse) > 0 {
                let refusals: Vec<String> = r.refusals().map(|l| l.describe()).collect();
                bail!(
                    "configuration {} refused, nothing was started:\n  {}\n(pmio-tgt \
                     --check-config {} lists what it creates, maps and ignores)",
                    p.display(),
                    refusals.join("\n  "),
                    p.display()
                );
            }
            doc
        }
        None => pmio_config::Document::default(),
    };
    // Bind first: a live daemon on the socket stops us before anything else starts.
    let server = Server::bind(ServerOptions {
        mode: args.rpc_socket_mode,
        ..ServerOptions::new(&args.rpc_socket)
    })
    .map_err(|e| match e {
        ServerError::InUse(_) => anyhow::anyhow!("{e} with -r"),
        e => e.into(),
    })?;
    let idle_sleep = Duration::from_micros(args.idle_sleep_us);
    let opts = ReactorsOptions {
        interrupt_idle: (!args.no_interrupt).then_some(idle_sleep),
        thread_name_prefix: "reactor".into(),
        ..ReactorsOptions::default()
    };
    let reactors = Reactors::start(mask.clone(), opts)
        .with_context(|| format!("starting reactors on {}", mask.to_list()))?;
    let state = if args.wait_for_rpc {
        RpcState::Startup
    } else {
        RpcState::Runtime
    };
    let target = Arc::new(Target::new(reactors.handle(), state));
    if let Some(dir) = &args.vhost_socket_dir {
        if !dir.is_dir() {
            drop(target);
            let _ = reactors.stop();
            bail!("-S {}: not a directory", dir.display());
        }
        target.vhost.tgt.set_socket_dir(dir);
    }
    let rpc = Arc::new(Rpc::new(
        target.clone(),
        Box::new(|sig| {
            // SAFETY: kill on our own pid with a valid signal number; the signal is blocked in
            // every thread but taken by the main thread's sigwait (SIGKILL cannot be blocked
            // and ends the process, as SPDK's spdk_kill_instance SIGKILL does).
            unsafe { libc::kill(libc::getpid(), sig) };
        }),
    ));
    // framework_set_scheduler "static" goes back to this mode, "dynamic" sleeps idle reactors.
    rpc.settings.set_reactor_mode(ReactorMode {
        interrupt_idle: (!args.no_interrupt).then_some(idle_sleep),
        idle_sleep,
    });
    if args.wait_for_rpc {
        rpc.defer_config(doc);
    } else if let Err(e) = pmio_config::apply(&*rpc, &doc).map(|r| {
        if !doc.calls.is_empty() {
            log::info!("configuration applied: {}", r.totals());
        }
    }) {
        // The load removed what it created; anything else goes before the reactors stop.
        pmio_tgt::shutdown(&rpc);
        drop(rpc);
        drop(target);
        if let Err(s) = reactors.stop() {
            log::warn!("stopping reactors: {s}");
        }
        return Err(anyhow::Error::new(e).context(format!(
            "applying {}",
            args.json
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        )));
    }
    let handle = server.start(rpc.clone())?;
    let metrics = match args.metrics_listen {
        Some(addr) => match MetricsServer::start(addr, target.clone()) {
            Ok(m) => Some(m),
            Err(e) => {
                handle.stop(Duration::from_secs(10));
                pmio_tgt::shutdown(&rpc);
                drop(rpc);
                drop(target);
                let _ = reactors.stop();
                return Err(e);
            }
        },
        None => None,
    };
    log::info!(
        "pmio-tgt {} listening on {} (mode {:04o}), reactors on cores {}{}",
        env!("CARGO_PKG_VERSION"),
        args.rpc_socket.display(),
        args.rpc_socket_mode,
        mask.to_list(),
        if args.wait_for_rpc {
            "; waiting for framework_start_init"
        } else {
            ""
        }
    );
    let sig = wait_signal(&set);
    log::info!("signal {sig} received: shutting down");
    target.bdevs.begin_shutdown();
    drop(metrics);
    handle.stop(Duration::from_secs(10));
    pmio_tgt::shutdown(&rpc);
    drop(rpc);
    drop(target);
    reactors.stop().context("stopping reactors")?;
    log::info!("pmio-tgt stopped");
    Ok(())
}
