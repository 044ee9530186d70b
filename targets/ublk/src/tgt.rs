//! The target: the control device, the reactors that serve disks (the cpumask), and the
//! disks — started, stopped and recovered from RPC threads, never from a reactor (START_DEV,
//! STOP_DEV and DEL_DEV block in the kernel until the reactors have served what it waits for).
//!
//! Starting disk N: (1) reserve N and its bdev, (2) ADD_DEV, (3) SET_PARAMS, (4) open
//! `/dev/ublkcN`, (5) each queue opens on its reactor and sends its fetches, (6) START_DEV
//! (`/dev/ublkbN` appears; the kernel reads its partition table through the queues). Stopping:
//! STOP_DEV (the kernel completes the disk's requests first), each queue closes once its bdev
//! I/O has drained, `/dev/ublkcN` closes, DEL_DEV. Recovering (a pmio-tgt before this one was
//! killed): START_USER_RECOVERY, steps 4 and 5, END_USER_RECOVERY.

use std::fs::{File, OpenOptions};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pmio::bdev::Registry;
use pmio_reactors::{CoreMask, ReactorsHandle};

use crate::ctrl::Control;
use crate::error::UblkError;
use crate::group;
use crate::params::{Geometry, dev_params, use_user_copy};
use crate::queue::{QueueKey, QueueSetup};
use crate::sys::{self, DevInfo};

/// Bytes of each tag's buffer: the largest request the kernel sends (it splits larger ones).
pub const MAX_IO_BYTES: u32 = 128 << 10;
/// SPDK's default number of queues of a disk.
pub const DEFAULT_NUM_QUEUES: u32 = 1;
/// SPDK's default queue depth.
pub const DEFAULT_QUEUE_DEPTH: u32 = 128;
/// The most queues a disk may have (SPDK's `UBLK_DEV_MAX_QUEUES`).
pub const MAX_NUM_QUEUES: u32 = 32;
/// Whether a disk that does not say (`ublk_start_disk` without `user_copy`) moves its data by
/// user copy where the kernel offers it. Measured (BENCHMARKS.md, "ublk: the kernel's copy
/// against user copy"): user copy was the cheaper in 12 rounds of 28, a few per cent dearer in
/// the medians: a system call per request that the kernel's copy folds into the commit's submit.
pub const DEFAULT_USER_COPY: bool = false;
/// How long a recovery waits for the kernel to let go of the dead server.
const RECOVERY_WAIT: Duration = Duration::from_secs(10);
/// How long a stopping disk's queues may take to drain their bdev I/O.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// `ublk_start_disk`'s parameters.
#[derive(Clone, Debug)]
pub struct StartDiskParams {
    pub bdev_name: String,
    pub ublk_id: u32,
    pub num_queues: u32,
    pub queue_depth: u32,
    /// pmio's own: the disk's data by user copy (`UBLK_F_USER_COPY`) or copied by the kernel
    /// through the per-tag buffers; `None`: [`DEFAULT_USER_COPY`] where the kernel has it.
    pub user_copy: Option<bool>,
}

/// A started disk, as `ublk_get_disks` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskInfo {
    pub id: u32,
    pub bdev: String,
    pub num_queues: u32,
    pub queue_depth: u32,
    /// Its data moves by user copy.
    pub user_copy: bool,
}

impl DiskInfo {
    /// `/dev/ublkbN`.
    pub fn block_device(&self) -> String {
        format!("{}{}", sys::BDEV_PREFIX, self.id)
    }
}

/// What a disk is doing (start, stop and recovery take a while, without the target's lock).
#[derive(Debug)]
enum DiskState {
    /// Being started or recovered.
    Starting,
    Started(Disk),
    Stopping,
}

/// A disk's kernel side, while it is started.
#[derive(Debug)]
struct Disk {
    cdev: Arc<File>,
    /// Each queue with the reactor serving it.
    queues: Vec<(u32, QueueKey)>,
}

#[derive(Debug)]
struct DiskEntry {
    info: DiskInfo,
    state: DiskState,
}

/// The target, once `ublk_create_target` made it.
struct Active {
    ctrl: Arc<Control>,
    cpumask: CoreMask,
    /// `ublk_create_target`'s `disable_user_copy`: disks that do not ask for user copy do
    /// without it.
    disable_user_copy: bool,
    /// Where the next disk's first queue goes (disks spread over the cpumask).
    next_core: usize,
    disks: Vec<DiskEntry>,
}

/// A disk id and bdev reserved for a start or recovery ([`UblkTarget::reserve`]); the caller
/// then runs it ([`UblkTarget::start`], [`UblkTarget::recover`]).
#[derive(Debug)]
pub struct Reservation {
    params: StartDiskParams,
    ctrl: Arc<Control>,
    cores: Vec<u32>,
    /// The target's `disable_user_copy`.
    disable_user_copy: bool,
}

/// The ublk target of a daemon.
pub struct UblkTarget {
    reactors: ReactorsHandle,
    registry: Arc<Registry>,
    active: Mutex<Option<Active>>,
    /// `/dev/ublk-control` (another path in tests).
    control_path: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl UblkTarget {
    /// A target not yet created (`ublk_create_target` creates it).
    pub fn new(reactors: ReactorsHandle, registry: Arc<Registry>) -> Arc<UblkTarget> {
        UblkTarget::with_control_path(reactors, registry, sys::CONTROL_PATH)
    }

    /// [`UblkTarget::new`] with another control device (tests of a kernel without ublk).
    pub fn with_control_path(
        reactors: ReactorsHandle,
        registry: Arc<Registry>,
        path: &str,
    ) -> Arc<UblkTarget> {
        Arc::new(UblkTarget {
            reactors,
            registry,
            active: Mutex::new(None),
            control_path: path.to_string(),
        })
    }

    /// `ublk_create_target`: opens the control device; disks' queues go to the reactors of
    /// `cpumask` (default: every reactor). `disable_user_copy`: no disk uses user copy unless
    /// it asks.
    pub fn create(&self, cpumask: Option<&str>, disable_user_copy: bool) -> Result<(), UblkError> {
        let mut active = lock(&self.active);
        if active.is_some() {
            return Err(UblkError::TargetExists);
        }
        let cpumask = self.cpumask(cpumask)?;
        let ctrl = Control::open_path(&self.control_path)?;
        log::info!(
            "ublk: target created on cores {} (recovery {}, user copy {})",
            cpumask.to_list(),
            if ctrl.has_recovery() { "on" } else { "off" },
            if !ctrl.has_user_copy() {
                "not in the kernel"
            } else if disable_user_copy {
                "disabled"
            } else {
                "available"
            }
        );
        *active = Some(Active {
            ctrl: Arc::new(ctrl),
            cpumask,
            disable_user_copy,
            next_core: 0,
            disks: Vec::new(),
        });
        Ok(())
    }

    fn cpumask(&self, mask: Option<&str>) -> Result<CoreMask, UblkError> {
        let all = self.reactors.mask().clone();
        let Some(m) = mask else {
            return Ok(all);
        };
        let bad = |reason: String| UblkError::Cpumask {
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

    /// The target's cpumask, if it exists.
    pub fn target_cpumask(&self) -> Option<CoreMask> {
        lock(&self.active).as_ref().map(|a| a.cpumask.clone())
    }

    /// Whether the target was created with `disable_user_copy` (false without a target).
    pub fn user_copy_disabled(&self) -> bool {
        lock(&self.active)
            .as_ref()
            .is_some_and(|a| a.disable_user_copy)
    }

    /// `ublk_destroy_target`: stops every disk, then closes the control device.
    pub fn destroy(&self) -> Result<(), UblkError> {
        let ids: Vec<u32> = match lock(&self.active).as_ref() {
            None => return Err(UblkError::NoTarget),
            Some(a) => a.disks.iter().map(|d| d.info.id).collect(),
        };
        for id in ids {
            if let Err(e) = self.stop(id) {
                log::error!("ublk: destroying the target: {e}");
            }
        }
        let mut active = lock(&self.active);
        // A disk started meanwhile, or one whose stop failed, keeps the target.
        if let Some(d) = active.as_ref().and_then(|a| a.disks.first()) {
            return Err(UblkError::DiskBusy(d.info.id));
        }
        *active = None;
        log::info!("ublk: target destroyed");
        Ok(())
    }

    /// Reserves disk `p.ublk_id` for bdev `p.bdev_name` (checked: it exists and no other disk
    /// serves it) and picks its queues' reactors. Quick: the caller may hold the bdev owners'
    /// lock around it, so a bdev is never deleted between the check and the reservation.
    pub fn reserve(&self, p: &StartDiskParams) -> Result<Reservation, UblkError> {
        check_queues(p.num_queues, p.queue_depth)?;
        let mut guard = lock(&self.active);
        let a = guard.as_mut().ok_or(UblkError::NoTarget)?;
        if a.disks.iter().any(|d| d.info.id == p.ublk_id) {
            return Err(UblkError::DiskExists(p.ublk_id));
        }
        // The bdev by its own name (an alias such as lvs0/vol0 names the same bdev): what a
        // delete of it, by any of its names, is checked against.
        let name = match self.registry.get(&p.bdev_name) {
            Some(dev) => dev.info().name.clone(),
            None => return Err(UblkError::BdevNotFound(p.bdev_name.clone())),
        };
        if let Some(d) = a.disks.iter().find(|d| d.info.bdev == name) {
            return Err(UblkError::BdevInUse {
                bdev: name,
                id: d.info.id,
            });
        }
        let p = &StartDiskParams {
            bdev_name: name,
            ..p.clone()
        };
        let cores = a.cpumask.cores();
        let picked: Vec<u32> = (0..p.num_queues as usize)
            .map(|q| cores[(a.next_core + q) % cores.len()])
            .collect();
        a.next_core = (a.next_core + 1) % cores.len();
        a.disks.push(DiskEntry {
            info: DiskInfo {
                id: p.ublk_id,
                bdev: p.bdev_name.clone(),
                num_queues: p.num_queues,
                queue_depth: p.queue_depth,
                user_copy: false,
            },
            state: DiskState::Starting,
        });
        Ok(Reservation {
            params: p.clone(),
            ctrl: Arc::clone(&a.ctrl),
            cores: picked,
            disable_user_copy: a.disable_user_copy,
        })
    }

    /// `ublk_start_disk` after [`UblkTarget::reserve`]: the disk is `/dev/ublkbN` when this
    /// returns. On failure nothing of it is left (in the kernel or here).
    pub fn start(&self, r: Reservation) -> Result<DiskInfo, UblkError> {
        let id = r.params.ublk_id;
        match self.start_steps(&r) {
            Ok((disk, info)) => Ok(self.set_started(id, disk, info)),
            Err(e) => {
                self.forget(id);
                Err(e)
            }
        }
    }

    fn start_steps(&self, r: &Reservation) -> Result<(Disk, DiskInfo), UblkError> {
        let p = &r.params;
        let geometry = self.geometry(&p.bdev_name)?;
        let user_copy = use_user_copy(
            p.user_copy,
            DEFAULT_USER_COPY,
            r.ctrl.has_user_copy(),
            r.disable_user_copy,
        )
        .ok_or(UblkError::NoUserCopy { id: p.ublk_id })?;
        let mut flags = r.ctrl.features & sys::F_CMD_IOCTL_ENCODE;
        if user_copy {
            flags |= sys::F_USER_COPY;
        }
        if r.ctrl.has_recovery() {
            // Requests in flight when the server dies go to the next one, not fail.
            flags |= sys::F_USER_RECOVERY | (r.ctrl.features & sys::F_USER_RECOVERY_REISSUE);
        }
        let mut info = DevInfo {
            nr_hw_queues: p.num_queues as u16,
            queue_depth: p.queue_depth as u16,
            max_io_buf_bytes: geometry.buf_bytes,
            dev_id: p.ublk_id,
            ublksrv_pid: sys::pid(),
            flags,
            ..DevInfo::default()
        };
        r.ctrl.add_dev(&mut info)?;
        let steps = || -> Result<Disk, UblkError> {
            r.ctrl.set_params(p.ublk_id, &dev_params(&geometry))?;
            let disk = self.open_queues(r, &info, geometry)?;
            if let Err(e) = r.ctrl.start_dev(p.ublk_id) {
                self.close_queues(&disk);
                return Err(e);
            }
            Ok(disk)
        };
        match steps() {
            Ok(disk) => {
                log::info!(
                    "ublk {}: bdev {} is {}{} ({} queues of depth {}, {})",
                    p.ublk_id,
                    p.bdev_name,
                    sys::BDEV_PREFIX,
                    p.ublk_id,
                    info.nr_hw_queues,
                    info.queue_depth,
                    if user_copy {
                        "user copy"
                    } else {
                        "kernel copy"
                    }
                );
                Ok((disk, disk_info(p, &info)))
            }
            Err(e) => {
                if let Err(d) = r.ctrl.del_dev(p.ublk_id) {
                    log::error!("ublk {}: deleting after a failed start: {d}", p.ublk_id);
                }
                Err(e)
            }
        }
    }

    /// What the data path needs of bdev `name`.
    fn geometry(&self, name: &str) -> Result<Geometry, UblkError> {
        let dev = self
            .registry
            .get(name)
            .ok_or_else(|| UblkError::BdevNotFound(name.to_string()))?;
        Geometry::of(dev.info(), MAX_IO_BYTES).map_err(|reason| UblkError::BadBdev {
            bdev: name.to_string(),
            reason,
        })
    }

    /// `ublk_recover_disk` after [`UblkTarget::reserve`]: disk `ublk_id`, left quiesced by a
    /// server that died, is served by this one (with its queue count and depth).
    pub fn recover(&self, r: Reservation) -> Result<DiskInfo, UblkError> {
        let id = r.params.ublk_id;
        match self.recover_steps(&r) {
            Ok((disk, info)) => Ok(self.set_started(id, disk, info)),
            Err(e) => {
                self.forget(id);
                Err(e)
            }
        }
    }

    fn recover_steps(&self, r: &Reservation) -> Result<(Disk, DiskInfo), UblkError> {
        let p = &r.params;
        let no = |reason: String| UblkError::NoRecovery {
            id: p.ublk_id,
            reason,
        };
        if !r.ctrl.has_recovery() {
            return Err(no(
                "the kernel's ublk_drv has no UBLK_F_USER_RECOVERY".into()
            ));
        }
        let geometry = self.geometry(&p.bdev_name)?;
        let info = r.ctrl.get_dev_info(p.ublk_id)?;
        if info.flags & sys::F_USER_RECOVERY == 0 {
            return Err(no("it was added without UBLK_F_USER_RECOVERY".into()));
        }
        if info.max_io_buf_bytes < geometry.buf_bytes {
            return Err(no(format!(
                "its requests are up to {} bytes, this server's buffers {}",
                info.max_io_buf_bytes, geometry.buf_bytes
            )));
        }
        start_user_recovery(&r.ctrl, p.ublk_id)?;
        // The queues as the disk has them, whatever the reservation asked.
        let cores = self.cores_for(u32::from(info.nr_hw_queues));
        let r2 = Reservation {
            params: p.clone(),
            ctrl: Arc::clone(&r.ctrl),
            cores,
            disable_user_copy: r.disable_user_copy,
        };
        let disk = self.open_queues(&r2, &info, geometry)?;
        if let Err(e) = r.ctrl.end_user_recovery(p.ublk_id) {
            self.close_queues(&disk);
            return Err(e);
        }
        log::info!("ublk {}: recovered on bdev {}", p.ublk_id, p.bdev_name);
        Ok((disk, disk_info(p, &info)))
    }

    /// Reactors for `n` queues of a disk, spread over the cpumask.
    fn cores_for(&self, n: u32) -> Vec<u32> {
        let mut guard = lock(&self.active);
        let Some(a) = guard.as_mut() else {
            return Vec::new();
        };
        let cores = a.cpumask.cores();
        let picked = (0..n as usize)
            .map(|q| cores[(a.next_core + q) % cores.len()])
            .collect();
        a.next_core = (a.next_core + 1) % cores.len();
        picked
    }

    /// Steps 4 and 5: `/dev/ublkcN`, then each queue on its reactor.
    fn open_queues(
        &self,
        r: &Reservation,
        info: &DevInfo,
        geometry: Geometry,
    ) -> Result<Disk, UblkError> {
        let id = r.params.ublk_id;
        let cdev = Arc::new(open_cdev(id)?);
        let mut disk = Disk {
            cdev,
            queues: Vec::new(),
        };
        let nq = usize::from(info.nr_hw_queues).min(r.cores.len());
        for (q, &core) in r.cores.iter().enumerate().take(nq) {
            let key = QueueKey {
                dev: id,
                q: q as u16,
            };
            let setup = QueueSetup {
                key,
                cdev: Arc::clone(&disk.cdev),
                depth: info.queue_depth,
                bdev: r.params.bdev_name.clone(),
                geometry,
                ioctl_encode: r.ctrl.ioctl_encode(),
                // As the kernel has the disk: a recovered one keeps its dead server's mode.
                user_copy: info.flags & sys::F_USER_COPY != 0,
            };
            let registry = Arc::clone(&self.registry);
            let started = self
                .reactors
                .run_on(core, move |ctx| group::start_queue(ctx, &registry, setup))
                .map_err(UblkError::from)
                .and_then(|r| r);
            if let Err(e) = started {
                self.close_queues(&disk);
                return Err(e);
            }
            disk.queues.push((core, key));
        }
        Ok(disk)
    }

    /// Closes a disk's queues (each once its bdev I/O has drained) and waits for them.
    fn close_queues(&self, disk: &Disk) {
        let (tx, rx) = mpsc::channel();
        let mut asked = 0;
        for &(core, key) in &disk.queues {
            let tx = tx.clone();
            match self
                .reactors
                .send(core, move |ctx| group::close_queue(ctx, key, tx))
            {
                Ok(()) => asked += 1,
                Err(e) => log::error!("ublk {}: closing queue {}: {e}", key.dev, key.q),
            }
        }
        drop(tx);
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        for _ in 0..asked {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(report) => {
                    if let Some(e) = report.error {
                        log::warn!(
                            "ublk {} queue {}: the kernel refused a command: {}",
                            report.key.dev,
                            report.key.q,
                            std::io::Error::from_raw_os_error(-e)
                        );
                    }
                }
                Err(_) => {
                    log::error!("ublk: a queue did not close in {CLOSE_TIMEOUT:?}");
                    break;
                }
            }
        }
    }

    fn set_started(&self, id: u32, disk: Disk, info: DiskInfo) -> DiskInfo {
        let mut guard = lock(&self.active);
        if let Some(e) = guard
            .as_mut()
            .and_then(|a| a.disks.iter_mut().find(|d| d.info.id == id))
        {
            e.info = info.clone();
            e.state = DiskState::Started(disk);
        }
        info
    }

    fn forget(&self, id: u32) {
        if let Some(a) = lock(&self.active).as_mut() {
            a.disks.retain(|d| d.info.id != id);
        }
    }

    /// `ublk_stop_disk`: `/dev/ublkbN` goes after its requests complete; the disk is
    /// deleted from the kernel.
    pub fn stop(&self, id: u32) -> Result<(), UblkError> {
        let (disk, ctrl) = {
            let mut guard = lock(&self.active);
            let a = guard.as_mut().ok_or(UblkError::NoTarget)?;
            let e = a
                .disks
                .iter_mut()
                .find(|d| d.info.id == id)
                .ok_or(UblkError::NoDisk(id))?;
            match std::mem::replace(&mut e.state, DiskState::Stopping) {
                DiskState::Started(d) => (d, Arc::clone(&a.ctrl)),
                other => {
                    e.state = other;
                    return Err(UblkError::DiskBusy(id));
                }
            }
        };
        if let Err(e) = ctrl.stop_dev(id) {
            log::error!("ublk {id}: {e}");
        }
        self.close_queues(&disk);
        drop(disk);
        if let Err(e) = ctrl.del_dev(id) {
            log::error!("ublk {id}: {e}");
        }
        self.forget(id);
        log::info!("ublk {id}: stopped");
        Ok(())
    }

    /// Every started disk, by id.
    pub fn disks(&self) -> Vec<DiskInfo> {
        let guard = lock(&self.active);
        let mut v: Vec<DiskInfo> = guard
            .iter()
            .flat_map(|a| a.disks.iter())
            .filter(|d| matches!(d.state, DiskState::Started(_)))
            .map(|d| d.info.clone())
            .collect();
        v.sort_by_key(|d| d.id);
        v
    }

    /// The disk serving bdev `name` (by any of its names), started or on its way, if any.
    pub fn bdev_in_use(&self, name: &str) -> Option<u32> {
        let own = self.registry.get(name).map(|d| d.info().name.clone());
        let name = own.as_deref().unwrap_or(name);
        lock(&self.active)
            .iter()
            .flat_map(|a| a.disks.iter())
            .find(|d| d.info.bdev == name)
            .map(|d| d.info.id)
    }

    /// Stops every disk and the target, then drops each reactor's group. Call before the
    /// reactors stop.
    pub fn shutdown(&self) {
        if lock(&self.active).is_some()
            && let Err(e) = self.destroy()
        {
            log::error!("ublk: shutdown: {e}");
        }
        let _ = self.reactors.run_on_all(group::shut_down);
    }
}

/// A started or recovered disk as the kernel has it.
fn disk_info(p: &StartDiskParams, info: &DevInfo) -> DiskInfo {
    DiskInfo {
        id: p.ublk_id,
        bdev: p.bdev_name.clone(),
        num_queues: u32::from(info.nr_hw_queues),
        queue_depth: u32::from(info.queue_depth),
        user_copy: info.flags & sys::F_USER_COPY != 0,
    }
}

/// START_USER_RECOVERY, retried while the kernel answers EBUSY: the dead server's
/// `/dev/ublkcN` and ring are released by the kernel after the process has gone, not at once.
fn start_user_recovery(ctrl: &Control, id: u32) -> Result<(), UblkError> {
    let deadline = Instant::now() + RECOVERY_WAIT;
    loop {
        match ctrl.start_user_recovery(id) {
            Err(UblkError::Command { errno, .. })
                if errno == -libc::EBUSY && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// A disk's queue count and depth as SPDK and the kernel take them.
fn check_queues(num_queues: u32, queue_depth: u32) -> Result<(), UblkError> {
    if num_queues == 0 || num_queues > MAX_NUM_QUEUES {
        return Err(UblkError::Invalid(format!(
            "num_queues {num_queues}: a ublk disk has 1 to {MAX_NUM_QUEUES} queues"
        )));
    }
    if queue_depth == 0 || queue_depth > sys::MAX_QUEUE_DEPTH {
        return Err(UblkError::Invalid(format!(
            "queue_depth {queue_depth}: the kernel takes 1 to {}",
            sys::MAX_QUEUE_DEPTH
        )));
    }
    Ok(())
}

/// Opens `/dev/ublkcN`, which ADD_DEV has just created (devtmpfs makes the node at once;
/// udev may still be changing its mode: retried for a second).
fn open_cdev(id: u32) -> Result<File, UblkError> {
    let path = format!("{}{id}", sys::CDEV_PREFIX);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => return Ok(f),
            Err(e) if Instant::now() < deadline && e.kind() == std::io::ErrorKind::NotFound => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(source) => return Err(UblkError::Open { path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_counts_and_depths_the_kernel_takes() {
        assert!(check_queues(1, 1).is_ok());
        assert!(check_queues(MAX_NUM_QUEUES, sys::MAX_QUEUE_DEPTH).is_ok());
        for (n, d) in [(0, 128), (MAX_NUM_QUEUES + 1, 128), (1, 0), (1, 4097)] {
            let e = check_queues(n, d).unwrap_err();
            assert_eq!(e.errno(), -libc::EINVAL, "{n} {d}");
        }
        assert!(
            check_queues(1, 8192)
                .unwrap_err()
                .to_string()
                .contains("4096")
        );
    }
}
