//! The slice of sysfs, procfs and /dev that pmio-setup reads and writes, rooted at a
//! directory so tests can run against a fake tree.

use std::fs;
use std::io;
use std::path::PathBuf;

/// Where the system's pseudo file systems are. `/` on a real machine.
#[derive(Clone, Debug)]
pub struct System {
    root: PathBuf,
}

impl System {
    pub fn new(root: impl Into<PathBuf>) -> System {
        System { root: root.into() }
    }

    /// `rel` (an absolute system path such as `/sys/bus/pci`) under this root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// Reads a small attribute file, trimmed.
    pub fn read(&self, rel: &str) -> io::Result<String> {
        Ok(fs::read_to_string(self.path(rel))?.trim().to_string())
    }

    pub fn write(&self, rel: &str, value: &str) -> io::Result<()> {
        fs::write(self.path(rel), value)
    }

    /// The final component of a symlink's target (`driver` → `nvme`, `iommu_group` → `7`).
    pub fn link_name(&self, rel: &str) -> Option<String> {
        let target = fs::read_link(self.path(rel)).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// Names of the entries of a directory, sorted; empty when it does not exist.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.path(rel))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}
