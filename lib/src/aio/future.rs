//! The I/O futures of an [`AioBdev`]: [`DataIo`] (read, write: owns a buffer) and [`Cmd`]
//! (flush, write zeroes, deallocate). Both are one [`InFlight`] — an I/O and its slot — and
//! differ only in the buffer they carry and hand back.
//!
//! The first poll stages the I/O in the handle; later polls look at the slot. A future dropped
//! in flight leaves its buffer in the slot (see `slots.rs`); one dropped while its I/O is
//! still staged withdraws it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::AioBdev;
use super::buf::IoBufMut;
use super::error::{AioError, AioErrorKind};
use super::slots::Outcome;
use crate::request::{IoBuf, IoStatus, Op};

/// The slot of an I/O not submitted yet.
const NEW: u32 = u32::MAX;
/// The slot of an I/O whose result was taken (or that was refused).
const DONE: u32 = u32::MAX - 1;

/// One I/O of a handle from first poll to result.
#[derive(Debug)]
struct InFlight<'a> {
    bdev: &'a AioBdev,
    op: Op,
    lba: u64,
    nblocks: u32,
    /// Its slot in the handle's table, or `NEW` / `DONE`.
    slot: u32,
}

impl<'a> InFlight<'a> {
    fn new(bdev: &'a AioBdev, op: Op, lba: u64, nblocks: u32) -> InFlight<'a> {
        InFlight {
            bdev,
            op,
            lba,
            nblocks,
            slot: NEW,
        }
    }

    /// Polls the I/O; `buf` gives its buffer at the first poll (when it is staged).
    #[inline]
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        buf: impl FnOnce(&mut Self) -> IoBuf,
    ) -> Poll<Result<(), AioError>> {
        match self.slot {
            NEW => {
                let buf = buf(self);
                let staged = self
                    .bdev
                    .stage(self.op, self.lba, self.nblocks, buf, cx.waker());
                self.slot = staged;
                Poll::Pending
            }
            DONE => panic!("an I/O future polled after it completed"),
            slot => match self.bdev.poll_slot(slot, cx.waker()) {
                Outcome::Pending => Poll::Pending,
                Outcome::Succeeded => {
                    self.slot = DONE;
                    Poll::Ready(Ok(()))
                }
                Outcome::Failed(status) => {
                    self.slot = DONE;
                    Poll::Ready(Err(self.failure(status)))
                }
                Outcome::Rejected(refused) => {
                    self.slot = DONE;
                    Poll::Ready(Err(refused))
                }
            },
        }
    }

    #[cold]
    fn failure(&self, status: IoStatus) -> AioError {
        AioErrorKind::Failed {
            bdev: self.bdev.name_arc().clone(),
            op: self.op,
            lba: self.lba,
            nblocks: self.nblocks,
            status,
        }
        .into()
    }

    /// Gives the slot up (the future is dropped); the handle keeps `buf` while the device may
    /// still use it.
    #[inline]
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
    pub(super) fn new(bdev: &'a AioBdev, op: Op, buf: B, lba: u64) -> DataIo<'a, B> {
        DataIo {
            io: InFlight::new(bdev, op, lba, 0),
            buf: Some(buf),
        }
    }
}

impl<B: IoBufMut> Future for DataIo<'_, B> {
    type Output = (Result<(), AioError>, B);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let buf = &mut this.buf;
        this.io
            .poll(cx, |io| {
                let b = buf.as_mut().expect("the buffer is here until handed back");
                let iobuf = AioBdev::io_buf(b.stable_mut_ptr(), b.bytes_total());
                io.nblocks = io.bdev.blocks_in(iobuf.len());
                iobuf
            })
            .map(|res| {
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
            io: InFlight::new(bdev, op, lba, nblocks),
        }
    }
}

impl Future for Cmd<'_> {
    type Output = Result<(), AioError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().io.poll(cx, |_| IoBuf::EMPTY)
    }
}
