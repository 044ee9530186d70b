//! Holds idle NVMe/TCP connections open against a target, to measure what they cost it
//! (`make bench-nvmf-spdk`'s resident-memory row, issue 26): CONTROLLERS controllers of
//! SUBNQN, each with its admin queue and QUEUES I/O queues connected, none carrying I/O (the
//! controllers' Keep Alives only), for SECS seconds; then everything is detached.
//!
//! ```text
//! nvmf_idle TRADDR TRSVCID SUBNQN CONTROLLERS QUEUES SECS
//! ```
//! Prints `connected N` (N = CONTROLLERS x (1 + QUEUES) connections) once all are up.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use pmio_nvme::tcp::{self, TcpOptions, TcpTarget};

fn main() -> Result<()> {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [traddr, trsvcid, subnqn, ctrlrs, queues, secs] = args.as_slice() else {
        bail!("usage: nvmf_idle TRADDR TRSVCID SUBNQN CONTROLLERS QUEUES SECS");
    };
    let ctrlrs: usize = ctrlrs.parse().context("CONTROLLERS")?;
    let queues: u16 = queues.parse().context("QUEUES")?;
    let secs: u64 = secs.parse().context("SECS")?;
    let target = TcpTarget {
        traddr: traddr.clone(),
        trsvcid: trsvcid.clone(),
        subnqn: subnqn.clone(),
    };
    let opts = TcpOptions {
        io_queues: queues.max(1),
        ..TcpOptions::default()
    };
    let mut held = Vec::with_capacity(ctrlrs);
    for i in 0..ctrlrs {
        let ctrlr = tcp::connect(&format!("Nvme{i}"), &target, opts.clone())
            .with_context(|| format!("controller {i}"))?;
        let bdev = ctrlr.bdev(1).context("namespace 1")?;
        let qpairs = (0..queues)
            .map(|q| {
                bdev.open_tcp_qpair(8)
                    .with_context(|| format!("controller {i} queue {q}"))
            })
            .collect::<Result<Vec<_>>>()?;
        held.push((ctrlr, bdev, qpairs));
    }
    println!("connected {}", ctrlrs * (1 + usize::from(queues)));
    std::thread::sleep(Duration::from_secs(secs));
    for (ctrlr, bdev, qpairs) in held {
        drop(qpairs);
        drop(bdev);
        ctrlr.detach()?;
    }
    Ok(())
}
