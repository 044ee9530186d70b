//! pmio-rpc: send one JSON-RPC method to pmio-tgt and print the result, with SPDK rpc.py's
//! positional arguments, flags and output, so `rpc.py` command lines work by changing the name.
//!
//! `pmio-rpc [-s SOCK] [-t TIMEOUT] METHOD [ARGS…]`. Exit status 1 on an error reply (printed as
//! rpc.py prints it) or a connection failure.

mod client;
mod config;
mod nvme;
mod nvmf;
mod sock;
mod vhost;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{Map, Value, json};

use client::{CallError, Client, py_dumps};

/// pmio-rpc: JSON-RPC client for pmio-tgt (SPDK rpc.py's arguments and output).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// RPC socket path.
    #[arg(short = 's', default_value = "/var/tmp/pmio.sock")]
    server_addr: PathBuf,
    /// Seconds to wait for a response.
    #[arg(short = 't', default_value_t = 60.0)]
    timeout: f64,
    /// Retry connecting N times, 0.2 s apart.
    #[arg(short = 'r', default_value_t = 0)]
    conn_retries: u32,
    #[command(subcommand)]
    method: Method,
}

#[derive(Subcommand, Debug)]
#[command(rename_all = "snake_case")]
enum Method {
    /// Get the daemon's version.
    SpdkGetVersion,
    /// List the RPC methods.
    #[command(name = "rpc_get_methods", rename_all = "kebab-case")]
    RpcGetMethods {
        /// Only methods callable in the current state.
        #[arg(short = 'c', long)]
        current: bool,
        /// Include aliases.
        #[arg(short = 'i', long)]
        include_aliases: bool,
    },
    /// Finish start-up (after --wait-for-rpc).
    FrameworkStartInit,
    /// Reactor statistics.
    FrameworkGetReactors,
    /// Per-thread statistics.
    ThreadGetStats,
    /// List subsystems.
    FrameworkGetSubsystems,
    /// A subsystem's configuration.
    #[command(name = "framework_get_config", rename_all = "kebab-case")]
    FrameworkGetConfig {
        /// Subsystem name.
        name: String,
    },
    /// Print the configuration of every subsystem (client-side, as rpc.py).
    #[command(name = "save_config", rename_all = "kebab-case")]
    SaveConfig {
        /// Indent level; a negative value prints compact JSON.
        #[arg(short = 'i', long, default_value_t = 2, allow_negative_numbers = true)]
        indent: i32,
    },
    /// Replay a configuration (from --json-conf or stdin).
    #[command(name = "load_config", rename_all = "kebab-case")]
    LoadConfig {
        /// Include aliases when checking methods.
        #[arg(short = 'i', long)]
        include_aliases: bool,
        /// Configuration file (default: standard input).
        #[arg(short = 'j', long = "json-conf")]
        json_conf: Option<PathBuf>,
    },
    /// Create a null bdev.
    #[command(name = "bdev_null_create", rename_all = "kebab-case")]
    BdevNullCreate {
        /// Bdev name.
        name: String,
        /// Size in MiB.
        total_size: u64,
        /// Block size in bytes.
        block_size: u64,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Physical block size.
        #[arg(short = 'p', long)]
        physical_block_size: Option<u64>,
        /// Metadata size per block (pmio supports 0).
        #[arg(short = 'm', long)]
        md_size: Option<u64>,
        /// DIF type (pmio supports 0).
        #[arg(short = 't', long)]
        dif_type: Option<u64>,
        /// DIF at the head of metadata.
        #[arg(short = 'd', long)]
        dif_is_head_of_md: bool,
    },
    /// Delete a null bdev.
    #[command(name = "bdev_null_delete", rename_all = "kebab-case")]
    BdevNullDelete {
        /// Bdev name.
        name: String,
    },
    /// Create a malloc (RAM) bdev.
    #[command(name = "bdev_malloc_create", rename_all = "kebab-case")]
    BdevMallocCreate {
        /// Size in MiB.
        total_size: f64,
        /// Block size in bytes.
        block_size: u64,
        /// Bdev name (default: Malloc0, Malloc1, …).
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Physical block size.
        #[arg(short = 'p', long)]
        physical_block_size: Option<u64>,
        /// Optimal I/O boundary in blocks.
        #[arg(short = 'o', long)]
        optimal_io_boundary: Option<u64>,
        /// Metadata size per block.
        #[arg(short = 'm', long)]
        md_size: Option<u64>,
        /// Interleave metadata.
        #[arg(short = 'i', long)]
        md_interleave: bool,
        /// DIF type.
        #[arg(short = 't', long)]
        dif_type: Option<u64>,
        /// DIF at the head of metadata.
        #[arg(short = 'd', long)]
        dif_is_head_of_md: bool,
    },
    /// Delete a malloc bdev.
    #[command(name = "bdev_malloc_delete", rename_all = "kebab-case")]
    BdevMallocDelete {
        /// Bdev name.
        name: String,
    },
    /// Create a bdev on a file or block device through io_uring.
    #[command(name = "bdev_uring_create", rename_all = "kebab-case")]
    BdevUringCreate {
        /// File or block device path.
        filename: String,
        /// Bdev name.
        name: String,
        /// Block size (default: the device's logical block size; for files the file
        /// system's direct-I/O alignment).
        block_size: Option<u64>,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Buffered I/O instead of O_DIRECT (pmio; for file systems without O_DIRECT).
        #[arg(long)]
        buffered: bool,
    },
    /// Delete a uring bdev.
    #[command(name = "bdev_uring_delete", rename_all = "kebab-case")]
    BdevUringDelete {
        /// Bdev name.
        name: String,
    },
    /// List bdevs, or one.
    #[command(name = "bdev_get_bdevs", rename_all = "kebab-case")]
    BdevGetBdevs {
        /// Bdev name (or UUID).
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// Milliseconds to wait for the bdev.
        #[arg(short = 't', long)]
        timeout: Option<u64>,
    },
    /// I/O statistics of bdevs.
    #[command(name = "bdev_get_iostat", rename_all = "kebab-case")]
    BdevGetIostat {
        /// Bdev name.
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// Per-channel statistics (pmio: not supported).
        #[arg(short = 'c', long)]
        per_channel: bool,
    },
    /// Select a bdev's I/O scheduler and its tunables (pmio; Linux's iosched names, ms).
    #[command(name = "bdev_set_scheduler", rename_all = "kebab-case")]
    BdevSetScheduler {
        /// Bdev name.
        name: String,
        /// none or mq-deadline.
        scheduler: String,
        /// Read deadline, ms.
        #[arg(long)]
        read_expire: Option<u64>,
        /// Write deadline, ms.
        #[arg(long)]
        write_expire: Option<u64>,
        /// Read batches served before waiting writes.
        #[arg(long)]
        writes_starved: Option<u64>,
        /// Front merges (0 or 1).
        #[arg(long)]
        front_merges: Option<u64>,
        /// Requests dispatched in one sequential batch.
        #[arg(long)]
        fifo_batch: Option<u64>,
        /// Age after which lower-priority requests are served, ms.
        #[arg(long)]
        prio_aging_expire: Option<u64>,
        /// Shallow tag depth for asynchronous requests.
        #[arg(long)]
        async_depth: Option<u64>,
        /// Scheduler tags.
        #[arg(long)]
        nr_requests: Option<u64>,
    },
    /// Scheduler, tunables and per-priority counters of bdevs (pmio).
    #[command(name = "bdev_get_scheduler", rename_all = "kebab-case")]
    BdevGetScheduler {
        /// Bdev name.
        #[arg(short = 'b', long)]
        name: Option<String>,
    },
    /// Run a bdevperf-style workload inside the daemon (pmio).
    #[command(name = "perform_tests", rename_all = "kebab-case")]
    PerformTests {
        /// Bdev to run on (repeat for several; default: every bdev).
        #[arg(short = 'b', long = "bdev")]
        bdevs: Vec<String>,
        /// Workload: read, write, randread, randwrite, rw, randrw.
        #[arg(short = 'w', long = "rw", default_value = "randread")]
        rw: String,
        /// Queue depth per bdev.
        #[arg(short = 'q', long = "depth", default_value_t = 32)]
        depth: u32,
        /// I/O size in bytes.
        #[arg(short = 'o', long = "size", default_value_t = 4096)]
        size: u64,
        /// Run time in seconds.
        #[arg(short = 't', long = "seconds", default_value_t = 5.0)]
        seconds: f64,
        /// Read percentage for rw/randrw.
        #[arg(short = 'M', long)]
        rwmixread: Option<u32>,
        /// One job per reactor on each bdev (bdevperf's -C).
        #[arg(short = 'C', long)]
        every_core: bool,
    },
    /// Stop the daemon.
    #[command(name = "spdk_kill_instance", rename_all = "kebab-case")]
    SpdkKillInstance {
        /// Signal name (SIGTERM, SIGINT, SIGKILL, …).
        sig_name: String,
    },
    #[command(flatten)]
    Nvme(nvme::NvmeMethod),
    #[command(flatten)]
    Nvmf(nvmf::NvmfMethod),
    #[command(flatten)]
    Sock(sock::SockMethod),
    #[command(flatten)]
    Vhost(vhost::VhostMethod),
}

/// How rpc.py prints a method's result.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Print {
    /// `print_dict`: indent-2 JSON.
    Dict,
    /// `print_json`: indent-2 JSON with surrounding quotes stripped (strings print bare).
    Json,
    /// `print_array`: elements space-separated.
    Array,
    /// Nothing (delete/detach/kill return `true`).
    Nothing,
}

fn obj(pairs: Vec<(&str, Option<Value>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    }
    Value::Object(m)
}

fn some<T: Into<Value>>(v: T) -> Option<Value> {
    Some(v.into())
}

fn opt<T: Into<Value>>(v: Option<T>) -> Option<Value> {
    v.map(Into::into)
}

/// Method name, params and output style of a simple (one-call) method.
fn request(m: &Method) -> Result<(&'static str, Option<Value>, Print), String> {
    Ok(match m {
        Method::SpdkGetVersion => ("spdk_get_version", None, Print::Json),
        Method::RpcGetMethods {
            current,
            include_aliases,
        } => (
            "rpc_get_methods",
            Some(obj(vec![
                ("current", some(*current)),
                ("include_aliases", some(*include_aliases)),
            ])),
            Print::Dict,
        ),
        Method::FrameworkStartInit => ("framework_start_init", None, Print::Nothing),
        Method::FrameworkGetReactors => ("framework_get_reactors", None, Print::Dict),
        Method::ThreadGetStats => ("thread_get_stats", None, Print::Dict),
        Method::FrameworkGetSubsystems => ("framework_get_subsystems", None, Print::Dict),
        Method::FrameworkGetConfig { name } => (
            "framework_get_config",
            Some(json!({ "name": name })),
            Print::Dict,
        ),
        Method::BdevNullCreate {
            name,
            total_size,
            block_size,
            uuid,
            physical_block_size,
            md_size,
            dif_type,
            dif_is_head_of_md,
        } => {
            let num_blocks = mib_to_blocks(*total_size as f64, *block_size)?;
            (
                "bdev_null_create",
                Some(obj(vec![
                    ("num_blocks", some(num_blocks)),
                    ("block_size", some(*block_size)),
                    ("physical_block_size", opt(*physical_block_size)),
                    ("name", some(name.clone())),
                    ("uuid", opt(uuid.clone())),
                    ("md_size", opt(*md_size)),
                    ("dif_type", opt(*dif_type)),
                    ("dif_is_head_of_md", some(*dif_is_head_of_md)),
                ])),
                Print::Json,
            )
        }
        Method::BdevNullDelete { name } => (
            "bdev_null_delete",
            Some(json!({ "name": name })),
            Print::Nothing,
        ),
        Method::BdevMallocCreate {
            total_size,
            block_size,
            name,
            uuid,
            physical_block_size,
            optimal_io_boundary,
            md_size,
            md_interleave,
            dif_type,
            dif_is_head_of_md,
        } => {
            let num_blocks = mib_to_blocks(*total_size, *block_size)?;
            (
                "bdev_malloc_create",
                Some(obj(vec![
                    ("num_blocks", some(num_blocks)),
                    ("block_size", some(*block_size)),
                    ("physical_block_size", opt(*physical_block_size)),
                    ("name", opt(name.clone())),
                    ("uuid", opt(uuid.clone())),
                    ("optimal_io_boundary", opt(*optimal_io_boundary)),
                    ("md_size", opt(*md_size)),
                    ("md_interleave", some(*md_interleave)),
                    ("dif_type", opt(*dif_type)),
                    ("dif_is_head_of_md", some(*dif_is_head_of_md)),
                ])),
                Print::Json,
            )
        }
        Method::BdevMallocDelete { name } => (
            "bdev_malloc_delete",
            Some(json!({ "name": name })),
            Print::Nothing,
        ),
        Method::BdevUringCreate {
            filename,
            name,
            block_size,
            uuid,
            buffered,
        } => (
            "bdev_uring_create",
            Some(obj(vec![
                ("filename", some(filename.clone())),
                ("name", some(name.clone())),
                ("block_size", opt(*block_size)),
                ("uuid", opt(uuid.clone())),
                ("direct", buffered.then_some(Value::Bool(false))),
            ])),
            Print::Json,
        ),
        Method::BdevUringDelete { name } => (
            "bdev_uring_delete",
            Some(json!({ "name": name })),
            Print::Nothing,
        ),
        Method::BdevGetBdevs { name, timeout } => (
            "bdev_get_bdevs",
            Some(obj(vec![
                ("name", opt(name.clone())),
                ("timeout", opt(*timeout)),
            ])),
            Print::Dict,
        ),
        Method::BdevGetIostat { name, per_channel } => (
            "bdev_get_iostat",
            Some(obj(vec![
                ("name", opt(name.clone())),
                ("per_channel", some(*per_channel)),
            ])),
            Print::Dict,
        ),
        Method::BdevSetScheduler {
            name,
            scheduler,
            read_expire,
            write_expire,
            writes_starved,
            front_merges,
            fifo_batch,
            prio_aging_expire,
            async_depth,
            nr_requests,
        } => (
            "bdev_set_scheduler",
            Some(obj(vec![
                ("name", some(name.clone())),
                ("scheduler", some(scheduler.clone())),
                ("read_expire", opt(*read_expire)),
                ("write_expire", opt(*write_expire)),
                ("writes_starved", opt(*writes_starved)),
                ("front_merges", opt(*front_merges)),
                ("fifo_batch", opt(*fifo_batch)),
                ("prio_aging_expire", opt(*prio_aging_expire)),
                ("async_depth", opt(*async_depth)),
                ("nr_requests", opt(*nr_requests)),
            ])),
            Print::Nothing,
        ),
        Method::BdevGetScheduler { name } => (
            "bdev_get_scheduler",
            Some(obj(vec![("name", opt(name.clone()))])),
            Print::Dict,
        ),
        Method::PerformTests {
            bdevs,
            rw,
            depth,
            size,
            seconds,
            rwmixread,
            every_core,
        } => (
            "perform_tests",
            Some(obj(vec![
                ("bdevs", (!bdevs.is_empty()).then(|| json!(bdevs))),
                ("rw", some(rw.clone())),
                ("depth", some(*depth)),
                ("size", some(*size)),
                ("seconds", some(*seconds)),
                ("rwmixread", opt(*rwmixread)),
                ("every_core", every_core.then_some(json!(true))),
            ])),
            Print::Dict,
        ),
        Method::SpdkKillInstance { sig_name } => (
            "spdk_kill_instance",
            Some(json!({ "sig_name": sig_name })),
            Print::Nothing,
        ),
        Method::Nvme(m) => nvme::request(m),
        Method::Nvmf(m) => nvmf::request(m),
        Method::Sock(m) => sock::request(m),
        Method::Vhost(m) => vhost::request(m),
        Method::SaveConfig { .. } | Method::LoadConfig { .. } => {
            return Err("save_config/load_config are client-side sequences".into());
        }
    })
}

/// rpc.py's `(total_size * 1024 * 1024) // block_size`.
fn mib_to_blocks(total_mib: f64, block_size: u64) -> Result<u64, String> {
    if block_size == 0 {
        return Err("block_size must not be 0".into());
    }
    if !(total_mib.is_finite() && total_mib >= 0.0) {
        return Err(format!("invalid total_size {total_mib}"));
    }
    Ok(((total_mib * 1024.0 * 1024.0) as u64) / block_size)
}

/// One line on stdout. A reader that went away (`pmio-rpc ... | grep -q`) ends the program
/// quietly, as a shell tool does on SIGPIPE, instead of `println!`'s panic.
pub(crate) fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("pmio-rpc: cannot write the result: {e}");
        std::process::exit(1);
    }
}

fn print_result(v: &Value, how: Print) {
    match how {
        Print::Nothing => {}
        Print::Dict => say(py_dumps(v)),
        Print::Json => {
            let s = py_dumps(v);
            say(s.trim_matches('"'));
        }
        Print::Array => {
            let items: Vec<String> = match v.as_array() {
                Some(a) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| x.to_string())
                    })
                    .collect(),
                None => vec![v.to_string()],
            };
            say(items.join(" "));
        }
    }
}

/// Python's `json.dump(config, fd, indent=indent)`: indent < 0 is compact (`", "`, `": "`).
fn dump_indent(v: &Value, indent: i32) -> String {
    if indent < 0 {
        return py_compact(v);
    }
    let pad = " ".repeat(indent as usize);
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(v, &mut ser).expect("serialising JSON");
    client::ascii_escape(String::from_utf8(out).expect("JSON is UTF-8"))
}

/// `json.dumps(v)` without indent: `", "` and `": "` separators.
fn py_compact(v: &Value) -> String {
    match v {
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_compact).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), py_compact(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

fn save_config(c: &mut Client, indent: i32) -> Result<(), CallError> {
    let subsystems = c.call("framework_get_subsystems", None)?;
    let mut out = Vec::new();
    for s in subsystems.as_array().into_iter().flatten() {
        let name = s.get("subsystem").cloned().unwrap_or(Value::Null);
        let config = c.call("framework_get_config", Some(json!({ "name": name })))?;
        out.push(json!({"subsystem": name, "config": config}));
    }
    say(dump_indent(&json!({ "subsystems": out }), indent));
    Ok(())
}

fn connect(args: &Args) -> Result<Client, CallError> {
    let timeout = Duration::try_from_secs_f64(args.timeout.max(0.0)).unwrap_or(Duration::ZERO);
    let mut last = None;
    for _ in 0..args.conn_retries {
        match Client::connect(&args.server_addr, timeout) {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = last;
    Client::connect(&args.server_addr, timeout)
}

fn run(args: &Args) -> Result<(), CallError> {
    let mut c = connect(args)?;
    match &args.method {
        Method::SaveConfig { indent } => save_config(&mut c, *indent),
        Method::LoadConfig {
            include_aliases,
            json_conf,
        } => config::load_config(&mut c, *include_aliases, json_conf.as_ref()),
        m => {
            let (method, params, how) = request(m).map_err(CallError::Transport)?;
            let r = c.call(method, params)?;
            print_result(&r, how);
            Ok(())
        }
    }
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    if let Err(e) = run(&args) {
        say(e.render());
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(argv: &[&str]) -> Value {
        let a = Args::try_parse_from(argv).unwrap();
        request(&a.method).unwrap().1.unwrap()
    }

    #[test]
    fn sock_flag_pairs_send_the_later_one_or_nothing() {
        let p = params(&[
            "pmio-rpc",
            "sock_impl_set_options",
            "-i",
            "posix",
            "-r",
            "4096",
            "--enable-quickack",
            "--disable-quickack",
            "--disable-zerocopy-send-server",
            "--enable-zerocopy-send-server",
        ]);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"impl_name":"posix","recv_buf_size":4096,"enable_quickack":false,"enable_zerocopy_send_server":true}"#
        );
        let p = params(&["pmio-rpc", "sock_impl_get_options", "-i", "posix"]);
        assert_eq!(p, serde_json::json!({"impl_name": "posix"}));
    }

    #[test]
    fn null_create_converts_mib_to_blocks() {
        let p = params(&["pmio-rpc", "bdev_null_create", "Null0", "64", "512"]);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"num_blocks":131072,"block_size":512,"name":"Null0","dif_is_head_of_md":false}"#
        );
    }

    #[test]
    fn malloc_create_matches_rpc_py() {
        let p = params(&[
            "pmio-rpc",
            "bdev_malloc_create",
            "-b",
            "Malloc0",
            "64",
            "512",
        ]);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"num_blocks":131072,"block_size":512,"name":"Malloc0","md_interleave":false,"dif_is_head_of_md":false}"#
        );
    }

    #[test]
    fn global_options_and_simple_methods() {
        let a = Args::try_parse_from([
            "pmio-rpc",
            "-s",
            "/tmp/x.sock",
            "-t",
            "5",
            "bdev_get_bdevs",
            "-b",
            "Null0",
        ])
        .unwrap();
        assert_eq!(a.server_addr, PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.timeout, 5.0);
        assert_eq!(
            request(&a.method).unwrap().1.unwrap(),
            json!({"name": "Null0"})
        );
        let a = Args::try_parse_from(["pmio-rpc", "spdk_get_version"]).unwrap();
        assert_eq!(request(&a.method).unwrap().1, None);
        assert_eq!(
            params(&["pmio-rpc", "bdev_get_iostat"]),
            json!({"per_channel": false})
        );
        assert_eq!(
            params(&["pmio-rpc", "spdk_kill_instance", "SIGTERM"]),
            json!({"sig_name": "SIGTERM"})
        );
    }

    #[test]
    fn compact_dump_uses_python_separators() {
        assert_eq!(
            dump_indent(&json!({"a": [1, {"b": null}]}), -1),
            r#"{"a": [1, {"b": null}]}"#
        );
        assert_eq!(
            dump_indent(&json!({"a": [1]}), 4),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }
}
