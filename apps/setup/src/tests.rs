//! pmio-setup against fake sysfs trees: the refusals users meet, and what status reports.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::SetupError;
use crate::bind::{self, Host};
use crate::pci::Bdf;
use crate::status;
use crate::sysfs::System;

const CTRL: &str = "0000:00:04.0";

/// A machine with one NVMe controller bound to `driver`, in IOMMU group 3 (if `iommu`), with
/// namespace nvme0n1 and partition nvme0n1p1.
fn fake(driver: Option<&str>, iommu: bool) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let dev = r.join("sys/bus/pci/devices").join(CTRL);
    fs::create_dir_all(&dev).unwrap();
    fs::write(dev.join("class"), "0x010802\n").unwrap();
    fs::write(dev.join("driver_override"), "(null)\n").unwrap();
    for d in ["nvme", "vfio-pci"] {
        fs::create_dir_all(r.join("sys/bus/pci/drivers").join(d)).unwrap();
    }
    fs::write(r.join("sys/bus/pci/drivers_probe"), "").unwrap();
    if let Some(d) = driver {
        symlink(r.join("sys/bus/pci/drivers").join(d), dev.join("driver")).unwrap();
    }
    if iommu {
        let g = r.join("sys/kernel/iommu_groups/3/devices");
        fs::create_dir_all(&g).unwrap();
        symlink(&dev, g.join(CTRL)).unwrap();
        symlink(r.join("sys/kernel/iommu_groups/3"), dev.join("iommu_group")).unwrap();
    }
    fs::create_dir_all(dev.join("nvme/nvme0")).unwrap();
    fs::create_dir_all(r.join("sys/block/nvme0n1/nvme0n1p1/holders")).unwrap();
    fs::create_dir_all(r.join("sys/block/nvme0n1/holders")).unwrap();
    fs::create_dir_all(r.join("sys/block/vda/holders")).unwrap();
    fs::create_dir_all(r.join("proc/self")).unwrap();
    fs::write(r.join("proc/self/mountinfo"), "").unwrap();
    fs::write(r.join("proc/swaps"), "Filename Type Size Used Priority\n").unwrap();
    let hp = r.join("sys/kernel/mm/hugepages/hugepages-2048kB");
    fs::create_dir_all(&hp).unwrap();
    fs::write(hp.join("nr_hugepages"), "0\n").unwrap();
    fs::write(hp.join("free_hugepages"), "0\n").unwrap();
    t
}

fn host(root: &Path, euid: u32) -> Host {
    Host {
        sys: System::new(root),
        euid,
        modprobe: false,
    }
}

fn add_group_peer(root: &Path, bdf: &str, driver: Option<&str>) {
    let dev = root.join("sys/bus/pci/devices").join(bdf);
    fs::create_dir_all(&dev).unwrap();
    fs::write(dev.join("class"), "0x020000\n").unwrap();
    if let Some(d) = driver {
        let dd = root.join("sys/bus/pci/drivers").join(d);
        fs::create_dir_all(&dd).unwrap();
        symlink(dd, dev.join("driver")).unwrap();
    }
    symlink(
        &dev,
        root.join("sys/kernel/iommu_groups/3/devices").join(bdf),
    )
    .unwrap();
}

fn ctrl() -> Bdf {
    Bdf::parse(CTRL).unwrap()
}

#[test]
fn status_lists_controller_namespaces_and_verdict() {
    let t = fake(Some("nvme"), true);
    let st = status::gather(&System::new(t.path()));
    assert_eq!(st.iommu_groups, 1);
    assert_eq!(st.controllers.len(), 1);
    let c = &st.controllers[0];
    assert_eq!(c.driver.as_deref(), Some("nvme"));
    assert_eq!(c.iommu_group.as_deref(), Some("3"));
    assert_eq!(c.namespaces, vec!["nvme0n1".to_string()]);
    assert_eq!(c.bind_refusal(), None);
    let text = status::render(&st);
    assert!(
        text.contains("NVMe 0000:00:04.0: driver nvme, IOMMU group 3"),
        "{text}"
    );
    assert!(text.contains("safe to bind: yes"), "{text}");
    assert!(text.contains("hugepages 2M: total 0 free 0"), "{text}");
}

#[test]
fn mounted_partition_makes_bind_refuse_and_names_the_mount() {
    let t = fake(Some("nvme"), true);
    fs::write(
        t.path().join("proc/self/mountinfo"),
        "36 25 259:1 / /data rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n",
    )
    .unwrap();
    let st = status::gather(&System::new(t.path()));
    let why = st.controllers[0].bind_refusal().unwrap();
    assert!(why.contains("/dev/nvme0n1p1 mounted on /data"), "{why}");
    match bind::bind(&host(t.path(), 0), &ctrl()) {
        Err(SetupError::InUse { what, .. }) => assert!(what.contains("/data"), "{what}"),
        other => panic!("expected InUse, got {other:?}"),
    }
}

#[test]
fn swap_and_holders_count_as_in_use() {
    let t = fake(Some("nvme"), true);
    fs::write(
        t.path().join("proc/swaps"),
        "Filename Type Size Used Priority\n/dev/nvme0n1 partition 1024 0 -2\n",
    )
    .unwrap();
    fs::create_dir_all(t.path().join("sys/block/nvme0n1/nvme0n1p1/holders/dm-0")).unwrap();
    let use_ = status::usage(&System::new(t.path()), &["nvme0n1".to_string()]);
    assert!(use_.iter().any(|u| u.contains("active swap")), "{use_:?}");
    assert!(use_.iter().any(|u| u.contains("held by dm-0")), "{use_:?}");
}

#[test]
fn bind_needs_root() {
    let t = fake(Some("nvme"), true);
    assert!(matches!(
        bind::bind(&host(t.path(), 1000), &ctrl()),
        Err(SetupError::NotRoot("bind"))
    ));
    assert!(matches!(
        bind::hugepages(&host(t.path(), 1000), 8, "2M"),
        Err(SetupError::NotRoot("hugepages"))
    ));
}

#[test]
fn bind_without_iommu_says_iommu_off() {
    let t = fake(Some("nvme"), false);
    let e = bind::bind(&host(t.path(), 0), &ctrl()).unwrap_err();
    assert!(matches!(e, SetupError::IommuOff(_)), "{e}");
    assert!(e.to_string().contains("intel_iommu=on"));
}

#[test]
fn bind_refuses_group_with_a_device_on_another_driver() {
    let t = fake(Some("nvme"), true);
    add_group_peer(t.path(), "0000:00:05.0", Some("e1000e"));
    add_group_peer(t.path(), "0000:00:06.0", Some("pcieport"));
    match bind::bind(&host(t.path(), 0), &ctrl()) {
        Err(SetupError::GroupNotViable { others, group, .. }) => {
            assert_eq!(group, "3");
            assert!(others.contains("0000:00:05.0 (e1000e)"), "{others}");
            assert!(
                !others.contains("00:06.0"),
                "bridges keep a group viable: {others}"
            );
        }
        other => panic!("expected GroupNotViable, got {other:?}"),
    }
}

#[test]
fn bind_reports_missing_vfio_module() {
    let t = fake(Some("nvme"), true);
    fs::remove_dir(t.path().join("sys/bus/pci/drivers/vfio-pci")).unwrap();
    assert!(matches!(
        bind::bind(&host(t.path(), 0), &ctrl()),
        Err(SetupError::ModuleMissing("vfio-pci"))
    ));
}

#[test]
fn bind_writes_override_unbind_and_probe() {
    // The fake kernel does not rebind, so the final check reports what it found: the writes
    // before it are what a real kernel acts on.
    let t = fake(Some("nvme"), true);
    let e = bind::bind(&host(t.path(), 0), &ctrl()).unwrap_err();
    assert!(
        matches!(
            e,
            SetupError::BindFailed {
                want: "vfio-pci",
                ..
            }
        ),
        "{e}"
    );
    let r = t.path();
    let dev = r.join("sys/bus/pci/devices").join(CTRL);
    assert_eq!(
        fs::read_to_string(dev.join("driver_override")).unwrap(),
        "vfio-pci\n"
    );
    assert_eq!(
        fs::read_to_string(r.join("sys/bus/pci/drivers/nvme/unbind")).unwrap(),
        CTRL
    );
    assert_eq!(
        fs::read_to_string(r.join("sys/bus/pci/drivers_probe")).unwrap(),
        CTRL
    );
}

#[test]
fn already_bound_is_not_an_error() {
    let t = fake(Some("vfio-pci"), true);
    let msg = bind::bind(&host(t.path(), 1000), &ctrl()).unwrap();
    assert!(msg.contains("already bound to vfio-pci"));
    let t = fake(Some("nvme"), true);
    let msg = bind::unbind(&host(t.path(), 1000), &ctrl()).unwrap();
    assert!(msg.contains("already bound to nvme"));
}

#[test]
fn bind_rejects_devices_that_are_not_nvme_or_absent() {
    let t = fake(Some("nvme"), true);
    add_group_peer(t.path(), "0000:00:05.0", None);
    let h = host(t.path(), 0);
    assert!(matches!(
        bind::bind(&h, &Bdf::parse("0000:00:05.0").unwrap()),
        Err(SetupError::NotNvme { .. })
    ));
    assert!(matches!(
        bind::bind(&h, &Bdf::parse("0000:00:09.0").unwrap()),
        Err(SetupError::NoDevice(_))
    ));
}

#[test]
fn hugepages_reports_unsupported_size_and_short_grant() {
    let t = fake(None, true);
    let h = host(t.path(), 0);
    match bind::hugepages(&h, 4, "1G") {
        Err(SetupError::HugepageSize(s, have)) => {
            assert_eq!(s, "1G");
            assert_eq!(have, "2M");
        }
        other => panic!("expected HugepageSize, got {other:?}"),
    }
    // A plain file keeps what is written, so this grant succeeds in full.
    assert_eq!(bind::hugepages(&h, 4, "2M").unwrap(), "hugepages 2M: 4");
}

#[test]
fn memlock_too_low_is_named_for_non_root() {
    let e = bind::check_memlock(1000, Some(8 << 20), 64 << 20).unwrap_err();
    assert!(
        e.to_string().contains("RLIMIT_MEMLOCK is 8388608 bytes"),
        "{e}"
    );
    assert!(bind::check_memlock(0, Some(8 << 20), 64 << 20).is_ok());
    assert!(bind::check_memlock(1000, None, 64 << 20).is_ok());
}
