//! The metadata owner of one lvstore: a plain thread that runs the synchronous blobstore
//! (`pmio_blobstore::lvol::Lvstore`) over its own queue of the base bdev, and publishes the
//! cluster maps the reactors translate with ([`crate::map`]). Everything that changes
//! metadata — allocation on first write, copy-on-write, create, snapshot, clone, resize,
//! rename, delete — runs here, one job at a time, reached by message: RPC methods send a job
//! and wait for its answer; a reactor's queue sends an allocation and never waits (it parks
//! the requests for that cluster and is told in its [`Mailbox`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use pmio_blobstore::lvol::Lvstore;
use pmio_blobstore::{BlobId, Error as BsError};

use crate::base::BaseDevice;
use crate::map::{ClusterMap, VolShared};

/// A job for the owner.
pub(crate) type Job = Box<dyn FnOnce(&mut Owner) + Send>;

/// A message to the owner thread.
pub(crate) enum Msg {
    Job(Job),
    /// Unload the store cleanly (or, with `false`, drop it as a crash would) and stop.
    Stop(bool, Sender<Result<(), BsError>>),
}

/// The sending side, held by the store handle and by every lvol queue.
pub(crate) type OwnerTx = Sender<Msg>;

/// The owner thread's state.
pub(crate) struct Owner {
    pub(crate) lvs: Lvstore<BaseDevice>,
    /// The published maps, by blob id (every lvol, snapshots included).
    pub(crate) vols: BTreeMap<BlobId, Arc<VolShared>>,
    /// Lvols with an inflate or decouple_parent running, a cluster per job: their
    /// ancestry, size and flags do not change until it ends (SPDK's
    /// `locked_operation_in_progress`).
    pub(crate) busy: BTreeSet<BlobId>,
}

/// Where a queue hears about its allocations: blob cluster and outcome (negative errno).
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    has_mail: AtomicBool,
    mail: Mutex<Vec<(u64, Result<(), i32>)>>,
}

impl Mailbox {
    pub(crate) fn post(&self, cluster: u64, r: Result<(), i32>) {
        self.mail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((cluster, r));
        self.has_mail.store(true, Ordering::Release);
    }

    /// Takes the replies into `out` if there are any (one load when there are none).
    #[inline]
    pub(crate) fn take(&self, out: &mut Vec<(u64, Result<(), i32>)>) {
        if !self.has_mail.load(Ordering::Acquire) {
            return;
        }
        let mut m = self.mail.lock().unwrap_or_else(|p| p.into_inner());
        self.has_mail.store(false, Ordering::Relaxed);
        out.append(&mut m);
    }
}

/// The errno an I/O fails with for a blobstore error.
pub(crate) fn io_errno(e: &BsError) -> i32 {
    match e {
        BsError::NoSpace(_) => libc::ENOSPC,
        BsError::ReadOnly(_) | BsError::MetadataReadOnly(_) => libc::EPERM,
        BsError::BadRange { .. } => libc::EINVAL,
        _ => libc::EIO,
    }
}

impl Owner {
    /// Refuses (-EBUSY) a change of the ancestry, size or flags of lvols `ids` while an
    /// inflate or decouple_parent of one of them runs.
    pub(crate) fn check_idle(&self, ids: &[BlobId]) -> Result<(), BsError> {
        match ids.iter().find(|id| self.busy.contains(id)) {
            Some(&id) => Err(BsError::Busy(id)),
            None => Ok(()),
        }
    }

    /// Builds (or rebuilds) the published map of blob `id` from the store's state, its
    /// parent's first; returns it. An existing lvol gets the new map under its generation.
    pub(crate) fn publish(&mut self, id: BlobId) -> Result<Arc<ClusterMap>, BsError> {
        let b = self.lvs.blobstore().open_blob(id)?;
        let parent = b.parent();
        let (n, thin, ro) = (b.num_clusters(), b.is_thin_provisioned(), b.is_read_only());
        let clusters: Vec<u32> = (0..n).map(|i| b.cluster(i).unwrap_or(0)).collect();
        let parent_map = match parent {
            Some(p) => Some(match self.vols.get(&p) {
                Some(v) => v.map(),
                None => self.publish(p)?,
            }),
            None => None,
        };
        let map = Arc::new(ClusterMap::new(clusters, parent_map, thin, ro));
        match self.vols.get(&id) {
            Some(v) => v.replace(Arc::clone(&map)),
            None => {
                let v = VolShared::new(ClusterMap::new([], None, true, true));
                v.replace(Arc::clone(&map));
                self.vols.insert(id, Arc::new(v));
            }
        }
        Ok(map)
    }

    /// Publishes every lvol's map (at load).
    pub(crate) fn publish_all(&mut self) -> Result<(), BsError> {
        let ids: Vec<BlobId> = self.lvs.lvols().map(|l| l.blob_id).collect();
        for id in ids {
            if !self.vols.contains_key(&id) {
                self.publish(id)?;
            }
        }
        Ok(())
    }

    /// A queue's allocation: gives blob cluster `i` storage (copying the parent's data into
    /// it), publishes it once its metadata is written, and tells the queue.
    pub(crate) fn allocate(&mut self, id: BlobId, i: u64, mailbox: &Mailbox) {
        let r = self.lvs.blobstore_mut().allocate_cluster(id, i);
        match r {
            Ok(c) => {
                if let Some(v) = self.vols.get(&id) {
                    v.map().publish(i, c);
                }
                mailbox.post(i, Ok(()));
            }
            Err(e) => {
                log::error!("lvol blob {id:#x}: allocating cluster {i}: {e}");
                mailbox.post(i, Err(io_errno(&e)));
            }
        }
    }

    /// A queue's unmap of all of blob cluster `i` of a thin lvol without a parent: with every
    /// queue of the lvol drained (frozen), the cluster is unmapped and freed in the store
    /// (`Blobstore::release_unmapped`), the map stops pointing at it, and the queue is told.
    pub(crate) fn release(&mut self, id: BlobId, i: u64, mailbox: &Mailbox) {
        let vol = self.vols.get(&id).cloned();
        if let Some(v) = &vol {
            v.freeze();
        }
        let r = self.lvs.blobstore_mut().release_unmapped(id, i);
        if let (Ok(_), Some(v)) = (&r, &vol) {
            v.map().publish(i, 0);
        }
        if let Some(v) = &vol {
            v.thaw();
        }
        match r {
            Ok(_) => mailbox.post(i, Ok(())),
            Err(e) => {
                log::error!("lvol blob {id:#x}: freeing unmapped cluster {i}: {e}");
                mailbox.post(i, Err(io_errno(&e)));
            }
        }
    }

    /// Runs a metadata change that moves clusters out of `frozen`'s map (a snapshot, a
    /// shrink): freezes those lvols first, republishes `republish` after, then thaws.
    pub(crate) fn frozen<R>(
        &mut self,
        frozen: &[BlobId],
        f: impl FnOnce(&mut Owner) -> Result<R, BsError>,
    ) -> Result<R, BsError> {
        let vols: Vec<Arc<VolShared>> = frozen
            .iter()
            .filter_map(|id| self.vols.get(id).cloned())
            .collect();
        vols.iter().for_each(|v| v.freeze());
        let r = f(self);
        // Republish whatever happened (a failed change may have half-moved nothing, but the
        // map must match the store either way).
        for id in frozen {
            if self.lvs.blobstore().open_blob(*id).is_ok()
                && let Err(e) = self.publish(*id)
            {
                log::error!("lvol blob {id:#x}: republishing its map: {e}");
            }
        }
        vols.iter().for_each(|v| v.thaw());
        r
    }
}

/// Starts the owner thread of a store that `open` makes (creates or loads) on the thread.
/// Returns the sender once `open` succeeded.
pub(crate) fn spawn(
    name: String,
    open: impl FnOnce() -> Result<Lvstore<BaseDevice>, BsError> + Send + 'static,
) -> Result<OwnerTx, BsError> {
    let (tx, rx) = channel::<Msg>();
    let (ready_tx, ready_rx) = channel::<Result<(), BsError>>();
    std::thread::Builder::new()
        .name(format!("lvs-{name}"))
        .spawn(move || {
            let lvs = match open() {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut owner = Owner {
                lvs,
                vols: BTreeMap::new(),
                busy: BTreeSet::new(),
            };
            if let Err(e) = owner.publish_all() {
                let _ = ready_tx.send(Err(e));
                return;
            }
            let _ = ready_tx.send(Ok(()));
            run(owner, rx);
        })
        .map_err(|e| BsError::Device(format!("cannot start the lvstore thread: {e}")))?;
    ready_rx
        .recv()
        .map_err(|_| BsError::Device("the lvstore thread ended".into()))??;
    Ok(tx)
}

fn run(mut owner: Owner, rx: Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Job(job) => job(&mut owner),
            Msg::Stop(clean, reply) => {
                let r = if clean {
                    owner.lvs.unload().map(drop)
                } else {
                    drop(owner.lvs.into_device());
                    Ok(())
                };
                let _ = reply.send(r);
                return;
            }
        }
    }
    // Every sender dropped without a stop: unload cleanly.
    if let Err(e) = owner.lvs.unload() {
        log::error!("unloading lvstore: {e}");
    }
}
