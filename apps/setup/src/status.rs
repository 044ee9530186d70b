//! `pmio-setup status`: everything that decides whether pmio can drive a device.

use std::fmt::Write as _;

use crate::pci::{self, Bdf};
use crate::sysfs::System;

/// Modules the VFIO path needs.
pub const VFIO_MODULES: [&str; 3] = ["vfio", "vfio_iommu_type1", "vfio_pci"];

/// Hugepages of one size.
#[derive(Debug, PartialEq, Eq)]
pub struct HugepagePool {
    pub size_kb: u64,
    pub total: u64,
    pub free: u64,
}

/// One NVMe controller as the system sees it.
#[derive(Debug)]
pub struct Controller {
    pub bdf: Bdf,
    pub driver: Option<String>,
    pub iommu_group: Option<String>,
    /// Other devices in the IOMMU group, with their drivers.
    pub group_peers: Vec<(Bdf, Option<String>)>,
    /// Block devices of its namespaces (when the kernel nvme driver has it).
    pub namespaces: Vec<String>,
    /// Why binding it would hurt someone (mounted, swap, holders); empty when safe.
    pub in_use: Vec<String>,
}

impl Controller {
    /// Whether binding it to vfio-pci would be refused, and why.
    pub fn bind_refusal(&self) -> Option<String> {
        if !self.in_use.is_empty() {
            return Some(format!("in use: {}", self.in_use.join(", ")));
        }
        if self.iommu_group.is_none() {
            return Some("no IOMMU group (IOMMU off)".into());
        }
        let blockers = self.non_viable_peers();
        if !blockers.is_empty() {
            return Some(format!("IOMMU group not viable: {blockers}"));
        }
        None
    }

    /// Group peers whose drivers keep the group from being used by VFIO.
    pub fn non_viable_peers(&self) -> String {
        self.group_peers
            .iter()
            .filter(|(_, d)| !pci::driver_keeps_group_viable(d.as_deref()))
            .map(|(b, d)| format!("{b} ({})", d.as_deref().unwrap_or("no driver")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The whole picture.
#[derive(Debug)]
pub struct Status {
    pub iommu_groups: usize,
    pub modules: Vec<(&'static str, bool)>,
    pub hugepages: Vec<HugepagePool>,
    pub memlock: Option<u64>,
    pub controllers: Vec<Controller>,
}

pub fn gather(sys: &System) -> Status {
    Status {
        iommu_groups: sys.list("/sys/kernel/iommu_groups").len(),
        modules: VFIO_MODULES
            .iter()
            .map(|m| (*m, sys.exists(&format!("/sys/module/{m}"))))
            .collect(),
        hugepages: hugepage_pools(sys),
        memlock: memlock_limit(),
        controllers: pci::nvme_controllers(sys)
            .into_iter()
            .map(|b| controller(sys, b))
            .collect(),
    }
}

/// Every hugepage size the kernel offers.
pub fn hugepage_pools(sys: &System) -> Vec<HugepagePool> {
    let mut pools: Vec<HugepagePool> = sys
        .list("/sys/kernel/mm/hugepages")
        .into_iter()
        .filter_map(|dir| {
            let kb = dir
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let read = |f: &str| {
                sys.read(&format!("/sys/kernel/mm/hugepages/{dir}/{f}"))
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            Some(HugepagePool {
                size_kb: kb,
                total: read("nr_hugepages"),
                free: read("free_hugepages"),
            })
        })
        .collect();
    pools.sort_by_key(|p| p.size_kb);
    pools
}

/// The soft RLIMIT_MEMLOCK in bytes; None when unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(lim.rlim_cur)
    }
}

fn controller(sys: &System, bdf: Bdf) -> Controller {
    let driver = pci::driver(sys, &bdf);
    let iommu_group = pci::iommu_group(sys, &bdf);
    let group_peers = iommu_group
        .as_deref()
        .map(|g| {
            pci::group_devices(sys, g)
                .into_iter()
                .filter(|p| *p != bdf)
                .map(|p| {
                    let d = pci::driver(sys, &p);
                    (p, d)
                })
                .collect()
        })
        .unwrap_or_default();
    let namespaces = namespaces(sys, &bdf);
    let in_use = usage(sys, &namespaces);
    Controller {
        bdf,
        driver,
        iommu_group,
        group_peers,
        namespaces,
        in_use,
    }
}

/// Block devices (`nvme0n1`, …) of the kernel nvme controllers on this PCI function.
pub fn namespaces(sys: &System, bdf: &Bdf) -> Vec<String> {
    let ctrls: Vec<String> = sys.list(&format!("{}/nvme", bdf.sysfs()));
    sys.list("/sys/block")
        .into_iter()
        .filter(|blk| {
            ctrls.iter().any(|c| {
                blk.strip_prefix(c.as_str())
                    .and_then(|rest| rest.strip_prefix('n'))
                    .is_some_and(|ns| !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect()
}

/// What uses these block devices or their partitions: mounts, swap, stacked devices.
pub fn usage(sys: &System, disks: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for d in disks {
        names.push(d.clone());
        names.extend(
            sys.list(&format!("/sys/block/{d}"))
                .into_iter()
                .filter(|p| p.starts_with(d.as_str()) && p.len() > d.len()),
        );
    }
    let mut out = Vec::new();
    let mountinfo = sys.read("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines() {
        // Fields: id parent major:minor root mountpoint opts [optional…] - fstype source superopts
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (mountpoint, source) = (fields.get(4), fields.get(sep + 2));
        if let (Some(mp), Some(src)) = (mountpoint, source)
            && let Some(dev) = src.strip_prefix("/dev/")
            && names.iter().any(|n| n == dev)
        {
            out.push(format!("/dev/{dev} mounted on {mp}"));
        }
    }
    let swaps = sys.read("/proc/swaps").unwrap_or_default();
    for line in swaps.lines().skip(1) {
        if let Some(dev) = line
            .split_whitespace()
            .next()
            .and_then(|s| s.strip_prefix("/dev/"))
            && names.iter().any(|n| n == dev)
        {
            out.push(format!("/dev/{dev} is active swap"));
        }
    }
    for n in &names {
        let dir = if disks.contains(n) {
            format!("/sys/block/{n}/holders")
        } else {
            let disk = disks
                .iter()
                .find(|d| n.starts_with(d.as_str()))
                .cloned()
                .unwrap_or_default();
            format!("/sys/block/{disk}/{n}/holders")
        };
        let holders = sys.list(&dir);
        if !holders.is_empty() {
            out.push(format!("/dev/{n} is held by {}", holders.join(", ")));
        }
    }
    out
}

/// Human-readable report.
pub fn render(st: &Status) -> String {
    let mut s = String::new();
    let iommu = if st.iommu_groups > 0 {
        format!("enabled ({} groups)", st.iommu_groups)
    } else {
        "OFF (no IOMMU groups: boot with intel_iommu=on or amd_iommu=on)".into()
    };
    let _ = writeln!(s, "IOMMU: {iommu}");
    for (m, loaded) in &st.modules {
        let _ = writeln!(
            s,
            "module {m}: {}",
            if *loaded { "loaded" } else { "not loaded" }
        );
    }
    for p in &st.hugepages {
        let _ = writeln!(
            s,
            "hugepages {}: total {} free {}",
            size_name(p.size_kb),
            p.total,
            p.free
        );
    }
    match st.memlock {
        None => {
            let _ = writeln!(s, "RLIMIT_MEMLOCK: unlimited");
        }
        Some(b) => {
            let _ = writeln!(s, "RLIMIT_MEMLOCK: {b} bytes");
        }
    }
    if st.controllers.is_empty() {
        let _ = writeln!(s, "NVMe controllers: none");
    }
    for c in &st.controllers {
        let _ = writeln!(
            s,
            "NVMe {}: driver {}, IOMMU group {}",
            c.bdf,
            c.driver.as_deref().unwrap_or("none"),
            c.iommu_group.as_deref().unwrap_or("none")
        );
        for (p, d) in &c.group_peers {
            let _ = writeln!(
                s,
                "  group peer {p}: driver {}",
                d.as_deref().unwrap_or("none")
            );
        }
        if !c.namespaces.is_empty() {
            let _ = writeln!(s, "  namespaces: {}", c.namespaces.join(" "));
        }
        match c.bind_refusal() {
            None => {
                let _ = writeln!(s, "  safe to bind: yes");
            }
            Some(why) => {
                let _ = writeln!(s, "  safe to bind: no ({why})");
            }
        }
    }
    s
}

/// `2M`, `1G` for a size in KiB.
pub fn size_name(kb: u64) -> String {
    if kb >= 1 << 20 && kb.is_multiple_of(1 << 20) {
        format!("{}G", kb >> 20)
    } else if kb >= 1 << 10 && kb.is_multiple_of(1 << 10) {
        format!("{}M", kb >> 10)
    } else {
        format!("{kb}K")
    }
}
