//! The scale figure of issue 28: creates N thin lvols (default 10,000) in one lvstore on a
//! RAM device, then loads the store again after a clean unload and as a crash left it, and
//! prints the create rate and both load times.
//!
//! `cargo run --release -p pmio-blobstore --example lvol_scale -- [N]`
//!
//! The device is 1 GiB of 512-byte blocks with 1 MiB clusters and 16 metadata pages per
//! cluster (16,384 pages: one per lvol and room to spare); the lvols are 1 MiB thin, so no
//! cluster is allocated and what is measured is metadata alone. Each create is persisted
//! (flushed) before the next starts, as `bdev_lvol_create` acknowledges.

use std::time::Instant;

use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
use pmio_blobstore::{ClearMethod, MemDevice};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 10_000,
    };
    let opts = LvstoreOptions {
        name: "scale".into(),
        cluster_size: 1 << 20,
        clear_method: ClearMethod::None,
        md_pages_per_cluster_ratio: 1600,
        ..Default::default()
    };
    let mut lvs = Lvstore::create(MemDevice::new(1 << 30, 512), &opts)?;
    let t = Instant::now();
    for i in 0..n {
        lvs.create_lvol(&format!("v{i}"), 1 << 20, true, ClearMethod::Default)?;
    }
    let create = t.elapsed();
    let crashed = lvs.blobstore().device().clone();
    let t = Instant::now();
    let dev = lvs.unload()?;
    let unload = t.elapsed();

    let t = Instant::now();
    let clean = Lvstore::load(dev)?;
    let load_clean = t.elapsed();
    let found_clean = clean.lvols().count();
    let t = Instant::now();
    let recovered = Lvstore::load(crashed)?;
    let load_dirty = t.elapsed();
    let found_dirty = recovered.lvols().count();
    if found_clean != n || found_dirty != n {
        return Err(
            format!("created {n}, found {found_clean} (clean) and {found_dirty} (crash)").into(),
        );
    }
    println!(
        "{n} thin lvols: created in {:.2} s ({:.0}/s); unload {:.3} s; load {:.3} s clean, {:.3} s after a crash",
        create.as_secs_f64(),
        n as f64 / create.as_secs_f64(),
        unload.as_secs_f64(),
        load_clean.as_secs_f64(),
        load_dirty.as_secs_f64(),
    );
    Ok(())
}
