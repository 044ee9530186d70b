//! The device side of one vhost-user connection (a "session", as SPDK calls it): the answers
//! to the front end's control messages. It runs on the controller's control thread and reaches
//! the reactors by message only: a ring starts on its reactor once it has a size, addresses,
//! a kick eventfd, a memory table and (with PROTOCOL_FEATURES) SET_VRING_ENABLE 1; it stops
//! there, after its in-flight requests, on SET_VRING_ENABLE 0, GET_VRING_BASE, a reset or the
//! end of the connection.
//!
//! The `vhost` crate decodes the messages and sends the replies (REPLY_ACK included); this
//! type only keeps the negotiated state.

use std::fs::File;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use vhost::VhostUserMemoryRegionBase;
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVirtioFeatures,
    VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Backend, Error, GpuBackend, Result, VhostUserBackendReqHandlerMut};

use crate::ctrlr::CtrlrInfo;
use crate::inflight::InflightRegion;
use crate::mem::{GuestMem, RegionDesc};
use crate::ring::{RingKey, RingSetup};
use crate::spec::{BlkConfig, feature};
use crate::vring::{VringAddrs, valid_size};

/// Most queues a controller offers (GET_QUEUE_NUM); QEMU's `num-queues` may not exceed it.
pub const MAX_QUEUES: usize = 16;
/// How long a stop waits for a ring's in-flight requests before it logs and keeps waiting.
const STOP_WARN_AFTER: Duration = Duration::from_secs(10);

/// One virtqueue as the front end configured it.
#[derive(Default)]
struct VringConf {
    size: u16,
    addrs: Option<VringAddrs>,
    base: u16,
    kick: Option<File>,
    kick_set: bool,
    call: Option<File>,
    enabled: bool,
    /// Running on its reactor.
    started: bool,
}

/// The state of one connection.
pub(crate) struct Session {
    info: Arc<CtrlrInfo>,
    acked_features: u64,
    acked_protocol: u64,
    mem: Option<Arc<GuestMem>>,
    vrings: Vec<VringConf>,
    /// The in-flight log (INFLIGHT_SHMFD), kept by the front end across backends.
    inflight: Option<Arc<InflightRegion>>,
}

impl Session {
    pub fn new(info: Arc<CtrlrInfo>) -> Session {
        Session {
            info,
            acked_features: 0,
            acked_protocol: 0,
            mem: None,
            vrings: (0..MAX_QUEUES).map(|_| VringConf::default()).collect(),
            inflight: None,
        }
    }

    /// The virtio features offered: SPDK's set for a split-ring block device.
    pub fn features(info: &CtrlrInfo) -> u64 {
        use crate::spec::bit;
        let ops = info.facts().ops;
        let mut f = bit(feature::VERSION_1)
            | bit(feature::SIZE_MAX)
            | bit(feature::SEG_MAX)
            | bit(feature::BLK_SIZE)
            | bit(feature::MQ)
            | bit(feature::INDIRECT_DESC)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        if ops.contains(pmio::Op::Flush) {
            f |= bit(feature::FLUSH);
        }
        if info.readonly {
            f |= bit(feature::RO);
        } else {
            if ops.contains(pmio::Op::Discard) {
                f |= bit(feature::DISCARD);
            }
            if ops.contains(pmio::Op::WriteZeroes) {
                f |= bit(feature::WRITE_ZEROES);
            }
        }
        f
    }

    /// The configuration space.
    pub fn config(info: &CtrlrInfo) -> BlkConfig {
        let facts = info.facts();
        let bs = facts.block_size;
        BlkConfig {
            capacity: facts.num_blocks * u64::from(bs) / crate::spec::SECTOR_SIZE,
            size_max: crate::buf::BUF_SIZE as u32,
            seg_max: crate::ring::SEG_MAX,
            blk_size: bs,
            num_queues: MAX_QUEUES as u16,
            max_discard_sectors: crate::blk::MAX_DWZ_SECTORS,
            max_discard_seg: crate::blk::MAX_DWZ_SEGS,
            discard_sector_alignment: bs / crate::spec::SECTOR_SIZE as u32,
            max_write_zeroes_sectors: crate::blk::MAX_DWZ_SECTORS,
            max_write_zeroes_seg: crate::blk::MAX_DWZ_SEGS,
            write_zeroes_may_unmap: 0,
        }
    }

    fn vring(&mut self, index: u32) -> Result<&mut VringConf> {
        self.vrings
            .get_mut(index as usize)
            .ok_or(Error::InvalidParam)
    }

    fn key(&self, index: usize) -> RingKey {
        RingKey {
            ctrlr: self.info.id,
            queue: index as u16,
        }
    }

    /// Starts ring `index` on its reactor if it is ready and not running.
    fn maybe_start(&mut self, index: usize) -> Result<()> {
        let needs_enable =
            self.acked_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0;
        let key = self.key(index);
        let Some(mem) = self.mem.clone() else {
            return Ok(());
        };
        let v = &mut self.vrings[index];
        let ready = !v.started && v.size > 0 && v.kick_set && (v.enabled || !needs_enable);
        let Some(addrs) = v.addrs.filter(|_| ready) else {
            return Ok(());
        };
        let dup = |f: &Option<File>| f.as_ref().and_then(|f| f.try_clone().ok());
        let log = match &self.inflight {
            Some(r) => match r.queue(index as u16, v.size) {
                Ok(l) => Some(l),
                Err(e) => {
                    log::error!("vhost {}: queue {index}: {e}", self.info.name);
                    return Err(Error::InvalidParam);
                }
            },
            None => None,
        };
        let setup = RingSetup {
            log,
            key,
            name: Arc::clone(&self.info.name_arc),
            size: v.size,
            addrs,
            base: v.base,
            mem,
            kick: dup(&v.kick),
            call: dup(&v.call),
            bdev: self.info.bdev.clone(),
            readonly: self.info.readonly,
            serial: self.info.serial(),
            requests: self.info.new_ring_counter(),
        };
        let core = self.info.core_of(index);
        let registry = Arc::clone(&self.info.registry);
        let res = self.info.reactors.run_on(core, move |ctx| {
            crate::group::start_ring(ctx, &registry, setup)
        });
        match res {
            Ok(Ok(())) => {
                v.started = true;
                Ok(())
            }
            Ok(Err(e)) => {
                log::error!("vhost {}: queue {index}: {e}", self.info.name);
                Err(Error::InvalidOperation("the ring cannot start"))
            }
            Err(e) => {
                log::error!("vhost {}: queue {index}: {e}", self.info.name);
                Err(Error::InvalidOperation("the reactors are stopping"))
            }
        }
    }

    /// Stops ring `index` on its reactor after its in-flight requests; records where it
    /// stopped as its base.
    fn stop(&mut self, index: usize) {
        if !self.vrings[index].started {
            return;
        }
        let key = self.key(index);
        let core = self.info.core_of(index);
        let (tx, rx) = mpsc::channel();
        let sent = self
            .info
            .reactors
            .send(core, move |ctx| crate::group::stop_ring(ctx, key, tx));
        let v = &mut self.vrings[index];
        v.started = false;
        if sent.is_err() {
            return;
        }
        loop {
            match rx.recv_timeout(STOP_WARN_AFTER) {
                Ok(base) => {
                    v.base = base;
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => log::warn!(
                    "vhost {}: queue {index}: still waiting for in-flight I/O to stop",
                    self.info.name
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Stops every ring (a reset, the end of the connection).
    pub fn stop_all(&mut self) {
        for i in 0..self.vrings.len() {
            self.stop(i);
        }
    }

    fn unsupported<T>(&self, what: &'static str) -> Result<T> {
        log::warn!("vhost {}: {what} is not supported", self.info.name);
        Err(Error::InvalidOperation(what))
    }
}

impl VhostUserBackendReqHandlerMut for Session {
    fn set_owner(&mut self) -> Result<()> {
        Ok(())
    }

    fn reset_owner(&mut self) -> Result<()> {
        self.stop_all();
        Ok(())
    }

    fn reset_device(&mut self) -> Result<()> {
        self.stop_all();
        self.vrings = (0..MAX_QUEUES).map(|_| VringConf::default()).collect();
        self.acked_features = 0;
        Ok(())
    }

    fn get_features(&mut self) -> Result<u64> {
        Ok(Self::features(&self.info))
    }

    fn set_features(&mut self, features: u64) -> Result<()> {
        let offered = Self::features(&self.info);
        if features & !offered != 0 {
            log::error!(
                "vhost {}: the driver acked features {:#x} that were not offered",
                self.info.name,
                features & !offered
            );
            return Err(Error::InvalidParam);
        }
        self.acked_features = features;
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy_listening: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        let regions: Vec<RegionDesc> = ctx
            .iter()
            .map(|r| RegionDesc {
                guest_phys_addr: r.guest_phys_addr,
                memory_size: r.memory_size,
                user_addr: r.user_addr,
                mmap_offset: r.mmap_offset,
            })
            .collect();
        let mem = match GuestMem::map(&regions, files) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                log::error!("vhost {}: {e}", self.info.name);
                return Err(Error::InvalidParam);
            }
        };
        log::info!(
            "vhost {}: memory table: {} region(s), {} MiB",
            self.info.name,
            regions.len(),
            mem.size() >> 20
        );
        // Rings already running switch on their reactors before the front end hears back.
        let mut cores: Vec<u32> = (0..self.vrings.len())
            .filter(|&i| self.vrings[i].started)
            .map(|i| self.info.core_of(i))
            .collect();
        cores.sort_unstable();
        cores.dedup();
        for core in cores {
            let (id, m) = (self.info.id, Arc::clone(&mem));
            let _ = self
                .info
                .reactors
                .run_on(core, move |ctx| crate::group::set_mem(ctx, id, &m));
        }
        self.mem = Some(mem);
        for i in 0..self.vrings.len() {
            self.maybe_start(i)?;
        }
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        if !valid_size(num) {
            return Err(Error::InvalidParam);
        }
        let v = self.vring(index)?;
        if v.started {
            return Err(Error::InvalidOperation("the ring is running"));
        }
        v.size = num as u16;
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> Result<()> {
        let v = self.vring(index)?;
        if v.started {
            return Err(Error::InvalidOperation("the ring is running"));
        }
        v.addrs = Some(VringAddrs {
            desc: descriptor,
            avail: available,
            used,
        });
        self.maybe_start(index as usize)
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        let v = self.vring(index)?;
        if v.started {
            return Err(Error::InvalidOperation("the ring is running"));
        }
        v.base = base as u16;
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        self.vring(index)?;
        let i = index as usize;
        self.stop(i);
        let v = &mut self.vrings[i];
        // The ring stays stopped until a new kick eventfd arrives.
        v.kick = None;
        v.kick_set = false;
        Ok(VhostUserVringState::new(index, u32::from(v.base)))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let v = self.vring(u32::from(index))?;
        if let Some(f) = &fd {
            use std::os::fd::AsRawFd;
            crate::sys::set_nonblocking(f.as_raw_fd());
        }
        v.kick = fd;
        v.kick_set = true;
        self.maybe_start(usize::from(index))
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        let key = self.key(usize::from(index));
        let core = self.info.core_of(usize::from(index));
        let running = fd.as_ref().and_then(|f| f.try_clone().ok());
        let v = self.vring(u32::from(index))?;
        v.call = fd;
        if v.started {
            let _ = self
                .info
                .reactors
                .run_on(core, move |ctx| crate::group::set_call(ctx, key, running));
        }
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> Result<()> {
        self.vring(u32::from(index))?;
        Ok(())
    }

    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::INFLIGHT_SHMFD)
    }

    fn set_protocol_features(&mut self, features: u64) -> Result<()> {
        self.acked_protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(MAX_QUEUES as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> Result<()> {
        let v = self.vring(index)?;
        v.enabled = enable;
        if enable {
            self.maybe_start(index as usize)
        } else {
            self.stop(index as usize);
            Ok(())
        }
    }

    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> Result<Vec<u8>> {
        // The front end fails on a reply of any other size: exactly `size` bytes from
        // `offset`, zeros past the layout.
        let cfg = Self::config(&self.info).to_bytes();
        let size = size.min(4096) as usize;
        let mut out = vec![0u8; size];
        let start = (offset as usize).min(cfg.len());
        let end = (start + size).min(cfg.len());
        out[..end - start].copy_from_slice(&cfg[start..end]);
        Ok(out)
    }

    fn set_config(
        &mut self,
        _offset: u32,
        _buf: &[u8],
        _flags: VhostUserConfigFlags,
    ) -> Result<()> {
        self.unsupported("SET_CONFIG (no writable configuration field)")
    }

    fn set_backend_req_fd(&mut self, _backend: Backend) {}

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> Result<()> {
        self.unsupported("GPU_SET_SOCKET")
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> Result<File> {
        self.unsupported("GET_SHARED_OBJECT")
    }

    fn get_inflight_fd(
        &mut self,
        inflight: &VhostUserInflight,
    ) -> Result<(VhostUserInflight, File)> {
        let (nq, qs) = (inflight.num_queues, inflight.queue_size);
        if usize::from(nq) > MAX_QUEUES || !valid_size(u32::from(qs)) {
            return Err(Error::InvalidParam);
        }
        let new = InflightRegion::create(nq, qs).map_err(|e| {
            log::error!("vhost {}: {e}", self.info.name);
            Error::InvalidOperation("no in-flight region")
        })?;
        log::info!(
            "vhost {}: in-flight log: {nq} queues of {qs} ({} bytes)",
            self.info.name,
            new.mmap_size
        );
        self.inflight = Some(new.region);
        Ok((VhostUserInflight::new(new.mmap_size, 0, nq, qs), new.file))
    }

    fn set_inflight_fd(&mut self, inflight: &VhostUserInflight, file: File) -> Result<()> {
        let r = InflightRegion::map(
            file,
            inflight.mmap_size,
            inflight.mmap_offset,
            inflight.num_queues,
            inflight.queue_size,
        )
        .map_err(|e| {
            log::error!("vhost {}: {e}", self.info.name);
            Error::InvalidParam
        })?;
        self.inflight = Some(Arc::new(r));
        Ok(())
    }

    fn get_max_mem_slots(&mut self) -> Result<u64> {
        Ok(crate::mem::MAX_REGIONS as u64)
    }

    fn add_mem_region(
        &mut self,
        _region: &VhostUserSingleMemoryRegion,
        _fd: File,
        _postcopy_listening: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        self.unsupported("ADD_MEM_REG")
    }

    fn remove_mem_region(&mut self, _region: &VhostUserSingleMemoryRegion) -> Result<()> {
        self.unsupported("REM_MEM_REG")
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> Result<Option<File>> {
        self.unsupported("SET_DEVICE_STATE_FD")
    }

    fn check_device_state(&mut self) -> Result<()> {
        self.unsupported("CHECK_DEVICE_STATE")
    }

    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        self.unsupported("GET_SHMEM_CONFIG")
    }

    fn set_log_base(&mut self, _log: &VhostUserLog, _file: File) -> Result<()> {
        self.unsupported("SET_LOG_BASE")
    }
}
