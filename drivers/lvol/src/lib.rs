//! pmio-lvol: logical volumes. An lvstore is a blobstore in SPDK v25.09's format
//! (`pmio_blobstore::lvol`) on any bdev; each of its lvols is a bdev ([`LvolDevice`]) stacked
//! on the base bdev.
//!
//! | file | job |
//! |---|---|
//! | `lib.rs` | the store handle ([`LvolStore`]), the lvol bdev, what they tell about themselves |
//! | `owner.rs` | the metadata owner: one thread per store running the synchronous blobstore |
//! | `base.rs` | the owner's device: its own queue of the base bdev |
//! | `map.rs` | the cluster maps the reactors translate with, and the freeze |
//! | `queue.rs` | an lvol queue: translation, forwarding, parking first writes |
//! | `rpc.rs`, `cli.rs` | SPDK's `bdev_lvol_*` methods and pmio-rpc's subcommands |
//!
//! Design. The data path and the metadata are split the way SPDK splits them between its
//! I/O channels and its metadata thread, with one change: the metadata owner is a plain
//! thread running the existing synchronous store, so it may wait for its own I/O, and no
//! reactor ever does. A reactor translates an I/O with a lock-free read of the lvol's
//! published cluster map (`map.rs`) and forwards it to its own base queue under the same tag:
//! no lock, no allocation, no message per I/O. Only a first write to a cluster of a thin
//! lvol goes to the owner, by message; it and the I/Os behind it to that cluster wait, and
//! nothing else does. The owner publishes the cluster only once the metadata mapping it is
//! written. An lvol's `boundary_blocks` is its cluster size, so the block layer's splitter
//! hands it no request that crosses a cluster.
//!
//! What differs from SPDK's lvol bdev, and why:
//! - flush is supported and forwarded to the base (SPDK's lvol refuses it): on a base with
//!   a volatile cache (a file, a drive's write cache) a host's flush must reach it;
//! - write-zeroes over a cluster that reads as zeroes completes without allocating it
//!   (SPDK allocates a cluster to write zeroes into it);
//! - an unmap of a whole cluster of a thin lvol without a parent frees it, as SPDK's does;
//!   pmio drains every queue of the lvol first (a freeze), so no write still in flight can
//!   land in a cluster another lvol may be given next.
//!
//! ```
//! use pmio_lvol::LvolStore;
//! use pmio_blobstore::lvol::LvstoreOptions;
//! use pmio_malloc::{MallocDevice, MallocOptions};
//! // Any bdev will do; a 128 MiB RAM disk here.
//! let base = MallocDevice::new(MallocOptions {
//!     name: "Malloc0".into(),
//!     num_blocks: (128 << 20) / 512,
//!     ..Default::default()
//! })
//! .unwrap();
//! let lvs = LvolStore::create(base, &LvstoreOptions { name: "lvs0".into(), ..Default::default() }).unwrap();
//! let vol = lvs.create_lvol("vol0", 64 << 20, true, Default::default()).unwrap();
//! // `vol` is a BlockDevice named by its uuid; register it, open queues on reactors.
//! # let _ = vol;
//! ```

mod base;
#[cfg(feature = "cli")]
pub mod cli;
pub mod map;
mod owner;
mod queue;
#[cfg(feature = "rpc")]
pub mod rpc;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};

use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, Op, OpSet, Uuid};
use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
use pmio_blobstore::{BlobId, ClearMethod, Error as BsError};

pub use base::BaseDevice;
use map::VolShared;
use owner::{Msg, Owner, OwnerTx};
use queue::{Geo, LvolQueue};

/// The product name of an lvol bdev (SPDK's).
pub const PRODUCT_NAME: &str = "Logical Volume";

/// Errors of the lvol module.
#[derive(Debug, thiserror::Error)]
pub enum LvolError {
    /// The blobstore refused or failed.
    #[error(transparent)]
    Store(#[from] BsError),
    /// The store's thread is gone (the store was unloaded).
    #[error("lvstore {0}: its metadata thread has stopped")]
    Stopped(String),
}

impl LvolError {
    /// Negative errno in SPDK's convention.
    pub fn errno(&self) -> i32 {
        match self {
            LvolError::Store(e) => match e {
                BsError::NoSpace(_) => -libc::ENOSPC,
                BsError::LvolExists(_) => -libc::EEXIST,
                BsError::NoSuchLvol(_) | BsError::NoSuchBlob(_) => -libc::ENODEV,
                BsError::HasClones(_) | BsError::ReadOnly(_) | BsError::MetadataReadOnly(_) => {
                    -libc::EPERM
                }
                BsError::InvalidName { .. } | BsError::InvalidOption(_) => -libc::EINVAL,
                BsError::NotReadOnly(_) | BsError::NoParent(_) => -libc::EINVAL,
                BsError::Busy(_) => -libc::EBUSY,
                BsError::Device(_) => -libc::EIO,
                _ => -libc::EILSEQ,
            },
            LvolError::Stopped(_) => -libc::ENODEV,
        }
    }
}

/// The module's result type.
pub type Result<T> = std::result::Result<T, LvolError>;

/// What an lvstore tells about itself (`bdev_lvol_get_lvstores`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreInfo {
    pub name: String,
    pub uuid: Uuid,
    pub base_bdev: String,
    pub total_data_clusters: u64,
    pub free_clusters: u64,
    /// The io unit: the lvols' block size.
    pub block_size: u32,
    pub cluster_size: u32,
}

/// What an lvol tells about itself (`bdev_lvol_get_lvols`, `driver_specific.lvol`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvolInfo {
    pub name: String,
    pub uuid: Option<Uuid>,
    /// Its bdev's name: the uuid, or `<lvs uuid>_<blob id>` without one (SPDK's unique id).
    pub bdev_name: String,
    pub blob_id: BlobId,
    pub num_clusters: u64,
    pub num_allocated_clusters: u64,
    pub thin: bool,
    pub read_only: bool,
    /// It has clones (`spdk_blob_is_snapshot`).
    pub is_snapshot: bool,
    /// The snapshot it reads through to (`spdk_blob_is_clone`), by name.
    pub base_snapshot: Option<String>,
    /// Its clones' names.
    pub clones: Vec<String>,
    pub clear_method: ClearMethod,
}

/// An lvstore on a base bdev, served by its metadata thread.
pub struct LvolStore {
    tx: Mutex<Option<OwnerTx>>,
    base: Arc<dyn BlockDevice>,
    uuid: Uuid,
    cluster_size: u32,
    io_unit: u32,
    /// The lvol bdevs made so far, by blob id (the latest object of each).
    devices: Mutex<BTreeMap<BlobId, Arc<LvolDevice>>>,
    stopped: AtomicBool,
}

impl std::fmt::Debug for LvolStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LvolStore")
            .field("uuid", &self.uuid)
            .field("base", &self.base.info().name)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a store's thread ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Unload cleanly: masks written, clean flag set.
    Unload,
    /// Drop the store as a crash would (tests).
    Crash,
}

impl LvolStore {
    /// Formats `base` as an lvstore (`bdev_lvol_create_lvstore`).
    pub fn create(base: Arc<dyn BlockDevice>, opts: &LvstoreOptions) -> Result<Arc<LvolStore>> {
        let b = Arc::clone(&base);
        let opts = opts.clone();
        Self::start(base, opts.name.clone(), move || {
            Lvstore::create(BaseDevice::open(b)?, &opts)
        })
    }

    /// Opens the lvstore on `base` (examine). Fails with the blobstore's reason when `base`
    /// holds none, or one it cannot read; nothing is written to a store that fails to load.
    pub fn load(base: Arc<dyn BlockDevice>) -> Result<Arc<LvolStore>> {
        let b = Arc::clone(&base);
        let name = base.info().name.clone();
        Self::start(base, name, move || Lvstore::load(BaseDevice::open(b)?))
    }

    fn start(
        base: Arc<dyn BlockDevice>,
        thread_name: String,
        open: impl FnOnce() -> std::result::Result<Lvstore<BaseDevice>, BsError> + Send + 'static,
    ) -> Result<Arc<LvolStore>> {
        let tx = owner::spawn(thread_name, open)?;
        let (r_tx, r_rx) = channel();
        let _ = tx.send(Msg::Job(Box::new(move |o: &mut Owner| {
            let bs = o.lvs.blobstore();
            let _ = r_tx.send((o.lvs.uuid(), bs.cluster_size(), bs.io_unit_size()));
        })));
        let (uuid, cluster_size, io_unit) = r_rx
            .recv()
            .map_err(|_| LvolError::Stopped(base.info().name.clone()))?;
        let lvs = Arc::new(LvolStore {
            tx: Mutex::new(Some(tx)),
            base,
            uuid,
            cluster_size,
            io_unit,
            devices: Mutex::new(BTreeMap::new()),
            stopped: AtomicBool::new(false),
        });
        for l in lvs.lvols()? {
            lvs.device_for(&l)?;
        }
        Ok(lvs)
    }

    fn sender(&self) -> Result<OwnerTx> {
        lock(&self.tx)
            .clone()
            .ok_or_else(|| LvolError::Stopped(self.uuid.to_string()))
    }

    /// Runs `f` on the metadata thread and returns its result.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Owner) -> std::result::Result<R, BsError> + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = channel();
        let job = Box::new(move |o: &mut Owner| {
            let _ = tx.send(f(o));
        });
        let gone = || LvolError::Stopped(self.uuid.to_string());
        self.sender()?.send(Msg::Job(job)).map_err(|_| gone())?;
        Ok(rx.recv().map_err(|_| gone())??)
    }

    /// The base bdev.
    pub fn base(&self) -> &Arc<dyn BlockDevice> {
        &self.base
    }

    /// The lvstore's uuid.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u32 {
        self.cluster_size
    }

    /// The store's facts now.
    pub fn info(&self) -> Result<StoreInfo> {
        let base_bdev = self.base.info().name.clone();
        self.call(move |o| {
            let bs = o.lvs.blobstore();
            Ok(StoreInfo {
                name: o.lvs.name().to_string(),
                uuid: o.lvs.uuid(),
                base_bdev,
                total_data_clusters: u64::from(bs.total_data_clusters()),
                free_clusters: u64::from(bs.free_clusters()),
                block_size: bs.io_unit_size(),
                cluster_size: bs.cluster_size(),
            })
        })
    }

    /// The store's name now.
    pub fn name(&self) -> Result<String> {
        self.call(|o| Ok(o.lvs.name().to_string()))
    }

    /// Every lvol's facts, by blob id.
    pub fn lvols(&self) -> Result<Vec<LvolInfo>> {
        self.call(|o| Ok(all_infos(o)))
    }

    /// The lvol bdev object of `info`'s lvol, made if there is none yet.
    fn device_for(&self, info: &LvolInfo) -> Result<Arc<LvolDevice>> {
        if let Some(d) = lock(&self.devices).get(&info.blob_id) {
            return Ok(Arc::clone(d));
        }
        self.make_device(info)
    }

    /// A new lvol bdev object for `info`'s lvol (replacing the previous one: after a resize
    /// or a change to read-only, its size or operations differ).
    fn make_device(&self, info: &LvolInfo) -> Result<Arc<LvolDevice>> {
        let id = info.blob_id;
        let vol = self.call(move |o| o.vols.get(&id).cloned().ok_or(BsError::NoSuchBlob(id)))?;
        let dev = Arc::new(LvolDevice::new(
            Arc::clone(&self.base),
            vol,
            self.sender()?,
            info,
            self.cluster_size,
            self.io_unit,
        ));
        lock(&self.devices).insert(id, Arc::clone(&dev));
        Ok(dev)
    }

    /// The lvol bdevs (one per lvol), by blob id.
    pub fn devices(&self) -> Vec<Arc<LvolDevice>> {
        lock(&self.devices).values().cloned().collect()
    }

    /// The facts of lvol `name` (its name in the store).
    pub fn lvol(&self, name: &str) -> Result<LvolInfo> {
        let n = name.to_string();
        let all = self.lvols()?;
        all.into_iter()
            .find(|l| l.name == n)
            .ok_or_else(|| BsError::NoSuchLvol(name.to_string()).into())
    }

    fn info_of(&self, id: BlobId) -> Result<LvolInfo> {
        self.lvols()?
            .into_iter()
            .find(|l| l.blob_id == id)
            .ok_or_else(|| BsError::NoSuchBlob(id).into())
    }

    /// Creates an lvol of `size` bytes (rounded up to clusters) and returns its bdev.
    pub fn create_lvol(
        &self,
        name: &str,
        size: u64,
        thin: bool,
        clear: ClearMethod,
    ) -> Result<Arc<LvolDevice>> {
        let n = name.to_string();
        let id = self.call(move |o| {
            let id = o.lvs.create_lvol(&n, size, thin, clear)?;
            o.publish(id)?;
            Ok(id)
        })?;
        let info = self.info_of(id)?;
        self.make_device(&info)
    }

    /// Snapshots lvol `name` into the read-only lvol `snapshot` (the lvol becomes its clone),
    /// with the lvol's I/O frozen meanwhile; returns the snapshot's bdev.
    pub fn snapshot(&self, name: &str, snapshot: &str) -> Result<Arc<LvolDevice>> {
        let origin = self.lvol(name)?.blob_id;
        let (n, s) = (name.to_string(), snapshot.to_string());
        let id = self.call(move |o| {
            // Republishing the origin publishes the snapshot too: it is the origin's parent.
            o.check_idle(&[origin])?;
            o.frozen(&[origin], |o| o.lvs.create_snapshot(&n, &s))
        })?;
        let info = self.info_of(id)?;
        self.make_device(&info)
    }

    /// Clones the snapshot `snapshot` into a new thin lvol `clone`; returns its bdev.
    pub fn clone_lvol(&self, snapshot: &str, clone: &str) -> Result<Arc<LvolDevice>> {
        let (s, c) = (snapshot.to_string(), clone.to_string());
        let id = self.call(move |o| {
            let id = o.lvs.create_clone(&s, &c)?;
            o.publish(id)?;
            Ok(id)
        })?;
        let info = self.info_of(id)?;
        self.make_device(&info)
    }

    /// Resizes lvol `name` to `size` bytes (rounded up to clusters); returns its new bdev
    /// object, of the new size. A shrink freezes the lvol's I/O while it commits.
    pub fn resize(&self, name: &str, size: u64) -> Result<Arc<LvolDevice>> {
        let id = self.lvol(name)?.blob_id;
        let n = name.to_string();
        self.call(move |o| {
            o.check_idle(&[id])?;
            o.frozen(&[id], |o| o.lvs.resize(&n, size))
        })?;
        let info = self.info_of(id)?;
        self.make_device(&info)
    }

    /// Makes lvol `name` read-only; returns its new bdev object (without write operations).
    pub fn set_read_only(&self, name: &str) -> Result<Arc<LvolDevice>> {
        let id = self.lvol(name)?.blob_id;
        let n = name.to_string();
        self.call(move |o| {
            o.check_idle(&[id])?;
            o.frozen(&[id], |o| o.lvs.set_read_only(&n))
        })?;
        let info = self.info_of(id)?;
        self.make_device(&info)
    }

    /// Inflates lvol `name` (`bdev_lvol_inflate`): every cluster it inherits is copied into
    /// storage of its own, one job of the store's thread per cluster (first writes and other
    /// lvols' metadata changes run between them), each published to its queues as it is
    /// allocated (I/O goes on; a write to a cluster being copied waits for that cluster
    /// only); then it drops its parent. Until then its snapshot, resize, read-only, delete
    /// and the delete of its parent into it are refused (-EBUSY).
    pub fn inflate(&self, name: &str) -> Result<()> {
        self.detach(name, true)
    }

    /// Decouples lvol `name` from its parent (`bdev_lvol_decouple_parent`): as
    /// [`LvolStore::inflate`] for the clusters the parent holds; the grandparent becomes the
    /// parent.
    pub fn decouple_parent(&self, name: &str) -> Result<()> {
        self.detach(name, false)
    }

    fn detach(&self, name: &str, all: bool) -> Result<()> {
        let id = self.lvol(name)?.blob_id;
        let plan = self.call(move |o| {
            o.check_idle(&[id])?;
            let plan = o.lvs.blobstore_mut().detach_plan(id, all)?;
            if plan.is_some() {
                o.busy.insert(id);
            }
            Ok(plan)
        })?;
        let Some(plan) = plan else {
            return Ok(());
        };
        let plan = Arc::new(plan);
        let mut copied: Result<()> = Ok(());
        for &i in &plan.clusters {
            let p = Arc::clone(&plan);
            copied = self.call(move |o| {
                if let Some(c) = o.lvs.blobstore_mut().detach_cluster(&p, i)?
                    && let Some(v) = o.vols.get(&id)
                {
                    v.map().publish(i, c);
                }
                Ok(())
            });
            if copied.is_err() {
                break;
            }
        }
        let p = Arc::clone(&plan);
        let copy_failed = copied.is_err();
        let finished = self.call(move |o| {
            o.busy.remove(&id);
            if copy_failed {
                // Some clusters are its own now, the parent is unchanged: it reads the same.
                return o.publish(id).map(|_| ());
            }
            let vol = o.vols.get(&id).cloned();
            let r = o.lvs.blobstore_mut().detach_finish(&p, |i, c| {
                if let Some(v) = &vol {
                    v.map().publish(i, c);
                }
            });
            // The parent changed (or, after an error, some clusters did): the map follows the
            // store either way.
            o.publish(id)?;
            r
        });
        copied.and(finished)
    }

    /// Renames lvol `name` (its bdev, named by uuid, keeps its name; its alias changes).
    pub fn rename_lvol(&self, name: &str, new_name: &str) -> Result<()> {
        let (n, m) = (name.to_string(), new_name.to_string());
        self.call(move |o| o.lvs.rename_lvol(&n, &m))
    }

    /// Renames the store.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        let m = new_name.to_string();
        self.call(move |o| o.lvs.rename(&m))
    }

    /// Deletes lvol `name`. A snapshot with one clone is merged into it, the clone's I/O
    /// frozen meanwhile (its map loses the snapshot as parent and gains its clusters); one
    /// with more clones is refused. Its bdev must be unregistered first: its queues must be
    /// gone.
    pub fn delete_lvol(&self, name: &str) -> Result<()> {
        let info = self.lvol(name)?;
        let id = info.blob_id;
        let clones = info
            .clones
            .iter()
            .map(|c| self.lvol(c).map(|l| l.blob_id))
            .collect::<Result<Vec<BlobId>>>()?;
        let n = name.to_string();
        self.call(move |o| {
            o.check_idle(&[id])?;
            o.check_idle(&clones)?;
            o.frozen(&clones, |o| o.lvs.delete_lvol(&n))?;
            o.vols.remove(&id);
            Ok(())
        })?;
        lock(&self.devices).remove(&id);
        Ok(())
    }

    /// Ends the store's thread: unloads cleanly, or drops it as a crash would. Later calls
    /// fail with [`LvolError::Stopped`]; lvol queues still open fail their I/O.
    pub fn stop(&self, how: Stop) -> Result<()> {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let Some(tx) = lock(&self.tx).take() else {
            return Ok(());
        };
        let (r_tx, r_rx) = channel();
        let gone = || LvolError::Stopped(self.uuid.to_string());
        tx.send(Msg::Stop(how == Stop::Unload, r_tx))
            .map_err(|_| gone())?;
        r_rx.recv().map_err(|_| gone())??;
        lock(&self.devices).clear();
        Ok(())
    }

    /// Destroys the store (`bdev_lvol_delete_lvstore`): deletes every lvol (clones before
    /// their snapshots), unloads, and zeroes the super block so that the base holds no
    /// store any more.
    pub fn destroy(&self) -> Result<()> {
        self.call(|o| {
            loop {
                let infos = all_infos(o);
                let Some(leaf) = infos.iter().find(|l| l.clones.is_empty()) else {
                    break;
                };
                let (n, id) = (leaf.name.clone(), leaf.blob_id);
                o.lvs.delete_lvol(&n)?;
                o.vols.remove(&id);
            }
            Ok(())
        })?;
        self.stop(Stop::Unload)?;
        let mut dev = BaseDevice::open(Arc::clone(&self.base))?;
        let zero = vec![0u8; pmio_blobstore::format::PAGE_SIZE];
        use pmio_blobstore::BlobDevice;
        dev.write(0, &zero)?;
        dev.flush()?;
        Ok(())
    }
}

impl Drop for LvolStore {
    fn drop(&mut self) {
        if let Err(e) = self.stop(Stop::Unload) {
            log::error!("lvstore {}: unload: {e}", self.uuid);
        }
    }
}

fn all_infos(o: &Owner) -> Vec<LvolInfo> {
    let bs = o.lvs.blobstore();
    let name_of = |id: BlobId| {
        o.lvs
            .lvols()
            .find(|l| l.blob_id == id)
            .map(|l| l.name.clone())
    };
    o.lvs
        .lvols()
        .filter_map(|l| {
            let b = bs.open_blob(l.blob_id).ok()?;
            let clones: Vec<String> = bs
                .clones(l.blob_id)
                .into_iter()
                .filter_map(name_of)
                .collect();
            Some(LvolInfo {
                name: l.name.clone(),
                uuid: l.uuid,
                bdev_name: o.lvs.unique_id(l),
                blob_id: l.blob_id,
                num_clusters: b.num_clusters(),
                num_allocated_clusters: b.num_allocated_clusters(),
                thin: b.is_thin_provisioned(),
                read_only: b.is_read_only(),
                is_snapshot: !clones.is_empty(),
                base_snapshot: b.parent().and_then(name_of),
                clones,
                clear_method: b.clear_method(),
            })
        })
        .collect()
}

/// An lvol as a bdev.
pub struct LvolDevice {
    info: BdevInfo,
    base: Arc<dyn BlockDevice>,
    vol: Arc<VolShared>,
    tx: Mutex<OwnerTx>,
    blob: BlobId,
    geo: Geo,
}

impl std::fmt::Debug for LvolDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LvolDevice")
            .field("info", &self.info)
            .field("blob", &self.blob)
            .finish()
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl LvolDevice {
    fn new(
        base: Arc<dyn BlockDevice>,
        vol: Arc<VolShared>,
        tx: Sender<Msg>,
        l: &LvolInfo,
        cluster_size: u32,
        io_unit: u32,
    ) -> LvolDevice {
        let bi = base.info();
        let base_per_block = u64::from(io_unit / bi.block_size).max(1);
        let cluster_blocks = u64::from(cluster_size / io_unit);
        let cluster_base_blocks = cluster_blocks * base_per_block;
        // The base's boundary, seen from the lvol: clusters start on multiples of the
        // cluster size, so the boundary both respect is their gcd.
        let boundary = if bi.boundary_blocks == 0 {
            cluster_blocks
        } else {
            (gcd(cluster_base_blocks, u64::from(bi.boundary_blocks)) / base_per_block).max(1)
        };
        let mut ops = OpSet::EMPTY.with(Op::Read);
        if bi.supported_ops.contains(Op::Flush) {
            ops = ops.with(Op::Flush);
        }
        if !l.read_only {
            ops = ops.with(Op::Write).with(Op::Discard);
            if bi.supported_ops.contains(Op::WriteZeroes) {
                ops = ops.with(Op::WriteZeroes);
            }
        }
        let num_blocks = l.num_clusters * cluster_blocks;
        let info = BdevInfo {
            name: l.bdev_name.clone(),
            uuid: l.uuid.unwrap_or_default(),
            product_name: PRODUCT_NAME.into(),
            block_size: io_unit,
            num_blocks,
            supported_ops: ops,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: bi.max_queue_depth,
            max_transfer_blocks: (u64::from(bi.max_transfer_blocks) / base_per_block)
                .clamp(1, u64::from(u32::MAX)) as u32,
            boundary_blocks: boundary.min(u64::from(u32::MAX)) as u32,
        };
        LvolDevice {
            geo: Geo {
                cluster_blocks,
                base_per_block,
                cluster_base_blocks,
                block_size: io_unit,
                num_blocks,
                cluster_shift: cluster_blocks
                    .is_power_of_two()
                    .then(|| cluster_blocks.trailing_zeros()),
            },
            info,
            base,
            vol,
            tx: Mutex::new(tx),
            blob: l.blob_id,
        }
    }

    /// The lvol's blob.
    pub fn blob_id(&self) -> BlobId {
        self.blob
    }

    /// The base bdev.
    pub fn base(&self) -> &Arc<dyn BlockDevice> {
        &self.base
    }
}

impl BlockDevice for LvolDevice {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> std::result::Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        let base = self.base.open_queue(HctxType::Default, 0, depth)?;
        let tx = lock(&self.tx).clone();
        Ok(Box::new(LvolQueue::new(
            base,
            self.base.info().supported_ops,
            Arc::clone(&self.vol),
            tx,
            self.blob,
            self.geo,
            depth,
        )))
    }

    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        // SAFETY: the caller's promise covers the base device, which the lvol's queues hand
        // the same buffers to.
        unsafe { self.base.register_memory(regions) }
    }

    fn dma_options(&self) -> pmio::dma::DmaOptions {
        self.base.dma_options()
    }
}
