//! rpc.py's `nvmf_*` subcommands: the same positional arguments and flags, the same request
//! (keys in rpc.py's order, `store_true` flags sent as `false`, absent options left out) and the
//! same output (nothing for the methods that change state, indent-2 JSON for the queries).
//!
//! The requests are the target's own declarations (`pmio_nvmf::rpc`), built from the command
//! line and serialized: a key is named once, beside the method that decodes it.

use clap::Subcommand;
use pmio_jsonrpc::decl::{BoolDefault, IntDefault};
use pmio_nvmf::rpc::host::{AddHost, AllowAnyHost, RemoveHost};
use pmio_nvmf::rpc::listener::{AddListener, ListenAddress, RemoveListener};
use pmio_nvmf::rpc::ns::{AddNs, NsParams, RemoveNs};
use pmio_nvmf::rpc::rules::{Ignored, TgtName};
use pmio_nvmf::rpc::subsystem::{self, SubsystemQuery};
use pmio_nvmf::rpc::{conn, transport};
use serde::Serialize;
use serde_json::Value;

use crate::Print;

/// The discovery subsystem's NQN, for rpc.py's `discovery` shortcut.
const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The NVMe-oF target's methods.
#[derive(Subcommand, Debug)]
pub enum NvmfMethod {
    /// Create an NVMe-oF transport (pmio: TCP).
    #[command(name = "nvmf_create_transport", rename_all = "kebab-case")]
    CreateTransport {
        /// Transport type (TCP).
        #[arg(short = 't', long)]
        trtype: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 'g', long)]
        tgt_name: Option<String>,
        /// Max number of outstanding I/O per queue.
        #[arg(short = 'q', long)]
        max_queue_depth: Option<u16>,
        /// Max number of I/O queue pairs per controller.
        #[arg(short = 'm', long)]
        max_io_qpairs_per_ctrlr: Option<u16>,
        /// Max in-capsule data size.
        #[arg(short = 'c', long)]
        in_capsule_data_size: Option<u32>,
        /// Max I/O size (bytes).
        #[arg(short = 'i', long)]
        max_io_size: Option<u32>,
        /// I/O unit size (bytes).
        #[arg(short = 'u', long)]
        io_unit_size: Option<u32>,
        /// Max number of admin commands per admin queue.
        #[arg(short = 'a', long)]
        max_aq_depth: Option<u16>,
        /// Pooled data buffers of the transport (SPDK; no effect in pmio).
        #[arg(short = 'n', long)]
        num_shared_buffers: Option<u64>,
        /// Shared buffers reserved per poll group (SPDK; no effect in pmio).
        #[arg(short = 'b', long)]
        buf_cache_size: Option<u64>,
        /// Zero-copy operations (pmio: not supported).
        #[arg(short = 'z', long)]
        zcopy: bool,
        /// CQ entries (RDMA only).
        #[arg(short = 'd', long)]
        num_cqe: Option<u64>,
        /// Max outstanding I/O per SRQ (RDMA only).
        #[arg(short = 's', long)]
        max_srq_depth: Option<u64>,
        /// Disable shared receive queues (RDMA only).
        #[arg(short = 'r', long)]
        no_srq: bool,
        /// Disable the C2H success optimization (reads end with a CapsuleResp).
        #[arg(short = 'o', long = "c2h-success")]
        no_c2h_success: bool,
        /// DIF insert/strip (pmio: not supported).
        #[arg(short = 'f', long)]
        dif_insert_or_strip: bool,
        /// Socket priority of the connections (pmio: 0 only).
        #[arg(short = 'y', long)]
        sock_priority: Option<i64>,
        /// Pending connections allowed at one time (RDMA only).
        #[arg(short = 'l', long)]
        acceptor_backlog: Option<u64>,
        /// Abort execution timeout, seconds.
        #[arg(short = 'x', long)]
        abort_timeout_sec: Option<u32>,
        /// Disable work request batching (RDMA only).
        #[arg(short = 'w', long)]
        no_wr_batching: bool,
        /// Control messages per poll group (SPDK; no effect in pmio).
        #[arg(short = 'e', long)]
        control_msg_num: Option<u64>,
        /// Disable mmap() of BAR0 (vfio-user only).
        #[arg(short = 'M', long)]
        disable_mappable_bar0: bool,
        /// Disable adaptive interrupts (vfio-user only).
        #[arg(short = 'I', long)]
        disable_adaptive_irq: bool,
        /// Disable shadow doorbells (vfio-user only).
        #[arg(short = 'S', long)]
        disable_shadow_doorbells: bool,
        /// Acceptor polling interval, µs (SPDK; no effect in pmio).
        #[arg(long)]
        acceptor_poll_rate: Option<u64>,
        /// ACK timeout, ms (RDMA only).
        #[arg(long)]
        ack_timeout: Option<u64>,
        /// RDMA data WR pool size (RDMA only).
        #[arg(long)]
        data_wr_pool_size: Option<u64>,
        /// Disallow command pass-through.
        #[arg(long)]
        disable_command_passthru: bool,
        /// Keep alive support granularity (SPDK; no effect in pmio).
        #[arg(long)]
        kas: Option<u64>,
        /// Minimum keep alive timeout, ms (SPDK; no effect in pmio).
        #[arg(long)]
        min_kato: Option<u64>,
    },
    /// Display NVMe-oF transports.
    #[command(name = "nvmf_get_transports", rename_all = "kebab-case")]
    GetTransports {
        /// Transport type.
        #[arg(long)]
        trtype: Option<String>,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Display NVMe-oF subsystems, or one.
    #[command(name = "nvmf_get_subsystems", rename_all = "kebab-case")]
    GetSubsystems {
        /// Subsystem NQN.
        nqn: Option<String>,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Create an NVMe-oF subsystem.
    #[command(name = "nvmf_create_subsystem", rename_all = "kebab-case")]
    CreateSubsystem {
        /// Subsystem NQN.
        nqn: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
        /// Serial number (e.g. SPDK00000000000001).
        #[arg(short = 's', long)]
        serial_number: Option<String>,
        /// Model number (e.g. "SPDK Controller").
        #[arg(short = 'd', long)]
        model_number: Option<String>,
        /// Allow any host to connect (no host list).
        #[arg(short = 'a', long)]
        allow_any_host: bool,
        /// Maximum number of namespaces.
        #[arg(short = 'm', long)]
        max_namespaces: Option<u32>,
        /// ANA reporting (pmio: not supported).
        #[arg(short = 'r', long)]
        ana_reporting: bool,
        /// Minimum controller ID.
        #[arg(short = 'i', long = "min_cntlid")]
        min_cntlid: Option<u16>,
        /// Maximum controller ID.
        #[arg(short = 'I', long = "max_cntlid")]
        max_cntlid: Option<u16>,
        /// Maximum discard size, KiB.
        #[arg(long)]
        max_discard_size: Option<i64>,
        /// Maximum write zeroes size, KiB.
        #[arg(long)]
        max_write_zeroes_size: Option<i64>,
        /// NVMe pass-through (pmio: not supported).
        #[arg(short = 'p', long)]
        passthrough: bool,
        /// NVM subsystem reset support (pmio: not supported).
        #[arg(short = 'n', long = "enable_nssr")]
        enable_nssr: bool,
    },
    /// Delete an NVMe-oF subsystem.
    #[command(name = "nvmf_delete_subsystem", rename_all = "kebab-case")]
    DeleteSubsystem {
        /// Subsystem NQN.
        subsystem_nqn: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Add a listener to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_listener", rename_all = "kebab-case")]
    SubsystemAddListener {
        #[command(flatten)]
        listener: Listener,
        /// Immediately establish a secure channel (pmio: not supported).
        #[arg(short = 'k', long)]
        secure_channel: bool,
        /// ANA state (pmio: optimized only).
        #[arg(short = 'n', long)]
        ana_state: Option<String>,
        /// Socket implementation (SPDK; no effect in pmio).
        #[arg(short = 'S', long)]
        sock_impl: Option<String>,
    },
    /// Remove a listener from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_listener", rename_all = "kebab-case")]
    SubsystemRemoveListener {
        #[command(flatten)]
        listener: Listener,
    },
    /// Add a namespace to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_ns", rename_all = "kebab-case")]
    SubsystemAddNs {
        /// Subsystem NQN.
        nqn: String,
        /// The bdev behind the namespace.
        bdev_name: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
        /// Persistent reservation file (pmio: not supported).
        #[arg(short = 'p', long)]
        ptpl_file: Option<String>,
        /// The requested NSID.
        #[arg(short = 'n', long)]
        nsid: Option<u32>,
        /// Namespace globally unique identifier (32 hex digits).
        #[arg(short = 'g', long)]
        nguid: Option<String>,
        /// Namespace EUI-64 (16 hex digits).
        #[arg(short = 'e', long)]
        eui64: Option<String>,
        /// Namespace UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// ANA group ID (pmio: not supported).
        #[arg(short = 'a', long)]
        anagrpid: Option<i64>,
        /// Do not make the namespace visible to controllers automatically (pmio: not supported).
        #[arg(short = 'i', long)]
        no_auto_visible: bool,
        /// Hide the bdev's metadata (pmio: not supported).
        #[arg(short = 'N', long)]
        hide_metadata: bool,
    },
    /// Remove a namespace from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_ns", rename_all = "kebab-case")]
    SubsystemRemoveNs {
        /// Subsystem NQN.
        nqn: String,
        /// Namespace ID.
        nsid: u32,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Allow a host to connect to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_host", rename_all = "kebab-case")]
    SubsystemAddHost {
        /// Subsystem NQN.
        nqn: String,
        /// Host NQN.
        host: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
        /// PSK file for TLS (pmio: not supported).
        #[arg(long)]
        psk: Option<String>,
        /// DH-HMAC-CHAP key name (pmio: not supported).
        #[arg(long)]
        dhchap_key: Option<String>,
        /// DH-HMAC-CHAP controller key name (pmio: not supported).
        #[arg(long)]
        dhchap_ctrlr_key: Option<String>,
    },
    /// Remove a host from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_host", rename_all = "kebab-case")]
    SubsystemRemoveHost {
        /// Subsystem NQN.
        nqn: String,
        /// Host NQN.
        host: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Allow any host to connect to the subsystem (-e, the default) or only listed hosts (-d).
    #[command(name = "nvmf_subsystem_allow_any_host", rename_all = "kebab-case")]
    SubsystemAllowAnyHost {
        /// Subsystem NQN.
        nqn: String,
        /// Allow any host.
        #[arg(short = 'e', long)]
        enable: bool,
        /// Only hosts on the list.
        #[arg(short = 'd', long)]
        disable: bool,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
    /// Display the controllers of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_controllers", rename_all = "kebab-case")]
    SubsystemGetControllers(Query),
    /// Display the queue pairs of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_qpairs", rename_all = "kebab-case")]
    SubsystemGetQpairs(Query),
    /// Display the listeners of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_listeners", rename_all = "kebab-case")]
    SubsystemGetListeners(Query),
    /// Display the NVMe-oF target's statistics.
    #[command(name = "nvmf_get_stats", rename_all = "kebab-case")]
    GetStats {
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<String>,
    },
}

/// The address arguments of the listener subcommands.
#[derive(clap::Args, Debug)]
#[command(rename_all = "kebab-case")]
pub struct Listener {
    /// Subsystem NQN ('discovery' for the discovery subsystem).
    nqn: String,
    /// Transport type (tcp).
    #[arg(short = 't', long)]
    trtype: String,
    /// Transport address (an IP address).
    #[arg(short = 'a', long)]
    traddr: String,
    /// The name of the parent NVMe-oF target.
    #[arg(short = 'p', long)]
    tgt_name: Option<String>,
    /// Address family (ipv4, ipv6).
    #[arg(short = 'f', long)]
    adrfam: Option<String>,
    /// Transport service id (the port).
    #[arg(short = 's', long)]
    trsvcid: Option<String>,
}

impl Listener {
    /// rpc.py's `discovery` shortcut for the discovery NQN.
    fn nqn(&self) -> String {
        if self.nqn == "discovery" {
            DISCOVERY_NQN.to_string()
        } else {
            self.nqn.clone()
        }
    }

    /// `listen_address` as rpc.py groups it.
    fn address(&self) -> ListenAddress {
        ListenAddress {
            trtype: self.trtype.clone(),
            traddr: self.traddr.clone(),
            adrfam: self.adrfam.clone(),
            trsvcid: self.trsvcid.clone(),
        }
    }
}

/// The arguments of the per-subsystem queries.
#[derive(clap::Args, Debug)]
#[command(rename_all = "kebab-case")]
pub struct Query {
    /// Subsystem NQN.
    nqn: String,
    /// The name of the parent NVMe-oF target.
    #[arg(short = 't', long)]
    tgt_name: Option<String>,
}

impl Query {
    fn params(&self) -> Option<Value> {
        encode(&SubsystemQuery {
            nqn: self.nqn.clone(),
            tgt_name: tgt(&self.tgt_name),
        })
    }
}

/// A declaration's request params: the object its fields serialize to, `None` when empty
/// (rpc.py leaves out empty params). The client's one encoder of declarations.
pub(crate) fn encode<T: Serialize>(p: &T) -> Option<Value> {
    match serde_json::to_value(p) {
        Ok(Value::Object(m)) if m.is_empty() => None,
        Ok(v) => Some(v),
        // The declarations are structs of strings, numbers and booleans.
        Err(e) => unreachable!("a declaration serializes: {e}"),
    }
}

fn tgt(name: &Option<String>) -> Option<TgtName> {
    name.clone().map(TgtName)
}

/// A `store_true` flag rpc.py sends as is (`false` when not given) to a key pmio ignores.
fn flag(b: bool) -> Option<Ignored<bool>> {
    Some(Ignored(b))
}

fn ignored(v: Option<u64>) -> Option<Ignored<u64>> {
    v.map(Ignored)
}

/// A `store_true` flag rpc.py sends as is to a key pmio accepts only as `false`.
fn only_false(b: bool) -> Option<BoolDefault<false>> {
    Some(BoolDefault(b))
}

/// Method name, params and output style of an nvmf subcommand.
pub fn request(m: &NvmfMethod) -> (&'static str, Option<Value>, Print) {
    use NvmfMethod::*;
    match m {
        CreateTransport {
            trtype,
            tgt_name,
            max_queue_depth,
            max_io_qpairs_per_ctrlr,
            in_capsule_data_size,
            max_io_size,
            io_unit_size,
            max_aq_depth,
            num_shared_buffers,
            buf_cache_size,
            zcopy,
            num_cqe,
            max_srq_depth,
            no_srq,
            no_c2h_success,
            dif_insert_or_strip,
            sock_priority,
            acceptor_backlog,
            abort_timeout_sec,
            no_wr_batching,
            control_msg_num,
            disable_mappable_bar0,
            disable_adaptive_irq,
            disable_shadow_doorbells,
            acceptor_poll_rate,
            ack_timeout,
            data_wr_pool_size,
            disable_command_passthru,
            kas,
            min_kato,
        } => (
            "nvmf_create_transport",
            encode(&transport::CreateTransport {
                trtype: trtype.clone(),
                tgt_name: tgt(tgt_name),
                max_queue_depth: *max_queue_depth,
                max_io_qpairs_per_ctrlr: *max_io_qpairs_per_ctrlr,
                in_capsule_data_size: *in_capsule_data_size,
                max_io_size: *max_io_size,
                io_unit_size: *io_unit_size,
                max_aq_depth: *max_aq_depth,
                num_shared_buffers: ignored(*num_shared_buffers),
                buf_cache_size: ignored(*buf_cache_size),
                num_cqe: ignored(*num_cqe),
                max_srq_depth: ignored(*max_srq_depth),
                c2h_success: Some(!*no_c2h_success),
                no_srq: flag(*no_srq),
                zcopy: only_false(*zcopy),
                dif_insert_or_strip: only_false(*dif_insert_or_strip),
                sock_priority: sock_priority.map(IntDefault),
                acceptor_backlog: ignored(*acceptor_backlog),
                abort_timeout_sec: *abort_timeout_sec,
                no_wr_batching: flag(*no_wr_batching),
                control_msg_num: ignored(*control_msg_num),
                disable_mappable_bar0: flag(*disable_mappable_bar0),
                disable_adaptive_irq: flag(*disable_adaptive_irq),
                disable_shadow_doorbells: flag(*disable_shadow_doorbells),
                acceptor_poll_rate: ignored(*acceptor_poll_rate),
                ack_timeout: ignored(*ack_timeout),
                data_wr_pool_size: ignored(*data_wr_pool_size),
                disable_command_passthru: flag(*disable_command_passthru),
                kas: ignored(*kas),
                min_kato: ignored(*min_kato),
            }),
            Print::Nothing,
        ),
        GetTransports { trtype, tgt_name } => (
            "nvmf_get_transports",
            encode(&transport::GetTransports {
                tgt_name: tgt(tgt_name),
                trtype: trtype.clone(),
            }),
            Print::Dict,
        ),
        GetSubsystems { nqn, tgt_name } => (
            "nvmf_get_subsystems",
            encode(&subsystem::GetSubsystems {
                tgt_name: tgt(tgt_name),
                nqn: nqn.clone(),
            }),
            Print::Dict,
        ),
        CreateSubsystem {
            nqn,
            tgt_name,
            serial_number,
            model_number,
            allow_any_host,
            max_namespaces,
            ana_reporting,
            min_cntlid,
            max_cntlid,
            max_discard_size,
            max_write_zeroes_size,
            passthrough,
            enable_nssr,
        } => (
            "nvmf_create_subsystem",
            encode(&subsystem::CreateSubsystem {
                nqn: nqn.clone(),
                tgt_name: tgt(tgt_name),
                serial_number: serial_number.clone(),
                model_number: model_number.clone(),
                allow_any_host: *allow_any_host,
                max_namespaces: *max_namespaces,
                ana_reporting: only_false(*ana_reporting),
                min_cntlid: *min_cntlid,
                max_cntlid: *max_cntlid,
                max_discard_size_kib: max_discard_size.map(IntDefault),
                max_write_zeroes_size_kib: max_write_zeroes_size.map(IntDefault),
                passthrough: only_false(*passthrough),
                enable_nssr: only_false(*enable_nssr),
            }),
            Print::Nothing,
        ),
        DeleteSubsystem {
            subsystem_nqn,
            tgt_name,
        } => (
            "nvmf_delete_subsystem",
            encode(&SubsystemQuery {
                nqn: subsystem_nqn.clone(),
                tgt_name: tgt(tgt_name),
            }),
            Print::Nothing,
        ),
        SubsystemAddListener {
            listener,
            secure_channel,
            ana_state,
            sock_impl,
        } => (
            "nvmf_subsystem_add_listener",
            encode(&AddListener {
                nqn: listener.nqn(),
                tgt_name: tgt(&listener.tgt_name),
                secure_channel: only_false(*secure_channel),
                ana_state: ana_state.clone(),
                sock_impl: sock_impl.clone().map(Ignored),
                listen_address: listener.address(),
            }),
            Print::Nothing,
        ),
        SubsystemRemoveListener { listener } => (
            "nvmf_subsystem_remove_listener",
            encode(&RemoveListener {
                nqn: listener.nqn(),
                tgt_name: tgt(&listener.tgt_name),
                listen_address: listener.address(),
            }),
            Print::Nothing,
        ),
        SubsystemAddNs {
            nqn,
            bdev_name,
            tgt_name,
            ptpl_file,
            nsid,
            nguid,
            eui64,
            uuid,
            anagrpid,
            no_auto_visible,
            hide_metadata,
        } => (
            "nvmf_subsystem_add_ns",
            encode(&AddNs {
                nqn: nqn.clone(),
                tgt_name: tgt(tgt_name),
                namespace: NsParams {
                    bdev_name: bdev_name.clone(),
                    ptpl_file: ptpl_file.clone(),
                    nsid: *nsid,
                    nguid: nguid.clone(),
                    eui64: eui64.clone(),
                    uuid: uuid.clone(),
                    anagrpid: anagrpid.map(IntDefault),
                    no_auto_visible: only_false(*no_auto_visible),
                    hide_metadata: only_false(*hide_metadata),
                },
            }),
            Print::Nothing,
        ),
        SubsystemRemoveNs {
            nqn,
            nsid,
            tgt_name,
        } => (
            "nvmf_subsystem_remove_ns",
            encode(&RemoveNs {
                nqn: nqn.clone(),
                nsid: *nsid,
                tgt_name: tgt(tgt_name),
            }),
            Print::Nothing,
        ),
        SubsystemAddHost {
            nqn,
            host,
            tgt_name,
            psk,
            dhchap_key,
            dhchap_ctrlr_key,
        } => (
            "nvmf_subsystem_add_host",
            encode(&AddHost {
                nqn: nqn.clone(),
                host: host.clone(),
                tgt_name: tgt(tgt_name),
                psk: psk.clone(),
                dhchap_key: dhchap_key.clone(),
                dhchap_ctrlr_key: dhchap_ctrlr_key.clone(),
            }),
            Print::Nothing,
        ),
        SubsystemRemoveHost {
            nqn,
            host,
            tgt_name,
        } => (
            "nvmf_subsystem_remove_host",
            encode(&RemoveHost {
                nqn: nqn.clone(),
                host: host.clone(),
                tgt_name: tgt(tgt_name),
                timeout_ms: None,
            }),
            Print::Nothing,
        ),
        // rpc.py: allow unless -d (-e is the default, kept for symmetry).
        SubsystemAllowAnyHost {
            nqn,
            enable: _,
            disable,
            tgt_name,
        } => (
            "nvmf_subsystem_allow_any_host",
            encode(&AllowAnyHost {
                nqn: nqn.clone(),
                allow_any_host: !*disable,
                tgt_name: tgt(tgt_name),
            }),
            Print::Nothing,
        ),
        SubsystemGetControllers(q) => ("nvmf_subsystem_get_controllers", q.params(), Print::Dict),
        SubsystemGetQpairs(q) => ("nvmf_subsystem_get_qpairs", q.params(), Print::Dict),
        SubsystemGetListeners(q) => ("nvmf_subsystem_get_listeners", q.params(), Print::Dict),
        GetStats { tgt_name } => (
            "nvmf_get_stats",
            encode(&conn::GetStats {
                tgt_name: tgt(tgt_name),
            }),
            Print::Dict,
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Args, Method, request};
    use clap::Parser;
    use serde_json::{Value, json};

    fn req(argv: &[&str]) -> (&'static str, Option<Value>) {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(argv);
        let a = Args::try_parse_from(full).unwrap();
        assert!(matches!(a.method, Method::Nvmf(_)));
        let (m, p, _) = request(&a.method).unwrap();
        (m, p)
    }

    /// The request's params exactly as rpc.py serialises them (key order included).
    fn params(argv: &[&str]) -> String {
        serde_json::to_string(&req(argv).1.unwrap()).unwrap()
    }

    const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

    /// The requests reference/nvmf.md records from SPDK v25.09's rpc.py, byte for byte.
    #[test]
    fn requests_match_rpc_py() {
        assert_eq!(
            params(&["nvmf_create_transport", "-t", "TCP"]),
            r#"{"trtype":"TCP","c2h_success":true,"no_srq":false,"zcopy":false,"dif_insert_or_strip":false,"no_wr_batching":false,"disable_mappable_bar0":false,"disable_adaptive_irq":false,"disable_shadow_doorbells":false,"disable_command_passthru":false}"#
        );
        assert_eq!(
            params(&[
                "nvmf_create_subsystem",
                NQN,
                "-s",
                "SPDK00000000000001",
                "-a",
                "-m",
                "10"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","serial_number":"SPDK00000000000001","allow_any_host":true,"max_namespaces":10,"ana_reporting":false,"passthrough":false,"enable_nssr":false}"#
        );
        assert_eq!(
            params(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","no_auto_visible":false,"hide_metadata":false}}"#
        );
        assert_eq!(
            params(&[
                "nvmf_subsystem_add_listener",
                NQN,
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "4420"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","secure_channel":false,"listen_address":{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420"}}"#
        );
        assert_eq!(
            params(&[
                "nvmf_subsystem_add_listener",
                "discovery",
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "4420"
            ]),
            r#"{"nqn":"nqn.2014-08.org.nvmexpress.discovery","secure_channel":false,"listen_address":{"trtype":"tcp","traddr":"127.0.0.1","trsvcid":"4420"}}"#
        );
        assert_eq!(
            params(&["nvmf_subsystem_remove_ns", NQN, "1"]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","nsid":1}"#
        );
        assert_eq!(
            params(&["nvmf_delete_subsystem", NQN]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1"}"#
        );
        assert_eq!(
            params(&[
                "nvmf_subsystem_add_host",
                NQN,
                "nqn.2014-08.org.nvmexpress:uuid:1234"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","host":"nqn.2014-08.org.nvmexpress:uuid:1234"}"#
        );
        assert_eq!(
            params(&["nvmf_subsystem_allow_any_host", NQN, "-d"]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":false}"#
        );
    }

    #[test]
    fn options_and_queries() {
        assert_eq!(
            req(&[
                "nvmf_create_transport",
                "-t",
                "tcp",
                "-u",
                "8192",
                "-q",
                "64",
                "-c",
                "0",
                "-i",
                "65536",
                "-o",
                "-x",
                "2"
            ])
            .1
            .unwrap(),
            json!({"trtype": "tcp", "max_queue_depth": 64, "in_capsule_data_size": 0,
                "max_io_size": 65536, "io_unit_size": 8192, "c2h_success": false, "no_srq": false,
                "zcopy": false, "dif_insert_or_strip": false, "abort_timeout_sec": 2,
                "no_wr_batching": false, "disable_mappable_bar0": false,
                "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
                "disable_command_passthru": false})
        );
        assert_eq!(
            params(&[
                "nvmf_subsystem_add_ns",
                NQN,
                "Malloc0",
                "-n",
                "3",
                "-g",
                "FE828EED8EF34FCF80C28367DAA65457",
                "-e",
                "0123456789ABCDEF",
                "-u",
                "fe828eed-8ef3-4fcf-80c2-8367daa65457"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","nsid":3,"nguid":"FE828EED8EF34FCF80C28367DAA65457","eui64":"0123456789ABCDEF","uuid":"fe828eed-8ef3-4fcf-80c2-8367daa65457","no_auto_visible":false,"hide_metadata":false}}"#
        );
        assert_eq!(
            params(&[
                "nvmf_subsystem_remove_listener",
                NQN,
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-s",
                "4420",
                "-f",
                "ipv4"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","listen_address":{"trtype":"tcp","traddr":"127.0.0.1","adrfam":"ipv4","trsvcid":"4420"}}"#
        );
        assert_eq!(
            params(&[
                "nvmf_create_subsystem",
                NQN,
                "-d",
                "pmio",
                "-i",
                "5",
                "-I",
                "9"
            ]),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","model_number":"pmio","allow_any_host":false,"ana_reporting":false,"min_cntlid":5,"max_cntlid":9,"passthrough":false,"enable_nssr":false}"#
        );
        assert_eq!(
            req(&["nvmf_subsystem_allow_any_host", NQN, "-e"])
                .1
                .unwrap(),
            json!({"nqn": NQN, "allow_any_host": true})
        );
        assert_eq!(
            req(&["nvmf_subsystem_remove_host", NQN, "nqn.h:1"])
                .1
                .unwrap(),
            json!({"nqn": NQN, "host": "nqn.h:1"})
        );
        for m in [
            "nvmf_subsystem_get_controllers",
            "nvmf_subsystem_get_qpairs",
            "nvmf_subsystem_get_listeners",
        ] {
            assert_eq!(req(&[m, NQN]), (m, Some(json!({"nqn": NQN}))));
        }
        assert_eq!(req(&["nvmf_get_subsystems"]), ("nvmf_get_subsystems", None));
        assert_eq!(
            req(&["nvmf_get_subsystems", NQN]).1,
            Some(json!({"nqn": NQN}))
        );
        assert_eq!(req(&["nvmf_get_transports"]), ("nvmf_get_transports", None));
        assert_eq!(
            req(&["nvmf_get_transports", "--trtype", "TCP"]).1,
            Some(json!({"trtype": "TCP"}))
        );
        assert_eq!(req(&["nvmf_get_stats"]), ("nvmf_get_stats", None));
        // rpc.py's required arguments.
        for bad in [
            &["nvmf_create_transport"][..],
            &["nvmf_subsystem_add_listener", NQN, "-t", "tcp"],
            &["nvmf_subsystem_add_ns", NQN],
            &["nvmf_subsystem_remove_ns", NQN, "x"],
        ] {
            let mut full = vec!["pmio-rpc"];
            full.extend_from_slice(bad);
            assert!(Args::try_parse_from(full).is_err(), "{bad:?}");
        }
    }
}
