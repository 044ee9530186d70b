//! The one declaration of each `bdev_nvme_*` method's parameters, fields in the order SPDK's
//! rpc.py sends them: the methods decode them, `pmio-rpc` builds them from rpc.py's command line
//! ([`crate::cli`], feature `cli`; clap's derive is on the declaration where rpc.py's flags are
//! its keys) and serializes them (absent options left out, `store_true` flags sent as `false`).

use pmio_jsonrpc::decl::BoolDefault;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `bdev_nvme_attach_controller` parameters. What each transport takes is checked after
/// decoding (`args::parse`); `hostnqn` and the reconnect knobs are taken for PCIe too, as SPDK's
/// `save_config` writes them for every controller.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeAttach {
    /// Controller name; its bdevs are `<name>n<nsid>`.
    pub name: String,
    /// `PCIe` or `tcp` (any case).
    pub trtype: String,
    /// PCI address, or the target's IP address or host name.
    pub traddr: String,
    /// `ipv4` or `ipv6` (TCP; default: from `traddr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adrfam: Option<String>,
    /// The target's port (TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trsvcid: Option<String>,
    /// Socket priority (TCP; pmio: `0` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Subsystem NQN (TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnqn: Option<String>,
    /// Host NQN (default: the driver's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostnqn: Option<String>,
    /// Source address (pmio: not supported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostaddr: Option<String>,
    /// Source port (pmio: not supported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostsvcid: Option<String>,
    /// Reference tag checks: false.
    #[serde(default)]
    pub prchk_reftag: BoolDefault<false>,
    /// Guard checks: false.
    #[serde(default)]
    pub prchk_guard: BoolDefault<false>,
    /// TCP header digests.
    #[serde(default)]
    pub hdgst: bool,
    /// TCP data digests.
    #[serde(default)]
    pub ddgst: bool,
    /// SPDK's connect timeout (accepted; the driver has its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabrics_connect_timeout_us: Option<u64>,
    /// `disable`, `failover` or `multipath` (pmio attaches one path per controller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath: Option<String>,
    /// I/O queues (at least 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_io_queues: Option<u16>,
    /// Seconds to keep reconnecting a lost controller (-1: forever, 0: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctrlr_loss_timeout_sec: Option<i32>,
    /// Seconds between reconnect attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnect_delay_sec: Option<u32>,
    /// Seconds after which I/O held during a reconnect fails (0: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_io_fail_timeout_sec: Option<u32>,
    /// TLS pre-shared key: a keyring key (`NVMeTLSkey-1:...`) for TLS 1.3 on every queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psk: Option<String>,
    /// SPDK's cap on the names returned (accepted; pmio answers every namespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bdevs: Option<u32>,
    /// DH-HMAC-CHAP key (a keyring key name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<String>,
    /// DH-HMAC-CHAP controller key (a keyring key name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrlr_key: Option<String>,
    /// Namespaces of unrecognized command sets: false.
    #[serde(default)]
    pub allow_unrecognized_csi: BoolDefault<false>,
    /// SQ flow control off: false (newer SPDK clients always send it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_sq_flow_control: Option<BoolDefault<false>>,
    /// Multipath options (pmio: empty only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath_opts: Option<Map<String, Value>>,
}

/// `bdev_nvme_detach_controller` parameters: the controller, and optionally which of its paths
/// (the controller goes only if every key given matches it).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct NvmeDetach {
    /// Controller name.
    pub name: String,
    /// Transport type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub trtype: Option<String>,
    /// Transport address.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'a', long))]
    pub traddr: Option<String>,
    /// Address family.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'f', long))]
    pub adrfam: Option<String>,
    /// Port.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 's', long))]
    pub trsvcid: Option<String>,
    /// Subsystem NQN.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'n', long))]
    pub subnqn: Option<String>,
    /// Source address (pmio's host picks none: matches only when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'i', long))]
    pub hostaddr: Option<String>,
    /// Source port (matches only when empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'c', long))]
    pub hostsvcid: Option<String>,
}

/// `bdev_nvme_reset_controller` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct NvmeReset {
    /// Controller name.
    pub name: String,
    /// The controller's ID, which must then be the controller's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'c', long))]
    pub cntlid: Option<u16>,
}

/// `bdev_nvme_get_controllers` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct NvmeGetControllers {
    /// Only this controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'n', long))]
    pub name: Option<String>,
}

/// `bdev_nvme_set_options` parameters as rpc.py sends them. (The daemon maps them key by key,
/// with a note for each key it ignores, in its configuration settings; this is the client's
/// side.)
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct NvmeSetOptions {
    /// Action on a command timeout: `none`, `reset`, `abort`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_on_timeout: Option<String>,
    /// Command timeout in microseconds (0: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_us: Option<u64>,
    /// Admin command timeout in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_admin_us: Option<u64>,
    /// Keep-alive timeout in milliseconds (NVMe/TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive_timeout_ms: Option<u64>,
    /// Admin queue poll period, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_adminq_poll_period_us: Option<u64>,
    /// I/O queue poll period, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvme_ioq_poll_period_us: Option<u64>,
    /// Requests allocated per I/O queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_queue_requests: Option<u64>,
    /// Batch command submissions.
    pub delay_cmd_submit: bool,
    /// Attempts per I/O in the transport layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport_retry_count: Option<u64>,
    /// Attempts per I/O in the bdev layer (-1: forever).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bdev_retry_count: Option<i64>,
    /// Ack timeout of the transport (0-31).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport_ack_timeout: Option<u64>,
    /// Seconds to keep reconnecting a lost controller (-1: forever, 0: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctrlr_loss_timeout_sec: Option<i64>,
    /// Seconds between reconnect attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnect_delay_sec: Option<u64>,
    /// Seconds after which I/O held during a reconnect fails (0: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_io_fail_timeout_sec: Option<u64>,
    /// No automatic failback.
    pub disable_auto_failback: bool,
    /// UUIDs for namespaces without one.
    pub generate_uuids: bool,
    /// NVMe error counts.
    pub nvme_error_stat: bool,
    /// Per-path I/O statistics.
    pub io_path_stat: bool,
    /// Accel sequences.
    pub allow_accel_sequence: bool,
    /// TCP connect timeout in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_connect_timeout_ms: Option<u64>,
    /// Flush passed to NVMe when a volatile write cache is present.
    pub enable_flush: bool,
}
