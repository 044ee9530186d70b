//! The target: the controllers RPC creates and deletes, the socket directory they listen in
//! (SPDK's `-S`), and shutdown.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pmio::bdev::Registry;
use pmio_reactors::{CoreMask, ReactorsHandle};

use crate::ctrlr::{Controller, CtrlrInfo, CtrlrOptions};
use crate::error::VhostError;

/// The longest unix socket path (`sun_path` holds 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `vhost_create_blk_controller`'s parameters.
#[derive(Clone, Debug, Default)]
pub struct BlkCtrlrParams {
    pub ctrlr: String,
    pub dev_name: String,
    /// Reactor mask (SPDK's forms); `None`: every reactor.
    pub cpumask: Option<String>,
    pub readonly: bool,
    pub packed_ring: bool,
}

/// The vhost target of a daemon.
pub struct VhostTarget {
    reactors: ReactorsHandle,
    registry: Arc<Registry>,
    socket_dir: Mutex<PathBuf>,
    ctrlrs: Mutex<Vec<Controller>>,
    next_id: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl VhostTarget {
    /// A target with no controllers; sockets go to the current directory until
    /// [`VhostTarget::set_socket_dir`].
    pub fn new(reactors: ReactorsHandle, registry: Arc<Registry>) -> Arc<VhostTarget> {
        Arc::new(VhostTarget {
            reactors,
            registry,
            socket_dir: Mutex::new(PathBuf::from(".")),
            ctrlrs: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        })
    }

    /// Where controllers' sockets are created (SPDK's `-S`).
    pub fn set_socket_dir(&self, dir: &Path) {
        *lock(&self.socket_dir) = dir.to_path_buf();
    }

    pub fn socket_dir(&self) -> PathBuf {
        lock(&self.socket_dir).clone()
    }

    /// Creates a vhost-user-blk controller serving bdev `p.dev_name` on `DIR/p.ctrlr`.
    pub fn create_blk(&self, p: &BlkCtrlrParams) -> Result<Arc<CtrlrInfo>, VhostError> {
        if p.packed_ring {
            return Err(VhostError::PackedRing);
        }
        check_name(&p.ctrlr)?;
        let cpumask = self.cpumask(p.cpumask.as_deref())?;
        let socket = self.socket_dir().join(&p.ctrlr);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(VhostError::BadName(
                p.ctrlr.clone(),
                "the socket path is longer than 107 bytes",
            ));
        }
        let mut ctrlrs = lock(&self.ctrlrs);
        if ctrlrs.iter().any(|c| c.info.name == p.ctrlr) {
            return Err(VhostError::Exists(p.ctrlr.clone()));
        }
        if self.registry.get(&p.dev_name).is_none() {
            return Err(VhostError::BdevNotFound(p.dev_name.clone()));
        }
        if let Some(c) = ctrlrs.iter().find(|c| c.info.bdev == p.dev_name) {
            return Err(VhostError::BdevInUse {
                bdev: p.dev_name.clone(),
                ctrlr: c.info.name.clone(),
            });
        }
        let c = Controller::start(
            CtrlrOptions {
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                name: p.ctrlr.clone(),
                bdev: p.dev_name.clone(),
                cpumask,
                readonly: p.readonly,
                socket,
            },
            self.reactors.clone(),
            Arc::clone(&self.registry),
        )?;
        let info = Arc::clone(&c.info);
        ctrlrs.push(c);
        Ok(info)
    }

    fn cpumask(&self, mask: Option<&str>) -> Result<CoreMask, VhostError> {
        let all = self.reactors.mask().clone();
        let Some(m) = mask else {
            return Ok(all);
        };
        let bad = |reason: String| VhostError::Cpumask {
            mask: m.to_string(),
            reason,
        };
        let parsed = CoreMask::parse_unchecked(m).map_err(|e| bad(e.to_string()))?;
        if let Some(c) = parsed.cores().iter().find(|&&c| !all.contains(c)) {
            return Err(bad(format!(
                "core {c} runs no reactor (reactors: {})",
                all.to_list()
            )));
        }
        Ok(parsed)
    }

    /// Deletes controller `name`. Refused while a front end is connected (SPDK's rule: the
    /// VM would lose its disk under it).
    pub fn delete(&self, name: &str) -> Result<(), VhostError> {
        let mut ctrlrs = lock(&self.ctrlrs);
        let i = ctrlrs
            .iter()
            .position(|c| c.info.name == name)
            .ok_or_else(|| VhostError::NotFound(name.to_string()))?;
        if ctrlrs[i].info.connected.load(Ordering::Relaxed) {
            return Err(VhostError::Connected(name.to_string()));
        }
        let c = ctrlrs.remove(i);
        drop(ctrlrs);
        c.stop();
        log::info!("vhost {name}: deleted");
        Ok(())
    }

    /// Every controller, in creation order.
    pub fn controllers(&self) -> Vec<Arc<CtrlrInfo>> {
        lock(&self.ctrlrs)
            .iter()
            .map(|c| Arc::clone(&c.info))
            .collect()
    }

    /// The controller serving bdev `name`, if any (a bdev a VM uses is not deleted under
    /// it).
    pub fn bdev_in_use(&self, name: &str) -> Option<String> {
        lock(&self.ctrlrs)
            .iter()
            .find(|c| c.info.bdev == name)
            .map(|c| c.info.name.clone())
    }

    /// Stops every controller (front ends are disconnected after their rings' in-flight
    /// I/O), then drops each reactor's group. Call before the reactors stop.
    pub fn shutdown(&self) {
        let all: Vec<Controller> = lock(&self.ctrlrs).drain(..).collect();
        for c in all {
            c.stop();
        }
        let _ = self.reactors.run_on_all(crate::group::shut_down);
    }
}

/// A controller name is a file name in the socket directory.
fn check_name(name: &str) -> Result<(), VhostError> {
    let bad = |why| Err(VhostError::BadName(name.to_string(), why));
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return bad("not a file name");
    }
    Ok(())
}
