//! pmio's user-space NVMe driver over VFIO.
//!
//! - [`vfio`]: the controller through VFIO ([`vfio::VfioPci`]): BAR0, config space, DMA
//!   mappings; [`vfio::attach`] opens and brings up a controller from its PCI address.
//! - [`ctrlr`]: bring-up state machine, I/O queue creation, shutdown ([`Controller`]).
//! - [`bdev`]: namespaces as `pmio` block devices ([`NvmeBdev`], `Nvme0n1`).
//! - [`qpair`]: the I/O queue pair, the hot path ([`NvmeQpair`], a `pmio::DriverQueue`).
//! - [`regs`]: controller registers and [`RegisterIo`], the register-access interface.
//! - [`dma`]: [`DmaMapper`], the DMA-mapping interface, and mapped queue memory;
//!   [`iova`]: where each mapping sits in the IOMMU's address space (IOVA = virtual address
//!   where the IOMMU reaches it, else allocated from its valid ranges).
//! - [`spec`]: SQE/CQE/Identify layouts, opcodes, status codes: the `pmio-nvme-spec` crate,
//!   shared with the NVMe/TCP target; [`prp`]: PRP entries and lists.
//! - [`tcp`]: the NVMe/TCP transport: [`tcp::connect`] attaches a remote controller, with the
//!   same [`Controller`] and bdevs as PCIe, I/O queue pairs on TCP connections
//!   ([`tcp::TcpQpair`]), Keep Alive and SPDK's reconnect policy.
//! - [`error`]: attach and I/O errors.
//! - `rpc` (feature `rpc`): SPDK's `bdev_nvme_*` methods on a daemon's bdevs; `cli` (feature
//!   `cli`): pmio-rpc's subcommands for them, built from the same declarations.
//!
//! A software controller (tests, the emulator of issue 7) implements [`RegisterIo`] and
//! [`DmaMapper`] and is attached with [`Controller::attach_with`].
//!
//! ```no_run
//! use pmio::BlockDevice;
//!
//! let ctrlr = pmio_nvme::attach("0000:00:04.0", pmio_nvme::NvmeOptions::default())?;
//! for bdev in ctrlr.bdevs() {
//!     println!("{} {} blocks of {}", bdev.info().name, bdev.info().num_blocks, bdev.info().block_size);
//! }
//! ctrlr.detach()?;
//! # Ok::<(), pmio_nvme::NvmeError>(())
//! ```

mod admin;
pub mod bdev;
#[cfg(feature = "cli")]
pub mod cli;
pub mod ctrlr;
pub mod dma;
#[cfg(any(test, feature = "emulator"))]
pub mod emu;
pub mod error;
pub mod iova;
pub mod prp;
pub mod qpair;
mod recovery;
pub mod regs;
mod ring;
#[cfg(feature = "rpc")]
pub mod rpc;
pub mod tcp;
pub mod vfio;

pub use bdev::NvmeBdev;
pub use ctrlr::{Controller, CtrlrState, InitState, Namespace, NvmeOptions};
pub use dma::{DmaMapper, DmaMem};
pub use error::{IoError, NvmeError};
pub use pmio_nvme_spec as spec;
pub use qpair::{NvmeQpair, QpairStats};
pub use regs::RegisterIo;
pub use vfio::attach;
