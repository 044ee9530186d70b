//! pmio's block layer: everything an I/O passes through between a submitter and a driver.
//!
//! - [`sbitmap`]: the lockless tag bitmap, one per hardware context, with batched allocation.
//! - [`tags`]: driver tags, reserved tags and the fixed request pool of a hardware context.
//! - [`hctx`]: hardware-context types (default, read, poll) and how an I/O maps to one.
//! - [`plug`]: a submitter's burst, sized per device, with a request cache per (device, type).
//! - [`sched`]: I/O schedulers (`none`, `mq-deadline`).
//! - [`bdev`]: the block-device interface drivers implement.
//! - [`dma`]: memory a device can DMA into.
//! - [`aio`]: async I/O on a bdev, futures that own their buffers (runtime-agnostic).
//!
//! This crate starts no threads and opens no devices.

pub mod aio;
pub mod bdev;
pub mod dma;
pub mod hctx;
pub mod plug;
pub mod prefetch;
pub mod request;
pub mod sbitmap;
pub mod sched;
pub mod tags;

pub use bdev::{BdevError, BdevInfo, BlockDevice, DriverQueue, Uuid};
pub use dma::{DmaError, DmaPool, DmaRegion};
pub use hctx::{HctxQueues, HctxType};
pub use plug::{DevKey, Plug, PlugStats};
pub use request::{Io, IoBuf, IoPrio, IoStatus, Op, OpSet, PrioClass, ReqFlags, Request};
pub use tags::{RequestPool, Tags, TagsOptions};
