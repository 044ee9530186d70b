//! Device specs (`--dev null:size=1G,bs=512`) and the table of driver constructors.
//!
//! A spec is `DRIVER[:key=value[,key=value...]]`. Each driver is one [`DriverEntry`] in
//! [`DRIVERS`]: its name, a one-line help, and a constructor that takes its keys out of a
//! [`SpecArgs`] and returns the device. Adding a driver (e.g. `uring:path=/dev/nvme0n1` or
//! `nvme:traddr=0000:00:04.0`) is one constructor function and one line in [`DRIVERS`]; keys
//! the constructor does not take are reported as errors by [`SpecArgs::finish`].

pub mod nvmf;

use std::collections::BTreeMap;
use std::sync::Arc;

use pmio::{BlockDevice, HctxQueues};
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_null::{NullDevice, NullOptions};

/// A bad device spec; printed as one line, exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("--dev {spec:?}: unknown driver {driver:?} (known: {known})")]
    UnknownDriver {
        spec: String,
        driver: String,
        known: String,
    },
    #[error("--dev {spec:?}: {msg}")]
    Bad { spec: String, msg: String },
}

/// What a driver constructor returns.
pub struct Created {
    /// The device, not yet registered.
    pub dev: Arc<dyn BlockDevice>,
    /// Whether reads return what was written (`--verify` needs it; null does not).
    pub stores_data: bool,
}

/// One driver that `--dev` knows.
pub struct DriverEntry {
    /// The spec's prefix (`null`, `malloc`, `uring`, `nvme`).
    pub name: &'static str,
    /// Keys it takes, for `--help` and error messages.
    pub help: &'static str,
    /// Builds the device from the spec's keys; `name` is the default device name
    /// (`Null0`, `Malloc1`, ...) unless the spec gives `name=`.
    pub create: fn(&mut SpecArgs, name: String) -> Result<Created, String>,
}

/// The drivers `--dev` knows. To add one: write `fn my_spec(a: &mut SpecArgs, name: String)
/// -> Result<Created, String>` and add a line here.
pub const DRIVERS: &[DriverEntry] = &[
    DriverEntry {
        name: "null",
        help: "null[:size=1G,bs=512,latency_us=0,read_queues=0,poll_queues=0,max_transfer=SIZE,boundary=SIZE,name=Null0]",
        create: null_spec,
    },
    DriverEntry {
        name: "malloc",
        help: "malloc[:size=64M,bs=512,max_transfer=SIZE,boundary=SIZE,name=Malloc0]",
        create: malloc_spec,
    },
    DriverEntry {
        name: "uring",
        help: "uring:path=FILE[,direct=0|1,hipri=0|1,bs=BYTES,wait_us=0,nop=0|1,name=Uring0]",
        create: uring_spec,
    },
    DriverEntry {
        name: "nvme",
        help: "nvme:traddr=PCI_ADDRESS[,ns=1,queues=64,name=Nvme0] (controller bound to vfio-pci)",
        create: nvme_spec,
    },
    DriverEntry {
        name: "nvmf",
        help: nvmf::HELP,
        create: nvmf::create,
    },
];

/// `--help` text listing every driver of [`DRIVERS`] with its keys.
pub fn drivers_help() -> String {
    let mut s = String::from("Device specs (--dev, repeatable; default: null):\n");
    for d in DRIVERS {
        s.push_str("  ");
        s.push_str(d.help);
        s.push('\n');
    }
    s.push_str(
        "Each (core, device) pair gets its own queue of --depth, paired as spdk_nvme_perf does:\n\
         round robin over max(cores, devices) pairs, or every pair with --use-every-core.",
    );
    s
}

/// The `key=value` pairs of one spec, taken out one by one by a constructor.
pub struct SpecArgs {
    kv: BTreeMap<String, String>,
}

impl SpecArgs {
    fn parse(s: &str) -> Result<SpecArgs, String> {
        let mut kv = BTreeMap::new();
        if s.is_empty() {
            return Ok(SpecArgs { kv });
        }
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, found {part:?}"))?;
            if k.is_empty() || v.is_empty() {
                return Err(format!("expected key=value, found {part:?}"));
            }
            if kv.insert(k.to_string(), v.to_string()).is_some() {
                return Err(format!("key {k:?} given twice"));
            }
        }
        Ok(SpecArgs { kv })
    }

    /// Takes `key` as a string.
    pub fn str(&mut self, key: &str) -> Option<String> {
        self.kv.remove(key)
    }

    /// Takes `key` as a size in bytes (`4096`, `4k`, `256M`, `1G`, `1GiB`).
    pub fn size(&mut self, key: &str) -> Result<Option<u64>, String> {
        self.kv
            .remove(key)
            .map(|v| parse_size(&v).map_err(|e| format!("{key}={v}: {e}")))
            .transpose()
    }

    /// Takes `key` as an unsigned integer.
    pub fn u64(&mut self, key: &str) -> Result<Option<u64>, String> {
        self.kv
            .remove(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("{key}={v}: not an unsigned integer"))
            })
            .transpose()
    }

    /// Takes `key` as an integer of type `T` of at least `min`; `what` ends the error
    /// (`ns=0: not a namespace ID`).
    pub fn bounded<T: TryFrom<u64>>(
        &mut self,
        key: &str,
        min: u64,
        what: &str,
    ) -> Result<Option<T>, String> {
        self.u64(key)?
            .map(|v| {
                T::try_from(v)
                    .ok()
                    .filter(|_| v >= min)
                    .ok_or(format!("{key}={v}: {what}"))
            })
            .transpose()
    }

    /// Takes `ns` (default 1), a namespace ID.
    pub fn nsid(&mut self) -> Result<u32, String> {
        Ok(self.bounded("ns", 1, "not a namespace ID")?.unwrap_or(1))
    }

    /// Makes every key lower case (for drivers whose keys are case-insensitive); fails if two
    /// keys then become one.
    pub fn lowercase_keys(&mut self) -> Result<(), String> {
        let kv = std::mem::take(&mut self.kv);
        for (k, v) in kv {
            let lower = k.to_ascii_lowercase();
            if self.kv.insert(lower, v).is_some() {
                return Err(format!("key {k:?} given twice"));
            }
        }
        Ok(())
    }

    /// Fails if keys remain that no one took.
    pub fn finish(self) -> Result<(), String> {
        match self.kv.keys().next() {
            None => Ok(()),
            Some(k) => Err(format!("unknown key {k:?}")),
        }
    }
}

/// Parses `4096`, `4k`, `4K`, `4KiB`, `256M`, `1G`, `1T` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err("not a size (examples: 4096, 4k, 256M, 1G)".into());
    }
    let n: u64 = t[..digits].parse().map_err(|_| "number too large")?;
    let suffix = t[digits..].to_ascii_lowercase();
    let shift = match suffix.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("unknown size suffix {:?}", &t[digits..])),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "size too large".to_string())
}

/// Parses one `--dev` spec into a device. `index` counts devices of the same driver given
/// so far (for default names `Null0`, `Null1`...).
pub fn parse_dev(spec: &str, index: usize) -> Result<Created, SpecError> {
    let (driver, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let entry =
        DRIVERS
            .iter()
            .find(|d| d.name == driver)
            .ok_or_else(|| SpecError::UnknownDriver {
                spec: spec.into(),
                driver: driver.into(),
                known: DRIVERS
                    .iter()
                    .map(|d| d.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
    let bad = |msg: String| SpecError::Bad {
        spec: spec.into(),
        msg: format!("{msg} (usage: {})", entry.help),
    };
    let mut args = SpecArgs::parse(rest).map_err(bad)?;
    let mut cap = entry.name.chars();
    let default_name = match cap.next() {
        Some(c) => format!("{}{}{index}", c.to_ascii_uppercase(), cap.as_str()),
        None => format!("dev{index}"),
    };
    let created = (entry.create)(&mut args, default_name).map_err(bad)?;
    args.finish().map_err(bad)?;
    Ok(created)
}

fn blocks(size: u64, bs: u32) -> Result<u64, String> {
    if bs == 0 || !size.is_multiple_of(u64::from(bs)) || size == 0 {
        return Err(format!(
            "size {size} is not a non-zero multiple of the block size {bs}"
        ));
    }
    Ok(size / u64::from(bs))
}

/// `key` as a size in bytes turned into blocks of `bs` (a non-zero multiple of it), or
/// `default` when absent: a device's transfer limit or boundary (`max_transfer=64k`).
fn blocks_key(a: &mut SpecArgs, key: &str, bs: u32, default: u32) -> Result<u32, String> {
    let Some(v) = a.size(key)? else {
        return Ok(default);
    };
    if v == 0 || !v.is_multiple_of(u64::from(bs)) {
        return Err(format!(
            "{key}={v}: not a non-zero multiple of the block size {bs}"
        ));
    }
    u32::try_from(v / u64::from(bs)).map_err(|_| format!("{key}={v}: too large"))
}

fn u16_key(a: &mut SpecArgs, key: &str) -> Result<u16, String> {
    match a.u64(key)? {
        None => Ok(0),
        Some(v) => u16::try_from(v).map_err(|_| format!("{key}={v}: too large")),
    }
}

fn null_spec(a: &mut SpecArgs, name: String) -> Result<Created, String> {
    let d = NullOptions::default();
    let bs = a.size("bs")?.unwrap_or(u64::from(d.block_size));
    let bs = u32::try_from(bs).map_err(|_| format!("bs={bs}: too large"))?;
    let size = a
        .size("size")?
        .unwrap_or(d.num_blocks * u64::from(d.block_size));
    let latency_us = a.u64("latency_us")?.unwrap_or(0);
    let opts = NullOptions {
        name: a.str("name").unwrap_or(name),
        block_size: bs,
        num_blocks: blocks(size, bs)?,
        latency_ns: latency_us.checked_mul(1000).ok_or("latency_us too large")?,
        queues: HctxQueues {
            default: 1,
            read: u16_key(a, "read_queues")?,
            poll: u16_key(a, "poll_queues")?,
        },
        max_transfer_blocks: blocks_key(a, "max_transfer", bs, d.max_transfer_blocks)?,
        boundary_blocks: blocks_key(a, "boundary", bs, 0)?,
        ..d
    };
    let dev = NullDevice::new(opts).map_err(|e| e.to_string())?;
    Ok(Created {
        dev,
        stores_data: false,
    })
}

fn malloc_spec(a: &mut SpecArgs, name: String) -> Result<Created, String> {
    let d = MallocOptions::default();
    let bs = a.size("bs")?.unwrap_or(u64::from(d.block_size));
    let bs = u32::try_from(bs).map_err(|_| format!("bs={bs}: too large"))?;
    let size = a
        .size("size")?
        .unwrap_or(d.num_blocks * u64::from(d.block_size));
    // TEST ONLY (fault injection, see MallocOptions::corrupt_lba); not in the help text.
    let corrupt_lba = a.u64("corrupt_lba")?;
    let opts = MallocOptions {
        name: a.str("name").unwrap_or(name),
        block_size: bs,
        num_blocks: blocks(size, bs)?,
        max_transfer_blocks: blocks_key(a, "max_transfer", bs, d.max_transfer_blocks)?,
        boundary_blocks: blocks_key(a, "boundary", bs, 0)?,
        corrupt_lba,
        ..d
    };
    let dev = MallocDevice::new(opts).map_err(|e| e.to_string())?;
    Ok(Created {
        dev,
        stores_data: true,
    })
}

fn bool_key(a: &mut SpecArgs, key: &str, default: bool) -> Result<bool, String> {
    match a.str(key).as_deref() {
        None => Ok(default),
        Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(v) => Err(format!("{key}={v}: must be 0 or 1")),
    }
}

fn uring_spec(a: &mut SpecArgs, name: String) -> Result<Created, String> {
    let path = a.str("path").ok_or("path=FILE is required")?;
    let block_size = match a.size("bs")? {
        None => None,
        Some(v) => Some(u32::try_from(v).map_err(|_| format!("bs={v}: too large"))?),
    };
    let opts = pmio_uring::UringOptions {
        path: path.into(),
        name: Some(a.str("name").unwrap_or(name)),
        direct: bool_key(a, "direct", true)?,
        hipri: bool_key(a, "hipri", false)?,
        block_size,
        wait_us: u32::try_from(a.u64("wait_us")?.unwrap_or(0))
            .map_err(|_| "wait_us: too large".to_string())?,
        nop: bool_key(a, "nop", false)?,
    };
    let dev = pmio_uring::UringBdev::create(&opts).map_err(|e| e.to_string())?;
    if dev.reads_use_io_wq() && opts.wait_us == 0 {
        log::warn!(
            "{}: buffered reads of a tmpfs file run on io_uring worker threads that share the \
             reactor's core, and a polling reactor leaves them only part of it; add wait_us=1000 \
             to wait for completions instead (as t/io_uring does)",
            dev.info().name
        );
    }
    Ok(Created {
        stores_data: !dev.is_nop(),
        dev: Arc::new(dev),
    })
}

/// `nvme:traddr=0000:00:04.0[,ns=1][,queues=N][,name=Nvme0]`: attaches the controller through
/// VFIO (`queues` = I/O queue pairs asked of it, at least one per reactor that opens the
/// device; `name` = the controller's name, the bdev is `<name>n<ns>`). The controller shuts
/// down when the last reference to the bdev goes.
fn nvme_spec(a: &mut SpecArgs, name: String) -> Result<Created, String> {
    let traddr = a
        .str("traddr")
        .ok_or("traddr=PCI_ADDRESS is required (e.g. traddr=0000:00:04.0)")?;
    let nsid = a.nsid()?;
    let mut opts = pmio_nvme::NvmeOptions {
        name: a.str("name").unwrap_or(name),
        ..Default::default()
    };
    if let Some(q) = a.u64("queues")? {
        opts.max_io_queues = u16::try_from(q)
            .ok()
            .filter(|&q| (1..u16::MAX).contains(&q))
            .ok_or(format!("queues={q}: not in 1..=65534"))?;
    }
    let ctrlr = pmio_nvme::attach(&traddr, opts).map_err(|e| e.to_string())?;
    Ok(Created {
        dev: namespace_bdev(&ctrlr, nsid, &traddr)?,
        stores_data: true,
    })
}

/// Namespace `nsid` of a controller (`at` names it in the error, with the active ones).
fn namespace_bdev(
    ctrlr: &pmio_nvme::Controller,
    nsid: u32,
    at: &str,
) -> Result<Arc<dyn BlockDevice>, String> {
    match ctrlr.bdev(nsid) {
        Some(b) => Ok(b),
        None => {
            let active: Vec<String> = ctrlr
                .namespaces()
                .iter()
                .map(|n| n.nsid.to_string())
                .collect();
            Err(format!(
                "namespace {nsid} not active on {at} (active: {})",
                active.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_specs_fail_clearly_without_a_device() {
        for (spec, needle) in [
            ("nvme", "traddr=PCI_ADDRESS is required"),
            ("nvme:traddr=00:04", "invalid PCI address"),
            ("nvme:traddr=0000:ff:1f.7", "no such PCI device"),
            ("nvme:traddr=0000:ff:1f.7,ns=0", "ns=0: not a namespace ID"),
            (
                "nvme:traddr=0000:ff:1f.7,queues=0",
                "queues=0: not in 1..=65534",
            ),
        ] {
            let e = parse_dev(spec, 0).err().unwrap().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("17179869184T").is_err());
    }

    #[test]
    fn null_specs() {
        let c = parse_dev("null", 0).unwrap();
        assert_eq!(c.dev.info().name, "Null0");
        assert!(!c.stores_data);
        let c = parse_dev("null:size=1G,bs=4096,name=N", 3).unwrap();
        let i = c.dev.info();
        assert_eq!(
            (i.name.as_str(), i.block_size, i.num_blocks),
            ("N", 4096, 1 << 18)
        );
        let c = parse_dev("null:latency_us=50,read_queues=1", 1).unwrap();
        assert_eq!(c.dev.info().name, "Null1");
        assert_eq!(c.dev.info().queues.read, 1);
    }

    #[test]
    fn malloc_specs() {
        let c = parse_dev("malloc:size=1M", 0).unwrap();
        assert!(c.stores_data);
        assert_eq!(c.dev.info().num_blocks, 2048);
        assert_eq!(c.dev.info().name, "Malloc0");
        assert_eq!(c.dev.info().max_transfer_blocks, u32::MAX);
        let c = parse_dev("malloc:size=1M,bs=4096,max_transfer=64k,boundary=128k", 0).unwrap();
        let i = c.dev.info();
        assert_eq!((i.max_transfer_blocks, i.boundary_blocks), (16, 32));
        let c = parse_dev("null:max_transfer=8k", 0).unwrap();
        assert_eq!(c.dev.info().max_transfer_blocks, 16);
        for (spec, needle) in [
            (
                "malloc:size=1M,max_transfer=0",
                "max_transfer=0: not a non-zero multiple",
            ),
            (
                "malloc:size=1M,boundary=1000",
                "boundary=1000: not a non-zero multiple",
            ),
        ] {
            let e = parse_dev(spec, 0).err().unwrap().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn uring_specs() {
        let f = std::env::temp_dir().join(format!("pmio-perf-uring-spec-{}", std::process::id()));
        std::fs::write(&f, vec![0u8; 1 << 20]).unwrap();
        let c = parse_dev(&format!("uring:path={},direct=0", f.display()), 0).unwrap();
        assert!(c.stores_data);
        assert_eq!(c.dev.info().name, "Uring0");
        assert_eq!(c.dev.info().num_blocks, 2048, "buffered: 512-byte blocks");
        let c = parse_dev(&format!("uring:path={},nop=1", f.display()), 0).unwrap();
        assert!(
            !c.stores_data,
            "nop=1 moves no data: --verify must refuse it"
        );
        for (spec, needle) in [
            ("uring".to_string(), "path=FILE is required"),
            ("uring:path=/nonexistent/x".to_string(), "no such file"),
            ("uring:path=/tmp".to_string(), "is a directory"),
            (
                format!("uring:path={},direct=2", f.display()),
                "direct=2: must be 0 or 1",
            ),
        ] {
            let e = parse_dev(&spec, 0).err().unwrap().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        std::fs::remove_file(&f).unwrap();
    }

    #[test]
    fn bad_specs_name_the_problem() {
        for (spec, needle) in [
            ("nope", "unknown driver"),
            ("null:size", "expected key=value"),
            ("null:size=1Q", "unknown size suffix"),
            ("null:color=red", "unknown key \"color\""),
            ("null:bs=1000", "block size 1000"),
            ("null:size=1000", "multiple of the block size"),
            ("null:bs=512,bs=512", "given twice"),
            ("malloc:size=0", "multiple of the block size"),
            ("null:latency_us=-1", "not an unsigned integer"),
            ("malloc:size=1M,corrupt_lba=99999", "beyond the device"),
        ] {
            let e = parse_dev(spec, 0).err().unwrap().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
