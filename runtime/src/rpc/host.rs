//! The bdevs of a daemon, as its RPC methods see them: each bdev with the module that made it
//! and the call that recreates it, who uses it, its statistics and its I/O scheduler.
//!
//! Every module's methods share one [`BdevHost`]: a driver's create method adds its device with
//! [`BdevHost::add_bdev`], its delete method removes it with [`BdevHost::delete_bdev`], a target
//! that serves a bdev to hosts registers itself as a [`BdevUser`] so a bdev it serves is never
//! deleted under it. The host knows no module: it is what SPDK's bdev layer is to its modules.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use pmio::bdev::Registry;
use pmio::bdev::stats::{QueueStats, QueueStatsCell};
use pmio::dma::{DmaError, DmaRegion};
use pmio::sched::Scheduler;
use pmio::{BdevError, BlockDevice, Op, Uuid};
use pmio_jsonrpc::RpcError;
use pmio_reactors::ReactorsHandle;
use serde_json::{Value, json};

use super::histogram::EnableHistogram;

/// A bdev a module created through the host.
#[derive(Clone, Debug)]
pub struct BdevRecord {
    /// Bdev name.
    pub name: String,
    /// The module that made it, as SPDK names it in errors (`malloc`, `null`, `nvme`, ...).
    pub module: &'static str,
    /// The object it belongs to and goes away with (an NVMe controller's name), if any.
    pub parent: Option<String>,
    /// The method call that recreates it (`None` for bdevs recreated by their parent's call).
    pub create: Option<Value>,
    /// `bdev_get_bdevs`' `driver_specific` object (unless a [`BdevModule`] tells it now).
    pub driver_specific: Value,
    /// Other names the bdev is found by (an lvol's `lvs/lvol`), besides its uuid.
    pub aliases: Vec<String>,
}

impl BdevRecord {
    /// A record of bdev `name` made by `module`, recreated by `create`.
    pub fn new(name: impl Into<String>, module: &'static str, create: Option<Value>) -> Self {
        BdevRecord {
            name: name.into(),
            module,
            parent: None,
            create,
            driver_specific: json!({}),
            aliases: Vec::new(),
        }
    }
}

/// A module that looks at bdevs as they appear and tells about its own (SPDK's bdev module
/// `examine_config`/`examine_disk` and `dump_info_json`).
pub trait BdevModule: Send + Sync {
    /// Looks at bdev `name`, just registered or named by `bdev_examine` (an lvol module
    /// looks for an lvstore on it). Runs with no lock of the host held.
    fn examine(&self, name: &str) {
        let _ = name;
    }

    /// `driver_specific` of bdev `name` now, if this module made it.
    fn driver_specific(&self, name: &str) -> Option<Value> {
        let _ = name;
        None
    }
}

/// Something that serves bdevs to others (an NVMe-oF namespace, a vhost controller): a bdev it
/// uses is claimed, and deleting it is refused.
pub trait BdevUser: Send + Sync {
    /// Why bdev `name` cannot be deleted now (SPDK's -16 detail naming the user and how to
    /// release it), or `None` if this user does not use it.
    fn user_of(&self, name: &str) -> Option<String>;

    /// Bdev `dev.info().name` was replaced by `dev` (a resized lvol: same name, another
    /// size): a user serving it moves to `dev` and tells its hosts. Users that cannot follow
    /// keep the old object, which still serves its old size.
    fn bdev_replaced(&self, dev: &Arc<dyn BlockDevice>) {
        let _ = dev;
    }
}

/// The bdevs of a daemon (see the module documentation).
pub struct BdevHost {
    /// Every bdev, by name.
    pub registry: Arc<Registry>,
    /// Held while a bdev changes hands: deleted, or taken by a user. A bdev is then never
    /// deleted between a user's look-up of it and the user taking it. Lock order: a module's
    /// own lists, then this, then the records.
    owners: Mutex<()>,
    records: Mutex<Vec<BdevRecord>>,
    users: RwLock<Vec<Arc<dyn BdevUser>>>,
    modules: RwLock<Vec<Arc<dyn BdevModule>>>,
    /// Bdev name → number of running jobs (perform_tests, scheduler changes) using it.
    busy: Arc<Mutex<HashMap<String, usize>>>,
    /// I/O statistics per bdev: finished jobs' totals plus the queues of running jobs.
    iostat: Mutex<HashMap<String, IoStat>>,
    next_live: AtomicU64,
    /// perform_tests I/O buffers per bdev, reused by later jobs (see [`BdevHost::take_buffer`]).
    bufs: Mutex<HashMap<String, Vec<DmaRegion>>>,
    /// Bdev name → its scheduler (absent: none).
    scheds: Mutex<HashMap<String, Scheduler>>,
    /// Bdev name → the `bdev_enable_histogram` call that turned its histogram on (absent: off).
    histograms: Mutex<HashMap<String, EnableHistogram>>,
    reactors: ReactorsHandle,
    stopping: AtomicBool,
    start_ns: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Maps a block-layer error to SPDK's reply: negative errno, strerror text, and what failed.
pub fn bdev_error(e: &BdevError) -> RpcError {
    match e {
        BdevError::NotFound(_) => RpcError::errno(-libc::ENODEV),
        _ => RpcError::errno_detail(e.errno(), e),
    }
}

impl BdevHost {
    /// A host with an empty registry, whose jobs run on `reactors`.
    pub fn new(reactors: ReactorsHandle) -> BdevHost {
        BdevHost {
            registry: Arc::new(Registry::new()),
            owners: Mutex::new(()),
            records: Mutex::new(Vec::new()),
            users: RwLock::new(Vec::new()),
            modules: RwLock::new(Vec::new()),
            busy: Arc::new(Mutex::new(HashMap::new())),
            iostat: Mutex::new(HashMap::new()),
            next_live: AtomicU64::new(1),
            bufs: Mutex::new(HashMap::new()),
            scheds: Mutex::new(HashMap::new()),
            histograms: Mutex::new(HashMap::new()),
            reactors,
            stopping: AtomicBool::new(false),
            start_ns: pmio_reactors::now_ns(),
        }
    }

    /// The reactors jobs run on.
    pub fn reactors(&self) -> &ReactorsHandle {
        &self.reactors
    }

    /// Nanoseconds since the host was made (SPDK's `ticks` at a 1 GHz tick rate).
    pub fn uptime_ns(&self) -> u64 {
        pmio_reactors::now_ns().saturating_sub(self.start_ns)
    }

    /// Marks the daemon as shutting down: running jobs stop early, new ones are refused.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Adds a user whose bdevs are claimed ([`BdevUser`]).
    pub fn add_user(&self, user: Arc<dyn BdevUser>) {
        self.users
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(user);
    }

    /// Adds a module that examines new bdevs and tells about its own ([`BdevModule`]).
    pub fn add_module(&self, module: Arc<dyn BdevModule>) {
        self.modules
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(module);
    }

    fn modules(&self) -> Vec<Arc<dyn BdevModule>> {
        self.modules
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Has every module examine bdev `name` (`bdev_examine`, and every bdev added).
    pub fn examine(&self, name: &str) {
        for m in self.modules() {
            m.examine(name);
        }
    }

    /// Registers a new bdev without examining it (a module's own bdevs, found by examine).
    pub fn add_bdev_unexamined(
        &self,
        dev: Arc<dyn BlockDevice>,
        record: BdevRecord,
    ) -> Result<(), RpcError> {
        let mut records = lock(&self.records);
        self.check_name_free(&record.name)?;
        for a in &record.aliases {
            let taken = self.registry.get(a).is_some()
                || records.iter().any(|r| r.aliases.iter().any(|b| b == a));
            if taken {
                return Err(RpcError::errno_detail(
                    -libc::EEXIST,
                    format_args!("bdev alias {a} is already in use"),
                ));
            }
        }
        self.registry.register(dev).map_err(|e| bdev_error(&e))?;
        records.push(record);
        Ok(())
    }

    /// Replaces registered bdev `record.name` by `dev` (an lvol after a resize: same name, new
    /// size), keeping its place, and tells the users ([`BdevUser::bdev_replaced`]); queues open
    /// on the old object keep it until they close.
    pub fn replace_bdev(
        &self,
        dev: Arc<dyn BlockDevice>,
        record: BdevRecord,
    ) -> Result<(), RpcError> {
        let mut records = lock(&self.records);
        let _ = self.registry.unregister(&record.name);
        self.registry
            .register(dev.clone())
            .map_err(|e| bdev_error(&e))?;
        match records.iter_mut().find(|r| r.name == record.name) {
            Some(r) => *r = record,
            None => records.push(record),
        }
        drop(records);
        let users = self.users.read().unwrap_or_else(|p| p.into_inner());
        for u in users.iter() {
            u.bdev_replaced(&dev);
        }
        Ok(())
    }

    /// Changes the aliases of bdev `name`.
    pub fn set_aliases(&self, name: &str, aliases: Vec<String>) {
        if let Some(r) = lock(&self.records).iter_mut().find(|r| r.name == name) {
            r.aliases = aliases;
        }
    }

    /// Refuses a name already used by a bdev, naming the existing one.
    pub fn check_name_free(&self, name: &str) -> Result<(), RpcError> {
        if name.is_empty() {
            return Err(RpcError::errno_detail(
                -libc::EINVAL,
                "bdev name must not be empty",
            ));
        }
        if let Some(dev) = self.registry.get(name) {
            let i = dev.info();
            return Err(RpcError::errno_detail(
                -libc::EEXIST,
                format_args!(
                    "bdev {name} already exists ({}, {} blocks of {} bytes, uuid {})",
                    i.product_name, i.num_blocks, i.block_size, i.uuid
                ),
            ));
        }
        Ok(())
    }

    /// Registers a new bdev and remembers how to recreate it (`record.name` is the device's).
    pub fn add_bdev(&self, dev: Arc<dyn BlockDevice>, record: BdevRecord) -> Result<(), RpcError> {
        let mut records = lock(&self.records);
        self.check_name_free(&record.name)?;
        self.registry.register(dev).map_err(|e| bdev_error(&e))?;
        let name = record.name.clone();
        records.push(record);
        drop(records);
        self.examine(&name);
        Ok(())
    }

    /// The record of bdev `name`.
    pub fn record(&self, name: &str) -> Option<BdevRecord> {
        lock(&self.records).iter().find(|r| r.name == name).cloned()
    }

    /// Records of every bdev, in creation order.
    pub fn records(&self) -> Vec<BdevRecord> {
        lock(&self.records).clone()
    }

    /// Deletes bdev `name` if it was made by `module` (`-19` otherwise, as SPDK), and is not in
    /// use by a running job or a user (`-16`).
    pub fn delete_bdev(&self, name: &str, module: &str) -> Result<(), RpcError> {
        let _owners = self.hold_bdev_owners();
        let mut records = lock(&self.records);
        let Some(pos) = records.iter().position(|r| r.name == name) else {
            return Err(RpcError::errno(-libc::ENODEV));
        };
        if records[pos].module != module {
            return Err(RpcError::errno_detail(
                -libc::ENODEV,
                format_args!(
                    "{name} is a {} bdev, not a {module} bdev",
                    records[pos].module
                ),
            ));
        }
        self.check_not_busy(name)?;
        self.registry.unregister(name).map_err(|e| bdev_error(&e))?;
        records.remove(pos);
        drop(records);
        self.forget_bdev_state(name);
        Ok(())
    }

    /// Unregisters every bdev, newest first (a bdev made on top of others goes before them),
    /// and forgets their records: the last step of a daemon's shutdown, after the targets that
    /// served the bdevs have stopped and before the reactors stop. A bdev that cannot be
    /// unregistered is logged and left.
    pub fn unregister_all(&self) {
        let records = std::mem::take(&mut *lock(&self.records));
        for r in records.iter().rev() {
            match self.registry.unregister(&r.name) {
                Ok(_) => self.forget_bdev_state(&r.name),
                Err(e) => log::debug!("unregistering {}: {e}", r.name),
            }
        }
    }

    /// Drops per-bdev state (statistics, scheduler) of a removed bdev.
    pub fn forget_bdev_state(&self, name: &str) {
        lock(&self.iostat).remove(name);
        let sched = lock(&self.scheds).remove(name);
        if let Some(Err(e)) = sched.map(|s| s.teardown_check()) {
            log::warn!("bdev {name} removed while its scheduler held requests: {e}");
        }
        lock(&self.bufs).remove(name);
        lock(&self.histograms).remove(name);
    }

    /// Forgets the record of bdev `name` (a module unregistered it itself).
    pub fn forget_record(&self, name: &str) {
        lock(&self.records).retain(|r| r.name != name);
    }

    /// Removes every record whose parent is `parent` (after its devices were unregistered).
    pub fn forget_children(&self, parent: &str) {
        lock(&self.records).retain(|r| r.parent.as_deref() != Some(parent));
    }

    /// An I/O buffer of at least `len` bytes for a job on bdev `name`: a cached one, else new.
    ///
    /// A driver may keep a buffer registered with the device (DMA-mapped by the NVMe driver),
    /// so buffers handed to a bdev are kept, same pages, until the bdev is gone rather than
    /// freed after each job.
    pub fn take_buffer(&self, name: &str, len: usize) -> Result<DmaRegion, DmaError> {
        if let Some(list) = lock(&self.bufs).get_mut(name)
            && let Some(i) = list.iter().position(|r| r.len() >= len)
        {
            return Ok(list.swap_remove(i));
        }
        DmaRegion::new(len)
    }

    /// Returns a job's buffer to bdev `name`'s cache (dropped if the bdev is gone).
    pub fn give_back_buffer(&self, name: &str, region: DmaRegion) {
        if self.registry.get(name).is_some() {
            lock(&self.bufs)
                .entry(name.to_string())
                .or_default()
                .push(region);
        }
    }

    /// The call that turned bdev `name`'s latency histogram on, if it is on.
    pub fn histogram_call(&self, name: &str) -> Option<EnableHistogram> {
        lock(&self.histograms).get(name).cloned()
    }

    /// Remembers the call that turned bdev `name`'s histogram on (`None`: it is off).
    pub fn set_histogram_call(&self, name: &str, call: Option<EnableHistogram>) {
        let mut m = lock(&self.histograms);
        match call {
            Some(c) => m.insert(name.to_string(), c),
            None => m.remove(name),
        };
    }

    /// The scheduler of bdev `name`, if one was set.
    pub fn scheduler(&self, name: &str) -> Option<Scheduler> {
        lock(&self.scheds).get(name).cloned()
    }

    /// Sets bdev `name`'s scheduler (`Scheduler::None` forgets it).
    pub fn set_scheduler(&self, name: &str, s: Scheduler) {
        let mut m = lock(&self.scheds);
        match s {
            Scheduler::None => {
                m.remove(name);
            }
            s => {
                m.insert(name.to_string(), s);
            }
        }
    }

    fn check_not_busy(&self, name: &str) -> Result<(), RpcError> {
        match lock(&self.busy).get(name) {
            Some(&n) if n > 0 => Err(RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("bdev {name} is in use by {n} running perform_tests job(s)"),
            )),
            _ => self.check_no_user(name),
        }
    }

    /// Refuses (`-16`, as SPDK refuses a claimed bdev) when a user serves bdev `name`: its
    /// hosts would lose their data path. Call with [`BdevHost::hold_bdev_owners`] held.
    pub fn check_no_user(&self, name: &str) -> Result<(), RpcError> {
        let users = self.users.read().unwrap_or_else(|p| p.into_inner());
        match users.iter().find_map(|u| u.user_of(name)) {
            Some(why) => Err(RpcError::errno_detail(-libc::EBUSY, why)),
            None => Ok(()),
        }
    }

    /// Holds off bdev ownership changes (deletes, users taking a bdev) until dropped.
    pub fn hold_bdev_owners(&self) -> MutexGuard<'_, ()> {
        lock(&self.owners)
    }

    /// Whether bdev `name` is claimed: a running job or a user uses it.
    pub fn is_claimed_by_anyone(&self, name: &str) -> bool {
        self.is_claimed(name) || self.check_no_user(name).is_err()
    }

    /// Marks `names` busy (a job uses them) until the returned guard is dropped; fails with the
    /// first name already busy (check and mark are one step: two jobs never share a bdev).
    pub fn try_claim(&self, names: &[String]) -> Result<BusyGuard, String> {
        let mut busy = lock(&self.busy);
        if let Some(n) = names.iter().find(|n| busy.get(*n).is_some_and(|&c| c > 0)) {
            return Err(n.clone());
        }
        for n in names {
            *busy.entry(n.clone()).or_insert(0) += 1;
        }
        Ok(BusyGuard {
            busy: self.busy.clone(),
            names: names.to_vec(),
        })
    }

    /// Whether a job uses bdev `name`.
    pub fn is_claimed(&self, name: &str) -> bool {
        lock(&self.busy).get(name).is_some_and(|&n| n > 0)
    }

    /// Makes a running queue's statistics part of bdev `name`'s (read through its shared cell
    /// whenever asked, never summed on the I/O path). Returns the id for
    /// [`BdevHost::finish_live`].
    pub fn add_live(&self, name: &str, cell: Arc<QueueStatsCell>) -> u64 {
        let id = self.next_live.fetch_add(1, Ordering::Relaxed);
        lock(&self.iostat)
            .entry(name.to_string())
            .or_default()
            .live
            .push(LiveQueue {
                id,
                cell,
                base: QueueStats::default(),
            });
        id
    }

    /// Folds a finished queue's final statistics into bdev `name`'s totals (one step, so a
    /// concurrent reader never counts it twice or not at all).
    pub fn finish_live(&self, name: &str, id: u64, last: &QueueStats) {
        let mut m = lock(&self.iostat);
        let st = m.entry(name.to_string()).or_default();
        let base = match st.live.iter().position(|l| l.id == id) {
            Some(i) => st.live.swap_remove(i).base,
            None => QueueStats::default(),
        };
        st.total.add(&since(last, &base));
    }

    /// Resets bdev `name`'s statistics as SPDK's `reset_mode`: `all` counters, only `maxmin`
    /// latencies, or only `error` counts. Running queues restart their counts from now (their
    /// min/max latencies are not reset).
    pub fn reset_iostat(&self, name: &str, mode: &str) {
        let served = self.registry.device_stats(name).unwrap_or_default();
        let mut m = lock(&self.iostat);
        let st = m.entry(name.to_string()).or_default();
        match mode {
            "all" => st.served_base = served,
            "error" => {
                for (b, n) in st.served_base.ops.iter_mut().zip(served.ops.iter()) {
                    b.errors = n.errors;
                }
            }
            _ => {}
        }
        for o in &mut st.total.ops {
            match mode {
                "all" => *o = Default::default(),
                "maxmin" => {
                    o.lat_min_ns = u64::MAX;
                    o.lat_max_ns = 0;
                }
                "error" => o.errors = 0,
                _ => {}
            }
        }
        for l in &mut st.live {
            let now = l.cell.load();
            match mode {
                "all" => l.base = now,
                "error" => {
                    for (b, n) in l.base.ops.iter_mut().zip(now.ops.iter()) {
                        b.errors = n.errors;
                    }
                }
                _ => {}
            }
        }
    }

    /// Statistics of bdev `name`: finished jobs, running queues (snapshots), and the queues
    /// opened through the registry (the targets serving the bdev: NVMe/TCP, vhost).
    pub fn iostat(&self, name: &str) -> QueueStats {
        let served = self.registry.device_stats(name).unwrap_or_default();
        let m = lock(&self.iostat);
        let Some(st) = m.get(name) else {
            return served;
        };
        let mut s = st.total;
        for l in &st.live {
            s.add(&since(&l.cell.load(), &l.base));
        }
        s.add(&since(&served, &st.served_base));
        s
    }

    /// I/Os in flight on bdev `name` (each queue as of its last completion batch): running
    /// jobs' queues and the targets' queues.
    pub fn outstanding(&self, name: &str) -> u64 {
        let jobs: u64 = lock(&self.iostat)
            .get(name)
            .map_or(0, |st| st.live.iter().map(|l| l.cell.outstanding()).sum());
        jobs + self.registry.device_outstanding(name)
    }

    /// Looks a bdev up by name, by alias or by UUID alias.
    pub fn find_bdev(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        if let Some(d) = self.registry.get(name) {
            return Some(d);
        }
        let aliased = lock(&self.records)
            .iter()
            .find(|r| r.aliases.iter().any(|a| a == name))
            .map(|r| r.name.clone());
        if let Some(d) = aliased.and_then(|n| self.registry.get(&n)) {
            return Some(d);
        }
        let uuid = Uuid::parse(name)?;
        self.registry
            .list()
            .into_iter()
            .find(|d| d.info().uuid == uuid)
    }

    /// Bdevs in creation order (devices registered by others follow, by name).
    pub fn bdevs_in_order(&self) -> Vec<Arc<dyn BlockDevice>> {
        let mut out: Vec<Arc<dyn BlockDevice>> = Vec::new();
        for r in self.records() {
            if let Some(d) = self.registry.get(&r.name) {
                out.push(d);
            }
        }
        for d in self.registry.list() {
            if !out.iter().any(|o| o.info().name == d.info().name) {
                out.push(d);
            }
        }
        out
    }

    /// The calls that recreate every bdev made through the host, in creation order (their part
    /// of `save_config`'s bdev section).
    pub fn create_calls(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter_map(|r| r.create)
            .collect()
    }

    /// `bdev_get_bdevs` object of `dev`, in SPDK's member order.
    pub fn bdev_json(&self, dev: &dyn BlockDevice) -> Value {
        let i = dev.info();
        let ops = i.supported_ops;
        let uuid = i.uuid.to_string();
        let record = self.record(&i.name);
        let driver_specific = self
            .modules()
            .iter()
            .find_map(|m| m.driver_specific(&i.name))
            .or_else(|| record.as_ref().map(|r| r.driver_specific.clone()))
            .unwrap_or_else(|| json!({}));
        let mut aliases: Vec<String> = record.map(|r| r.aliases).unwrap_or_default();
        if uuid != i.name {
            aliases.push(uuid.clone());
        }
        json!({
            "name": i.name,
            "aliases": aliases,
            "product_name": i.product_name,
            "block_size": i.block_size,
            "num_blocks": i.num_blocks,
            "preferred_write_alignment": 0,
            "preferred_write_granularity": 0,
            "optimal_write_size": 0,
            "preferred_unmap_alignment": 0,
            "preferred_unmap_granularity": 0,
            "uuid": uuid,
            "assigned_rate_limits": {
                "rw_ios_per_sec": 0,
                "rw_mbytes_per_sec": 0,
                "r_mbytes_per_sec": 0,
                "w_mbytes_per_sec": 0
            },
            "claimed": self.is_claimed_by_anyone(&i.name),
            "zoned": false,
            "supported_io_types": {
                "read": ops.contains(Op::Read),
                "write": ops.contains(Op::Write),
                "unmap": ops.contains(Op::Discard),
                "flush": ops.contains(Op::Flush),
                "reset": false,
                "nvme_admin": false,
                "nvme_io": false,
                "nvme_io_md": false,
                "write_zeroes": ops.contains(Op::WriteZeroes),
                "zcopy": false,
                "get_zone_info": false,
                "zone_management": false,
                "zone_append": false,
                "compare": false,
                "compare_and_write": false,
                "abort": false,
                "seek_hole": false,
                "seek_data": false,
                "copy": false,
                "nvme_iov_md": false,
                "nvme_nssr": false
            },
            "driver_specific": driver_specific
        })
    }
    /// `bdev_get_iostat` object of bdev `name` (latencies in ns ticks; tick rate 1e9).
    pub fn iostat_json(&self, name: &str) -> Value {
        let s = self.iostat(name);
        let (r, w, u) = (s.op(Op::Read), s.op(Op::Write), s.op(Op::Discard));
        let min = |o: &pmio::bdev::stats::OpStats| if o.ops == 0 { 0 } else { o.lat_min_ns };
        let errors: u64 = s.ops.iter().map(|o| o.errors).sum();
        let io_error = if errors == 0 {
            json!({})
        } else {
            json!({ "failed": errors })
        };
        json!({
            "name": name,
            "bytes_read": r.bytes,
            "num_read_ops": r.ops,
            "bytes_written": w.bytes,
            "num_write_ops": w.ops,
            "bytes_unmapped": u.bytes,
            "num_unmap_ops": u.ops,
            "bytes_copied": 0,
            "num_copy_ops": 0,
            "read_latency_ticks": r.lat_sum_ns,
            "max_read_latency_ticks": r.lat_max_ns,
            "min_read_latency_ticks": min(r),
            "write_latency_ticks": w.lat_sum_ns,
            "max_write_latency_ticks": w.lat_max_ns,
            "min_write_latency_ticks": min(w),
            "unmap_latency_ticks": u.lat_sum_ns,
            "max_unmap_latency_ticks": u.lat_max_ns,
            "min_unmap_latency_ticks": min(u),
            "copy_latency_ticks": 0,
            "max_copy_latency_ticks": 0,
            "min_copy_latency_ticks": 0,
            "io_error": io_error
        })
    }
}

/// I/O statistics of one bdev.
#[derive(Default)]
struct IoStat {
    /// Finished queues.
    total: QueueStats,
    /// Running queues.
    live: Vec<LiveQueue>,
    /// The registry's counts of the bdev at the last reset (subtracted from them).
    served_base: QueueStats,
}

/// A running queue's shared statistics and the counts to subtract (after a reset).
struct LiveQueue {
    id: u64,
    cell: Arc<QueueStatsCell>,
    base: QueueStats,
}

/// Counters accumulated since `base` (min/max latencies are `a`'s).
fn since(a: &QueueStats, base: &QueueStats) -> QueueStats {
    let mut out = *a;
    for (o, b) in out.ops.iter_mut().zip(base.ops.iter()) {
        o.ops = o.ops.saturating_sub(b.ops);
        o.bytes = o.bytes.saturating_sub(b.bytes);
        o.errors = o.errors.saturating_sub(b.errors);
        o.lat_sum_ns = o.lat_sum_ns.saturating_sub(b.lat_sum_ns);
        if o.ops == 0 {
            o.lat_min_ns = u64::MAX;
            o.lat_max_ns = 0;
        }
    }
    out
}

/// Keeps bdevs marked busy while a job runs.
pub struct BusyGuard {
    busy: Arc<Mutex<HashMap<String, usize>>>,
    names: Vec<String>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut busy = lock(&self.busy);
        for n in &self.names {
            if let Some(c) = busy.get_mut(n) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    busy.remove(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio_null::{NullDevice, NullOptions};
    use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

    #[test]
    fn unregister_all_empties_the_registry_and_the_records() {
        let opts = ReactorsOptions {
            pin_threads: false,
            interrupt_idle: Some(std::time::Duration::from_millis(1)),
            ..ReactorsOptions::default()
        };
        let reactors = Reactors::start(CoreMask::parse("0x1").unwrap(), opts).unwrap();
        let host = BdevHost::new(reactors.handle());
        for name in ["N0", "N1"] {
            let dev = NullDevice::new(NullOptions {
                name: name.into(),
                ..NullOptions::default()
            })
            .unwrap();
            host.add_bdev(dev, BdevRecord::new(name, "null", None))
                .unwrap();
        }
        host.unregister_all();
        assert!(host.records().is_empty());
        assert!(host.registry.get("N0").is_none() && host.registry.get("N1").is_none());
        reactors.stop().unwrap();
    }
}
