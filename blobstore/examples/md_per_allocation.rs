//! Metadata I/O per cluster allocation (issue 28, "first writes"): what the store writes and
//! flushes to give a thin lvol's cluster storage, as an lvol queue's first write to it asks
//! (`allocate_cluster`: metadata only, the queue writes the data itself).
//!
//! `cargo run --release -p pmio-blobstore --example md_per_allocation -- [CLUSTERS]`
//!
//! A 2 GiB RAM device of 512-byte blocks, 64 KiB clusters, one thin lvol of CLUSTERS
//! (default 16,384) clusters allocated in order; prints the device writes, bytes and flushes
//! per allocation and the allocation rate of the store alone (no I/O path, no thread hop).

use std::time::Instant;

use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
use pmio_blobstore::{BlobDevice, ClearMethod, MemDevice, Result};

/// A RAM device that counts what is written to it.
#[derive(Debug)]
struct Counting {
    dev: MemDevice,
    writes: u64,
    bytes: u64,
    flushes: u64,
}

impl BlobDevice for Counting {
    fn block_len(&self) -> u32 {
        self.dev.block_len()
    }
    fn block_count(&self) -> u64 {
        self.dev.block_count()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.dev.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.writes += 1;
        self.bytes += data.len() as u64;
        self.dev.write(offset, data)
    }
    fn flush(&mut self) -> Result<()> {
        self.flushes += 1;
        self.dev.flush()
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 16_384,
    };
    let cluster = 64u64 << 10;
    let opts = LvstoreOptions {
        name: "first_writes".into(),
        cluster_size: cluster as u32,
        clear_method: ClearMethod::None,
        ..Default::default()
    };
    let dev = Counting {
        dev: MemDevice::new(2 << 30, 512),
        writes: 0,
        bytes: 0,
        flushes: 0,
    };
    let mut lvs = Lvstore::create(dev, &opts)?;
    let id = lvs.create_lvol("vol", n * cluster, true, ClearMethod::Default)?;
    let bs = lvs.blobstore_mut();
    let before = (bs.device().writes, bs.device().bytes, bs.device().flushes);
    let t = Instant::now();
    for i in 0..n {
        bs.allocate_cluster(id, i)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let d = bs.device();
    let per = |x: u64| x as f64 / n as f64;
    println!(
        "{n} allocations of 64 KiB clusters: {:.2} writes ({:.0} bytes) and {:.3} flushes per \
         allocation; {:.0} allocations/s in the store alone",
        per(d.writes - before.0),
        per(d.bytes - before.1),
        per(d.flushes - before.2),
        n as f64 / secs
    );
    Ok(())
}
