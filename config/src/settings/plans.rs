//! The planning functions of SPDK's settings methods: each decodes its call's keys into
//! [`Note`]s (mapped, same, ignored with why) and an [`Effect`], with no side effect.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{Effect, Note, NoteKind, NvmeDefaults, Plan, SchedChoice, SockChange};
use pmio_jsonrpc::{RpcError, code};
use pmio_nvme::rpc::Reconnect;

/// A call's parameters taken key by key; whatever is left over is ignored with a note.
struct Keys {
    map: Map<String, Value>,
    notes: Vec<Note>,
    method: &'static str,
}

impl Keys {
    fn new(method: &'static str, params: Option<&Value>) -> Result<Keys, RpcError> {
        let map = match params {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(RpcError::decode("params must be an object")),
        };
        Ok(Keys {
            map,
            notes: Vec::new(),
            method,
        })
    }

    /// A key of type `T` (a wrong type is an error: the file is broken).
    fn take<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, RpcError> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v).map(Some).map_err(|e| {
                RpcError::decode(format_args!("{}: parameter \"{key}\": {e}", self.method))
            }),
        }
    }

    fn note(&mut self, kind: NoteKind, key: &str, text: impl Into<String>) {
        self.notes.push(Note {
            kind,
            key: key.to_string(),
            text: text.into(),
        });
    }

    fn mapped(&mut self, key: &str, text: impl Into<String>) {
        self.note(NoteKind::Mapped, key, text);
    }

    fn same(&mut self, key: &str, text: impl Into<String>) {
        self.note(NoteKind::Same, key, text);
    }

    fn ignored(&mut self, key: &str, text: impl Into<String>) {
        self.note(NoteKind::Ignored, key, text);
    }

    /// Keys that only matter away from SPDK's default `default`: ignored with `why` when set
    /// to something else.
    fn ignore_unless<T>(&mut self, keys: &[&str], default: T, why: &str) -> Result<(), RpcError>
    where
        T: DeserializeOwned + PartialEq + std::fmt::Display,
    {
        for k in keys {
            if let Some(v) = self.take::<T>(k)?
                && v != default
            {
                self.ignored(k, format!("{v}: {why}"));
            }
        }
        Ok(())
    }

    /// Keys ignored whatever their value (checked to be JSON of the right kind only).
    fn ignore_any(&mut self, keys: &[&str], why: &str) -> Result<(), RpcError> {
        for k in keys {
            if let Some(v) = self.take::<Value>(k)? {
                self.ignored(k, format!("{v}: {why}"));
            }
        }
        Ok(())
    }

    /// Ends decoding: unknown keys are dropped with a note.
    fn finish(mut self, effect: Effect) -> Plan {
        let rest: Vec<(String, Value)> = std::mem::take(&mut self.map).into_iter().collect();
        for (k, v) in rest {
            self.ignored(
                &k,
                format!(
                    "{v}: not a {} key pmio knows (a newer SPDK's?)",
                    self.method
                ),
            );
        }
        Plan {
            notes: self.notes,
            effect,
        }
    }
}

fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

// --- bdev ---

/// Why a transport knob means nothing to pmio.
const NO_KNOB: &str = "pmio's NVMe/TCP host has no such knob (and pmio has no RDMA)";

/// `bdev_nvme_set_options`: timeouts and retry counts map onto the VFIO driver's options of
/// controllers attached afterwards; the reconnect knobs and the keep-alive timeout onto
/// NVMe/TCP controllers attached afterwards; other transport knobs are ignored.
pub fn bdev_nvme_set_options(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("bdev_nvme_set_options", params)?;
    let mut d = NvmeDefaults::default();
    let action: Option<String> = k.take("action_on_timeout")?;
    let timeout_us: Option<u64> = k.take("timeout_us")?;
    match (timeout_us.unwrap_or(0), action.as_deref().unwrap_or("none")) {
        (_, a) if !matches!(a, "none" | "abort" | "reset") => {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "bdev_nvme_set_options: action_on_timeout \"{a}\" is not none, abort or reset"
                ),
            ));
        }
        (0, "none") => {}
        (0, a) => k.same(
            "action_on_timeout",
            format!("{a} without timeout_us never fires; pmio keeps its I/O timeout (30 s)"),
        ),
        (t, "none") => k.ignored(
            "timeout_us",
            format!(
                "{t} with action none only logged slow commands; pmio cannot just log, it keeps \
                 its recovery (30 s, abort then reset)"
            ),
        ),
        (t, a) => {
            d.io_timeout = Some(us(t));
            k.mapped(
                "timeout_us",
                format!(
                    "{t} with action {a} -> NVMe I/O timeout {}: pmio aborts the command, then \
                     resets the controller if the abort fails",
                    secs(us(t))
                ),
            );
        }
    }
    if let Some(t) = k.take::<u64>("timeout_admin_us")?
        && t != 0
    {
        d.admin_timeout = Some(us(t));
        k.mapped(
            "timeout_admin_us",
            format!("{t} -> admin command timeout {}", secs(us(t))),
        );
    }
    if let Some(n) = k.take::<i64>("transport_retry_count")?
        && n != 4
    {
        let v = u8::try_from(n).map_err(|_| {
            RpcError::new(
                code::INVALID_PARAMS,
                format!("bdev_nvme_set_options: transport_retry_count {n} is not 0..=255"),
            )
        })?;
        d.io_retries = Some(v);
        k.mapped(
            "transport_retry_count",
            format!("{n} -> retries of a command with a retryable status: {v}"),
        );
    }
    if let Some(n) = k.take::<i64>("bdev_retry_count")?
        && n != 3
    {
        let v = match n {
            -1 => u8::MAX,
            0..=255 => n as u8,
            _ => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("bdev_nvme_set_options: bdev_retry_count {n} is not -1..=255"),
                ));
            }
        };
        d.recovery_retries = Some(v);
        let infinite = if n == -1 {
            " (SPDK's -1, retry forever: pmio stops at 255)"
        } else {
            ""
        };
        k.mapped(
            "bdev_retry_count",
            format!("{n} -> resubmissions after a timeout or reset: {v}{infinite}"),
        );
    }
    match k.take::<u64>("nvme_adminq_poll_period_us")? {
        None | Some(10_000) => {}
        Some(0) => k.ignored(
            "nvme_adminq_poll_period_us",
            "0 would read the controller's status on every poll; pmio keeps 10 ms",
        ),
        Some(t) => {
            d.health_check_interval = Some(us(t));
            k.mapped(
                "nvme_adminq_poll_period_us",
                format!("{t} -> controller health check every {}", secs(us(t))),
            );
        }
    }
    k.ignore_unless(
        &["nvme_ioq_poll_period_us"],
        0u64,
        "pmio polls I/O queues on every reactor turn",
    )?;
    k.ignore_unless(
        &["io_queue_requests"],
        0u64,
        "pmio sizes each queue's requests to its depth",
    )?;
    k.ignore_unless(
        &["delay_cmd_submit"],
        true,
        "pmio writes a queue's doorbell once per submission batch",
    )?;
    k.ignore_unless(
        &[
            "arbitration_burst",
            "low_priority_weight",
            "medium_priority_weight",
            "high_priority_weight",
        ],
        0u64,
        "pmio leaves the controller in round-robin arbitration",
    )?;
    fabrics_knobs(&mut k, &mut d)?;
    k.ignore_unless(
        &[
            "transport_ack_timeout",
            "transport_tos",
            "tcp_connect_timeout_ms",
            "rdma_srq_size",
            "rdma_max_cq_size",
            "rdma_cm_event_timeout_ms",
        ],
        0u64,
        NO_KNOB,
    )?;
    k.ignore_unless(
        &["disable_auto_failback", "rdma_umr_per_io"],
        false,
        NO_KNOB,
    )?;
    k.ignore_unless(
        &["nvme_error_stat", "io_path_stat"],
        false,
        "pmio keeps no per-status or per-path statistics",
    )?;
    k.ignore_unless(
        &["allow_accel_sequence"],
        false,
        "pmio has no accel framework",
    )?;
    if k.take::<bool>("generate_uuids")? == Some(true) {
        k.same(
            "generate_uuids",
            "pmio always gives a namespace bdev a UUID: its NGUID, else one derived from serial, \
             model and NSID",
        );
    }
    if k.take::<bool>("enable_flush")? == Some(true) {
        k.same("enable_flush", "pmio sends Flush to NVMe controllers");
    }
    dhchap_lists(&mut k)?;
    k.same(
        "",
        "for controllers attached from now on; keys at SPDK's defaults keep pmio's own",
    );
    let saved = params.cloned().unwrap_or_else(|| json!({}));
    Ok(k.finish(Effect::Nvme { defaults: d, saved }))
}

/// The reconnect knobs (SPDK's rules: refused when they do not fit together) and the
/// keep-alive timeout, for NVMe/TCP controllers attached afterwards.
fn fabrics_knobs(k: &mut Keys, d: &mut NvmeDefaults) -> Result<(), RpcError> {
    let r = Reconnect {
        ctrlr_loss_timeout_sec: k.take("ctrlr_loss_timeout_sec")?,
        reconnect_delay_sec: k.take("reconnect_delay_sec")?,
        fast_io_fail_timeout_sec: k.take("fast_io_fail_timeout_sec")?,
    };
    let (loss, delay, fail) = (
        r.ctrlr_loss_timeout_sec.unwrap_or(0),
        r.reconnect_delay_sec.unwrap_or(0),
        r.fast_io_fail_timeout_sec.unwrap_or(0),
    );
    let tcp = pmio_nvme::tcp::TcpOptions {
        ctrlr_loss_timeout_sec: loss,
        reconnect_delay_sec: delay,
        fast_io_fail_timeout_sec: fail,
        ..Default::default()
    };
    tcp.validate()
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("bdev_nvme_set_options: {e}")))?;
    if loss != 0 {
        d.reconnect = r;
        let lost = match loss {
            -1 => "reconnect forever".to_string(),
            l => format!("give up after {l} s"),
        };
        let held = match fail {
            0 => "held I/O waits for the reconnect".to_string(),
            f => format!("held I/O fails after {f} s"),
        };
        k.mapped(
            "ctrlr_loss_timeout_sec",
            format!(
                "{loss}, reconnect_delay_sec {delay}, fast_io_fail_timeout_sec {fail} -> \
                 NVMe/TCP controllers attached from now on retry a lost connection every \
                 {delay} s and {lost}; {held}"
            ),
        );
    }
    if let Some(ms) = k.take::<u32>("keep_alive_timeout_ms")?
        && ms != 10_000
    {
        d.keep_alive_timeout_ms = Some(ms);
        k.mapped(
            "keep_alive_timeout_ms",
            format!("{ms} -> keep-alive timeout of NVMe/TCP controllers attached from now on"),
        );
    }
    Ok(())
}

/// SPDK's default DH-HMAC-CHAP lists (every digest and group).
const DHCHAP_DIGESTS: [&str; 3] = ["sha256", "sha384", "sha512"];
const DHCHAP_DHGROUPS: [&str; 6] = [
    "null",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
];

/// `dhchap_digests` / `dhchap_dhgroups` of `bdev_nvme_set_options`: pmio's host offers every
/// hash and group; other lists are ignored.
fn dhchap_lists(k: &mut Keys) -> Result<(), RpcError> {
    for (key, all) in [
        ("dhchap_digests", &DHCHAP_DIGESTS[..]),
        ("dhchap_dhgroups", &DHCHAP_DHGROUPS[..]),
    ] {
        if let Some(v) = k.take::<Vec<String>>(key)?
            && v != all
        {
            k.ignored(
                key,
                format!("{v:?}: pmio's host offers every DH-HMAC-CHAP hash and group"),
            );
        }
    }
    Ok(())
}

/// `nvmf_set_config`'s `dhchap_digests` / `dhchap_dhgroups`: what the target's in-band
/// authentication may choose from (SPDK's names; an unknown one is refused, as SPDK does).
fn dhchap_policy(k: &mut Keys) -> Result<Option<pmio_nvmf::DhchapPolicy>, RpcError> {
    use pmio_auth::crypto::{DhGroup, Hash};
    let bad = |what: &str, n: &str| {
        RpcError::new(
            code::INVALID_PARAMS,
            format!("{what} {n:?} is not one of SPDK's names"),
        )
    };
    let digests = k.take::<Vec<String>>("dhchap_digests")?;
    let groups = k.take::<Vec<String>>("dhchap_dhgroups")?;
    if digests.is_none() && groups.is_none() {
        return Ok(None);
    }
    let mut p = pmio_nvmf::DhchapPolicy::default();
    if let Some(d) = digests {
        p.digests = d
            .iter()
            .map(|n| Hash::from_name(n).ok_or_else(|| bad("digest", n)))
            .collect::<Result<_, _>>()?;
        k.mapped(
            "dhchap_digests",
            format!("{d:?}: the hashes hosts may authenticate with"),
        );
    }
    if let Some(g) = groups {
        p.dhgroups = g
            .iter()
            .map(|n| DhGroup::from_name(n).ok_or_else(|| bad("dhgroup", n)))
            .collect::<Result<_, _>>()?;
        k.mapped(
            "dhchap_dhgroups",
            format!("{g:?}: the DH groups hosts may use"),
        );
    }
    if p.digests.is_empty() || p.dhgroups.is_empty() {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "DH-HMAC-CHAP needs at least one digest and one DH group",
        ));
    }
    Ok(Some(p))
}

/// `bdev_nvme_set_hotplug`: pmio has no hot-plug poller.
pub fn bdev_nvme_set_hotplug(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("bdev_nvme_set_hotplug", params)?;
    let enable: Option<bool> = k.take("enable")?;
    let period: Option<u64> = k.take("period_us")?;
    if enable == Some(true) {
        let every = period.map(|p| format!(" every {p} us")).unwrap_or_default();
        k.ignored(
            "enable",
            format!(
                "true{every}: pmio does not look for inserted controllers; attach them with \
                 bdev_nvme_attach_controller"
            ),
        );
    } else {
        k.same(
            "enable",
            "false: pmio has no hot-plug poller; controllers come from bdev_nvme_attach_controller",
        );
    }
    Ok(k.finish(Effect::None))
}

/// `bdev_wait_for_examine`: a barrier that pmio's bdevs pass at once.
pub fn bdev_wait_for_examine(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("bdev_wait_for_examine", params)?;
    k.same(
        "",
        "pmio examines a bdev (for an lvstore) before its create method answers: a bdev and \
         the lvols on it are ready once it has answered",
    );
    Ok(k.finish(Effect::None))
}

// --- scheduler ---

/// `framework_set_scheduler`: `static` keeps the reactors' mode, `dynamic` puts them in
/// interrupt mode (SPDK's dynamic scheduler gathers idle work to free cores; pmio never moves
/// work, so an idle reactor sleeps instead).
pub fn framework_set_scheduler(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("framework_set_scheduler", params)?;
    let name: Option<String> = k.take("name")?;
    let Some(name) = name else {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "framework_set_scheduler: missing required parameter \"name\"",
        ));
    };
    k.ignore_unless(
        &["period"],
        0u64,
        "pmio has no scheduling period: it never moves work between reactors",
    )?;
    let choice = match name.as_str() {
        "static" | "gscheduler" => {
            k.same(
                "name",
                format!(
                    "{name}: pmio never moves work between reactors; each keeps the mode the \
                     command line gave it (interrupt mode unless --no-interrupt)"
                ),
            );
            if name == "gscheduler" {
                k.ignored(
                    "name",
                    "gscheduler's governor: pmio does not change CPU frequencies",
                );
            }
            k.ignore_any(&["mappings"], "pmio places work on reactors itself")?;
            SchedChoice::Static
        }
        "dynamic" => {
            k.mapped(
                "name",
                "dynamic -> interrupt mode on every reactor: an idle reactor sleeps until work \
                 arrives (SPDK's dynamic scheduler frees idle cores)",
            );
            k.ignore_any(
                &["load_limit", "core_limit", "core_busy"],
                "pmio does not move work between reactors; idle ones sleep",
            )?;
            SchedChoice::Dynamic
        }
        other => {
            return Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!(
                    "No such file or directory: no scheduler \"{other}\" (SPDK's are static, \
                     dynamic and gscheduler)"
                ),
            ));
        }
    };
    let saved = params.cloned().unwrap_or_else(|| json!({}));
    Ok(k.finish(Effect::Scheduler { choice, saved }))
}

// --- sock ---

/// SPDK's `sock_rpc.c` answers every parameter its sock methods cannot decode with
/// -32602 "Invalid parameters" (the bdev methods' -32603 is not theirs).
fn sock_invalid_params(e: RpcError) -> RpcError {
    if e.code != code::INTERNAL_ERROR {
        return e;
    }
    let detail = e
        .message
        .strip_prefix("spdk_json_decode_object failed: ")
        .unwrap_or(&e.message);
    RpcError::new(
        code::INVALID_PARAMS,
        format!("Invalid parameters: {detail}"),
    )
}

/// `sock_set_default_impl`: pmio's sockets are posix sockets.
pub fn sock_set_default_impl(params: Option<&Value>) -> Result<Plan, RpcError> {
    sock_default_impl_plan(params).map_err(sock_invalid_params)
}

fn sock_default_impl_plan(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("sock_set_default_impl", params)?;
    match k.take::<String>("impl_name")?.as_deref() {
        Some("posix") => k.same(
            "impl_name",
            "posix: pmio's NVMe/TCP sockets are posix sockets",
        ),
        Some(other) => k.ignored(
            "impl_name",
            format!("{other}: pmio's NVMe/TCP sockets are posix sockets"),
        ),
        None => {
            return Err(RpcError::decode(
                "sock_set_default_impl: missing required parameter \"impl_name\"",
            ));
        }
    }
    Ok(k.finish(Effect::None))
}

/// `sock_impl_set_options`: for `posix`, buffer sizes and TCP_QUICKACK map onto the NVMe/TCP
/// target's [`pmio_nvmf::SockOptions`] for connections accepted from then on (SPDK's rule: open
/// connections keep theirs); the receive pipe is what pmio does; zero-copy, placement and TLS
/// have no counterpart. Other implementations' options (ssl, uring) do not apply.
pub fn sock_impl_set_options(params: Option<&Value>) -> Result<Plan, RpcError> {
    sock_options_plan(params).map_err(sock_invalid_params)
}

fn sock_options_plan(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("sock_impl_set_options", params)?;
    let Some(imp) = k.take::<String>("impl_name")? else {
        return Err(RpcError::decode(
            "sock_impl_set_options: missing required parameter \"impl_name\"",
        ));
    };
    if imp != "posix" {
        let why = if imp == "ssl" {
            "pmio's TLS is a listener's secure channel (nvmf_subsystem_add_listener \
             --secure-channel), not a socket implementation"
                .to_string()
        } else {
            format!("pmio's NVMe/TCP sockets are posix sockets, not {imp}")
        };
        k.ignored("impl_name", format!("{imp}: {why}"));
        k.map.clear();
        return Ok(k.finish(Effect::None));
    }
    let mut change = SockChange::default();
    for (key, opt, field) in [
        ("recv_buf_size", "SO_RCVBUF", &mut change.recv_buf_size),
        ("send_buf_size", "SO_SNDBUF", &mut change.send_buf_size),
    ] {
        if let Some(v) = k.take::<u32>(key)? {
            *field = Some(v);
            let raised = if v < pmio_nvmf::sock::MIN_BUF_SIZE {
                format!(
                    " (raised to SPDK's minimum {})",
                    pmio_nvmf::sock::MIN_BUF_SIZE
                )
            } else {
                String::new()
            };
            k.mapped(
                key,
                format!("{v}: {opt} of each NVMe/TCP connection accepted from now on{raised}"),
            );
        }
    }
    if let Some(v) = k.take::<bool>("enable_quickack")? {
        change.enable_quickack = Some(v);
        k.mapped(
            "enable_quickack",
            format!("{v}: TCP_QUICKACK on each NVMe/TCP connection accepted from now on"),
        );
    }
    match k.take::<bool>("enable_recv_pipe")? {
        Some(true) => k.same(
            "enable_recv_pipe",
            "true: pmio reads up to 64 KiB of a connection's PDUs at a time",
        ),
        Some(false) => k.ignored(
            "enable_recv_pipe",
            "false: pmio always reads up to 64 KiB of a connection's PDUs at a time",
        ),
        None => {}
    }
    for (key, pmio) in [
        (
            "enable_zerocopy_send_server",
            "pmio copies on send (no MSG_ZEROCOPY)",
        ),
        (
            "enable_zerocopy_send_client",
            "pmio copies on send (no MSG_ZEROCOPY)",
        ),
        (
            "enable_ktls",
            "pmio's TLS records are OpenSSL's, in user space (no kTLS)",
        ),
    ] {
        match k.take::<bool>(key)? {
            Some(true) => k.ignored(key, format!("true: {pmio}")),
            Some(false) => k.same(key, format!("false: {pmio}")),
            None => {}
        }
    }
    for (key, pmio) in [
        (
            "enable_placement_id",
            "pmio places connections on reactors round robin",
        ),
        (
            "zerocopy_threshold",
            "pmio copies on send (no MSG_ZEROCOPY)",
        ),
        ("tls_version", "pmio's secure channels are TLS 1.3 only"),
    ] {
        match k.take::<u64>(key)? {
            Some(0) => k.same(key, format!("0: {pmio}")),
            Some(v) => k.ignored(key, format!("{v}: {pmio}")),
            None => {}
        }
    }
    k.ignore_any(
        &["psk_key", "psk_identity"],
        "pmio's PSKs are keyring keys of hosts (nvmf_subsystem_add_host --psk)",
    )?;
    Ok(k.finish(Effect::Sock(change)))
}

// --- nvmf ---

/// `nvmf_set_config`: what the discovery log lists and which admin commands pass through.
pub fn nvmf_set_config(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("nvmf_set_config", params)?;
    const DISCOVERY: &str = "pmio's discovery log lists every listener of every subsystem the \
                             host may use";
    match k.take::<String>("discovery_filter")?.as_deref() {
        None => {}
        Some("match_any") => k.same("discovery_filter", format!("match_any: {DISCOVERY}")),
        Some(f) => k.ignored(
            "discovery_filter",
            format!("{f}: {DISCOVERY} (hosts see more entries, never fewer)"),
        ),
    }
    if let Some(p) = k.take::<Map<String, Value>>("admin_cmd_passthru")? {
        for (key, v) in p {
            let why = match key.as_str() {
                "identify_ctrlr" => "pmio answers Identify from its own subsystem data",
                "vendor_specific" => "pmio passes no vendor-specific admin command through",
                _ => "not an admin_cmd_passthru key pmio knows",
            };
            match v {
                Value::Bool(false) => {}
                v => k.ignored(&format!("admin_cmd_passthru.{key}"), format!("{v}: {why}")),
            }
        }
    }
    k.ignore_any(
        &["poll_groups_mask"],
        "pmio runs a poll group on every reactor of -m",
    )?;
    let effect = match dhchap_policy(&mut k)? {
        Some(p) => Effect::Dhchap(p),
        None => Effect::None,
    };
    Ok(k.finish(effect))
}

/// `nvmf_set_max_subsystems`: pmio has no fixed-size subsystem table.
pub fn nvmf_set_max_subsystems(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("nvmf_set_max_subsystems", params)?;
    k.ignore_any(
        &["max_subsystems"],
        "pmio has no fixed-size subsystem table",
    )?;
    Ok(k.finish(Effect::None))
}

/// `nvmf_set_crdt`: the Command Retry Delay Times reported in Identify Controller.
pub fn nvmf_set_crdt(params: Option<&Value>) -> Result<Plan, RpcError> {
    let mut k = Keys::new("nvmf_set_crdt", params)?;
    for key in ["crdt1", "crdt2", "crdt3"] {
        match k.take::<u16>(key)? {
            None => {}
            Some(0) => k.same(key, "0: pmio reports no retry delay; hosts retry at once"),
            Some(v) => k.ignored(
                key,
                format!("{v}: pmio never asks hosts to delay a retry (it reports CRDT 0)"),
            ),
        }
    }
    Ok(k.finish(Effect::None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio_nvme::NvmeOptions;

    fn sample(method: &str) -> Value {
        let doc: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/spdk-v25.09-sample.json"))
                .unwrap();
        doc["subsystems"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["config"].as_array().cloned().unwrap_or_default())
            .find(|c| c["method"] == method)
            .unwrap()["params"]
            .clone()
    }

    #[test]
    fn spdk_defaults_change_nothing() {
        let p = bdev_nvme_set_options(Some(&sample("bdev_nvme_set_options"))).unwrap();
        assert!(
            p.notes.iter().all(|n| n.kind == NoteKind::Same),
            "{:?}",
            p.notes
        );
        let Effect::Nvme { defaults, .. } = p.effect else {
            panic!("{:?}", p.effect)
        };
        assert_eq!(defaults, NvmeDefaults::default());
        let mut o = NvmeOptions::default();
        defaults.apply_to(&mut o);
        assert_eq!(format!("{o:?}"), format!("{:?}", NvmeOptions::default()));
    }

    #[test]
    fn nvme_timeouts_and_retries_map() {
        let p = bdev_nvme_set_options(Some(&json!({
            "action_on_timeout": "abort", "timeout_us": 5_000_000, "timeout_admin_us": 2_000_000,
            "transport_retry_count": 7, "bdev_retry_count": -1, "nvme_adminq_poll_period_us": 50_000,
            "future_knob": 1
        })))
        .unwrap();
        let Effect::Nvme { defaults, .. } = &p.effect else {
            panic!()
        };
        assert_eq!(
            *defaults,
            NvmeDefaults {
                io_timeout: Some(Duration::from_secs(5)),
                admin_timeout: Some(Duration::from_secs(2)),
                io_retries: Some(7),
                recovery_retries: Some(255),
                health_check_interval: Some(Duration::from_millis(50)),
                ..NvmeDefaults::default()
            }
        );
        let ignored = p.summary(NoteKind::Ignored);
        assert!(ignored.contains("future_knob"), "{ignored}");
        // SPDK's "none" only logs: pmio keeps its own recovery.
        let p = bdev_nvme_set_options(Some(&json!({"timeout_us": 1000}))).unwrap();
        let Effect::Nvme { defaults, .. } = &p.effect else {
            panic!()
        };
        assert_eq!(defaults.io_timeout, None);
        assert!(p.summary(NoteKind::Ignored).contains("only logged"));
        for bad in [
            json!({"action_on_timeout": "explode"}),
            json!({"transport_retry_count": 300}),
            json!({"timeout_us": "soon"}),
        ] {
            assert!(bdev_nvme_set_options(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn reconnect_knobs_map_for_tcp_controllers() {
        let p = bdev_nvme_set_options(Some(&json!({
            "ctrlr_loss_timeout_sec": 30, "reconnect_delay_sec": 2,
            "fast_io_fail_timeout_sec": 10, "keep_alive_timeout_ms": 5000,
            "transport_ack_timeout": 3
        })))
        .unwrap();
        let Effect::Nvme { defaults, .. } = &p.effect else {
            panic!()
        };
        assert_eq!(
            defaults.reconnect,
            Reconnect {
                ctrlr_loss_timeout_sec: Some(30),
                reconnect_delay_sec: Some(2),
                fast_io_fail_timeout_sec: Some(10)
            }
        );
        assert_eq!(defaults.keep_alive_timeout_ms, Some(5000));
        let mapped = p.summary(NoteKind::Mapped);
        assert!(
            mapped.contains("every 2 s and give up after 30 s"),
            "{mapped}"
        );
        assert!(mapped.contains("held I/O fails after 10 s"), "{mapped}");
        assert!(
            p.summary(NoteKind::Ignored)
                .contains("transport_ack_timeout")
        );
        // SPDK's rules: a reconnect needs a delay that fits in the loss timeout.
        for bad in [
            json!({"ctrlr_loss_timeout_sec": 10}),
            json!({"ctrlr_loss_timeout_sec": 5, "reconnect_delay_sec": 6}),
            json!({"reconnect_delay_sec": 1}),
            json!({"ctrlr_loss_timeout_sec": -2, "reconnect_delay_sec": 1}),
        ] {
            let e = bdev_nvme_set_options(Some(&bad)).unwrap_err();
            assert_eq!(e.code, code::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn scheduler_names() {
        let p = framework_set_scheduler(Some(&json!({"name": "static"}))).unwrap();
        assert!(matches!(
            p.effect,
            Effect::Scheduler {
                choice: SchedChoice::Static,
                ..
            }
        ));
        assert!(p.maps());
        let p = framework_set_scheduler(Some(
            &json!({"name": "dynamic", "period": 100000, "load_limit": 20}),
        ))
        .unwrap();
        assert!(matches!(
            p.effect,
            Effect::Scheduler {
                choice: SchedChoice::Dynamic,
                ..
            }
        ));
        let ig = p.summary(NoteKind::Ignored);
        assert!(ig.contains("period") && ig.contains("load_limit"), "{ig}");
        assert!(framework_set_scheduler(Some(&json!({"name": "fancy"}))).is_err());
        assert!(framework_set_scheduler(None).is_err());
    }

    #[test]
    fn sockets_and_nvmf_settings() {
        let doc: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/spdk-v25.09-sample.json"))
                .unwrap();
        let sock = doc["subsystems"][2]["config"].as_array().unwrap();
        let ssl = sock_impl_set_options(Some(&sock[1]["params"])).unwrap();
        assert!(!ssl.maps());
        assert_eq!(ssl.notes.len(), 1, "{:?}", ssl.notes);
        let posix = sock_impl_set_options(Some(&sock[2]["params"])).unwrap();
        assert!(posix.maps());
        let mapped = posix.summary(NoteKind::Mapped);
        assert!(
            mapped.contains("recv_buf_size: 2097152: SO_RCVBUF"),
            "{mapped}"
        );
        assert!(
            mapped.contains("enable_quickack: false: TCP_QUICKACK"),
            "{mapped}"
        );
        assert_eq!(
            posix.effect,
            Effect::Sock(SockChange {
                recv_buf_size: Some(2 << 20),
                send_buf_size: Some(2 << 20),
                enable_quickack: Some(false),
            })
        );
        let small =
            sock_impl_set_options(Some(&json!({"impl_name": "posix", "send_buf_size": 100})))
                .unwrap();
        assert!(
            small
                .summary(NoteKind::Mapped)
                .contains("raised to SPDK's minimum 4096")
        );
        let past_u32 = sock_impl_set_options(Some(
            &json!({"impl_name": "posix", "recv_buf_size": 1u64 << 33}),
        ))
        .unwrap_err();
        assert_eq!(past_u32.code, code::INVALID_PARAMS, "{past_u32}");
        assert!(
            past_u32.message.starts_with("Invalid parameters: ")
                && past_u32.message.contains("recv_buf_size"),
            "{past_u32}"
        );
        let no_name = sock_set_default_impl(Some(&json!({}))).unwrap_err();
        assert_eq!(no_name.code, code::INVALID_PARAMS, "{no_name}");
        assert!(
            sock_set_default_impl(Some(&sock[0]["params"]))
                .unwrap()
                .maps()
        );
        let cfg = nvmf_set_config(Some(&sample("nvmf_set_config"))).unwrap();
        assert!(cfg.maps());
        assert_eq!(cfg.summary(NoteKind::Ignored), "");
        // SPDK's sample lists every digest and group: the target's default policy.
        assert_eq!(
            cfg.effect,
            Effect::Dhchap(pmio_nvmf::DhchapPolicy::default())
        );
        let narrow = nvmf_set_config(Some(&json!({"dhchap_digests": ["sha384"],
            "dhchap_dhgroups": ["ffdhe2048", "null"]})))
        .unwrap();
        assert_eq!(
            narrow.effect,
            Effect::Dhchap(pmio_nvmf::DhchapPolicy {
                digests: vec![pmio_auth::crypto::Hash::Sha384],
                dhgroups: vec![
                    pmio_auth::crypto::DhGroup::Ffdhe2048,
                    pmio_auth::crypto::DhGroup::Null
                ],
            })
        );
        for bad in [
            json!({"dhchap_digests": ["md5"]}),
            json!({"dhchap_dhgroups": ["ffdhe1024"]}),
            json!({"dhchap_digests": []}),
        ] {
            assert!(nvmf_set_config(Some(&bad)).is_err(), "{bad}");
        }
        assert_eq!(
            nvmf_set_config(Some(&json!({"discovery_filter": "match_any"})))
                .unwrap()
                .effect,
            Effect::None
        );
        let crdt = nvmf_set_crdt(Some(&json!({"crdt1": 0, "crdt2": 5}))).unwrap();
        assert!(crdt.summary(NoteKind::Ignored).contains("crdt2"));
        assert!(
            !nvmf_set_max_subsystems(Some(&sample("nvmf_set_max_subsystems")))
                .unwrap()
                .maps()
        );
        assert!(
            bdev_nvme_set_hotplug(Some(&sample("bdev_nvme_set_hotplug")))
                .unwrap()
                .maps()
        );
    }
}
