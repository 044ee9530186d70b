//! SPDK's `bdev_rbd_*` methods (feature `rpc`), on [`RbdRpc`]: the registered cluster
//! connections and the daemon's [`BdevHost`].
//!
//! - `bdev_rbd_register_cluster` connects once; `bdev_rbd_create` with its `cluster_name`
//!   shares that connection (as ceph-nvmeof puts 32 images on one). Without `cluster_name`
//!   the bdev gets a connection of its own from `user_id` and `config`, as in SPDK.
//! - `bdev_rbd_unregister_cluster` refuses (EBUSY) while a bdev uses the cluster.
//! - Connecting blocks the RPC thread for at most the connect timeout (10 s,
//!   `client_mount_timeout`): a cluster that is down gives an error, the daemon goes on.
//! - save_config writes the registrations ([`RbdRpc::config`]) before the bdevs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pmio::BlockDevice;
use pmio_jsonrpc::decl;
use pmio_jsonrpc::{Method, RUNTIME, RpcError};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::params::call;
use pmio_runtime::rpc::{BdevHost, BdevRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Cluster, ClusterOptions, RbdDevice, RbdError, RbdOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "rbd";

/// The rbd module's RPC state: registered clusters, the daemon's bdevs.
pub struct RbdRpc {
    host: Arc<BdevHost>,
    clusters: Mutex<BTreeMap<String, (RegisterCluster, Arc<Cluster>)>>,
}

impl RbdRpc {
    /// No cluster registered.
    pub fn new(host: Arc<BdevHost>) -> RbdRpc {
        RbdRpc {
            host,
            clusters: Mutex::new(BTreeMap::new()),
        }
    }

    fn clusters(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, (RegisterCluster, Arc<Cluster>)>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// save_config's `bdev_rbd_register_cluster` calls (before the bdevs that use them).
    pub fn config(&self) -> Vec<Value> {
        self.clusters()
            .values()
            .map(|(p, _)| call("bdev_rbd_register_cluster", p))
            .collect()
    }
}

/// The methods of the rbd module.
pub fn methods() -> Vec<Method<RbdRpc>> {
    vec![
        Method::new(
            "bdev_rbd_register_cluster",
            RUNTIME,
            bdev_rbd_register_cluster,
        ),
        Method::new(
            "bdev_rbd_unregister_cluster",
            RUNTIME,
            bdev_rbd_unregister_cluster,
        ),
        Method::new(
            "bdev_rbd_get_clusters_info",
            RUNTIME,
            bdev_rbd_get_clusters_info,
        ),
        Method::new("bdev_rbd_create", RUNTIME, bdev_rbd_create),
        Method::new(
            "bdev_rbd_delete",
            RUNTIME,
            |r: &RbdRpc, _: &str, p: Option<&Value>| params::delete_bdev(&r.host, p, MODULE),
        ),
    ]
}

/// `bdev_rbd_register_cluster` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterCluster {
    /// Cluster registration name (what `bdev_rbd_create`'s `cluster_name` names).
    pub name: String,
    /// Ceph user without `client.` (default: librados's, `admin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Ceph options, set after the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_param: Option<BTreeMap<String, String>>,
    /// A ceph.conf.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// A keyring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// Cores of librados's threads: accepted and kept for save_config; librados's threads
    /// are not pinned by pmio.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_mask: Option<String>,
}

/// `bdev_rbd_unregister_cluster` and `bdev_rbd_get_clusters_info` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterName {
    /// Registration name (optional for `bdev_rbd_get_clusters_info`: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `bdev_rbd_create` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RbdCreate {
    /// Bdev name (default: the first free of Ceph0, Ceph1, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Ceph user (without a registered cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Pool name.
    pub pool_name: String,
    /// Image name.
    pub rbd_name: String,
    /// Block size of the bdev.
    pub block_size: u32,
    /// Ceph options (without a registered cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<BTreeMap<String, String>>,
    /// A registered cluster to use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// UUID (default: random).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Open the image read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

fn rbd_error(e: &RbdError) -> RpcError {
    RpcError::errno_detail(e.errno(), e)
}

fn bdev_rbd_register_cluster(r: &RbdRpc, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: RegisterCluster = decl::decode(p)?;
    if r.clusters().contains_key(&p.name) {
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!("cluster {} is already registered", p.name),
        ));
    }
    let mut opts = ClusterOptions {
        config_file: p.config_file.clone(),
        key_file: p.key_file.clone(),
        config_param: p
            .config_param
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        ..ClusterOptions::default()
    };
    if let Some(u) = &p.user_id {
        opts.user_id = u.clone();
    }
    // Connect outside the lock: it may take up to the timeout.
    let cluster = Cluster::connect(opts).map_err(|e| rbd_error(&e))?;
    let name = p.name.clone();
    let mut all = r.clusters();
    if all.contains_key(&name) {
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!("cluster {name} is already registered"),
        ));
    }
    log::info!("bdev_rbd_register_cluster: {name} connected");
    all.insert(name.clone(), (p, cluster));
    Ok(Value::String(name))
}

fn bdev_rbd_unregister_cluster(r: &RbdRpc, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: ClusterName = decl::decode(p)?;
    let name = p
        .name
        .ok_or_else(|| RpcError::decode("missing field `name`"))?;
    let mut all = r.clusters();
    let Some((_, c)) = all.get(&name) else {
        return Err(RpcError::errno_detail(
            -libc::ENOENT,
            format_args!("cluster {name} is not registered"),
        ));
    };
    // Ours, plus one per image (device and queues) still open on it.
    if Arc::strong_count(c) > 1 {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("cluster {name} is still used by rbd bdevs"),
        ));
    }
    all.remove(&name);
    Ok(Value::Bool(true))
}

fn bdev_rbd_get_clusters_info(r: &RbdRpc, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: ClusterName = if p.is_some() {
        decl::decode(p)?
    } else {
        ClusterName::default()
    };
    let all = r.clusters();
    let info = |c: &RegisterCluster| {
        let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            let name = o.remove("name").unwrap_or(Value::Null);
            o.insert("cluster_name".into(), name);
        }
        v
    };
    match p.name {
        Some(n) => all.get(&n).map(|(c, _)| info(c)).ok_or_else(|| {
            RpcError::errno_detail(-libc::ENOENT, format_args!("cluster {n} is not registered"))
        }),
        None => Ok(Value::Array(all.values().map(|(c, _)| info(c)).collect())),
    }
}

fn bdev_rbd_create(r: &RbdRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RbdCreate = decl::decode(params)?;
    let uuid = params::parse_uuid(p.uuid.as_deref())?;
    let name = match &p.name {
        Some(n) => n.clone(),
        None => (0..)
            .map(|i| format!("Ceph{i}"))
            .find(|n| r.host.registry.get(n).is_none())
            .unwrap_or_default(),
    };
    r.host.check_name_free(&name)?;
    let cluster = match &p.cluster_name {
        Some(c) => {
            let all = r.clusters();
            let Some((_, cl)) = all.get(c) else {
                return Err(RpcError::errno_detail(
                    -libc::ENOENT,
                    format_args!("cluster {c} is not registered"),
                ));
            };
            Arc::clone(cl)
        }
        None => {
            let mut opts = ClusterOptions {
                config_param: p.config.clone().unwrap_or_default().into_iter().collect(),
                ..ClusterOptions::default()
            };
            if let Some(u) = &p.user_id {
                opts.user_id = u.clone();
            }
            Cluster::connect(opts).map_err(|e| rbd_error(&e))?
        }
    };
    let dev = RbdDevice::open(
        &cluster,
        RbdOptions {
            name: name.clone(),
            uuid,
            pool: p.pool_name.clone(),
            image: p.rbd_name.clone(),
            block_size: p.block_size,
            read_only: p.read_only.unwrap_or(false),
            ..RbdOptions::default()
        },
    )
    .map_err(|e| rbd_error(&e))?;
    let create = RbdCreate {
        name: Some(name),
        uuid: Some(dev.info().uuid.to_string()),
        ..p
    };
    // bdev_get_bdevs' driver_specific, as SPDK's bdev_rbd_dump_info_json writes it.
    let mut rbd = serde_json::json!({
        "pool_name": create.pool_name,
        "rbd_name": create.rbd_name,
    });
    match &create.cluster_name {
        Some(c) => rbd["cluster_name"] = Value::String(c.clone()),
        None => {
            if let Some(u) = &create.user_id {
                rbd["user_id"] = Value::String(u.clone());
            }
            if let Some(c) = &create.config {
                rbd["config"] = serde_json::to_value(c).unwrap_or(Value::Null);
            }
        }
    }
    let name = dev.info().name.clone();
    let mut record = BdevRecord::new(&name, MODULE, Some(call("bdev_rbd_create", &create)));
    record.driver_specific = serde_json::json!({ "rbd": rbd });
    r.host.add_bdev(dev, record)?;
    log::info!(
        "bdev_rbd_create: {name} on {}/{}",
        create.pool_name,
        create.rbd_name
    );
    Ok(Value::String(name))
}
