//! The I/O futures of an [`AioBdev`]: [`DataIo`] (read, write: owns a buffer) and [`Cmd`]
//! (flush, write zeroes, deallocate). Both are one [`InFlight`] — an I/O and its slot — and
//! differ only in the buffer they carry and hand back.
//!
//! The first poll submits the I/O into the handle's plug; later polls look at the slot. A
//! future dropped in flight leaves its buffer in the slot (see `slots.rs`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::buf::IoBufMut;
use super::error::AioError;
use super::{AioBdev, Start};
use crate::request::{Io, IoBuf, IoStatus, Op};

/// The slot of an I/O not submitted yet.
const NEW: u32 = u32::MAX;
/// The slot of an I/O whose result was taken (or that was refused).
const DONE: u32 = u32::MAX - 1;

/// One I/O of a handle from first poll to result.
#[derive(Debug)]
struct InFlight<'a> {
    bdev: &'a AioBdev,
    io: Io,
    /// Its slot in the handle's table, or `NEW` / `DONE`.
    slot: u32,
}

impl<'a> InFlight<'a> {
    fn new(bdev: &'a AioBdev, op: Op, lba: u64, nblocks: u32, buf: IoBuf) -> InFlight<'a> {
        InFlight {
            bdev,
            io: Io {
                op,
                lba,
                nblocks,
                buf,
                ..Io::default()
            },
            slot: NEW,
        }
    }

    #[inline]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AioError>> {
        match self.slot {
            NEW => match self.bdev.start(&mut self.io, cx.waker()) {
                Start::Queued(slot) => {
                    self.slot = slot;
                    Poll::Pending
                }
                Start::Busy => Poll::Pending,
                Start::Refused(e) => {
                    self.slot = DONE;
                    Poll::Ready(Err(AioError::Rejected(e)))
                }
            },
            DONE => panic!("an I/O future polled after it completed"),
            slot => match self.bdev.poll_slot(slot, cx.waker()) {
                None => Poll::Pending,
                Some(status) => {
                    self.slot = DONE;
                    Poll::Ready(self.result(status))
                }
            },
        }
    }

    fn result(&self, status: IoStatus) -> Result<(), AioError> {
        if status.is_success() {
            return Ok(());
        }
        Err(AioError::Failed {
            bdev: self.bdev.name_arc().clone(),
            op: self.io.op,
            lba: self.io.lba,
            nblocks: self.io.nblocks,
            status,
        })
    }

    /// Gives the slot up (the future is dropped); the handle keeps `buf` while the device may
    /// still use it.
    fn abandon(&mut self, buf: super::Orphan) {
        if self.slot < DONE {
            self.bdev.abandon(self.slot, buf);
        }
        self.slot = DONE;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.abandon(None);
    }
}

/// A read or write: resolves to the result and the buffer (`let (res, buf) = io.await`).
///
/// Dropping it while the device has the I/O moves the buffer into the handle, which drops it
/// after the completion.
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct DataIo<'a, B: IoBufMut> {
    io: InFlight<'a>,
    /// `None` once handed back.
    buf: Option<B>,
}

impl<'a, B: IoBufMut> DataIo<'a, B> {
    pub(super) fn new(bdev: &'a AioBdev, op: Op, mut buf: B, lba: u64) -> DataIo<'a, B> {
        let iobuf = AioBdev::io_buf(buf.stable_mut_ptr(), buf.bytes_total());
        let nblocks = iobuf.len() / bdev.block_size();
        DataIo {
            io: InFlight::new(bdev, op, lba, nblocks, iobuf),
            buf: Some(buf),
        }
    }
}

impl<B: IoBufMut> Future for DataIo<'_, B> {
    type Output = (Result<(), AioError>, B);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.io.poll(cx).map(|res| {
            let buf = this.buf.take().expect("the buffer is handed back once");
            (res, buf)
        })
    }
}

impl<B: IoBufMut> Drop for DataIo<'_, B> {
    fn drop(&mut self) {
        if self.io.slot < DONE {
            let buf = self
                .buf
                .take()
                .map(|b| Box::new(b) as Box<dyn std::any::Any>);
            self.io.abandon(buf);
        }
    }
}

/// A flush, write zeroes or deallocate: resolves to the result.
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Cmd<'a> {
    io: InFlight<'a>,
}

impl<'a> Cmd<'a> {
    pub(super) fn new(bdev: &'a AioBdev, op: Op, lba: u64, nblocks: u32) -> Cmd<'a> {
        Cmd {
            io: InFlight::new(bdev, op, lba, nblocks, IoBuf::EMPTY),
        }
    }
}

impl Future for Cmd<'_> {
    type Output = Result<(), AioError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().io.poll(cx)
    }
}
