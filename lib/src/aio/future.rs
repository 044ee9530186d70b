//! The I/O futures of an [`AioBdev`]: [`DataIo`] (read, write: owns a buffer) and [`Cmd`]
//! (flush, write zeroes, deallocate). Both are one [`InFlight`] — an I/O and its slot — and
//! differ only in the buffer they carry and hand back.
//!
//! The first poll stages the I/O in the handle; later polls look at the slot. A future dropped
//! in flight leaves its buffer in the slot (see `slots.rs`); one dropped while its I/O is
//! still staged withdraws it.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use super::AioBdev;
use super::buf::IoBufMut;
use super::error::{AioError, AioErrorKind};
use super::slots::Outcome;
use crate::request::{IoBuf, IoStatus, Op};

/// The slot of an I/O not submitted yet.
const NEW: u32 = u32::MAX;
/// The slot of an I/O whose result was taken (or that was refused).
const DONE: u32 = u32::MAX - 1;

/// One I/O of a handle from first poll to result. Dropping it does nothing: its owner
/// ([`DataIo`], [`Cmd`]) gives the slot up in its own drop, with its buffer, so a drop checks
/// the slot once.
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

    /// Polls the I/O; `buf` gives its buffer and block count at the first poll (when it is
    /// staged). Once it returns `Ready` the slot is `DONE`.
    #[inline]
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        buf: impl FnOnce(&AioBdev) -> (IoBuf, u32),
    ) -> Poll<Result<(), AioError>> {
        match self.slot {
            NEW => {
                let bdev = self.bdev;
                let (slot, nblocks) = bdev.stage(self.op, self.lba, || buf(bdev), cx.waker());
                self.nblocks = nblocks;
                self.slot = slot;
                Poll::Pending
            }
            DONE => panic!("an I/O future polled after it completed"),
            slot => {
                let out = match self.bdev.poll_slot(slot, cx.waker()) {
                    Outcome::Pending => return Poll::Pending,
                    Outcome::PendingOtherWaker => {
                        self.bdev.new_waker(slot, cx.waker());
                        return Poll::Pending;
                    }
                    Outcome::Succeeded => Ok(()),
                    Outcome::Failed(status) => Err(self.failure(status)),
                    Outcome::Rejected(refused) => Err(refused),
                };
                self.slot = DONE;
                Poll::Ready(out)
            }
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

    /// Gives the slot of a submitted or staged I/O up (its future is dropped); the handle
    /// keeps `buf` while the device may still use it.
    #[cold]
    fn abandon(&mut self, buf: super::Orphan) {
        self.bdev.abandon(self.slot, buf);
        self.slot = DONE;
    }
}

/// A read or write: resolves to the result and the buffer (`let (res, buf) = io.await`).
///
/// Dropping it while the device has the I/O moves the buffer into the handle, which drops it
/// after the completion.
#[must_use = "futures do nothing unless awaited"]
pub struct DataIo<'a, B: IoBufMut> {
    io: InFlight<'a>,
    /// Live until handed back with the result, which is when `io.slot` becomes `DONE` (no
    /// `Option` to test and clear on every I/O).
    buf: ManuallyDrop<B>,
}

impl<'a, B: IoBufMut> DataIo<'a, B> {
    pub(super) fn new(bdev: &'a AioBdev, op: Op, buf: B, lba: u64) -> DataIo<'a, B> {
        DataIo {
            io: InFlight::new(bdev, op, lba, 0),
            buf: ManuallyDrop::new(buf),
        }
    }
}

impl<B: IoBufMut + std::fmt::Debug> std::fmt::Debug for DataIo<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The buffer is shown only while the future has it (not after handing it back).
        let buf = (self.io.slot != DONE).then_some(&*self.buf);
        f.debug_struct("DataIo")
            .field("io", &self.io)
            .field("buf", &buf)
            .finish()
    }
}

impl<B: IoBufMut> Future for DataIo<'_, B> {
    type Output = (Result<(), AioError>, B);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let buf = &mut this.buf;
        let res = ready!(this.io.poll(cx, |bdev| {
            let iobuf = AioBdev::io_buf(buf.stable_mut_ptr(), buf.bytes_total());
            (iobuf, bdev.blocks_in(iobuf.len()))
        }));
        // SAFETY: the slot just became `DONE` (`InFlight::poll` is `Ready` once), so this is
        // the one take of the buffer, and neither a later poll (it panics at `DONE`) nor the
        // drop (it leaves the buffer alone at `DONE`) touches it again.
        let buf = unsafe { ManuallyDrop::take(&mut this.buf) };
        Poll::Ready((res, buf))
    }
}

impl<B: IoBufMut> Drop for DataIo<'_, B> {
    fn drop(&mut self) {
        match self.io.slot {
            DONE => {}
            // SAFETY: not polled yet: the buffer is here and never handed out; dropped once.
            NEW => unsafe { ManuallyDrop::drop(&mut self.buf) },
            _ => {
                // SAFETY: staged or in flight: the buffer is here (taken only at `DONE`, which
                // `abandon` sets, so this is the one take).
                let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
                self.io.abandon(Some(Box::new(buf)));
            }
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
        let io = &mut self.get_mut().io;
        let nblocks = io.nblocks;
        io.poll(cx, |_| (IoBuf::EMPTY, nblocks))
    }
}

impl Drop for Cmd<'_> {
    fn drop(&mut self) {
        if self.io.slot < DONE {
            self.io.abandon(None);
        }
    }
}
