//! The objects the checks see: those of the running daemon (for a load at run time) and those
//! the calls so far create.

use pmio::Uuid;
use pmio_nvmf::subsystem::{DISCOVERY_NQN, ListenAddr, TransportOpts};
use serde_json::Value;

use crate::Daemon;

/// A check of one object-creating call: what it would create, or what is wrong.
pub type CheckFn = fn(&Value, &mut World) -> Result<String, String>;

/// A subsystem as the checks see it.
#[derive(Clone, Debug)]
pub(super) struct SubSeen {
    pub(super) nqn: String,
    pub(super) max_ns: u32,
    pub(super) nsids: Vec<u32>,
    pub(super) hosts: Vec<String>,
    pub(super) listeners: Vec<ListenAddr>,
    pub(super) ana_reporting: bool,
}

/// The objects that exist at a point of the check: those of the running daemon (for a load at
/// run time) and those the calls so far create.
#[derive(Clone, Debug)]
pub struct World {
    /// The methods of this pmio-tgt (a vhost entry is a create when its method is one).
    pub(super) methods: Vec<&'static str>,
    pub(super) bdevs: Vec<(String, Option<Uuid>)>,
    pub(super) ctrlrs: Vec<(String, pmio_nvme::rpc::Trid)>,
    pub(super) transport: Option<TransportOpts>,
    pub(super) subsystems: Vec<SubSeen>,
    pub(super) vhost: Vec<String>,
    /// Whether the document has created the ublk target, and the ublk disks it started.
    pub(super) ublk_target: bool,
    pub(super) ublk: Vec<u32>,
    /// Keyring keys added so far (`keyring_file_add_key`).
    pub(super) keys: Vec<String>,
}

impl Default for World {
    fn default() -> World {
        World {
            methods: Vec::new(),
            bdevs: Vec::new(),
            ctrlrs: Vec::new(),
            transport: None,
            subsystems: vec![SubSeen {
                nqn: DISCOVERY_NQN.into(),
                max_ns: 0,
                nsids: Vec::new(),
                hosts: Vec::new(),
                listeners: Vec::new(),
                ana_reporting: false,
            }],
            vhost: Vec::new(),
            ublk_target: false,
            ublk: Vec::new(),
            keys: Vec::new(),
        }
    }
}

impl World {
    /// Nothing yet, in a daemon whose methods are `methods` (`--check-config` without a
    /// daemon: a vhost call is a create only if the daemon has the vhost methods).
    pub fn with_methods(methods: Vec<&'static str>) -> World {
        World {
            methods,
            ..World::default()
        }
    }

    /// What a running daemon has.
    pub fn of(rpc: &dyn Daemon) -> World {
        let c = rpc.nvmf().config();
        World {
            // A running daemon's ublk target and disks are the calls' own business.
            ublk_target: false,
            ublk: Vec::new(),
            methods: rpc.method_names(false),
            bdevs: rpc
                .bdevs()
                .list()
                .iter()
                .map(|d| (d.info().name.clone(), Some(d.info().uuid)))
                .collect(),
            ctrlrs: rpc
                .nvme_ctrlrs()
                .into_iter()
                .map(|c| (c.name, c.trid))
                .collect(),
            transport: c.transport.clone(),
            subsystems: c
                .subsystems
                .iter()
                .map(|s| SubSeen {
                    nqn: s.nqn.clone(),
                    max_ns: s.max_namespaces,
                    nsids: s.namespaces.iter().map(|n| n.nsid).collect(),
                    hosts: s.hosts.clone(),
                    listeners: s.listeners.clone(),
                    ana_reporting: s.ana_reporting,
                })
                .collect(),
            vhost: if rpc.states_of("vhost_get_controllers").is_some() {
                rpc.invoke("vhost_get_controllers", None)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| c["ctrlr"].as_str().map(str::to_string))
                    .collect()
            } else {
                Vec::new()
            },
            keys: if rpc.states_of("keyring_get_keys").is_some() {
                rpc.invoke("keyring_get_keys", None)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter(|k| k["removed"] == false)
                    .filter_map(|k| k["name"].as_str().map(str::to_string))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether bdev `name` (a name, a UUID alias, or `<ctrlr>n<nsid>` of a controller
    /// attached in this file) would exist. An lvol (`lvs/lvol`, or the uuid it is named by)
    /// is not created by any call: it appears when its lvstore's base bdev is examined, so it
    /// may exist once any bdev does (applying the file then finds out).
    pub(super) fn has_bdev(&self, name: &str) -> bool {
        if self.bdevs.iter().any(|(n, _)| n == name) {
            return true;
        }
        let may_be_lvol = name.contains('/') || Uuid::parse(name).is_some();
        if may_be_lvol && !self.bdevs.is_empty() {
            return true;
        }
        if let Some(u) = Uuid::parse(name)
            && self.bdevs.iter().any(|(_, id)| *id == Some(u))
        {
            return true;
        }
        self.ctrlrs.iter().any(|(c, _)| {
            name.strip_prefix(c.as_str())
                .and_then(|r| r.strip_prefix('n'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }

    pub(super) fn add_bdev(&mut self, name: &str, uuid: Option<Uuid>) -> Result<(), String> {
        if self.bdevs.iter().any(|(n, _)| n == name) {
            return Err(format!("bdev {name} already exists"));
        }
        self.bdevs.push((name.to_string(), uuid));
        Ok(())
    }

    pub(super) fn subsystem(&mut self, nqn: &str) -> Result<&mut SubSeen, String> {
        self.subsystems
            .iter_mut()
            .find(|s| s.nqn == nqn)
            .ok_or_else(|| format!("subsystem {nqn} is not created before this call"))
    }
}
