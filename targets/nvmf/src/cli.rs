//! rpc.py's `nvmf_*` and `sock_*` subcommands for `pmio-rpc` (feature `cli`): the same
//! positional arguments and flags, the same request (keys in rpc.py's order, `store_true` flags
//! sent as `false`, absent options left out) and the same output (nothing for the methods that
//! change state, indent-2 JSON for the queries).
//!
//! The requests are the methods' own declarations ([`crate::rpc`]), built from the command line
//! and serialized: a key is named once, beside the method that decodes it. Where rpc.py's flags
//! are the keys, clap's derive is on the declaration itself (`nvmf_subsystem_remove_ns`,
//! `nvmf_subsystem_add_host`, the queries).
//!
//! - [`NvmfCommand`]: the `nvmf_*` subcommands; [`sock`]: the `sock_*` ones.

pub mod sock;
#[cfg(test)]
mod tests;

pub use sock::SockCommand;

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};
use pmio_jsonrpc::decl::{BoolDefault, IntDefault};

use crate::DISCOVERY_NQN;
use crate::rpc::conn::GetStats;
use crate::rpc::host::{AddHost, AllowAnyHost, RemoveHost};
use crate::rpc::listener::{AddListener, ListenAddress, RemoveListener, SetAnaState};
use crate::rpc::ns::{AddNs, NsParams, RemoveNs};
use crate::rpc::rules::{Ignored, TgtName};
use crate::rpc::subsystem::{CreateSubsystem, GetSubsystems, SubsystemQuery};
use crate::rpc::transport::{CreateTransport, GetTransports};

/// The NVMe-oF target's subcommands.
#[derive(Subcommand, Debug)]
pub enum NvmfCommand {
    /// Create an NVMe-oF transport (pmio: TCP).
    #[command(name = "nvmf_create_transport", rename_all = "kebab-case")]
    NvmfCreateTransport {
        /// Transport type (TCP).
        #[arg(short = 't', long)]
        trtype: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 'g', long)]
        tgt_name: Option<TgtName>,
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
    #[command(name = "nvmf_get_transports")]
    NvmfGetTransports(GetTransports),
    /// Display NVMe-oF subsystems, or one.
    #[command(name = "nvmf_get_subsystems")]
    NvmfGetSubsystems(GetSubsystems),
    /// Create an NVMe-oF subsystem.
    #[command(name = "nvmf_create_subsystem", rename_all = "kebab-case")]
    NvmfCreateSubsystem {
        /// Subsystem NQN.
        nqn: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<TgtName>,
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
        /// Enable ANA reporting (Asymmetric Namespace Access, multipath).
        #[arg(short = 'r', long)]
        ana_reporting: bool,
        /// Minimum controller ID (rpc.py: --min-cntlid; older: --min_cntlid).
        #[arg(short = 'i', long = "min-cntlid", alias = "min_cntlid")]
        min_cntlid: Option<u16>,
        /// Maximum controller ID (rpc.py: --max-cntlid; older: --max_cntlid).
        #[arg(short = 'I', long = "max-cntlid", alias = "max_cntlid")]
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
    #[command(name = "nvmf_delete_subsystem")]
    NvmfDeleteSubsystem(SubsystemQuery),
    /// Add a listener to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_listener", rename_all = "kebab-case")]
    NvmfSubsystemAddListener {
        #[command(flatten)]
        listener: Listener,
        /// A secure channel: TLS 1.3 with the hosts' pre-shared keys (`--psk` of add_host).
        #[arg(short = 'k', long)]
        secure_channel: bool,
        /// ANA state of every group: optimized, non_optimized or inaccessible.
        #[arg(short = 'n', long)]
        ana_state: Option<String>,
        /// Socket implementation (SPDK; no effect in pmio).
        #[arg(short = 'S', long)]
        sock_impl: Option<String>,
    },
    /// Remove a listener from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_listener", rename_all = "kebab-case")]
    NvmfSubsystemRemoveListener {
        #[command(flatten)]
        listener: Listener,
    },
    /// Set the ANA state of a listener of an NVMe-oF subsystem.
    #[command(
        name = "nvmf_subsystem_listener_set_ana_state",
        rename_all = "kebab-case"
    )]
    NvmfSubsystemListenerSetAnaState {
        #[command(flatten)]
        listener: Listener,
        /// ANA state to set: optimized, non_optimized or inaccessible.
        #[arg(short = 'n', long)]
        ana_state: String,
        /// ANA group ID (default: every group).
        #[arg(short = 'g', long)]
        anagrpid: Option<u32>,
    },
    /// Add a namespace to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_ns", rename_all = "kebab-case")]
    NvmfSubsystemAddNs {
        /// Subsystem NQN.
        nqn: String,
        /// The bdev behind the namespace.
        bdev_name: String,
        /// The name of the parent NVMe-oF target.
        #[arg(short = 't', long)]
        tgt_name: Option<TgtName>,
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
        /// ANA group ID (default: the NSID).
        #[arg(short = 'a', long)]
        anagrpid: Option<u32>,
        /// Do not make the namespace visible to controllers automatically (pmio: not supported).
        #[arg(short = 'i', long)]
        no_auto_visible: bool,
        /// Hide the bdev's metadata (pmio: not supported).
        #[arg(short = 'N', long)]
        hide_metadata: bool,
    },
    /// Remove a namespace from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_ns")]
    NvmfSubsystemRemoveNs(RemoveNs),
    /// Allow a host to connect to an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_add_host")]
    NvmfSubsystemAddHost(AddHost),
    /// Remove a host from an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_remove_host")]
    NvmfSubsystemRemoveHost(RemoveHost),
    /// Allow any host to connect to the subsystem (-e, the default) or only listed hosts (-d).
    #[command(name = "nvmf_subsystem_allow_any_host", rename_all = "kebab-case")]
    NvmfSubsystemAllowAnyHost {
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
        tgt_name: Option<TgtName>,
    },
    /// Display the controllers of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_controllers")]
    NvmfSubsystemGetControllers(SubsystemQuery),
    /// Display the queue pairs of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_qpairs")]
    NvmfSubsystemGetQpairs(SubsystemQuery),
    /// Display the listeners of an NVMe-oF subsystem.
    #[command(name = "nvmf_subsystem_get_listeners")]
    NvmfSubsystemGetListeners(SubsystemQuery),
    /// Display the NVMe-oF target's statistics.
    #[command(name = "nvmf_get_stats")]
    NvmfGetStats(GetStats),
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
    tgt_name: Option<TgtName>,
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

impl NvmfCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        use NvmfCommand::*;
        match self {
            NvmfCreateTransport {
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
            } => {
                let p = CreateTransport {
                    trtype: trtype.clone(),
                    tgt_name: tgt_name.clone(),
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
                };
                Request::new("nvmf_create_transport", &p, Print::Nothing)
            }
            NvmfGetTransports(p) => Request::new_or_bare("nvmf_get_transports", p, Print::Dict),
            NvmfGetSubsystems(p) => Request::new_or_bare("nvmf_get_subsystems", p, Print::Dict),
            NvmfCreateSubsystem {
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
            } => {
                let p = CreateSubsystem {
                    nqn: nqn.clone(),
                    tgt_name: tgt_name.clone(),
                    serial_number: serial_number.clone(),
                    model_number: model_number.clone(),
                    allow_any_host: *allow_any_host,
                    max_namespaces: *max_namespaces,
                    ana_reporting: Some(*ana_reporting),
                    min_cntlid: *min_cntlid,
                    max_cntlid: *max_cntlid,
                    max_discard_size_kib: max_discard_size.map(IntDefault),
                    max_write_zeroes_size_kib: max_write_zeroes_size.map(IntDefault),
                    passthrough: only_false(*passthrough),
                    enable_nssr: only_false(*enable_nssr),
                };
                Request::new("nvmf_create_subsystem", &p, Print::Nothing)
            }
            NvmfDeleteSubsystem(p) => Request::new("nvmf_delete_subsystem", p, Print::Nothing),
            NvmfSubsystemAddListener {
                listener,
                secure_channel,
                ana_state,
                sock_impl,
            } => {
                let p = AddListener {
                    nqn: listener.nqn(),
                    tgt_name: listener.tgt_name.clone(),
                    secure_channel: Some(*secure_channel),
                    ana_state: ana_state.clone(),
                    sock_impl: sock_impl.clone().map(Ignored),
                    listen_address: listener.address(),
                };
                Request::new("nvmf_subsystem_add_listener", &p, Print::Nothing)
            }
            NvmfSubsystemRemoveListener { listener } => {
                let p = RemoveListener {
                    nqn: listener.nqn(),
                    tgt_name: listener.tgt_name.clone(),
                    listen_address: listener.address(),
                };
                Request::new("nvmf_subsystem_remove_listener", &p, Print::Nothing)
            }
            NvmfSubsystemListenerSetAnaState {
                listener,
                ana_state,
                anagrpid,
            } => {
                let p = SetAnaState {
                    nqn: listener.nqn(),
                    ana_state: ana_state.clone(),
                    tgt_name: listener.tgt_name.clone(),
                    anagrpid: *anagrpid,
                    listen_address: listener.address(),
                };
                Request::new("nvmf_subsystem_listener_set_ana_state", &p, Print::Nothing)
            }
            NvmfSubsystemAddNs {
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
            } => {
                let p = AddNs {
                    nqn: nqn.clone(),
                    tgt_name: tgt_name.clone(),
                    namespace: NsParams {
                        bdev_name: bdev_name.clone(),
                        ptpl_file: ptpl_file.clone(),
                        nsid: *nsid,
                        nguid: nguid.clone(),
                        eui64: eui64.clone(),
                        uuid: uuid.clone(),
                        anagrpid: *anagrpid,
                        no_auto_visible: only_false(*no_auto_visible),
                        hide_metadata: only_false(*hide_metadata),
                    },
                };
                Request::new("nvmf_subsystem_add_ns", &p, Print::Nothing)
            }
            NvmfSubsystemRemoveNs(p) => Request::new("nvmf_subsystem_remove_ns", p, Print::Nothing),
            NvmfSubsystemAddHost(p) => Request::new("nvmf_subsystem_add_host", p, Print::Nothing),
            NvmfSubsystemRemoveHost(p) => {
                Request::new("nvmf_subsystem_remove_host", p, Print::Nothing)
            }
            // rpc.py: allow unless -d (-e is the default, kept for symmetry).
            NvmfSubsystemAllowAnyHost {
                nqn,
                enable: _,
                disable,
                tgt_name,
            } => {
                let p = AllowAnyHost {
                    nqn: nqn.clone(),
                    allow_any_host: !*disable,
                    tgt_name: tgt_name.clone(),
                };
                Request::new("nvmf_subsystem_allow_any_host", &p, Print::Nothing)
            }
            NvmfSubsystemGetControllers(p) => {
                Request::new("nvmf_subsystem_get_controllers", p, Print::Dict)
            }
            NvmfSubsystemGetQpairs(p) => Request::new("nvmf_subsystem_get_qpairs", p, Print::Dict),
            NvmfSubsystemGetListeners(p) => {
                Request::new("nvmf_subsystem_get_listeners", p, Print::Dict)
            }
            NvmfGetStats(p) => Request::new_or_bare("nvmf_get_stats", p, Print::Dict),
        }
    }
}
