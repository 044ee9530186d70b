//! pmio-rpc: send one JSON-RPC method to pmio-tgt and print the result, with SPDK rpc.py's
//! positional arguments, flags and output, so `rpc.py` command lines work by changing the name.
//!
//! `pmio-rpc [-s SOCK] [-t TIMEOUT] METHOD [ARGS…]`. Exit status 1 on an error reply (printed as
//! rpc.py prints it) or a connection failure.

mod client;
mod config;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{Value, json};

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
    /// Wait until start-up has finished.
    FrameworkWaitInit,
    /// The scheduler in effect.
    FrameworkGetScheduler,
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
    /// Stop the daemon.
    #[command(name = "spdk_kill_instance", rename_all = "kebab-case")]
    SpdkKillInstance {
        /// Signal name (SIGTERM, SIGINT, SIGKILL, …).
        sig_name: String,
    },
    #[command(flatten)]
    Reactors(pmio_reactors::rpc::cli::ReactorsCommand),
    #[command(flatten)]
    Null(pmio_null::cli::NullCommand),
    #[command(flatten)]
    Malloc(pmio_malloc::cli::MallocCommand),
    #[command(flatten)]
    Rbd(pmio_rbd::cli::RbdCommand),
    #[command(flatten)]
    Uring(pmio_uring::cli::UringCommand),
    #[command(flatten)]
    Raid(pmio_raid::cli::RaidCommand),
    #[command(flatten)]
    Lvol(pmio_lvol::cli::LvolCommand),
    #[command(flatten)]
    Bdev(pmio_runtime::rpc::cli::BdevCommand),
    #[command(flatten)]
    Nvme(pmio_nvme::cli::NvmeCommand),
    #[command(flatten)]
    Nvmf(pmio_nvmf::cli::NvmfCommand),
    #[command(flatten)]
    Sock(pmio_nvmf::cli::SockCommand),
    #[command(flatten)]
    Vhost(pmio_vhost::cli::VhostCommand),
    #[command(flatten)]
    Ublk(pmio_ublk::cli::UblkCommand),
    #[command(flatten)]
    Keyring(pmio_keyring::cli::KeyringCommand),
}

pub(crate) use pmio_jsonrpc::cli::Print;
use pmio_jsonrpc::cli::Request;
use pmio_jsonrpc::framework::{GetConfig, GetMethods, KillInstance};

/// Method name, params and output style of a simple (one-call) method.
fn request(m: &Method) -> Result<(&'static str, Option<Value>, Print), String> {
    Ok(match m {
        Method::SpdkGetVersion => ("spdk_get_version", None, Print::Json),
        Method::RpcGetMethods {
            current,
            include_aliases,
        } => Request::new(
            "rpc_get_methods",
            &GetMethods {
                current: *current,
                include_aliases: *include_aliases,
            },
            Print::Dict,
        )
        .into_parts(),
        Method::FrameworkStartInit => ("framework_start_init", None, Print::Nothing),
        Method::FrameworkWaitInit => ("framework_wait_init", None, Print::Nothing),
        Method::FrameworkGetScheduler => ("framework_get_scheduler", None, Print::Dict),
        Method::Reactors(m) => m.request().into_parts(),
        Method::FrameworkGetSubsystems => ("framework_get_subsystems", None, Print::Dict),
        Method::FrameworkGetConfig { name } => Request::new(
            "framework_get_config",
            &GetConfig {
                name: name.clone(),
                with_batches: None,
            },
            Print::Dict,
        )
        .into_parts(),
        Method::Null(m) => m.request()?.into_parts(),
        Method::Malloc(m) => m.request()?.into_parts(),
        Method::Lvol(m) => m.request()?.into_parts(),
        Method::Rbd(m) => m.request()?.into_parts(),
        Method::Uring(m) => m.request()?.into_parts(),
        Method::Raid(m) => m.request().into_parts(),
        Method::Bdev(m) => m.request()?.into_parts(),
        Method::SpdkKillInstance { sig_name } => Request::new(
            "spdk_kill_instance",
            &KillInstance {
                sig_name: sig_name.clone(),
            },
            Print::Nothing,
        )
        .into_parts(),
        Method::Nvme(m) => m.request().into_parts(),
        Method::Nvmf(m) => m.request().into_parts(),
        Method::Sock(m) => m.request().into_parts(),
        Method::Vhost(m) => m.request().into_parts(),
        Method::Ublk(m) => m.request().into_parts(),
        Method::Keyring(m) => m.request().into_parts(),
        Method::SaveConfig { .. } | Method::LoadConfig { .. } => {
            return Err("save_config/load_config are client-side sequences".into());
        }
    })
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
        Print::Text(f) => match (f.0)(v) {
            Ok(text) => say(text.trim_end()),
            Err(e) => {
                eprintln!("pmio-rpc: {e}");
                std::process::exit(1);
            }
        },
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

    /// The modules' subcommands reach their own enums (their requests are tested there).
    #[test]
    fn module_subcommands_are_flattened_in() {
        let method = |argv: &[&str]| {
            let mut full = vec!["pmio-rpc"];
            full.extend_from_slice(argv);
            Args::try_parse_from(full).unwrap().method
        };
        assert!(matches!(method(&["nvmf_get_stats"]), Method::Nvmf(_)));
        assert!(matches!(
            method(&["sock_impl_get_options", "-i", "posix"]),
            Method::Sock(_)
        ));
        assert!(matches!(
            method(&["vhost_get_controllers"]),
            Method::Vhost(_)
        ));
        assert!(matches!(method(&["ublk_get_disks"]), Method::Ublk(_)));
        assert_eq!(
            params(&["pmio-rpc", "nvmf_subsystem_remove_ns", "nqn.x", "1"]),
            json!({"nqn": "nqn.x", "nsid": 1})
        );
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
