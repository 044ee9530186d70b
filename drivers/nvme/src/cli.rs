//! rpc.py's `bdev_nvme_*` subcommands for `pmio-rpc` (feature `cli`): the same flags and the
//! same output (the new bdev names space-separated for an attach, nothing for detach, reset and
//! settings, indent-2 JSON for the query), turned into the methods' declarations
//! ([`crate::rpc::params`]) and serialized: keys in rpc.py's order, `store_true` flags sent as
//! `false`, absent options left out. Where rpc.py's flags are the keys, clap's derive is on the
//! declaration itself.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};
use pmio_jsonrpc::decl::BoolDefault;

use crate::rpc::params::{NvmeAttach, NvmeDetach, NvmeGetControllers, NvmeReset, NvmeSetOptions};

/// The NVMe bdev module's subcommands.
#[derive(Subcommand, Debug)]
pub enum NvmeCommand {
    /// Attach an NVMe controller (PCIe, or an NVMe/TCP subsystem) and create a bdev per
    /// namespace.
    #[command(name = "bdev_nvme_attach_controller", rename_all = "kebab-case")]
    BdevNvmeAttachController {
        /// Controller name, prefix of each bdev name (NAMEn1, ...).
        #[arg(short = 'b', long)]
        name: String,
        /// Transport type: PCIe or tcp.
        #[arg(short = 't', long)]
        trtype: String,
        /// Transport address: a PCI BDF (0000:00:04.0) or the target's IP address.
        #[arg(short = 'a', long)]
        traddr: String,
        /// Address family: ipv4 or ipv6.
        #[arg(short = 'f', long)]
        adrfam: Option<String>,
        /// Transport service id: the target's port (4420).
        #[arg(short = 's', long)]
        trsvcid: Option<String>,
        /// Connection priority (pmio: 0 only).
        #[arg(short = 'p', long)]
        priority: Option<String>,
        /// Subsystem NQN.
        #[arg(short = 'n', long)]
        subnqn: Option<String>,
        /// Host NQN.
        #[arg(short = 'q', long)]
        hostnqn: Option<String>,
        /// Host address to connect from (pmio: not supported).
        #[arg(short = 'i', long)]
        hostaddr: Option<String>,
        /// Host port to connect from (pmio: not supported).
        #[arg(short = 'c', long)]
        hostsvcid: Option<String>,
        /// Enable reference tag checking (pmio: not supported).
        #[arg(short = 'r', long)]
        prchk_reftag: bool,
        /// Enable guard checking (pmio: not supported).
        #[arg(short = 'g', long)]
        prchk_guard: bool,
        /// TCP header digest.
        #[arg(short = 'e', long)]
        hdgst: bool,
        /// TCP data digest.
        #[arg(short = 'd', long)]
        ddgst: bool,
        /// Fabrics connect timeout in microseconds.
        #[arg(long = "fabrics-timeout")]
        fabrics_connect_timeout_us: Option<u64>,
        /// Multipath behaviour: disable, failover, multipath (pmio: one path per controller).
        #[arg(short = 'x', long)]
        multipath: Option<String>,
        /// Number of I/O queues.
        #[arg(long)]
        num_io_queues: Option<u16>,
        /// Seconds to keep reconnecting a lost controller (-1: forever, 0: never).
        #[arg(short = 'l', long, allow_negative_numbers = true)]
        ctrlr_loss_timeout_sec: Option<i32>,
        /// Seconds between reconnect attempts.
        #[arg(short = 'o', long)]
        reconnect_delay_sec: Option<u32>,
        /// Seconds after which I/O held during a reconnect fails (0: never).
        #[arg(short = 'u', long)]
        fast_io_fail_timeout_sec: Option<u32>,
        /// TLS pre-shared key: a keyring key name (TLS 1.3 on every queue).
        #[arg(short = 'k', long)]
        psk: Option<String>,
        /// Most bdev names to return.
        #[arg(short = 'm', long)]
        max_bdevs: Option<u32>,
        /// DH-HMAC-CHAP key (a keyring key name).
        #[arg(long)]
        dhchap_key: Option<String>,
        /// DH-HMAC-CHAP controller key (a keyring key name).
        #[arg(long)]
        dhchap_ctrlr_key: Option<String>,
        /// Allow unrecognized command sets.
        #[arg(short = 'U', long)]
        allow_unrecognized_csi: bool,
    },
    /// Detach an NVMe controller (or one of its paths) and delete its bdevs.
    #[command(name = "bdev_nvme_detach_controller")]
    BdevNvmeDetachController(NvmeDetach),
    /// Reset an NVMe controller (its queue pairs recreate their queues).
    #[command(name = "bdev_nvme_reset_controller")]
    BdevNvmeResetController(NvmeReset),
    /// List NVMe controllers, or one.
    #[command(name = "bdev_nvme_get_controllers")]
    BdevNvmeGetControllers(NvmeGetControllers),
    /// Set options of NVMe controllers attached from now on.
    #[command(name = "bdev_nvme_set_options", rename_all = "kebab-case")]
    BdevNvmeSetOptions(SetOptions),
}

/// `bdev_nvme_set_options`' flags, in rpc.py's order.
#[derive(clap::Args, Debug)]
#[command(rename_all = "kebab-case")]
pub struct SetOptions {
    /// Action on a command timeout: none, reset, abort.
    #[arg(short = 'a', long)]
    action_on_timeout: Option<String>,
    /// Command timeout in microseconds (0: none).
    #[arg(short = 't', long)]
    timeout_us: Option<u64>,
    /// Admin command timeout in microseconds.
    #[arg(long)]
    timeout_admin_us: Option<u64>,
    /// Keep-alive timeout in milliseconds (NVMe/TCP).
    #[arg(short = 'k', long)]
    keep_alive_timeout_ms: Option<u64>,
    /// How often the admin queue is polled, microseconds.
    #[arg(short = 'p', long)]
    nvme_adminq_poll_period_us: Option<u64>,
    /// How often I/O queues are polled, microseconds.
    #[arg(short = 'i', long)]
    nvme_ioq_poll_period_us: Option<u64>,
    /// Requests allocated per I/O queue.
    #[arg(short = 's', long)]
    io_queue_requests: Option<u64>,
    /// Do not batch command submissions.
    #[arg(short = 'd', long = "disable-delay-cmd-submit")]
    disable_delay_cmd_submit: bool,
    /// Attempts per I/O in the transport layer.
    #[arg(short = 'c', long)]
    transport_retry_count: Option<u64>,
    /// Attempts per I/O in the bdev layer (-1: forever).
    #[arg(short = 'r', long, allow_negative_numbers = true)]
    bdev_retry_count: Option<i64>,
    /// Ack timeout of the transport (0-31).
    #[arg(short = 'e', long)]
    transport_ack_timeout: Option<u64>,
    /// Seconds to keep reconnecting a lost controller (-1: forever, 0: never).
    #[arg(short = 'l', long, allow_negative_numbers = true)]
    ctrlr_loss_timeout_sec: Option<i64>,
    /// Seconds between reconnect attempts.
    #[arg(short = 'o', long)]
    reconnect_delay_sec: Option<u64>,
    /// Seconds after which I/O held during a reconnect fails (0: never).
    #[arg(short = 'u', long)]
    fast_io_fail_timeout_sec: Option<u64>,
    /// Disable automatic failback.
    #[arg(short = 'f', long)]
    disable_auto_failback: bool,
    /// Generate UUIDs for namespaces without one.
    #[arg(long)]
    generate_uuids: bool,
    /// Collect NVMe error counts.
    #[arg(short = 'm', long)]
    nvme_error_stat: bool,
    /// Collect per-path I/O statistics.
    #[arg(long)]
    io_path_stat: bool,
    /// Allow accel sequences.
    #[arg(long)]
    allow_accel_sequence: bool,
    /// TCP connect timeout in milliseconds.
    #[arg(long)]
    tcp_connect_timeout_ms: Option<u64>,
    /// Pass flush to NVMe when a volatile write cache is present.
    #[arg(long)]
    enable_flush: bool,
}

impl SetOptions {
    fn params(&self) -> NvmeSetOptions {
        NvmeSetOptions {
            action_on_timeout: self.action_on_timeout.clone(),
            timeout_us: self.timeout_us,
            timeout_admin_us: self.timeout_admin_us,
            keep_alive_timeout_ms: self.keep_alive_timeout_ms,
            nvme_adminq_poll_period_us: self.nvme_adminq_poll_period_us,
            nvme_ioq_poll_period_us: self.nvme_ioq_poll_period_us,
            io_queue_requests: self.io_queue_requests,
            delay_cmd_submit: !self.disable_delay_cmd_submit,
            transport_retry_count: self.transport_retry_count,
            bdev_retry_count: self.bdev_retry_count,
            transport_ack_timeout: self.transport_ack_timeout,
            ctrlr_loss_timeout_sec: self.ctrlr_loss_timeout_sec,
            reconnect_delay_sec: self.reconnect_delay_sec,
            fast_io_fail_timeout_sec: self.fast_io_fail_timeout_sec,
            disable_auto_failback: self.disable_auto_failback,
            generate_uuids: self.generate_uuids,
            nvme_error_stat: self.nvme_error_stat,
            io_path_stat: self.io_path_stat,
            allow_accel_sequence: self.allow_accel_sequence,
            tcp_connect_timeout_ms: self.tcp_connect_timeout_ms,
            enable_flush: self.enable_flush,
        }
    }
}

impl NvmeCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        match self {
            NvmeCommand::BdevNvmeAttachController {
                name,
                trtype,
                traddr,
                adrfam,
                trsvcid,
                priority,
                subnqn,
                hostnqn,
                hostaddr,
                hostsvcid,
                prchk_reftag,
                prchk_guard,
                hdgst,
                ddgst,
                fabrics_connect_timeout_us,
                multipath,
                num_io_queues,
                ctrlr_loss_timeout_sec,
                reconnect_delay_sec,
                fast_io_fail_timeout_sec,
                psk,
                max_bdevs,
                dhchap_key,
                dhchap_ctrlr_key,
                allow_unrecognized_csi,
            } => {
                let p = NvmeAttach {
                    name: name.clone(),
                    trtype: trtype.clone(),
                    traddr: traddr.clone(),
                    adrfam: adrfam.clone(),
                    trsvcid: trsvcid.clone(),
                    priority: priority.clone(),
                    subnqn: subnqn.clone(),
                    hostnqn: hostnqn.clone(),
                    hostaddr: hostaddr.clone(),
                    hostsvcid: hostsvcid.clone(),
                    prchk_reftag: BoolDefault(*prchk_reftag),
                    prchk_guard: BoolDefault(*prchk_guard),
                    hdgst: *hdgst,
                    ddgst: *ddgst,
                    fabrics_connect_timeout_us: *fabrics_connect_timeout_us,
                    multipath: multipath.clone(),
                    num_io_queues: *num_io_queues,
                    ctrlr_loss_timeout_sec: *ctrlr_loss_timeout_sec,
                    reconnect_delay_sec: *reconnect_delay_sec,
                    fast_io_fail_timeout_sec: *fast_io_fail_timeout_sec,
                    psk: psk.clone(),
                    max_bdevs: *max_bdevs,
                    dhchap_key: dhchap_key.clone(),
                    dhchap_ctrlr_key: dhchap_ctrlr_key.clone(),
                    allow_unrecognized_csi: BoolDefault(*allow_unrecognized_csi),
                    disable_sq_flow_control: None,
                    multipath_opts: None,
                };
                Request::new("bdev_nvme_attach_controller", &p, Print::Array)
            }
            NvmeCommand::BdevNvmeDetachController(p) => {
                Request::new("bdev_nvme_detach_controller", p, Print::Nothing)
            }
            NvmeCommand::BdevNvmeResetController(p) => {
                Request::new("bdev_nvme_reset_controller", p, Print::Nothing)
            }
            // rpc.py sends no params at all without a name.
            NvmeCommand::BdevNvmeGetControllers(p) if p.name.is_none() => {
                Request::bare("bdev_nvme_get_controllers", Print::Dict)
            }
            NvmeCommand::BdevNvmeGetControllers(p) => {
                Request::new("bdev_nvme_get_controllers", p, Print::Dict)
            }
            NvmeCommand::BdevNvmeSetOptions(o) => {
                Request::new("bdev_nvme_set_options", &o.params(), Print::Nothing)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NvmeCommand;
    use clap::Parser;

    /// pmio-rpc's command line, with only this module's subcommands.
    #[derive(Parser)]
    struct Args {
        #[command(subcommand)]
        method: NvmeCommand,
    }

    /// The request's params exactly as rpc.py serialises them (key order included).
    fn params(argv: &[&str]) -> String {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(argv);
        let a = Args::try_parse_from(full).unwrap();
        serde_json::to_string(&a.method.request().params.unwrap()).unwrap()
    }

    #[test]
    fn pcie_attach_matches_rpc_py() {
        assert_eq!(
            params(&[
                "bdev_nvme_attach_controller",
                "-b",
                "Nvme0",
                "-t",
                "PCIe",
                "-a",
                "0000:00:04.0",
            ]),
            r#"{"name":"Nvme0","trtype":"PCIe","traddr":"0000:00:04.0","prchk_reftag":false,"prchk_guard":false,"hdgst":false,"ddgst":false,"allow_unrecognized_csi":false}"#
        );
    }

    #[test]
    fn tcp_attach_with_rpc_py_flags() {
        assert_eq!(
            params(&[
                "bdev_nvme_attach_controller",
                "-b",
                "Nvme0",
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-f",
                "ipv4",
                "-s",
                "4420",
                "-n",
                "nqn.s",
                "-q",
                "nqn.h",
                "--hdgst",
                "-d",
                "-l",
                "-1",
                "--reconnect-delay-sec",
                "2",
                "-u",
                "10",
                "--num-io-queues",
                "2",
            ]),
            r#"{"name":"Nvme0","trtype":"tcp","traddr":"127.0.0.1","adrfam":"ipv4","trsvcid":"4420","subnqn":"nqn.s","hostnqn":"nqn.h","prchk_reftag":false,"prchk_guard":false,"hdgst":true,"ddgst":true,"num_io_queues":2,"ctrlr_loss_timeout_sec":-1,"reconnect_delay_sec":2,"fast_io_fail_timeout_sec":10,"allow_unrecognized_csi":false}"#
        );
        assert_eq!(
            params(&[
                "bdev_nvme_attach_controller",
                "--name",
                "N",
                "--trtype",
                "tcp",
                "--traddr",
                "::1",
                "--trsvcid",
                "4420",
                "--subnqn",
                "nqn.s",
                "--ctrlr-loss-timeout-sec",
                "30",
                "--fast-io-fail-timeout-sec",
                "5",
                "--fabrics-timeout",
                "1000",
                "-x",
                "failover",
            ]),
            r#"{"name":"N","trtype":"tcp","traddr":"::1","trsvcid":"4420","subnqn":"nqn.s","prchk_reftag":false,"prchk_guard":false,"hdgst":false,"ddgst":false,"fabrics_connect_timeout_us":1000,"multipath":"failover","ctrlr_loss_timeout_sec":30,"fast_io_fail_timeout_sec":5,"allow_unrecognized_csi":false}"#
        );
    }

    #[test]
    fn detach_get_and_set_options() {
        assert_eq!(
            params(&["bdev_nvme_detach_controller", "Nvme0"]),
            r#"{"name":"Nvme0"}"#
        );
        assert_eq!(
            params(&[
                "bdev_nvme_detach_controller",
                "Nvme0",
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "4420",
                "-n",
                "nqn.s"
            ]),
            r#"{"name":"Nvme0","trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420","subnqn":"nqn.s"}"#
        );
        assert_eq!(
            params(&["bdev_nvme_get_controllers", "-n", "Nvme0"]),
            r#"{"name":"Nvme0"}"#
        );
        let a = Args::try_parse_from(["pmio-rpc", "bdev_nvme_get_controllers"]).unwrap();
        assert_eq!(a.method.request().params, None);
        assert_eq!(
            params(&[
                "bdev_nvme_set_options",
                "-l",
                "30",
                "-o",
                "2",
                "-u",
                "10",
                "-k",
                "5000"
            ]),
            r#"{"keep_alive_timeout_ms":5000,"delay_cmd_submit":true,"ctrlr_loss_timeout_sec":30,"reconnect_delay_sec":2,"fast_io_fail_timeout_sec":10,"disable_auto_failback":false,"generate_uuids":false,"nvme_error_stat":false,"io_path_stat":false,"allow_accel_sequence":false,"enable_flush":false}"#
        );
    }
}
