//! The Ceph RBD block device: a librbd image as a bdev (SPDK's `module/bdev/rbd`).
//!
//! - [`Cluster`]: one librados connection (`rados_create2` .. `rados_connect`) that many
//!   images share, as `bdev_rbd_register_cluster` makes one; connecting is bounded by
//!   `client_mount_timeout` ([`ClusterOptions::connect_timeout_secs`]), so a cluster that is
//!   down gives an error, not a hang.
//! - [`RbdDevice`]: an image on a pool of a cluster. Each reactor's queue opens the image on
//!   its own handle and has librbd queue that handle's completions with an eventfd
//!   (`rbd_set_image_notification`); the queue's `poll` reaps them with `rbd_poll_io_events`
//!   on the reactor that submitted them — no callback, no thread hop per I/O (librbd's own
//!   threads only push the completion and write the eventfd).
//! - `sys`: the FFI, every unsafe call in it.
//!
//! Opening a queue opens an image handle, which talks to the cluster (milliseconds).
//!
//! ```no_run
//! use pmio::BlockDevice;
//! use pmio_rbd::{Cluster, ClusterOptions, RbdDevice, RbdOptions};
//!
//! let cluster = Cluster::connect(ClusterOptions {
//!     config_file: Some("/etc/ceph/ceph.conf".into()),
//!     ..ClusterOptions::default()
//! })
//! .unwrap();
//! let dev = RbdDevice::open(&cluster, RbdOptions {
//!     name: "Ceph0".into(),
//!     pool: "rbd".into(),
//!     image: "disk1".into(),
//!     ..RbdOptions::default()
//! })
//! .unwrap();
//! println!("{} blocks", dev.info().num_blocks);
//! ```

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "rpc")]
pub mod rpc;
mod sys;

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use pmio::{
    BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, IoStatus, Op, OpSet,
    Request, Uuid,
};

pub use sys::Errno;

/// Errors of the rbd driver.
#[derive(Debug, thiserror::Error)]
pub enum RbdError {
    /// A string with a NUL byte in it.
    #[error("{what} contains a NUL byte")]
    Nul { what: &'static str },
    /// A librados/librbd call failed.
    #[error("{call}{context}: {errno}")]
    Ceph {
        call: &'static str,
        context: String,
        errno: Errno,
    },
    /// The image's size is not a whole number of blocks, or the block size is bad.
    #[error("{0}")]
    Invalid(String),
}

impl RbdError {
    fn ceph(call: &'static str, context: impl Into<String>) -> impl FnOnce(Errno) -> RbdError {
        let context = context.into();
        move |errno| RbdError::Ceph {
            call,
            context,
            errno,
        }
    }

    /// Negative errno in SPDK's convention.
    pub fn errno(&self) -> i32 {
        match self {
            RbdError::Ceph { errno, .. } => -errno.0,
            _ => -libc::EINVAL,
        }
    }
}

fn cstr(what: &'static str, s: &str) -> Result<CString, RbdError> {
    CString::new(s).map_err(|_| RbdError::Nul { what })
}

/// How to reach a cluster. Defaults: client `admin`, Ceph's default configuration search
/// (`/etc/ceph/$cluster.conf`, ...), a 10 s connect timeout.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Ceph cluster name (`ceph`): selects `$cluster.conf` where no file is given.
    pub cluster_name: String,
    /// Ceph user without `client.` (`admin`).
    pub user_id: String,
    /// A ceph.conf to read; `None`: Ceph's default search.
    pub config_file: Option<String>,
    /// A keyring file (`keyring` option).
    pub key_file: Option<String>,
    /// Options set after the file, in order (SPDK's `config_param`).
    pub config_param: Vec<(String, String)>,
    /// `client_mount_timeout` and `rados_mon_op_timeout` unless `config_param` sets them.
    pub connect_timeout_secs: u32,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            cluster_name: "ceph".into(),
            user_id: "admin".into(),
            config_file: None,
            key_file: None,
            config_param: Vec::new(),
            connect_timeout_secs: 10,
        }
    }
}

/// A connected librados handle, shared by the images opened on it.
#[derive(Debug)]
pub struct Cluster {
    handle: sys::RadosT,
}

// SAFETY: librados handles are thread-safe (Ceph documents rados_t and rados_ioctx_t as
// usable from many threads); the handle is only destroyed in Drop, when no image is left
// (every RbdDevice and queue holds an Arc<Cluster>).
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// Connects; blocks up to the connect timeout.
    pub fn connect(opts: ClusterOptions) -> Result<Arc<Cluster>, RbdError> {
        let name = cstr("cluster name", &opts.cluster_name)?;
        let user = cstr("user_id", &format!("client.{}", opts.user_id))?;
        let handle = sys::create(&name, &user).map_err(RbdError::ceph("rados_create2", ""))?;
        // From here Drop shuts the handle down on every error.
        let cluster = Cluster { handle };
        if let Some(f) = &opts.config_file {
            sys::conf_read_file(handle, &cstr("config_file", f)?)
                .map_err(RbdError::ceph("rados_conf_read_file", format!(" {f}")))?;
        } else {
            // Ceph's default search; a missing file is not an error when config_param
            // names the monitors.
            let _ = sys::conf_read_file_default(handle);
        }
        let t = opts.connect_timeout_secs.to_string();
        let mut params: Vec<(String, String)> = vec![
            ("client_mount_timeout".into(), t.clone()),
            ("rados_mon_op_timeout".into(), t),
        ];
        if let Some(k) = &opts.key_file {
            params.push(("keyring".into(), k.clone()));
        }
        params.extend(opts.config_param.iter().cloned());
        for (k, v) in &params {
            sys::conf_set(handle, &cstr("config key", k)?, &cstr("config value", v)?)
                .map_err(RbdError::ceph("rados_conf_set", format!(" {k}={v}")))?;
        }
        sys::connect(handle).map_err(RbdError::ceph("rados_connect", ""))?;
        Ok(Arc::new(cluster))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        sys::shutdown(self.handle);
    }
}

/// An I/O context on one pool.
#[derive(Debug)]
struct Pool {
    io: sys::IoctxT,
    _cluster: Arc<Cluster>,
}

// SAFETY: rados_ioctx_t is thread-safe (see Cluster); destroyed once in Drop.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        sys::ioctx_destroy(self.io);
    }
}

/// An open image handle.
#[derive(Debug)]
struct Image {
    img: sys::ImageT,
    _pool: Arc<Pool>,
}

// SAFETY: an rbd_image_t may be used from any thread (librbd locks inside); pmio-rbd uses
// each one from one thread at a time (the device's behind a Mutex, a queue's on its reactor).
unsafe impl Send for Image {}

impl Image {
    fn open(pool: &Arc<Pool>, name: &CString, read_only: bool) -> Result<Image, Errno> {
        let img = sys::open(pool.io, name, read_only)?;
        Ok(Image {
            img,
            _pool: Arc::clone(pool),
        })
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        sys::close(self.img);
    }
}

/// Options of an rbd bdev. Defaults: 512-byte blocks (SPDK's `bdev_rbd_create -b` is
/// required; rpc.py users pass 512 or 4096), read-write, queues up to 4096 deep.
#[derive(Clone, Debug)]
pub struct RbdOptions {
    /// Bdev name.
    pub name: String,
    /// UUID; a random one when `None`.
    pub uuid: Option<Uuid>,
    /// Pool name.
    pub pool: String,
    /// Image name.
    pub image: String,
    /// Block size of the bdev (the image's size must be a multiple of it).
    pub block_size: u32,
    /// Open the image read-only.
    pub read_only: bool,
    /// Deepest queue that may be opened.
    pub max_queue_depth: u32,
}

impl Default for RbdOptions {
    fn default() -> Self {
        RbdOptions {
            name: "Ceph0".into(),
            uuid: None,
            pool: "rbd".into(),
            image: String::new(),
            block_size: 512,
            read_only: false,
            max_queue_depth: 4096,
        }
    }
}

/// An RBD image as a block device.
#[derive(Debug)]
pub struct RbdDevice {
    info: BdevInfo,
    opts: RbdOptions,
    image_name: CString,
    pool: Arc<Pool>,
    /// The device's own handle: size, resize.
    image: std::sync::Mutex<Image>,
}

impl RbdDevice {
    /// Opens `opts.image` in `opts.pool` on `cluster` (blocks while librbd opens it).
    pub fn open(cluster: &Arc<Cluster>, opts: RbdOptions) -> Result<Arc<RbdDevice>, RbdError> {
        let pool_name = cstr("pool_name", &opts.pool)?;
        let image_name = cstr("rbd_name", &opts.image)?;
        let io = sys::ioctx_create(cluster.handle, &pool_name).map_err(RbdError::ceph(
            "rados_ioctx_create",
            format!(" pool {}", opts.pool),
        ))?;
        let pool = Arc::new(Pool {
            io,
            _cluster: Arc::clone(cluster),
        });
        let image = Image::open(&pool, &image_name, opts.read_only).map_err(RbdError::ceph(
            "rbd_open",
            format!(" {}/{}", opts.pool, opts.image),
        ))?;
        let (size, _obj) =
            sys::stat(image.img).map_err(RbdError::ceph("rbd_stat", opts.image.clone()))?;
        let info = Self::info_for(&opts, size)?;
        Ok(Arc::new(RbdDevice {
            info,
            opts,
            image_name,
            pool,
            image: std::sync::Mutex::new(image),
        }))
    }

    fn info_for(opts: &RbdOptions, size: u64) -> Result<BdevInfo, RbdError> {
        let bs = u64::from(opts.block_size);
        if bs == 0 || !size.is_multiple_of(bs) {
            return Err(RbdError::Invalid(format!(
                "image {}/{} of {size} bytes is not a multiple of block_size {}",
                opts.pool, opts.image, opts.block_size
            )));
        }
        let supported = if opts.read_only {
            OpSet::EMPTY.with(Op::Read)
        } else {
            OpSet::ALL
        };
        let info = BdevInfo {
            name: opts.name.clone(),
            uuid: opts.uuid.unwrap_or_else(Uuid::new_v4),
            product_name: "Ceph Rbd Disk".into(),
            block_size: opts.block_size,
            num_blocks: size / bs,
            supported_ops: supported,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: opts.max_queue_depth,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        };
        info.validate()
            .map_err(|e| RbdError::Invalid(e.to_string()))?;
        Ok(info)
    }

    /// The options it was opened with.
    pub fn options(&self) -> &RbdOptions {
        &self.opts
    }

    /// The image's current size in bytes, as librbd sees it now.
    pub fn image_size(&self) -> Result<u64, RbdError> {
        let img = self.image.lock().unwrap_or_else(|e| e.into_inner());
        sys::stat(img.img)
            .map(|(s, _)| s)
            .map_err(RbdError::ceph("rbd_stat", self.opts.image.clone()))
    }

    /// Grows or shrinks the image to `bytes` (blocks while librbd does it).
    pub fn resize_image(&self, bytes: u64) -> Result<(), RbdError> {
        let img = self.image.lock().unwrap_or_else(|e| e.into_inner());
        sys::resize(img.img, bytes).map_err(RbdError::ceph("rbd_resize", self.opts.image.clone()))
    }
}

impl BlockDevice for RbdDevice {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        let io_err = |what: &str, e: Errno| {
            self.info.invalid(format!(
                "{what} for {}/{}: {e}",
                self.opts.pool, self.opts.image
            ))
        };
        let image = Image::open(&self.pool, &self.image_name, self.opts.read_only)
            .map_err(|e| io_err("rbd_open", e))?;
        let efd = sys::eventfd().map_err(|e| io_err("eventfd", e))?;
        sys::set_image_notification(image.img, std::os::fd::AsRawFd::as_raw_fd(&efd))
            .map_err(|e| io_err("rbd_set_image_notification", e))?;
        Ok(Box::new(RbdQueue {
            image,
            efd,
            block_size: u64::from(self.info.block_size),
            num_blocks: self.info.num_blocks,
            comps: vec![std::ptr::null_mut(); 256].into_boxed_slice(),
            refused: Vec::with_capacity(depth as usize),
            outstanding: 0,
        }))
    }
}

/// One reactor's queue: its own image handle, whose completions librbd queues for it.
pub struct RbdQueue {
    // Field order: the image is closed before its eventfd.
    image: Image,
    efd: OwnedFd,
    block_size: u64,
    num_blocks: u64,
    /// `rbd_poll_io_events`'s output.
    comps: Box<[sys::CompletionT]>,
    /// Requests that failed to start, completed at the next poll: (tag, errno).
    refused: Vec<(u16, i32)>,
    /// Started (or refused) and not yet reaped.
    outstanding: usize,
}

impl RbdQueue {
    /// The librbd operation for `rq`, or the errno it fails with before reaching librbd.
    fn describe(&self, rq: &Request) -> Result<sys::Aio, i32> {
        let off = rq.lba.checked_mul(self.block_size).ok_or(libc::EINVAL)?;
        let end = rq
            .lba
            .checked_add(u64::from(rq.nblocks))
            .ok_or(libc::EINVAL)?;
        if rq.op != Op::Flush && end > self.num_blocks {
            return Err(libc::EINVAL);
        }
        let len = u64::from(rq.nblocks) * self.block_size;
        let ulen = usize::try_from(len).map_err(|_| libc::EINVAL)?;
        Ok(match rq.op {
            Op::Read | Op::Write => {
                if u64::from(rq.buf.len()) < len {
                    return Err(libc::EINVAL);
                }
                if rq.op == Op::Read {
                    sys::Aio::Read {
                        off,
                        len: ulen,
                        buf: rq.buf.as_ptr(),
                    }
                } else {
                    sys::Aio::Write {
                        off,
                        len: ulen,
                        buf: rq.buf.as_ptr(),
                    }
                }
            }
            Op::Discard => sys::Aio::Discard { off, len },
            Op::WriteZeroes => sys::Aio::WriteZeroes { off, len: ulen },
            Op::Flush => sys::Aio::Flush,
        })
    }

    fn start(&mut self, rq: &Request, tag: u16) -> Result<(), i32> {
        let op = self.describe(rq)?;
        let c = sys::completion(usize::from(tag)).map_err(|e| e.0)?;
        // SAFETY: the submitter keeps `rq.buf` valid and untouched until the request is
        // reaped (IoBuf's contract); the completion is reaped only by `poll`.
        if let Err(e) = unsafe { sys::aio(self.image.img, op, c) } {
            sys::release(c);
            return Err(e.0);
        }
        Ok(())
    }
}

impl DriverQueue for RbdQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        for &t in tags {
            let rq = &rqs[t as usize];
            if let Err(e) = self.start(rq, t) {
                self.refused.push((t, e));
            }
            self.outstanding += 1;
        }
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut n = 0;
        while n < max
            && let Some((t, e)) = self.refused.pop()
        {
            rqs[t as usize].status = IoStatus::Errno(e);
            done.push(t);
            n += 1;
        }
        if n < max && self.outstanding > self.refused.len() {
            // Clear the counter first: a completion queued after the clear writes it again.
            sys::eventfd_clear(self.efd.as_fd());
            let want = (max - n).min(self.comps.len());
            let got = sys::poll_io_events(self.image.img, &mut self.comps[..want]);
            for &c in &self.comps[..got] {
                let (arg, ret) = sys::take_completion(c);
                let t = arg as u16;
                rqs[t as usize].status = if ret < 0 {
                    IoStatus::Errno(i32::try_from(-ret).unwrap_or(libc::EIO))
                } else {
                    IoStatus::Success
                };
                done.push(t);
            }
            n += got;
        }
        self.outstanding -= n;
        n
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}

impl Drop for RbdQueue {
    fn drop(&mut self) {
        if self.outstanding > 0 {
            log::warn!(
                "rbd queue dropped with {} I/O in flight: closing the image waits for them",
                self.outstanding
            );
        }
    }
}
