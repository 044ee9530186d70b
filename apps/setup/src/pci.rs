//! PCI addresses and what sysfs says about an NVMe controller.

use std::fmt;

use crate::SetupError;
use crate::sysfs::System;

/// PCI class code of an NVMe controller (mass storage, NVM, NVMe programming interface).
pub const NVME_CLASS: &str = "0x010802";

/// A PCI address in `domain:bus:device.function` form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bdf(String);

impl Bdf {
    /// Accepts `0000:00:04.0` and the short `00:04.0` (domain 0), hex digits in either case.
    pub fn parse(s: &str) -> Result<Bdf, SetupError> {
        let bad = || SetupError::BadAddress(s.to_string());
        let full = if s.matches(':').count() == 1 {
            format!("0000:{s}")
        } else {
            s.to_string()
        };
        let (dom_bus_dev, func) = full.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = dom_bus_dev.split(':').collect();
        let widths = [4, 2, 2];
        if parts.len() != 3
            || func.len() != 1
            || !matches!(func.as_bytes()[0], b'0'..=b'7')
            || parts
                .iter()
                .zip(widths)
                .any(|(p, w)| p.len() != w || !p.bytes().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(bad());
        }
        let dev = u8::from_str_radix(parts[2], 16).map_err(|_| bad())?;
        if dev > 0x1f {
            return Err(bad());
        }
        Ok(Bdf(full.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The device's sysfs directory.
    pub fn sysfs(&self) -> String {
        format!("/sys/bus/pci/devices/{}", self.0)
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A PCI device's driver, or None when unbound.
pub fn driver(sys: &System, bdf: &Bdf) -> Option<String> {
    sys.link_name(&format!("{}/driver", bdf.sysfs()))
}

/// The device's IOMMU group number, or None without an IOMMU.
pub fn iommu_group(sys: &System, bdf: &Bdf) -> Option<String> {
    sys.link_name(&format!("{}/iommu_group", bdf.sysfs()))
}

/// Every PCI device in an IOMMU group.
pub fn group_devices(sys: &System, group: &str) -> Vec<Bdf> {
    sys.list(&format!("/sys/kernel/iommu_groups/{group}/devices"))
        .into_iter()
        .filter_map(|n| Bdf::parse(&n).ok())
        .collect()
}

/// All NVMe controllers on the PCI bus.
pub fn nvme_controllers(sys: &System) -> Vec<Bdf> {
    sys.list("/sys/bus/pci/devices")
        .into_iter()
        .filter_map(|n| Bdf::parse(&n).ok())
        .filter(|b| {
            sys.read(&format!("{}/class", b.sysfs()))
                .is_ok_and(|c| c.eq_ignore_ascii_case(NVME_CLASS))
        })
        .collect()
}

/// Drivers that leave an IOMMU group usable by VFIO (Linux's `vfio_dev_driver_allowed`).
pub fn driver_keeps_group_viable(driver: Option<&str>) -> bool {
    matches!(driver, None | Some("vfio-pci" | "pci-stub" | "pcieport"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_long_and_short_addresses() {
        assert_eq!(Bdf::parse("0000:00:04.0").unwrap().as_str(), "0000:00:04.0");
        assert_eq!(Bdf::parse("00:04.0").unwrap().as_str(), "0000:00:04.0");
        assert_eq!(Bdf::parse("0000:AF:00.1").unwrap().as_str(), "0000:af:00.1");
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "0000:00:04",
            "00:04",
            "0000:00:04.8",
            "0000:00:20.0",
            "zz:00.0",
            "0:00:04.0",
            "0000:00:04.0.1",
            "0000:000:04.0",
        ] {
            assert!(
                matches!(Bdf::parse(bad), Err(SetupError::BadAddress(_))),
                "{bad:?} accepted"
            );
        }
    }
}
