//! `UringOptions`: what a uring bdev is made from, with documented defaults, and the
//! `path=FILE[,direct=0|1][,hipri=1]` spec that pmio-perf and configs use.

use std::path::PathBuf;

use crate::error::UringError;

/// How to open a file or block device as a uring bdev.
///
/// Validated once, by [`crate::UringBdev::create`]; the I/O path never re-checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UringOptions {
    /// File, block device or NVMe generic character device (`/dev/ngXnY`). Required.
    pub path: PathBuf,
    /// Bdev name. Default: `uring:<file name>`.
    pub name: Option<String>,
    /// Open with O_DIRECT (bypass the page cache). Default: true.
    pub direct: bool,
    /// Ask for polled completions (an IOPOLL ring for the device's poll queue). Default: false.
    /// Needs O_DIRECT and a device with poll queues; when the device has none the driver logs a
    /// warning naming the device and uses interrupt-driven rings (see `UringBdev::iopoll`).
    pub hipri: bool,
    /// Logical block size override in bytes (a power of two, at least 512, and a multiple of
    /// the device's own block size with O_DIRECT). Default: the device's logical block size for
    /// block devices; for files the file system's direct-I/O alignment (statx STATX_DIOALIGN,
    /// else `st_blksize`) with O_DIRECT, and 512 bytes for buffered I/O.
    pub block_size: Option<u32>,
    /// When a poll finds less than a batch of completions (`min(in flight, max)`) while I/O is
    /// in flight, wait in the kernel up to this many microseconds for the batch instead of
    /// returning at once. Default: 0, pure polling (SPDK's behaviour: the reactor never blocks
    /// and burns its core). A disk-bound O_DIRECT job that owns its reactor saves that CPU
    /// with a wait (t/io_uring waits for its completion batch the same way), at the price of
    /// delaying the reactor's messages, other devices and completions already reaped by up
    /// to this long. Reads the kernel hands to an io-wq worker thread (buffered reads of a
    /// tmpfs file) want a wait too: the worker inherits the reactor's CPU affinity, and a
    /// polling reactor leaves it only part of that core.
    pub wait_us: u32,
    /// Benchmark mode: every request goes to the kernel as `IORING_OP_NOP` and completes
    /// without touching the file, so pmio's whole I/O path is measured over the ring alone
    /// (t/io_uring's `-N1`). Reads return no data and writes store none. Default: false.
    pub nop: bool,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            path: PathBuf::new(),
            name: None,
            direct: true,
            hipri: false,
            block_size: None,
            wait_us: 0,
            nop: false,
        }
    }
}

impl UringOptions {
    /// Options for `path` with every default.
    pub fn new(path: impl Into<PathBuf>) -> UringOptions {
        UringOptions {
            path: path.into(),
            ..UringOptions::default()
        }
    }

    /// Parses `path=FILE[,direct=0|1][,hipri=0|1][,name=NAME][,bs=BYTES][,wait_us=N][,nop=0|1]`
    /// (the part after `uring:` in `--dev uring:...`). `iopoll` is accepted for `hipri`, `block_size` for `bs`.
    pub fn parse(spec: &str) -> Result<UringOptions, UringError> {
        let bad = |reason: String| UringError::BadSpec {
            spec: spec.to_string(),
            reason,
        };
        let mut o = UringOptions::default();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("{item:?} is not key=value")))?;
            match key.trim() {
                "path" | "filename" => o.path = PathBuf::from(value),
                "name" => o.name = Some(value.to_string()),
                "direct" => o.direct = parse_bool(value).ok_or_else(|| bad(bool_msg(key)))?,
                "hipri" | "iopoll" => {
                    o.hipri = parse_bool(value).ok_or_else(|| bad(bool_msg(key)))?
                }
                "nop" => o.nop = parse_bool(value).ok_or_else(|| bad(bool_msg(key)))?,
                "wait_us" => {
                    o.wait_us = value
                        .parse::<u32>()
                        .map_err(|_| bad(format!("wait_us={value:?} is not a number")))?;
                }
                "bs" | "block_size" => {
                    let bs = value
                        .parse::<u32>()
                        .map_err(|_| bad(format!("{key}={value:?} is not a number of bytes")))?;
                    o.block_size = Some(bs);
                }
                other => {
                    return Err(bad(format!(
                        "unknown key {other:?} (known: path, direct, hipri, name, bs, wait_us, nop)"
                    )));
                }
            }
        }
        if o.path.as_os_str().is_empty() {
            return Err(UringError::MissingPath);
        }
        Ok(o)
    }

    /// The bdev name: the configured one, else `uring:<file name>`.
    pub fn bdev_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => {
                let file = self
                    .path
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| self.path.display().to_string());
                format!("uring:{file}")
            }
        }
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn bool_msg(key: &str) -> String {
    format!("{key} must be 0 or 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults_and_keys() {
        let o = UringOptions::parse("path=/tmp/f").unwrap();
        assert_eq!(o, UringOptions::new("/tmp/f"));
        assert!(o.direct && !o.hipri && o.block_size.is_none());
        assert_eq!(o.bdev_name(), "uring:f");

        assert!(!o.nop);
        let o = UringOptions::parse(
            "path=/dev/loop0,direct=0,hipri=1,name=U0,bs=4096,wait_us=50,nop=1",
        )
        .unwrap();
        assert_eq!(o.wait_us, 50);
        assert!(o.nop);
        assert_eq!(o.path, PathBuf::from("/dev/loop0"));
        assert!(!o.direct && o.hipri);
        assert_eq!(o.block_size, Some(4096));
        assert_eq!(o.bdev_name(), "U0");
    }

    #[test]
    fn spec_errors_are_clear() {
        assert!(matches!(
            UringOptions::parse("direct=1"),
            Err(UringError::MissingPath)
        ));
        let e = UringOptions::parse("path=/f,direct=2").unwrap_err();
        assert!(e.to_string().contains("direct must be 0 or 1"), "{e}");
        let e = UringOptions::parse("path=/f,colour=blue").unwrap_err();
        assert!(e.to_string().contains("unknown key \"colour\""), "{e}");
        let e = UringOptions::parse("path=/f,nop=yes please").unwrap_err();
        assert!(e.to_string().contains("nop must be 0 or 1"), "{e}");
        let e = UringOptions::parse("path=/f,bs=4k").unwrap_err();
        assert!(e.to_string().contains("not a number"), "{e}");
        let e = UringOptions::parse("/f").unwrap_err();
        assert!(e.to_string().contains("not key=value"), "{e}");
    }
}
