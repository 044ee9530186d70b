//! Every method SPDK v25.09's `save_config` writes (and pmio's own), with what pmio does with it.
//!
//! One table, read by the loader (`-c`, `load_config`, rpc.py's replay), by `--check-config` and
//! by the README's "Moving from SPDK" section:
//!
//! - [`Handling::Create`]: a pmio method creates the object; the entry says how a failed load
//!   removes it again ([`Undo`]) and how `--check-config` checks it without creating it.
//! - [`Handling::Set`]: a pmio method changes an existing object (pmio's own methods); undone
//!   by putting the old value back.
//! - [`Handling::Setting`]: SPDK's setting, planned key by key into mapped, same or ignored
//!   ([`super::settings`]).
//! - [`Handling::Ignore`]: a setting with no meaning in pmio; accepted, logged once with why.
//! - [`Handling::Refuse`]: an object someone's data would live on, which pmio cannot create:
//!   the load stops, naming section, method and object.
//! - [`Handling::Vhost`]: a vhost controller: refused while this pmio-tgt has no vhost-user
//!   target (no `vhost_create_blk_controller` method), created like any object once it has
//!   one; the entry carries both.
//!
//! A method in no entry is refused as unknown, and so is a section SPDK does not have (SPDK
//! itself skips both silently).

use serde_json::{Value, json};

use super::check::params;
use super::check::world::CheckFn;
use super::settings::{PlanFn, plans};
use crate::Daemon;

/// How a failed load removes what a call created.
#[derive(Clone, Copy, Debug)]
pub enum Undo {
    /// Call `method` with parameters taken from the create call.
    Call(&'static str, &'static [(&'static str, Arg)]),
    /// Decided from the state before the call (what existed, the old value).
    Before(fn(&dyn Daemon, &Value) -> Before),
}

/// Where an undo parameter comes from.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// The create call's parameter at this dotted path.
    Param(&'static str),
    /// The create method's result (a bdev name, an NSID).
    Result,
}

/// A method call that undoes another.
#[derive(Clone, Debug, PartialEq)]
pub struct UndoCall {
    /// What it removes ("bdev Malloc0").
    pub what: String,
    /// Method.
    pub method: String,
    /// Parameters.
    pub params: Value,
}

/// What the state before a call says about undoing it.
#[derive(Clone, Debug, PartialEq)]
pub enum Before {
    /// Undo with this call once the call succeeded.
    Undo(UndoCall),
    /// The call cannot be undone; this says what stays and why.
    Keep(String),
    /// The object is already there as asked: the call is skipped.
    Present(String),
}

/// An object-creating (or object-changing) method.
#[derive(Clone, Copy, Debug)]
pub struct Create {
    /// Names the object ("bdev Malloc0").
    pub what: fn(&Value) -> String,
    /// How a failed load removes it.
    pub undo: Undo,
    /// `--check-config`'s check (no side effect).
    pub check: CheckFn,
}

/// What pmio does with a method of a configuration.
#[derive(Clone, Copy, Debug)]
pub enum Handling {
    /// Creates an object.
    Create(Create),
    /// Changes an existing object (pmio's own methods).
    Set(Create),
    /// An SPDK setting, planned key by key.
    Setting(PlanFn),
    /// Accepted, changes nothing: why.
    Ignore(&'static str),
    /// Stops the load: the object's parameter path and why.
    Refuse(&'static str, &'static str),
    /// A vhost object: refused (object path, why) while pmio-tgt lacks the method, created as
    /// `then` once it has it.
    Vhost(&'static str, &'static str, Create),
}

/// One method.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// SPDK's method name.
    pub method: &'static str,
    /// The section (SPDK subsystem) `save_config` writes it in.
    pub section: &'static str,
    /// What pmio does with it.
    pub handling: Handling,
}

/// The entry of `method`.
pub fn lookup(method: &str) -> Option<&'static Entry> {
    TABLE.iter().find(|e| e.method == method)
}

impl Entry {
    /// The handling in a pmio-tgt that has the method (`registered`) or not: a vhost entry is
    /// a create once the method exists.
    pub fn handling(&self, registered: bool) -> Handling {
        match self.handling {
            Handling::Vhost(_, _, then) if registered => Handling::Create(then),
            h => h,
        }
    }
}

/// SPDK v25.09's subsystems (sections of its `save_config`), and pmio's.
pub const SECTIONS: [&str; 17] = [
    "keyring",
    "iobuf",
    "sock",
    "vmd",
    "accel",
    "bdev",
    "scsi",
    "scheduler",
    "vhost_scsi",
    "vhost_blk",
    "ublk",
    "nbd",
    "nvmf",
    "iscsi",
    "fsdev",
    "vfu_tgt",
    "interface",
];

/// The string at a dotted path of `params` (`"namespace.bdev_name"`), numbers as text.
pub fn param(params: &Value, path: &str) -> Option<String> {
    let v = path.split('.').try_fold(params, |v, k| v.get(k))?;
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn p(params: &Value, path: &str) -> String {
    param(params, path).unwrap_or_else(|| "?".into())
}

impl Undo {
    /// The undo call for a create with `params` and `result`, or what stays (Before undos are
    /// computed by the loader before the call).
    pub fn call(&self, what: &str, params: &Value, result: &Value) -> Option<UndoCall> {
        let Undo::Call(method, args) = self else {
            return None;
        };
        let mut out = serde_json::Map::new();
        for (k, a) in *args {
            let v = match a {
                Arg::Result => result.clone(),
                Arg::Param(path) => path
                    .split('.')
                    .try_fold(params, |v, k| v.get(k))
                    .cloned()
                    .unwrap_or(Value::Null),
            };
            out.insert((*k).to_string(), v);
        }
        Some(UndoCall {
            what: what.to_string(),
            method: (*method).to_string(),
            params: Value::Object(out),
        })
    }
}

// --- names of objects ---

fn rbd_cluster_name(v: &Value) -> String {
    format!("rbd cluster {}", p(v, "name"))
}

fn bdev_name(v: &Value) -> String {
    match param(v, "name") {
        Some(n) => format!("bdev {n}"),
        None => "bdev (named MallocN by pmio)".into(),
    }
}

fn ctrlr_name(v: &Value) -> String {
    let at = match pmio_nvme::rpc::args::parse(Some(v)) {
        Ok(a) => a.trid.describe(),
        Err(_) => p(v, "traddr"),
    };
    format!("NVMe controller {} at {at}", p(v, "name"))
}

fn transport_name(v: &Value) -> String {
    format!("the {} transport", p(v, "trtype").to_uppercase())
}

fn subsystem_name(v: &Value) -> String {
    format!("subsystem {}", p(v, "nqn"))
}

fn ns_name(v: &Value) -> String {
    format!(
        "namespace on bdev {} of {}",
        p(v, "namespace.bdev_name"),
        p(v, "nqn")
    )
}

fn listener_name(v: &Value) -> String {
    format!(
        "listener {}:{} of {}",
        p(v, "listen_address.traddr"),
        p(v, "listen_address.trsvcid"),
        p(v, "nqn")
    )
}

fn key_name(v: &Value) -> String {
    format!("key {}", p(v, "name"))
}

fn host_name(v: &Value) -> String {
    format!("host {} of {}", p(v, "host"), p(v, "nqn"))
}

fn scheduler_name(v: &Value) -> String {
    format!(
        "I/O scheduler {} of bdev {}",
        p(v, "scheduler"),
        p(v, "name")
    )
}

fn vhost_name(v: &Value) -> String {
    format!(
        "vhost controller {} on bdev {}",
        p(v, "ctrlr"),
        p(v, "dev_name")
    )
}

fn ublk_disk_name(v: &Value) -> String {
    format!(
        "ublk disk {} on bdev {}",
        p(v, "ublk_id"),
        p(v, "bdev_name")
    )
}

fn allow_any_host_name(v: &Value) -> String {
    format!(
        "allow_any_host {} of {}",
        p(v, "allow_any_host"),
        p(v, "nqn")
    )
}

fn ana_state_name(v: &Value) -> String {
    format!(
        "ANA state {} of {} (group {})",
        p(v, "ana_state"),
        listener_name(v),
        p(v, "anagrpid")
    )
}

fn histogram_name(v: &Value) -> String {
    format!("latency histogram of bdev {}", p(v, "name"))
}

// --- undo decided before the call ---

/// An NVMe controller attached again at the same address is already there (the method
/// answers its bdevs); a new one is detached by a rollback.
fn before_attach(rpc: &dyn Daemon, v: &Value) -> Before {
    let name = p(v, "name");
    let trid = pmio_nvme::rpc::args::parse(Some(v)).map(|a| a.trid);
    match rpc.nvme_ctrlrs().into_iter().find(|c| c.name == name) {
        Some(c) if trid.as_ref().is_ok_and(|t| c.trid.same_path(t)) => Before::Present(format!(
            "NVMe controller {name} is attached at {}",
            c.trid.describe()
        )),
        _ => Before::Undo(UndoCall {
            what: ctrlr_name(v),
            method: "bdev_nvme_detach_controller".into(),
            params: json!({ "name": name }),
        }),
    }
}

/// The TCP transport cannot be deleted (pmio-nvmf has no such call; it holds no listener once
/// the subsystems are gone). Loading the same file again finds it with the same options.
fn before_transport(rpc: &dyn Daemon, v: &Value) -> Before {
    match pmio_nvmf::rpc::transport_matches(rpc.nvmf(), v) {
        Some(true) => Before::Present("the TCP transport exists with these options".into()),
        _ => Before::Keep(
            "the TCP transport stays (pmio-nvmf cannot delete a transport; it serves nothing \
             without subsystems)"
                .into(),
        ),
    }
}

/// The bdev's scheduler before the call, set back by a rollback.
fn before_scheduler(rpc: &dyn Daemon, v: &Value) -> Before {
    let name = p(v, "name");
    match rpc.invoke("bdev_get_scheduler", Some(&json!({ "name": name }))) {
        Ok(s) => {
            let s = &s[0];
            let mut params = json!({"name": name, "scheduler": s["scheduler"]});
            if let Some(t) = s.get("tunables").and_then(Value::as_object) {
                for (k, v) in t {
                    params[k] = v.clone();
                }
            }
            Before::Undo(UndoCall {
                what: scheduler_name(v),
                method: "bdev_set_scheduler".into(),
                params,
            })
        }
        // No such bdev: the call fails and there is nothing to undo.
        Err(_) => Before::Keep(String::new()),
    }
}

/// A histogram that was off is turned off again by a rollback; one that was on stays on (with
/// the counts and the I/O type the call gave it).
fn before_histogram(rpc: &dyn Daemon, v: &Value) -> Before {
    let name = p(v, "name");
    match rpc.invoke("bdev_get_histogram", Some(&json!({ "name": name }))) {
        Ok(_) => Before::Keep(format!(
            "the latency histogram of bdev {name} stays on, as the call set it"
        )),
        Err(_) => Before::Undo(UndoCall {
            what: histogram_name(v),
            method: "bdev_enable_histogram".into(),
            params: json!({"name": name, "enable": false}),
        }),
    }
}

/// The subsystem's allow_any_host before the call, set back by a rollback.
fn before_allow_any_host(rpc: &dyn Daemon, v: &Value) -> Before {
    let nqn = p(v, "nqn");
    match rpc.nvmf().config().subsystem(&nqn) {
        Some(s) => Before::Undo(UndoCall {
            what: allow_any_host_name(v),
            method: "nvmf_subsystem_allow_any_host".into(),
            params: json!({"nqn": nqn, "allow_any_host": s.allow_any_host}),
        }),
        None => Before::Keep(String::new()),
    }
}

/// An ANA state set on a listener goes back to the state the listener's group had (group 1's
/// when every group was set: they differ only where a later call set one).
fn before_ana_state(rpc: &dyn Daemon, v: &Value) -> Before {
    let nqn = p(v, "nqn");
    let addr = v.get("listen_address").and_then(|a| {
        let port = a.get("trsvcid").and_then(Value::as_str)?;
        let traddr = a.get("traddr").and_then(Value::as_str)?;
        pmio_nvmf::ListenAddr::new(traddr, port, None).ok()
    });
    let group = v.get("anagrpid").and_then(Value::as_u64).unwrap_or(0) as u32;
    let cfg = rpc.nvmf().config();
    match (cfg.subsystem(&nqn), addr) {
        (Some(s), Some(a)) if s.listener_ana(&a).is_some() => {
            let mut params = v.clone();
            params["ana_state"] = json!(s.ana_state(&a, group.max(1)).name());
            Before::Undo(UndoCall {
                what: ana_state_name(v),
                method: "nvmf_subsystem_listener_set_ana_state".into(),
                params,
            })
        }
        // No such listener: the call fails and there is nothing to undo.
        _ => Before::Keep(String::new()),
    }
}

// --- the table ---

const fn create(what: fn(&Value) -> String, undo: Undo, check: CheckFn) -> Handling {
    Handling::Create(Create { what, undo, check })
}

const fn e(method: &'static str, section: &'static str, handling: Handling) -> Entry {
    Entry {
        method,
        section,
        handling,
    }
}

const NO_ACCEL: &str = "pmio has no accel framework: the CPU does copies and CRCs in place";
const NO_ISCSI: &str = "pmio has no iSCSI target; target nodes, which export data, are refused";
const NO_VHOST: &str =
    "this pmio-tgt has no vhost-user-blk target (no vhost_create_blk_controller method)";
const NO_VHOST_SCSI: &str = "pmio has no vhost-scsi target: the guest would lose this disk";
const NAME: &[(&str, Arg)] = &[("name", Arg::Result)];

/// Every method pmio knows in a configuration.
pub static TABLE: &[Entry] = &[
    // keyring
    e(
        "keyring_file_add_key",
        "keyring",
        create(
            key_name,
            Undo::Call("keyring_file_remove_key", &[("name", Arg::Param("name"))]),
            params::keyring_file_key,
        ),
    ),
    e(
        "keyring_linux_set_options",
        "keyring",
        Handling::Ignore("pmio has no Linux-keyring module: keys come from files"),
    ),
    // iobuf
    e(
        "iobuf_set_options",
        "iobuf",
        Handling::Ignore(
            "pmio has no shared iobuf pool: each queue owns its buffers, sized when it opens",
        ),
    ),
    // sock
    e(
        "sock_set_default_impl",
        "sock",
        Handling::Setting(plans::sock_set_default_impl),
    ),
    e(
        "sock_impl_set_options",
        "sock",
        Handling::Setting(plans::sock_impl_set_options),
    ),
    // vmd
    e(
        "vmd_enable",
        "vmd",
        Handling::Ignore(
            "pmio has no VMD driver: a controller behind a VMD cannot be attached (its \
             bdev_nvme_attach_controller fails and stops the load)",
        ),
    ),
    // accel
    e("accel_set_options", "accel", Handling::Ignore(NO_ACCEL)),
    e("accel_assign_opc", "accel", Handling::Ignore(NO_ACCEL)),
    e("accel_set_driver", "accel", Handling::Ignore(NO_ACCEL)),
    e(
        "ioat_scan_accel_module",
        "accel",
        Handling::Ignore(NO_ACCEL),
    ),
    e("dsa_scan_accel_module", "accel", Handling::Ignore(NO_ACCEL)),
    e("iaa_scan_accel_module", "accel", Handling::Ignore(NO_ACCEL)),
    e(
        "mlx5_scan_accel_module",
        "accel",
        Handling::Ignore(NO_ACCEL),
    ),
    e(
        "compressdev_scan_accel_module",
        "accel",
        Handling::Ignore(NO_ACCEL),
    ),
    e(
        "dpdk_cryptodev_scan_accel_module",
        "accel",
        Handling::Ignore(NO_ACCEL),
    ),
    e(
        "dpdk_cryptodev_set_driver",
        "accel",
        Handling::Ignore(NO_ACCEL),
    ),
    e(
        "accel_error_inject_error",
        "accel",
        Handling::Ignore("a test hook of SPDK's accel framework, which pmio does not have"),
    ),
    e(
        "accel_crypto_key_create",
        "accel",
        Handling::Refuse(
            "name",
            "pmio has no encryption: data written through this key could not be read",
        ),
    ),
    // bdev: settings
    e(
        "bdev_set_options",
        "bdev",
        Handling::Ignore(
            "pmio has no bdev_io pool and examines every bdev: each queue preallocates its requests",
        ),
    ),
    e(
        "bdev_raid_set_options",
        "bdev",
        Handling::Set(Create {
            what: |_| "RAID process options".into(),
            undo: Undo::Before(|_, _| {
                Before::Keep("the RAID process options (a rebuild's window and bandwidth)".into())
            }),
            check: params::bdev_raid_set_options,
        }),
    ),
    e(
        "bdev_iscsi_set_options",
        "bdev",
        Handling::Ignore("pmio has no iSCSI initiator; iSCSI bdevs themselves are refused"),
    ),
    e(
        "bdev_nvme_set_options",
        "bdev",
        Handling::Setting(plans::bdev_nvme_set_options),
    ),
    e(
        "bdev_nvme_set_hotplug",
        "bdev",
        Handling::Setting(plans::bdev_nvme_set_hotplug),
    ),
    e(
        "bdev_wait_for_examine",
        "bdev",
        Handling::Setting(plans::bdev_wait_for_examine),
    ),
    e(
        "bdev_examine",
        "bdev",
        Handling::Ignore(
            "pmio examines every bdev as it is created (lvstores on it are found then): \
             replaying the call changes nothing",
        ),
    ),
    e(
        "bdev_enable_histogram",
        "bdev",
        Handling::Set(Create {
            what: histogram_name,
            undo: Undo::Before(before_histogram),
            check: params::bdev_enable_histogram,
        }),
    ),
    e(
        "bdev_set_qos_limit",
        "bdev",
        Handling::Ignore("pmio has no bdev QoS: the bdev runs without this rate limit"),
    ),
    e(
        "bdev_nvme_set_multipath_policy",
        "bdev",
        Handling::Ignore("pmio attaches one path per controller"),
    ),
    // bdev: what pmio creates
    e(
        "bdev_null_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_null_delete", NAME),
            params::bdev_null,
        ),
    ),
    e(
        "bdev_malloc_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_malloc_delete", NAME),
            params::bdev_malloc,
        ),
    ),
    e(
        "bdev_raid_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_raid_delete", NAME),
            params::bdev_raid,
        ),
    ),
    e(
        "bdev_uring_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_uring_delete", NAME),
            params::bdev_uring,
        ),
    ),
    e(
        "bdev_aio_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_uring_delete", NAME),
            params::bdev_aio,
        ),
    ),
    e(
        "bdev_nvme_attach_controller",
        "bdev",
        create(ctrlr_name, Undo::Before(before_attach), params::nvme_attach),
    ),
    e(
        "bdev_set_scheduler",
        "bdev",
        Handling::Set(Create {
            what: scheduler_name,
            undo: Undo::Before(before_scheduler),
            check: params::bdev_set_scheduler,
        }),
    ),
    // bdev: what pmio cannot create
    e(
        "bdev_lvol_create_lvstore",
        "bdev",
        Handling::Refuse(
            "lvs_name",
            "pmio does not create lvstores from a configuration (SPDK's save_config never writes \
             this call: a store is found on its bdev); create it with the RPC",
        ),
    ),
    e(
        "bdev_lvol_create",
        "bdev",
        Handling::Refuse(
            "lvol_name",
            "pmio does not create lvols from a configuration (SPDK's save_config never writes this \
             call: lvols are found with their lvstore); create it with the RPC",
        ),
    ),
    e(
        "bdev_split_create",
        "bdev",
        Handling::Refuse(
            "base_bdev",
            "pmio has no split bdevs: the parts' data would be unreachable by name",
        ),
    ),
    e(
        "bdev_passthru_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no passthru bdev: the name hosts use would be missing",
        ),
    ),
    e(
        "bdev_delay_create",
        "bdev",
        Handling::Refuse("name", "pmio has no delay bdev: the name would be missing"),
    ),
    e(
        "bdev_error_create",
        "bdev",
        Handling::Refuse(
            "base_name",
            "pmio has no error-injection bdev: the name would be missing",
        ),
    ),
    e(
        "bdev_zone_block_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no zoned block bdev: the zoned view of the data would be missing",
        ),
    ),
    e(
        "bdev_crypto_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no encryption: the data would read as ciphertext",
        ),
    ),
    e(
        "bdev_compress_create",
        "bdev",
        Handling::Refuse(
            "base_bdev_name",
            "pmio has no compression: the data would be unreadable",
        ),
    ),
    e(
        "bdev_ocf_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no OCF cache: dirty data in the cache would be lost",
        ),
    ),
    e(
        "bdev_ftl_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no FTL: the data behind its mapping would be unreadable",
        ),
    ),
    e(
        "bdev_rbd_register_cluster",
        "bdev",
        create(
            rbd_cluster_name,
            Undo::Call("bdev_rbd_unregister_cluster", NAME),
            params::bdev_rbd_register_cluster,
        ),
    ),
    e(
        "bdev_rbd_create",
        "bdev",
        create(
            bdev_name,
            Undo::Call("bdev_rbd_delete", NAME),
            params::bdev_rbd,
        ),
    ),
    e(
        "bdev_iscsi_create",
        "bdev",
        Handling::Refuse("name", "pmio has no iSCSI initiator"),
    ),
    e(
        "bdev_virtio_attach_controller",
        "bdev",
        Handling::Refuse("name", "pmio has no virtio initiator"),
    ),
    e(
        "bdev_xnvme_create",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no xNVMe bdev (bdev_uring_create is close)",
        ),
    ),
    e(
        "bdev_daos_create",
        "bdev",
        Handling::Refuse("name", "pmio has no DAOS client"),
    ),
    e(
        "bdev_opal_create",
        "bdev",
        Handling::Refuse(
            "nvme_ctrlr_name",
            "pmio has no Opal: the locking range's data would stay locked",
        ),
    ),
    e(
        "bdev_nvme_start_discovery",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no NVMe-oF discovery client (attach each subsystem with \
             bdev_nvme_attach_controller -t tcp): the namespaces this discovery finds would be \
             missing",
        ),
    ),
    e(
        "bdev_nvme_start_mdns_discovery",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no mDNS discovery (attach each subsystem with bdev_nvme_attach_controller \
             -t tcp): the namespaces this mDNS discovery finds would be missing",
        ),
    ),
    e(
        "bdev_nvme_cuse_register",
        "bdev",
        Handling::Refuse(
            "name",
            "pmio has no CUSE devices: /dev/spdk/<name> would be missing",
        ),
    ),
    // scheduler
    e(
        "framework_set_scheduler",
        "scheduler",
        Handling::Setting(plans::framework_set_scheduler),
    ),
    // vhost_scsi
    e(
        "vhost_create_scsi_controller",
        "vhost_scsi",
        Handling::Refuse("ctrlr", NO_VHOST_SCSI),
    ),
    e(
        "vhost_scsi_controller_add_target",
        "vhost_scsi",
        Handling::Refuse("ctrlr", NO_VHOST_SCSI),
    ),
    e(
        "vhost_start_scsi_controller",
        "vhost_scsi",
        Handling::Refuse("ctrlr", NO_VHOST_SCSI),
    ),
    // vhost_blk
    e(
        "vhost_create_blk_controller",
        "vhost_blk",
        Handling::Vhost(
            "ctrlr",
            NO_VHOST,
            Create {
                what: vhost_name,
                undo: Undo::Call("vhost_delete_controller", &[("ctrlr", Arg::Param("ctrlr"))]),
                check: params::vhost_blk,
            },
        ),
    ),
    e(
        "vhost_controller_set_coalescing",
        "vhost_blk",
        Handling::Ignore(
            "SPDK's delay-based interrupt coalescing: a polled target signals the guest at most \
             once per poll",
        ),
    ),
    e(
        "virtio_blk_create_transport",
        "vhost_blk",
        Handling::Refuse(
            "name",
            "pmio serves virtio-blk over vhost-user only: controllers on this transport would \
             be missing",
        ),
    ),
    // ublk, nbd
    e(
        "ublk_create_target",
        "ublk",
        create(
            |_| "ublk target".into(),
            Undo::Call("ublk_destroy_target", &[]),
            params::ublk_target,
        ),
    ),
    e(
        "ublk_start_disk",
        "ublk",
        create(
            ublk_disk_name,
            Undo::Call("ublk_stop_disk", &[("ublk_id", Arg::Param("ublk_id"))]),
            params::ublk_disk,
        ),
    ),
    e(
        "nbd_start_disk",
        "nbd",
        Handling::Refuse(
            "bdev_name",
            "pmio has no NBD export: the /dev/nbd<N> device would be missing",
        ),
    ),
    // nvmf
    e(
        "nvmf_set_config",
        "nvmf",
        Handling::Setting(plans::nvmf_set_config),
    ),
    e(
        "nvmf_set_max_subsystems",
        "nvmf",
        Handling::Setting(plans::nvmf_set_max_subsystems),
    ),
    e(
        "nvmf_set_crdt",
        "nvmf",
        Handling::Setting(plans::nvmf_set_crdt),
    ),
    e(
        "nvmf_create_transport",
        "nvmf",
        create(
            transport_name,
            Undo::Before(before_transport),
            params::nvmf_transport,
        ),
    ),
    e(
        "nvmf_create_subsystem",
        "nvmf",
        create(
            subsystem_name,
            Undo::Call("nvmf_delete_subsystem", &[("nqn", Arg::Param("nqn"))]),
            params::nvmf_subsystem,
        ),
    ),
    e(
        "nvmf_subsystem_add_host",
        "nvmf",
        create(
            host_name,
            Undo::Call(
                "nvmf_subsystem_remove_host",
                &[("nqn", Arg::Param("nqn")), ("host", Arg::Param("host"))],
            ),
            params::nvmf_host,
        ),
    ),
    e(
        "nvmf_subsystem_add_ns",
        "nvmf",
        create(
            ns_name,
            Undo::Call(
                "nvmf_subsystem_remove_ns",
                &[("nqn", Arg::Param("nqn")), ("nsid", Arg::Result)],
            ),
            params::nvmf_ns,
        ),
    ),
    e(
        "nvmf_subsystem_add_listener",
        "nvmf",
        create(
            listener_name,
            Undo::Call(
                "nvmf_subsystem_remove_listener",
                &[
                    ("nqn", Arg::Param("nqn")),
                    ("listen_address", Arg::Param("listen_address")),
                ],
            ),
            params::nvmf_listener,
        ),
    ),
    e(
        "nvmf_subsystem_listener_set_ana_state",
        "nvmf",
        Handling::Set(Create {
            what: ana_state_name,
            undo: Undo::Before(before_ana_state),
            check: params::nvmf_ana_state,
        }),
    ),
    e(
        "nvmf_subsystem_allow_any_host",
        "nvmf",
        Handling::Set(Create {
            what: allow_any_host_name,
            undo: Undo::Before(before_allow_any_host),
            check: params::nvmf_allow_any_host,
        }),
    ),
    e(
        "nvmf_ns_add_host",
        "nvmf",
        Handling::Refuse(
            "nqn",
            "pmio has no per-namespace host visibility: the namespace would be visible to \
             every host of the subsystem, or to none",
        ),
    ),
    e(
        "nvmf_discovery_add_referral",
        "nvmf",
        Handling::Refuse(
            "address.traddr",
            "pmio's discovery log has no referrals: hosts would not find the subsystems behind \
             this address",
        ),
    ),
    // iscsi
    e("iscsi_set_options", "iscsi", Handling::Ignore(NO_ISCSI)),
    e(
        "iscsi_set_discovery_auth",
        "iscsi",
        Handling::Ignore(NO_ISCSI),
    ),
    e(
        "iscsi_create_auth_group",
        "iscsi",
        Handling::Ignore(NO_ISCSI),
    ),
    e(
        "iscsi_create_portal_group",
        "iscsi",
        Handling::Ignore(NO_ISCSI),
    ),
    e(
        "iscsi_create_initiator_group",
        "iscsi",
        Handling::Ignore(NO_ISCSI),
    ),
    e(
        "iscsi_enable_histogram",
        "iscsi",
        Handling::Ignore(NO_ISCSI),
    ),
    e(
        "iscsi_create_target_node",
        "iscsi",
        Handling::Refuse(
            "name",
            "pmio has no iSCSI target: the initiators using this node would lose its LUNs",
        ),
    ),
    // fsdev
    e(
        "fsdev_set_opts",
        "fsdev",
        Handling::Ignore("pmio has no fsdev layer"),
    ),
    e(
        "fsdev_aio_create",
        "fsdev",
        Handling::Refuse(
            "name",
            "pmio has no fsdev: the exported file system would be missing",
        ),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_method_and_known_sections() {
        let mut seen = std::collections::HashSet::new();
        for e in TABLE {
            assert!(seen.insert(e.method), "{} twice", e.method);
            assert!(SECTIONS.contains(&e.section), "{}: {}", e.method, e.section);
        }
    }

    /// Every method SPDK v25.09's lib/ and module/ write in `save_config` (grep of
    /// `"method", "…"` in its sources) has an entry.
    #[test]
    fn every_spdk_save_config_method_is_in_the_table() {
        for m in [
            "accel_assign_opc",
            "accel_crypto_key_create",
            "accel_error_inject_error",
            "accel_set_driver",
            "accel_set_options",
            "bdev_aio_create",
            "bdev_crypto_create",
            "bdev_daos_create",
            "bdev_delay_create",
            "bdev_enable_histogram",
            "bdev_error_create",
            "bdev_examine",
            "bdev_ftl_create",
            "bdev_iscsi_create",
            "bdev_iscsi_set_options",
            "bdev_malloc_create",
            "bdev_null_create",
            "bdev_nvme_attach_controller",
            "bdev_nvme_cuse_register",
            "bdev_nvme_set_hotplug",
            "bdev_nvme_set_multipath_policy",
            "bdev_nvme_set_options",
            "bdev_nvme_start_discovery",
            "bdev_nvme_start_mdns_discovery",
            "bdev_ocf_create",
            "bdev_passthru_create",
            "bdev_raid_create",
            "bdev_raid_set_options",
            "bdev_rbd_create",
            "bdev_set_options",
            "bdev_set_qos_limit",
            "bdev_split_create",
            "bdev_uring_create",
            "bdev_virtio_attach_controller",
            "bdev_wait_for_examine",
            "bdev_xnvme_create",
            "bdev_zone_block_create",
            "compressdev_scan_accel_module",
            "dpdk_cryptodev_scan_accel_module",
            "dpdk_cryptodev_set_driver",
            "dsa_scan_accel_module",
            "framework_set_scheduler",
            "fsdev_aio_create",
            "fsdev_set_opts",
            "iaa_scan_accel_module",
            "ioat_scan_accel_module",
            "iobuf_set_options",
            "iscsi_create_auth_group",
            "iscsi_create_initiator_group",
            "iscsi_create_portal_group",
            "iscsi_create_target_node",
            "iscsi_enable_histogram",
            "iscsi_set_options",
            "keyring_file_add_key",
            "keyring_linux_set_options",
            "mlx5_scan_accel_module",
            "nbd_start_disk",
            "nvmf_create_subsystem",
            "nvmf_create_transport",
            "nvmf_discovery_add_referral",
            "nvmf_ns_add_host",
            "nvmf_set_config",
            "nvmf_set_crdt",
            "nvmf_set_max_subsystems",
            "nvmf_subsystem_add_host",
            "nvmf_subsystem_add_listener",
            "nvmf_subsystem_add_ns",
            "sock_impl_set_options",
            "sock_set_default_impl",
            "ublk_create_target",
            "ublk_start_disk",
            "vhost_controller_set_coalescing",
            "vhost_create_blk_controller",
            "vhost_create_scsi_controller",
            "vhost_scsi_controller_add_target",
            "vhost_start_scsi_controller",
            "virtio_blk_create_transport",
            "vmd_enable",
        ] {
            assert!(lookup(m).is_some(), "{m} has no entry");
        }
    }

    #[test]
    fn undo_calls_take_params_and_results() {
        let Handling::Create(c) = lookup("nvmf_subsystem_add_ns").unwrap().handling else {
            panic!()
        };
        let v = json!({"nqn": "nqn.x:y", "namespace": {"bdev_name": "Malloc0"}});
        assert_eq!((c.what)(&v), "namespace on bdev Malloc0 of nqn.x:y");
        let u = c.undo.call("ns", &v, &json!(3)).unwrap();
        assert_eq!(u.method, "nvmf_subsystem_remove_ns");
        assert_eq!(u.params, json!({"nqn": "nqn.x:y", "nsid": 3}));
        assert_eq!(param(&json!({"a": {"b": 4}}), "a.b").as_deref(), Some("4"));
    }
}
