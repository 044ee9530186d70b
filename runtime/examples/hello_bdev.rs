//! SPDK's hello_bdev on pmio: start a reactor, create a malloc bdev, write "Hello World!" to
//! its first block, read it back, compare, stop. Exits 1 on any error or a mismatch.
//!
//! `cargo run -p pmio-runtime --example hello_bdev`

use pmio::aio::BufPool;
use pmio::dma::DmaPoolOptions;
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use pmio_runtime::Bdev;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let malloc = MallocDevice::new(MallocOptions {
        name: "Malloc0".into(),
        ..Default::default()
    })?;
    pmio_runtime::registry().register(malloc)?;
    let core = CoreMask::available()?.first();
    let reactors = Reactors::start(CoreMask::from_cores([core])?, ReactorsOptions::default())?;

    let hello = reactors.spawn_on(core, || async {
        let bdev = Bdev::open("Malloc0")?;
        let pool = BufPool::new(DmaPoolOptions {
            count: 2,
            buf_size: bdev.block_size() as usize,
            ..Default::default()
        })?;
        let mut buf = pool.get().ok_or("no free buffer")?;
        buf.fill(0);
        buf[..12].copy_from_slice(b"Hello World!");
        let (res, written) = bdev.write(buf, 0).await;
        res?;
        let (res, read) = bdev.read(pool.get().ok_or("no free buffer")?, 0).await;
        res?;
        if read[..] != written[..] {
            return Err("the block read back differs from the one written".into());
        }
        Ok::<String, Error>(String::from_utf8_lossy(&read[..12]).into_owned())
    })?;

    let text = hello.join()??;
    println!("read back from Malloc0: {text}");
    reactors.stop()?;
    Ok(())
}
