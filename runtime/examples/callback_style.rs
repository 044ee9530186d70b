//! pmio the SPDK way: no futures, a poller that owns a `BdevQueue` and a completion callback.
//!
//! On a reactor, a message (SPDK's event) opens the bdev's queue and registers a poller. The
//! poller keeps `DEPTH` I/Os in flight over a malloc bdev, first writing each block's number
//! into it, then reading every block back: every turn it reaps completions, calls
//! `on_complete` for each (SPDK's `spdk_bdev_io_completion_cb`), which checks a block read
//! and frees the buffer, then submits the next I/Os under one plug and flushes them with one
//! doorbell (`spdk_bdev_write_blocks`/`spdk_bdev_read_blocks` and the channel's batch). When
//! every block was read it reports to the main thread and unregisters itself. Exits 1 on an
//! I/O error or a wrong block.
//!
//! `cargo run -p pmio-runtime --example callback_style`

use std::cell::Cell;
use std::rc::Rc;
use std::sync::mpsc;

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::dma::{DmaPool, DmaPoolOptions};
use pmio::plug::Plug;
use pmio::{Io, IoBuf, Op, Request};
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_reactors::{CoreMask, PollerId, PollerResult, ReactorCtx, Reactors, ReactorsOptions};

const BLOCKS: u64 = 4096;
const DEPTH: u32 = 16;
const BS: usize = 512;

/// The app's state, owned by its poller (SPDK's context argument).
struct App {
    q: BdevQueue,
    plug: Plug,
    /// One buffer per I/O in flight; an I/O's token is its buffer's index.
    bufs: DmaPool,
    /// Buffers free for the next I/O.
    free: Vec<u32>,
    /// The turn's completions (room for `DEPTH`, kept across turns).
    reaped: Vec<Request>,
    /// Writing the stamps, then reading them back.
    op: Op,
    next_lba: u64,
    /// Blocks of the current op completed.
    completed: u64,
    done: mpsc::Sender<Result<u64, String>>,
}

impl App {
    /// The completion callback: checks what a read brought and frees the buffer.
    fn on_complete(&mut self, rq: &Request) -> Result<(), String> {
        if !rq.status.is_success() {
            return Err(format!(
                "{:?} of block {} failed: {:?}",
                rq.op, rq.lba, rq.status
            ));
        }
        let i = rq.token as u32;
        let stamp = u64::from_le_bytes(self.bufs.as_slice(i)[..8].try_into().unwrap());
        if rq.op == Op::Read && stamp != rq.lba {
            return Err(format!("block {} holds {stamp}", rq.lba));
        }
        self.completed += 1;
        self.free.push(i);
        Ok(())
    }

    /// Starts an I/O with each free buffer while blocks are left: one plug, one doorbell.
    fn submit(&mut self) {
        self.plug.begin();
        while self.next_lba < BLOCKS
            && let Some(i) = self.free.pop()
        {
            let lba = self.next_lba;
            if self.op == Op::Write {
                self.bufs.as_mut_slice(i)[..8].copy_from_slice(&lba.to_le_bytes());
            }
            // SAFETY: buffer `i` belongs to this I/O alone until its completion (its index is
            // off the free list), and the pool outlives the queue (both are owned by `self`).
            let buf = unsafe { IoBuf::from_raw_parts(self.bufs.ptr(i), BS as u32) };
            let io = Io {
                op: self.op,
                lba,
                nblocks: 1,
                buf,
                token: u64::from(i),
                ..Io::default()
            };
            self.q
                .submit(&mut self.plug, &io)
                .expect("a request per buffer");
            self.next_lba += 1;
        }
        self.plug.finish();
        self.q.flush();
    }

    /// One poller run: reap, call back, move on to reading once all is written, resubmit.
    /// Returns what to report when finished.
    fn run(&mut self) -> Option<Result<u64, String>> {
        let App { q, reaped, .. } = self;
        reaped.clear();
        q.poll(DEPTH as usize, |rq| reaped.push(*rq));
        for k in 0..self.reaped.len() {
            let rq = self.reaped[k];
            if let Err(e) = self.on_complete(&rq) {
                return Some(Err(e));
            }
        }
        if self.completed == BLOCKS {
            if self.op == Op::Read {
                return Some(Ok(BLOCKS));
            }
            (self.op, self.next_lba, self.completed) = (Op::Read, 0, 0);
        }
        self.submit();
        None
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = MallocDevice::new(MallocOptions {
        name: "Malloc0".into(),
        num_blocks: BLOCKS,
        ..Default::default()
    })?;
    pmio_runtime::registry().register(dev)?;
    let core = CoreMask::available()?.first();
    let reactors = Reactors::start(CoreMask::from_cores([core])?, ReactorsOptions::default())?;
    let (tx, rx) = mpsc::channel();
    reactors.run_on(core, move |ctx| start(ctx, tx))??;
    let checked = rx.recv()??;
    println!("wrote, read and checked {checked} blocks, {DEPTH} I/Os in flight, callback style");
    reactors.stop()?;
    Ok(())
}

/// The start event: opens the queue, registers the poller, submits the first I/Os.
fn start(ctx: &mut ReactorCtx, done: mpsc::Sender<Result<u64, String>>) -> Result<(), String> {
    let opts = BdevQueueOptions {
        depth: DEPTH,
        ..Default::default()
    };
    let q =
        BdevQueue::open_in(pmio_runtime::registry(), "Malloc0", opts).map_err(|e| e.to_string())?;
    let bufs = DmaPool::new(DmaPoolOptions {
        count: DEPTH,
        buf_size: BS,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mut app = App {
        q,
        plug: Plug::default(),
        bufs,
        free: (0..DEPTH).collect(),
        reaped: Vec::with_capacity(DEPTH as usize),
        op: Op::Write,
        next_lba: 0,
        completed: 0,
        done,
    };
    app.q.register_plug(&mut app.plug);
    app.submit();
    let me: Rc<Cell<Option<PollerId>>> = Rc::default();
    let id = Rc::clone(&me);
    let poller = ctx.register_poller("callback_app", move |ctx| match app.run() {
        None => PollerResult::Busy,
        Some(result) => {
            let _ = app.done.send(result);
            if let Some(id) = id.take() {
                ctx.unregister_poller(id);
            }
            PollerResult::Idle
        }
    });
    me.set(Some(poller));
    Ok(())
}
