//! pmio-setup: get a machine ready for pmio's VFIO NVMe driver.
//!
//! `status` shows the IOMMU, the VFIO modules, hugepages and every NVMe controller (its driver,
//! IOMMU group and whether it is safe to bind); `bind`/`unbind` move a controller between the
//! kernel nvme driver and vfio-pci; `hugepages` reserves hugepages.

mod bind;
mod error;
mod pci;
mod status;
mod sysfs;

use clap::{Parser, Subcommand};

use crate::bind::Host;
pub use crate::error::SetupError;
use crate::pci::Bdf;
use crate::sysfs::System;

/// DMA memory pmio-perf pins with its defaults (queues, PRP lists, buffers): warn below this.
const MEMLOCK_NEED: u64 = 64 << 20;

#[derive(Parser)]
#[command(
    name = "pmio-setup",
    version,
    about = "Prepare NVMe devices and hugepages for pmio"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// IOMMU, VFIO modules, hugepages and NVMe controllers.
    Status,
    /// Bind an NVMe controller to vfio-pci.
    Bind { bdf: String },
    /// Return an NVMe controller to the kernel nvme driver.
    Unbind { bdf: String },
    /// Reserve hugepages.
    Hugepages {
        count: u64,
        #[arg(long, default_value = "2M", value_parser = ["2M", "1G"])]
        size: String,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let host = Host {
        sys: System::new("/"),
        euid,
        modprobe: true,
    };
    let result = match cli.cmd {
        Cmd::Status => {
            let st = status::gather(&host.sys);
            print!("{}", status::render(&st));
            if let Err(e) = bind::check_memlock(euid, st.memlock, MEMLOCK_NEED) {
                println!("warning: {e}");
            }
            Ok(String::new())
        }
        Cmd::Bind { bdf } => Bdf::parse(&bdf).and_then(|b| bind::bind(&host, &b)),
        Cmd::Unbind { bdf } => Bdf::parse(&bdf).and_then(|b| bind::unbind(&host, &b)),
        Cmd::Hugepages { count, size } => bind::hugepages(&host, count, &size),
    };
    match result {
        Ok(msg) if msg.is_empty() => {}
        Ok(msg) => println!("{msg}"),
        Err(e) => {
            eprintln!("pmio-setup: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests;
