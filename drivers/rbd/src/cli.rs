//! rpc.py's `bdev_rbd_*` subcommands for `pmio-rpc` (feature `cli`), built into the methods'
//! declarations ([`RegisterCluster`], [`RbdCreate`], [`ClusterName`]).

use std::collections::BTreeMap;

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};
use pmio_runtime::rpc::params::DeleteBdev;

use crate::rpc::{ClusterName, RbdCreate, RegisterCluster};

/// `key=value` pairs of rpc.py's `--config-param`/`--config` into a map.
fn pairs(kv: &[String]) -> Result<Option<BTreeMap<String, String>>, String> {
    if kv.is_empty() {
        return Ok(None);
    }
    kv.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{s:?} is not key=value"))
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The rbd module's subcommands.
#[derive(Subcommand, Debug)]
pub enum RbdCommand {
    /// Register a Rados cluster connection.
    #[command(name = "bdev_rbd_register_cluster", rename_all = "kebab-case")]
    BdevRbdRegisterCluster {
        /// Registration name.
        name: String,
        /// Ceph user without `client.`.
        #[arg(long)]
        user_id: Option<String>,
        /// Ceph options, key=value (repeatable).
        #[arg(long)]
        config_param: Vec<String>,
        /// A ceph.conf.
        #[arg(long)]
        config_file: Option<String>,
        /// A keyring.
        #[arg(long)]
        key_file: Option<String>,
        /// Cores of librados's threads.
        #[arg(long)]
        core_mask: Option<String>,
    },
    /// Unregister a Rados cluster connection.
    #[command(name = "bdev_rbd_unregister_cluster", rename_all = "kebab-case")]
    BdevRbdUnregisterCluster {
        /// Registration name.
        name: String,
    },
    /// Show registered clusters.
    #[command(name = "bdev_rbd_get_clusters_info", rename_all = "kebab-case")]
    BdevRbdGetClustersInfo {
        /// Registration name.
        #[arg(short = 'b', long)]
        name: Option<String>,
    },
    /// Create an rbd bdev.
    #[command(name = "bdev_rbd_create", rename_all = "kebab-case")]
    BdevRbdCreate {
        /// Pool name.
        pool_name: String,
        /// Image name.
        rbd_name: String,
        /// Block size in bytes.
        block_size: u32,
        /// Bdev name.
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// Ceph user without `client.`.
        #[arg(long)]
        user_id: Option<String>,
        /// Ceph options, key=value (repeatable).
        #[arg(long)]
        config: Vec<String>,
        /// A registered cluster.
        #[arg(short = 'c', long)]
        cluster_name: Option<String>,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Open read-only.
        #[arg(short = 'r', long)]
        read_only: bool,
    },
    /// Delete an rbd bdev.
    #[command(name = "bdev_rbd_delete", rename_all = "kebab-case")]
    BdevRbdDelete {
        /// Bdev name.
        name: String,
    },
}

impl RbdCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Result<Request, String> {
        Ok(match self {
            RbdCommand::BdevRbdRegisterCluster {
                name,
                user_id,
                config_param,
                config_file,
                key_file,
                core_mask,
            } => Request::new(
                "bdev_rbd_register_cluster",
                &RegisterCluster {
                    name: name.clone(),
                    user_id: user_id.clone(),
                    config_param: pairs(config_param)?,
                    config_file: config_file.clone(),
                    key_file: key_file.clone(),
                    core_mask: core_mask.clone(),
                },
                Print::Json,
            ),
            RbdCommand::BdevRbdUnregisterCluster { name } => Request::new(
                "bdev_rbd_unregister_cluster",
                &ClusterName {
                    name: Some(name.clone()),
                },
                Print::Nothing,
            ),
            RbdCommand::BdevRbdGetClustersInfo { name } => Request::new(
                "bdev_rbd_get_clusters_info",
                &ClusterName { name: name.clone() },
                Print::Json,
            ),
            RbdCommand::BdevRbdCreate {
                pool_name,
                rbd_name,
                block_size,
                name,
                user_id,
                config,
                cluster_name,
                uuid,
                read_only,
            } => Request::new(
                "bdev_rbd_create",
                &RbdCreate {
                    name: name.clone(),
                    user_id: user_id.clone(),
                    pool_name: pool_name.clone(),
                    rbd_name: rbd_name.clone(),
                    block_size: *block_size,
                    config: pairs(config)?,
                    cluster_name: cluster_name.clone(),
                    uuid: uuid.clone(),
                    read_only: read_only.then_some(true),
                },
                Print::Json,
            ),
            RbdCommand::BdevRbdDelete { name } => Request::new(
                "bdev_rbd_delete",
                &DeleteBdev { name: name.clone() },
                Print::Nothing,
            ),
        })
    }
}
