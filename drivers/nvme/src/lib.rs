//! pmio's user-space NVMe driver over VFIO.
//!
//! - [`spec`]: SQE/CQE/Identify layouts, opcodes, status codes.
//! - [`regs`]: controller registers and [`RegisterIo`], the register-access interface.
//! - [`dma`]: [`DmaMapper`], the DMA-mapping interface (IOVA = virtual address), and mapped
//!   queue memory.
//! - [`prp`]: PRP entries and lists.
//! - [`error`]: attach and I/O errors.

pub mod dma;
pub mod error;
pub mod prp;
pub mod regs;
pub mod spec;

pub use dma::{DmaMapper, DmaMem};
pub use error::{IoError, NvmeError};
pub use regs::RegisterIo;
