//! `bind` / `unbind`: move an NVMe controller between the kernel nvme driver and vfio-pci.

use std::process::Command;

use crate::SetupError;
use crate::error::io_at;
use crate::pci::{self, Bdf};
use crate::status;
use crate::sysfs::System;

/// The machine a command acts on, and who is acting.
pub struct Host {
    pub sys: System,
    pub euid: u32,
    /// Whether a missing module may be loaded with modprobe (off in tests).
    pub modprobe: bool,
}

impl Host {
    fn require_root(&self, what: &'static str) -> Result<(), SetupError> {
        if self.euid == 0 {
            Ok(())
        } else {
            Err(SetupError::NotRoot(what))
        }
    }

    /// Makes sure a PCI driver is registered, loading its module when allowed.
    fn ensure_driver(&self, driver: &str, module: &'static str) -> Result<(), SetupError> {
        let dir = format!("/sys/bus/pci/drivers/{driver}");
        if self.sys.exists(&dir) {
            return Ok(());
        }
        if self.modprobe {
            let ok = Command::new("modprobe")
                .arg(module)
                .status()
                .is_ok_and(|s| s.success());
            if ok && self.sys.exists(&dir) {
                return Ok(());
            }
        }
        Err(SetupError::ModuleMissing(module))
    }

    fn nvme_device(&self, bdf: &Bdf) -> Result<(), SetupError> {
        let class_path = format!("{}/class", bdf.sysfs());
        let class = self
            .sys
            .read(&class_path)
            .map_err(|_| SetupError::NoDevice(bdf.to_string()))?;
        if !class.eq_ignore_ascii_case(pci::NVME_CLASS) {
            return Err(SetupError::NotNvme {
                bdf: bdf.to_string(),
                class,
            });
        }
        Ok(())
    }

    /// Rebinds `bdf` to `driver` through driver_override (empty override = kernel's choice).
    fn rebind(&self, bdf: &Bdf, driver_override: &str) -> Result<(), SetupError> {
        let over = format!("{}/driver_override", bdf.sysfs());
        self.sys
            .write(&over, &format!("{driver_override}\n"))
            .map_err(io_at(&over))?;
        if let Some(cur) = pci::driver(&self.sys, bdf) {
            let unbind = format!("/sys/bus/pci/drivers/{cur}/unbind");
            self.sys
                .write(&unbind, bdf.as_str())
                .map_err(io_at(&unbind))?;
        }
        let probe = "/sys/bus/pci/drivers_probe";
        self.sys.write(probe, bdf.as_str()).map_err(io_at(probe))
    }
}

/// Binds an NVMe controller to vfio-pci, refusing when that would hurt: not root, IOMMU off,
/// vfio-pci missing, a namespace in use, other devices in its IOMMU group.
pub fn bind(host: &Host, bdf: &Bdf) -> Result<String, SetupError> {
    host.nvme_device(bdf)?;
    let current = pci::driver(&host.sys, bdf);
    if current.as_deref() == Some("vfio-pci") {
        return Ok(format!("{bdf} is already bound to vfio-pci"));
    }
    host.require_root("bind")?;
    let group =
        pci::iommu_group(&host.sys, bdf).ok_or_else(|| SetupError::IommuOff(bdf.to_string()))?;
    let in_use = status::usage(&host.sys, &status::namespaces(&host.sys, bdf));
    if !in_use.is_empty() {
        return Err(SetupError::InUse {
            bdf: bdf.to_string(),
            what: in_use.join(", "),
        });
    }
    let blockers: Vec<String> = pci::group_devices(&host.sys, &group)
        .into_iter()
        .filter(|p| p != bdf)
        .filter_map(|p| {
            let d = pci::driver(&host.sys, &p);
            (!pci::driver_keeps_group_viable(d.as_deref()))
                .then(|| format!("{p} ({})", d.as_deref().unwrap_or("no driver")))
        })
        .collect();
    if !blockers.is_empty() {
        return Err(SetupError::GroupNotViable {
            bdf: bdf.to_string(),
            group,
            others: blockers.join(", "),
        });
    }
    host.ensure_driver("vfio-pci", "vfio-pci")?;
    host.rebind(bdf, "vfio-pci")?;
    expect_driver(host, bdf, "vfio-pci")?;
    let dev = format!("/dev/vfio/{group}");
    let mut msg = format!(
        "{bdf}: {} -> vfio-pci (IOMMU group {group}, {dev})",
        current.as_deref().unwrap_or("no driver")
    );
    if !host.sys.exists(&dev) {
        msg.push_str(&format!("; warning: {dev} does not exist yet"));
    }
    Ok(msg)
}

/// Returns a controller from vfio-pci to the kernel nvme driver.
pub fn unbind(host: &Host, bdf: &Bdf) -> Result<String, SetupError> {
    host.nvme_device(bdf)?;
    let current = pci::driver(&host.sys, bdf);
    if current.as_deref() == Some("nvme") {
        return Ok(format!("{bdf} is already bound to nvme"));
    }
    host.require_root("unbind")?;
    host.ensure_driver("nvme", "nvme")?;
    host.rebind(bdf, "")?;
    expect_driver(host, bdf, "nvme")?;
    Ok(format!(
        "{bdf}: {} -> nvme",
        current.as_deref().unwrap_or("no driver")
    ))
}

fn expect_driver(host: &Host, bdf: &Bdf, want: &'static str) -> Result<(), SetupError> {
    let found = pci::driver(&host.sys, bdf);
    if found.as_deref() == Some(want) {
        Ok(())
    } else {
        Err(SetupError::BindFailed {
            bdf: bdf.to_string(),
            want,
            found: found.unwrap_or_else(|| "no driver".into()),
        })
    }
}

/// Sets the number of hugepages of one size (`2M` or `1G`) and checks the kernel's answer.
pub fn hugepages(host: &Host, count: u64, size: &str) -> Result<String, SetupError> {
    let pools = status::hugepage_pools(&host.sys);
    let have = pools
        .iter()
        .map(|p| status::size_name(p.size_kb))
        .collect::<Vec<_>>()
        .join(", ");
    let pool = pools
        .iter()
        .find(|p| status::size_name(p.size_kb).eq_ignore_ascii_case(size))
        .ok_or_else(|| SetupError::HugepageSize(size.to_string(), have))?;
    host.require_root("hugepages")?;
    let path = format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
        pool.size_kb
    );
    host.sys
        .write(&path, &count.to_string())
        .map_err(io_at(&path))?;
    let got: u64 = host
        .sys
        .read(&path)
        .map_err(io_at(&path))?
        .parse()
        .unwrap_or(0);
    if got < count {
        return Err(SetupError::HugepagesShort {
            size: size.to_string(),
            want: count,
            got,
        });
    }
    Ok(format!("hugepages {size}: {got}"))
}

/// Checks that the caller can pin `need` bytes of DMA memory.
pub fn check_memlock(euid: u32, limit: Option<u64>, need: u64) -> Result<(), SetupError> {
    match limit {
        Some(limit) if euid != 0 && limit < need => Err(SetupError::MemlockTooLow { limit, need }),
        _ => Ok(()),
    }
}
