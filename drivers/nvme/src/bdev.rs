//! Namespaces as block devices: `Nvme0n1` is namespace 1 of controller `Nvme0`.

use std::sync::Arc;

use pmio::bdev::{BdevError, BdevInfo, BlockDevice, DriverQueue, Uuid};
use pmio::hctx::HctxType;
use pmio::request::{Op, OpSet};

use crate::ctrlr::{Controller, CtrlrInner, Namespace, Transport};
use crate::qpair::NvmeQpair;
use crate::spec::IdentifyController;
use crate::tcp::TcpQpair;

/// One active namespace as a bdev. Each `open_queue` creates an I/O queue pair on the
/// controller for the calling reactor; dropping the queue deletes it.
pub struct NvmeBdev {
    info: BdevInfo,
    ns: Namespace,
    ctrlr: Arc<CtrlrInner>,
}

impl NvmeBdev {
    fn new(ctrlr: Arc<CtrlrInner>, ns: Namespace) -> NvmeBdev {
        let oncs = ctrlr.id.oncs;
        let mut ops = OpSet::READ_WRITE.with(Op::Flush);
        if oncs & IdentifyController::ONCS_WRITE_ZEROES != 0 {
            ops = ops.with(Op::WriteZeroes);
        }
        if oncs & IdentifyController::ONCS_DSM != 0 {
            ops = ops.with(Op::Discard);
        }
        let max_depth = match ctrlr.transport {
            Transport::Pcie => (ctrlr.cap.max_queue_entries() - 1).min(4096),
            // A fabrics queue of n entries takes n commands (Linux's host: sqsize + 1 tags).
            Transport::Tcp(_) => ctrlr.tcp_io_entries().min(4096),
        };
        let max_blocks = (ctrlr.max_transfer >> ns.block_shift).min(1 << 16);
        let info = BdevInfo {
            name: format!("{}n{}", ctrlr.name, ns.nsid),
            uuid: ns_uuid(&ctrlr.id, &ns),
            product_name: "NVMe disk".to_string(),
            block_size: ns.block_size(),
            num_blocks: ns.num_blocks,
            supported_ops: ops,
            queues: ctrlr.opts.queues,
            max_queue_depth: max_depth,
            max_transfer_blocks: max_blocks as u32,
            // NOIOB: the block layer splits at it, as Linux (chunk_sectors) and SPDK
            // (optimal_io_boundary) do.
            boundary_blocks: ns.boundary_blocks,
        };
        NvmeBdev { info, ns, ctrlr }
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.ns.nsid
    }

    /// Removes a registration made by `register_memory` with exactly this address and length
    /// (no I/O may use the memory any more).
    pub fn unregister_memory(&self, addr: *mut u8, len: usize) -> Result<(), crate::NvmeError> {
        self.ctrlr.mapper.unregister(addr, len)
    }

    /// Opens a PCIe queue pair directly (the typed form of [`BlockDevice::open_queue`]).
    pub fn open_qpair(&self, depth: u32) -> Result<NvmeQpair, crate::NvmeError> {
        if let Transport::Tcp(_) = self.ctrlr.transport {
            return Err(crate::NvmeError::Unsupported {
                ctrlr: self.ctrlr.name.clone(),
                reason: "an NVMe/TCP controller's queue pairs are TcpQpairs (open_tcp_qpair)"
                    .into(),
            });
        }
        NvmeQpair::new(self.ctrlr.clone(), &self.ns, depth)
    }

    /// Opens an NVMe/TCP queue pair directly (the typed form of [`BlockDevice::open_queue`]
    /// on a TCP controller).
    pub fn open_tcp_qpair(&self, depth: u32) -> Result<TcpQpair, crate::NvmeError> {
        if let Transport::Pcie = self.ctrlr.transport {
            return Err(crate::NvmeError::Unsupported {
                ctrlr: self.ctrlr.name.clone(),
                reason: "a PCIe controller's queue pairs are NvmeQpairs (open_qpair)".into(),
            });
        }
        TcpQpair::new(self.ctrlr.clone(), &self.ns, depth)
    }

    /// The queue pair of the controller's transport, chosen once here: each is a concrete
    /// `DriverQueue`, so the I/O path makes no extra indirect call.
    fn open_any(&self, depth: u32) -> Result<Box<dyn DriverQueue>, crate::NvmeError> {
        Ok(match self.ctrlr.transport {
            Transport::Pcie => Box::new(self.open_qpair(depth)?),
            Transport::Tcp(_) => Box::new(self.open_tcp_qpair(depth)?),
        })
    }
}

/// The namespace's UUID: its NGUID when reported, else one derived from the controller's
/// serial and model numbers and the NSID (stable across attaches, like SPDK's).
fn ns_uuid(id: &IdentifyController, ns: &Namespace) -> Uuid {
    if ns.nguid != [0; 16] {
        return Uuid(ns.nguid);
    }
    // FNV-1a over the identity, twice with different seeds for 128 bits.
    let hash = |seed: u64| {
        let mut h = seed;
        for &b in id
            .sn
            .iter()
            .chain(id.mn.iter())
            .chain(ns.nsid.to_le_bytes().iter())
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hash(0xcbf2_9ce4_8422_2325).to_le_bytes());
    b[8..].copy_from_slice(&hash(0x6c62_272e_07bb_0142).to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    Uuid(b)
}

impl BlockDevice for NvmeBdev {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        match self.open_any(depth) {
            Ok(q) => Ok(q),
            Err(crate::NvmeError::Detached { .. }) => {
                Err(BdevError::Removed(self.info.name.clone()))
            }
            Err(e) => Err(BdevError::QueueOpen {
                name: self.info.name.clone(),
                ty,
                index,
                reason: e.to_string(),
            }),
        }
    }

    /// Maps the regions into the controller's IOMMU domain (at IOVA = VA where the IOMMU
    /// reaches them, else at allocated IOVAs: `crate::iova`), replacing earlier
    /// registrations they overlap (a freed buffer's address may have been reused). I/O
    /// buffers must lie in registered memory; a failure is logged (I/O to the region then
    /// fails with a data transfer error from the device, never reaching other memory).
    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        // SAFETY: the trait's contract is DmaMapper::map's: memory stays valid while mapped.
        if let Err(e) = unsafe { self.ctrlr.mapper.register(regions) } {
            log::error!("{}: cannot register I/O memory: {e}", self.info.name);
        }
    }
}

impl Controller {
    /// One bdev per active namespace without metadata, named `<controller>n<nsid>`.
    pub fn bdevs(&self) -> Vec<Arc<NvmeBdev>> {
        self.inner
            .namespaces
            .iter()
            .filter(|ns| {
                if ns.metadata != 0 {
                    log::warn!(
                        "{}: namespace {} has {} metadata bytes per block: not exposed",
                        self.inner.name,
                        ns.nsid,
                        ns.metadata
                    );
                }
                ns.metadata == 0
            })
            .map(|ns| Arc::new(NvmeBdev::new(self.inner.clone(), ns.clone())))
            .collect()
    }

    /// The bdev of namespace `nsid`, if active and usable.
    pub fn bdev(&self, nsid: u32) -> Option<Arc<NvmeBdev>> {
        self.bdevs().into_iter().find(|b| b.nsid() == nsid)
    }
}
