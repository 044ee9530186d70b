//! No heap allocation per I/O on the async path: tasks on a reactor keep 32 reads and writes in
//! flight on a null device through `Bdev`, and a counting global allocator sees nothing on the
//! reactor's thread once warm (futures, wakes, plug, doorbell, reap, the progress poller and
//! the executor included). Its own test binary, so the allocator counts only this.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pmio::OpSet;
use pmio::aio::BufPool;
use pmio::bdev::histogram::{HistogramConfig, HistogramShape};
use pmio::dma::DmaPoolOptions;
use pmio_null::{NullDevice, NullOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, spawn_local};
use pmio_runtime::{Bdev, registry};

/// Counts heap allocations per thread.
struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: both methods forward to `System` with the caller's arguments unchanged; counting
// touches a const-initialised thread-local that never allocates. `realloc` and `alloc_zeroed`
// keep their default bodies, which go through `alloc` (and so are counted).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const TASKS: u64 = 32;
const ROUNDS: u64 = 3000;
/// Rounds before and after the counted window: warm-up (tables grow to their peak) and the
/// tail where tasks finish (their join cells are written, which is not per I/O).
const EDGE: u64 = 500;

#[test]
fn steady_state_async_io_does_not_allocate() {
    run("NoAlloc0", false);
}

/// With the device's latency histogram on, the queue allocates its histogram once, at its
/// first poll (in the warm-up), and counts every I/O without allocating.
#[test]
fn steady_state_async_io_with_a_histogram_does_not_allocate() {
    run("NoAlloc1", true);
}

fn run(name: &'static str, histogram: bool) {
    let dev = NullDevice::new(NullOptions {
        name: name.into(),
        ..NullOptions::default()
    })
    .unwrap();
    registry().register(dev).unwrap();
    let switch = registry().histogram(name).unwrap();
    if histogram {
        switch.enable(HistogramConfig {
            shape: HistogramShape::default(),
            ops: OpSet::ALL,
        });
    }
    let core = CoreMask::available().unwrap().first();
    let opts = ReactorsOptions {
        task_budget: 2 * TASKS as usize,
        ..ReactorsOptions::default()
    };
    let reactors = Reactors::start(CoreMask::from_cores([core]).unwrap(), opts).unwrap();
    let counted = reactors
        .spawn_on(core, move || async move {
            let bdev = Bdev::open(name).unwrap();
            let pool = BufPool::new(DmaPoolOptions {
                count: TASKS as u32,
                buf_size: 4096,
                ..Default::default()
            })
            .unwrap();
            // Task 0 counts the window; all run the same rounds in step (every I/O completes
            // at the next poll), so the window sees every task mid-loop.
            let workers: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (bdev, mut buf) = (bdev.clone(), pool.get().unwrap());
                    spawn_local(async move {
                        let mut start = 0;
                        let mut window = 0;
                        for round in 0..ROUNDS {
                            if round == EDGE {
                                start = allocs();
                            }
                            if round == ROUNDS - EDGE {
                                window = allocs() - start;
                            }
                            let lba = (t * ROUNDS + round) * 8 % bdev.num_blocks();
                            let io = if round % 2 == 0 {
                                bdev.read(buf, lba)
                            } else {
                                bdev.write(buf, lba)
                            };
                            let (res, back) = io.await;
                            res.unwrap();
                            buf = back;
                        }
                        window
                    })
                })
                .collect();
            let mut windows = Vec::new();
            for w in workers {
                windows.push(w.await.unwrap());
            }
            let ios = bdev.stats().total().ops;
            (windows[0], ios)
        })
        .unwrap();
    let (allocations, ios) = counted.join().unwrap();
    assert_eq!(ios, TASKS * ROUNDS);
    assert_eq!(
        allocations,
        0,
        "heap allocations on the reactor during {} I/Os",
        TASKS * (ROUNDS - 2 * EDGE)
    );
    let counted = switch.merged().map_or(0, |h| h.total());
    assert_eq!(counted, if histogram { ios } else { 0 });
    reactors.stop().unwrap();
}
