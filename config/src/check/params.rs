//! The checks of object-creating calls, one per method, mirroring the parameter decoding of
//! the pmio method that runs it (`bdev_null_create` in `methods.rs`, the `nvmf_*` methods in
//! `nvmf.rs`, ...): the same required and optional keys, the same values pmio accepts only at
//! SPDK's default, the same validation (the drivers' own where it is pure). Each returns what
//! the call would create, or what is wrong with it.

use std::path::Path;

use pmio::Uuid;
use pmio_null::{NullDevice, NullOptions};
use pmio_nvmf::subsystem::{DISCOVERY_NQN, Subsystem, SubsystemParams, TransportOpts};
use serde_json::{Map, Value, json};

use super::world::{SubSeen, World};
use pmio_nvme::rpc::Trid;

/// A call's parameters, taken key by key as the method takes them.
struct P<'a> {
    map: Map<String, Value>,
    what: &'a str,
}

impl<'a> P<'a> {
    fn new(v: &Value, what: &'a str) -> Result<P<'a>, String> {
        match v {
            Value::Object(m) => Ok(P {
                map: m.clone(),
                what,
            }),
            _ => Err(format!("{what}: params must be an object")),
        }
    }

    fn opt<T: serde::de::DeserializeOwned>(&mut self, k: &str) -> Result<Option<T>, String> {
        match self.map.remove(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| format!("parameter \"{k}\": {e}")),
        }
    }

    fn req<T: serde::de::DeserializeOwned>(&mut self, k: &str) -> Result<T, String> {
        self.opt(k)?
            .ok_or_else(|| format!("missing required parameter \"{k}\""))
    }

    /// A key pmio takes only at SPDK's default.
    fn default_only(&mut self, k: &str, default: Value) -> Result<(), String> {
        match self.map.remove(k) {
            None | Some(Value::Null) => Ok(()),
            Some(v) if v == default => Ok(()),
            Some(v) => Err(format!(
                "parameter \"{k}\" is {v}; pmio supports only {default}"
            )),
        }
    }

    fn finish(self) -> Result<(), String> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(format!("unknown parameter \"{k}\" for {}", self.what)),
        }
    }
}

fn uuid(s: Option<String>) -> Result<Option<Uuid>, String> {
    s.map(|s| Uuid::parse(&s).ok_or_else(|| format!("\"{s}\" is not a UUID")))
        .transpose()
}

/// Size and block validation of a RAM bdev, as the null and malloc drivers do it.
fn ram_bdev(
    name: &str,
    num_blocks: u64,
    block_size: u32,
    uuid: Option<Uuid>,
    pbs: Option<u32>,
) -> Result<(), String> {
    match pbs {
        None | Some(0) => {}
        Some(p) if p == block_size => {}
        Some(p) => {
            return Err(format!(
                "physical_block_size {p} must equal block_size {block_size}"
            ));
        }
    }
    NullDevice::new(NullOptions {
        name: name.to_string(),
        uuid,
        block_size,
        num_blocks,
        ..NullOptions::default()
    })
    .map(drop)
    .map_err(|e| e.to_string())
}

/// A call's parameters decoded with the method's own declaration: the same keys, defaults and
/// refusals as the method, in the check's words.
/// `bdev_rbd_register_cluster`: the declaration decodes (connecting is the daemon's part).
pub fn bdev_rbd_register_cluster(v: &Value, _: &mut World) -> Result<String, String> {
    let p: pmio_rbd::rpc::RegisterCluster = declared(v, "bdev_rbd_register_cluster")?;
    Ok(format!(
        "Ceph cluster connection {} ({})",
        p.name,
        p.config_file
            .as_deref()
            .unwrap_or("Ceph's default ceph.conf")
    ))
}

/// `bdev_rbd_create`: the declaration decodes, the name is free.
pub fn bdev_rbd(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_rbd::rpc::RbdCreate = declared(v, "bdev_rbd_create")?;
    let id = uuid(p.uuid)?;
    let name = p.name.unwrap_or_else(|| "Ceph0".into());
    w.add_bdev(&name, id)?;
    Ok(format!(
        "rbd bdev {name} on image {}/{} ({}-byte blocks)",
        p.pool_name, p.rbd_name, p.block_size
    ))
}

fn declared<T: serde::de::DeserializeOwned>(v: &Value, method: &str) -> Result<T, String> {
    pmio_jsonrpc::decl::decode(Some(v)).map_err(|e| format!("{method}: {e}"))
}

/// An nvmf call's parameters decoded with the NVMe-oF target's own declaration and its
/// target-name rule.
fn nvmf_declared<T>(v: &Value, method: &str) -> Result<T, String>
where
    T: serde::de::DeserializeOwned + pmio_nvmf::rpc::rules::Targeted,
{
    pmio_nvmf::rpc::rules::decode(Some(v)).map_err(|e| format!("{method}: {}", e.message))
}

/// `bdev_enable_histogram`: the method's declaration and its checks of `opc` and the shape.
pub fn bdev_enable_histogram(v: &Value, w: &mut World) -> Result<String, String> {
    use pmio_runtime::rpc::histogram::{EnableHistogram, config_of};
    let p: EnableHistogram = declared(v, "bdev_enable_histogram")?;
    config_of(&p).map_err(|e| format!("bdev_enable_histogram: {}", e.message))?;
    if !w.has_bdev(&p.name) {
        return Err(format!("bdev {} is not created before this call", p.name));
    }
    let state = if p.enable { "on" } else { "off" };
    Ok(format!("latency histogram of bdev {}: {state}", p.name))
}

/// `bdev_null_create`.
pub fn bdev_null(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_null::rpc::NullCreate = declared(v, "bdev_null_create")?;
    let id = uuid(p.uuid)?;
    let (name, num_blocks, block_size) = (p.name, p.num_blocks, p.block_size);
    ram_bdev(&name, num_blocks, block_size, id, p.physical_block_size)?;
    w.add_bdev(&name, id)?;
    Ok(format!(
        "bdev {name}: null, {num_blocks} blocks of {block_size} bytes"
    ))
}

/// `bdev_malloc_create`.
pub fn bdev_malloc(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_malloc::rpc::MallocCreate = declared(v, "bdev_malloc_create")?;
    let id = uuid(p.uuid)?;
    let (num_blocks, block_size) = (p.num_blocks, p.block_size);
    let name = p.name.unwrap_or_else(|| {
        (0..)
            .map(|i| format!("Malloc{i}"))
            .find(|n| !w.has_bdev(n))
            .unwrap_or_default()
    });
    ram_bdev(&name, num_blocks, block_size, id, p.physical_block_size)?;
    w.add_bdev(&name, id)?;
    let mib = num_blocks.saturating_mul(u64::from(block_size)) >> 20;
    Ok(format!(
        "bdev {name}: malloc, {num_blocks} blocks of {block_size} bytes ({mib} MiB of RAM)"
    ))
}

/// `bdev_raid_create`: the level and strip as the module takes them, every base bdev made
/// earlier in the file, each in one array only.
/// `bdev_raid_set_options`: the window must hold a block.
pub fn bdev_raid_set_options(v: &Value, _: &mut World) -> Result<String, String> {
    let p: pmio_raid::rpc::RaidSetOptions = declared(v, "bdev_raid_set_options")?;
    if p.process_window_size_kb == Some(0) {
        return Err("process_window_size_kb 0: a window holds at least one block".into());
    }
    Ok(format!(
        "RAID process options: window {} KiB, bandwidth {} MiB/s",
        p.process_window_size_kb
            .map_or("as it is".into(), |k| k.to_string()),
        p.process_max_bandwidth_mb_sec
            .map_or("as it is".into(), |b| b.to_string())
    ))
}

pub fn bdev_raid(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_raid::rpc::RaidCreate = declared(v, "bdev_raid_create")?;
    let id = uuid(p.uuid.clone())?;
    let Some(level) = pmio_raid::RaidLevel::parse(&p.raid_level) else {
        return Err(format!(
            "raid_level {:?}: pmio has raid0, raid1 and concat",
            p.raid_level
        ));
    };
    let names = match &p.base_bdevs {
        pmio_raid::rpc::BaseBdevs::List(v) => v.clone(),
        pmio_raid::rpc::BaseBdevs::Spaced(s) => s.split_whitespace().map(str::to_string).collect(),
    };
    if names.len() < level.min_members() {
        return Err(format!(
            "{level} needs at least {} base bdevs",
            level.min_members()
        ));
    }
    match (level.has_strips(), p.strip_size_kb.unwrap_or(0)) {
        (true, kb) if kb == 0 || !kb.is_power_of_two() => {
            return Err(format!("strip_size_kb {kb} is not a power of two above 0"));
        }
        (false, kb) if kb != 0 => return Err(format!("{level} takes no strip size")),
        _ => {}
    }
    if let Some(missing) = names.iter().find(|n| !w.has_bdev(n)) {
        return Err(format!("base bdev {missing} is not made before it"));
    }
    w.add_bdev(&p.name, id)?;
    Ok(format!(
        "bdev {}: {level} over {}",
        p.name,
        names.join(", ")
    ))
}

/// `bdev_uring_create`.
pub fn bdev_uring(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_uring::rpc::UringCreate = declared(v, "bdev_uring_create")?;
    let id = uuid(p.uuid)?;
    let (filename, name) = (p.filename, p.name);
    if let Some(b) = p.block_size.filter(|&b| b != 0)
        && (b < 512 || !b.is_power_of_two())
    {
        return Err(format!(
            "block_size {b} is not a power of two of at least 512"
        ));
    }
    let md = std::fs::metadata(&filename).map_err(|e| format!("filename {filename}: {e}"))?;
    w.add_bdev(&name, id)?;
    let kind = if md.file_type().is_file() {
        "file"
    } else {
        "device"
    };
    let io = if p.direct == Some(false) {
        "buffered"
    } else {
        "O_DIRECT"
    };
    Ok(format!("bdev {name}: uring on {kind} {filename} ({io})"))
}

/// `bdev_aio_create`: created as a uring bdev on the same file.
pub fn bdev_aio(v: &Value, w: &mut World) -> Result<String, String> {
    let u = aio_as_uring(v)?;
    bdev_uring(&u, w).map(|s| format!("{s}; SPDK's aio bdev becomes pmio's uring bdev"))
}

/// `bdev_aio_create {name, filename, block_size, readonly, fallocate, uuid}` as
/// `bdev_uring_create`: the same file, O_DIRECT as SPDK's aio; a read-only bdev is refused
/// (pmio's uring bdev would let hosts write).
pub fn aio_as_uring(v: &Value) -> Result<Value, String> {
    let mut p = P::new(v, "bdev_aio_create")?;
    let name: String = p.req("name")?;
    let filename: String = p.req("filename")?;
    let bs: Option<u32> = p.opt("block_size")?;
    let id: Option<String> = p.opt("uuid")?;
    if p.opt::<bool>("readonly")? == Some(true) {
        return Err(
            "readonly: pmio's uring bdev has no read-only mode; hosts could write to it".into(),
        );
    }
    // Whether SPDK preallocated the file's blocks: the file is there either way.
    p.opt::<bool>("fallocate")?;
    p.finish()?;
    let mut u = json!({"name": name, "filename": filename});
    if let Some(b) = bs.filter(|&b| b != 0) {
        u["block_size"] = json!(b);
    }
    if let Some(i) = id {
        u["uuid"] = json!(i);
    }
    Ok(u)
}

/// `bdev_nvme_attach_controller`: the method's own decoding; a PCIe device must be there, an
/// NVMe/TCP target is only reached at load.
pub fn nvme_attach(v: &Value, w: &mut World) -> Result<String, String> {
    let a = pmio_nvme::rpc::args::parse(Some(v)).map_err(|e| {
        if e.code != -libc::EOPNOTSUPP {
            return e.message;
        }
        let nqn = v.get("subnqn").and_then(Value::as_str);
        format!(
            "{}; the namespaces of {} would be missing",
            e.message,
            nqn.unwrap_or("this controller")
        )
    })?;
    let (name, at) = (&a.name, a.trid.describe());
    if let Some((_, t)) = w.ctrlrs.iter().find(|(n, _)| n == name) {
        if t.same_path(&a.trid) {
            return Ok(format!("NVMe controller {name} at {at}: already attached"));
        }
        return Err(format!(
            "controller {name} is already attached at {}",
            t.describe()
        ));
    }
    if let Some((n, _)) = w.ctrlrs.iter().find(|(_, t)| t.same_path(&a.trid)) {
        return Err(format!("{at} is already attached as controller {n}"));
    }
    let note = match &a.trid {
        Trid::Pcie { traddr } => pcie_note(traddr)?,
        Trid::Tcp { .. } => "NVMe/TCP: connected at load, the target must answer then".into(),
    };
    w.ctrlrs.push((name.clone(), a.trid.clone()));
    Ok(format!(
        "NVMe controller {name} at {at} ({note}); one bdev {name}n<NSID> per namespace"
    ))
}

/// Whether the PCI function at `traddr` exists and is bound to vfio-pci.
fn pcie_note(traddr: &str) -> Result<String, String> {
    let bdf = pmio_nvme::vfio::parse_bdf(traddr).map_err(|e| e.to_string())?;
    let dev = Path::new("/sys/bus/pci/devices").join(&bdf);
    if !dev.exists() {
        return Err(format!("no PCI device at {traddr}"));
    }
    let driver = std::fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
    Ok(match driver.as_deref() {
        Some("vfio-pci") => "bound to vfio-pci".to_string(),
        Some(d) => format!("bound to {d}: bind it to vfio-pci (pmio-setup) before starting"),
        None => "bound to no driver: bind it to vfio-pci (pmio-setup) before starting".into(),
    })
}

/// `bdev_set_scheduler` (pmio's own).
pub fn bdev_set_scheduler(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "bdev_set_scheduler")?;
    let name: String = p.req("name")?;
    let sched: String = p.req("scheduler")?;
    for k in pmio::sched::TUNABLES.iter().chain(&["nr_requests"]) {
        p.opt::<u64>(k)?;
    }
    p.finish()?;
    if !matches!(sched.as_str(), "none" | "mq-deadline") {
        return Err(format!("unknown I/O scheduler {sched}"));
    }
    if !w.has_bdev(&name) {
        return Err(format!("bdev {name} is not created before this call"));
    }
    Ok(format!("bdev {name}: I/O scheduler {sched}"))
}

/// `tgt_name`: pmio has one target.
fn tgt_name(p: &mut P) -> Result<(), String> {
    match p.opt::<String>("tgt_name")? {
        None => Ok(()),
        Some(n) if n == "nvmf_tgt" => Ok(()),
        Some(n) => Err(format!("no target {n:?} (pmio has one, nvmf_tgt)")),
    }
}

/// `nvmf_create_transport`.
pub fn nvmf_transport(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "nvmf_create_transport")?;
    let trtype: String = p.req("trtype")?;
    tgt_name(&mut p)?;
    let d = TransportOpts::default();
    let o = TransportOpts {
        max_queue_depth: p.opt("max_queue_depth")?.unwrap_or(d.max_queue_depth),
        max_io_qpairs_per_ctrlr: p
            .opt("max_io_qpairs_per_ctrlr")?
            .unwrap_or(d.max_io_qpairs_per_ctrlr),
        in_capsule_data_size: p
            .opt("in_capsule_data_size")?
            .unwrap_or(d.in_capsule_data_size),
        max_io_size: p.opt("max_io_size")?.unwrap_or(d.max_io_size),
        io_unit_size: p.opt("io_unit_size")?.unwrap_or(d.io_unit_size),
        max_aq_depth: p.opt("max_aq_depth")?.unwrap_or(d.max_aq_depth),
        c2h_success: p.opt("c2h_success")?.unwrap_or(d.c2h_success),
        abort_timeout_sec: p.opt("abort_timeout_sec")?.unwrap_or(d.abort_timeout_sec),
    };
    p.default_only("dif_insert_or_strip", json!(false))?;
    p.default_only("zcopy", json!(false))?;
    p.default_only("sock_priority", json!(0))?;
    for k in [
        "disable_command_passthru",
        "no_srq",
        "no_wr_batching",
        "disable_mappable_bar0",
        "disable_adaptive_irq",
        "disable_shadow_doorbells",
    ] {
        p.opt::<bool>(k)?;
    }
    for k in [
        "num_cqe",
        "max_srq_depth",
        "acceptor_backlog",
        "ack_timeout",
        "data_wr_pool_size",
        "num_shared_buffers",
        "buf_cache_size",
        "acceptor_poll_rate",
        "control_msg_num",
        "kas",
        "min_kato",
    ] {
        p.opt::<u64>(k)?;
    }
    p.finish()?;
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(format!("trtype {trtype}: pmio serves NVMe/TCP only"));
    }
    o.validate().map_err(|e| e.to_string())?;
    match &w.transport {
        Some(t) if *t == o => Ok("the TCP transport: already there with these options".into()),
        Some(_) => Err("a TCP transport with other options already exists".into()),
        None => {
            w.transport = Some(o.clone());
            Ok(format!(
                "the TCP transport: queue depth {}, {} I/O queues per controller, in-capsule \
                 data {} bytes, largest I/O {} bytes",
                o.max_queue_depth, o.max_io_qpairs_per_ctrlr, o.in_capsule_data_size, o.max_io_size
            ))
        }
    }
}

/// `nvmf_create_subsystem`.
pub fn nvmf_subsystem(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_nvmf::rpc::subsystem::CreateSubsystem = nvmf_declared(v, "nvmf_create_subsystem")?;
    let sp = SubsystemParams {
        nqn: p.nqn,
        serial_number: p.serial_number,
        model_number: p.model_number,
        allow_any_host: p.allow_any_host,
        max_namespaces: p.max_namespaces.unwrap_or(0),
        min_cntlid: p.min_cntlid,
        max_cntlid: p.max_cntlid,
        ana_reporting: p.ana_reporting.unwrap_or(false),
    };
    let s = Subsystem::new(&sp).map_err(|e| e.to_string())?;
    if w.subsystems.iter().any(|x| x.nqn == s.nqn) {
        return Err(format!("subsystem {} already exists", s.nqn));
    }
    w.subsystems.push(SubSeen {
        nqn: s.nqn.clone(),
        max_ns: s.max_namespaces,
        nsids: Vec::new(),
        hosts: Vec::new(),
        listeners: Vec::new(),
        ana_reporting: s.ana_reporting,
    });
    let who = if s.allow_any_host {
        "any host"
    } else {
        "listed hosts"
    };
    Ok(format!(
        "subsystem {} (serial {}, {who}, up to {} namespaces)",
        s.nqn, s.serial_number, s.max_namespaces
    ))
}

/// Hexadecimal identity of `2n` digits.
fn hex_id(key: &str, s: &str, n: usize) -> Result<(), String> {
    if s.len() == 2 * n && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(format!("{key} {s:?} is not {} hexadecimal digits", 2 * n))
    }
}

/// `nvmf_subsystem_add_ns`.
pub fn nvmf_ns(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "nvmf_subsystem_add_ns")?;
    let nqn: String = p.req("nqn")?;
    let ns: Value = p.req("namespace")?;
    tgt_name(&mut p)?;
    p.finish()?;
    let mut n = P::new(&ns, "namespace")?;
    let bdev: String = n.req("bdev_name")?;
    let nsid: u32 = n.opt("nsid")?.unwrap_or(0);
    if let Some(g) = n.opt::<String>("nguid")? {
        hex_id("nguid", &g, 16)?;
    }
    if let Some(e) = n.opt::<String>("eui64")? {
        hex_id("eui64", &e, 8)?;
    }
    uuid(n.opt("uuid")?)?;
    let anagrpid: u32 = n.opt("anagrpid")?.unwrap_or(0);
    if n.opt::<bool>("no_auto_visible")? == Some(true) {
        return Err(
            "no_auto_visible: pmio has no per-namespace host visibility; the namespace would be \
             visible to every host of the subsystem"
                .into(),
        );
    }
    n.default_only("hide_metadata", json!(false))?;
    if let Some(f) = n.opt::<String>("ptpl_file")? {
        return Err(format!(
            "ptpl_file {f}: pmio has no persistent reservations; the reservations kept there \
             would be lost"
        ));
    }
    n.finish()?;
    if !w.has_bdev(&bdev) {
        return Err(missing_bdev(&bdev));
    }
    let s = w.subsystem(&nqn)?;
    if s.nqn == DISCOVERY_NQN {
        return Err("the discovery subsystem has no namespaces".into());
    }
    let nsid = if nsid == 0 {
        (1..=s.max_ns.max(1))
            .find(|i| !s.nsids.contains(i))
            .ok_or_else(|| format!("{nqn} has no free NSID (max_namespaces {})", s.max_ns))?
    } else {
        if s.nsids.contains(&nsid) {
            return Err(format!("NSID {nsid} of {nqn} is taken"));
        }
        if nsid > s.max_ns {
            return Err(format!(
                "NSID {nsid} is above {nqn}'s max_namespaces {}",
                s.max_ns
            ));
        }
        nsid
    };
    if anagrpid > s.max_ns {
        return Err(format!(
            "anagrpid {anagrpid} is above {nqn}'s max_namespaces {}",
            s.max_ns
        ));
    }
    s.nsids.push(nsid);
    Ok(format!("namespace {nsid} of {nqn} on bdev {bdev}"))
}

/// Why a bdev a namespace names is not there: SPDK names hint at what made it.
pub fn missing_bdev(name: &str) -> String {
    let hint = if name.contains('/') {
        " (a name with '/' is a logical volume, found by examine on its lvstore's base bdev: \
         create that bdev first)"
    } else if name.contains('p')
        && name
            .rsplit('p')
            .next()
            .is_some_and(|t| t.parse::<u32>().is_ok())
    {
        " (a name ending in p<N> may be an SPDK GPT partition or split bdev: pmio has neither)"
    } else {
        ""
    };
    format!("bdev {name} is not created before this call{hint}")
}

/// `nvmf_subsystem_add_listener`.
pub fn nvmf_listener(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_nvmf::rpc::listener::AddListener = nvmf_declared(v, "nvmf_subsystem_add_listener")?;
    ana_state(p.ana_state.as_deref())?;
    let addr = p.listen_address.listen_addr().map_err(|e| e.message)?;
    let nqn = p.nqn;
    if w.transport.is_none() {
        return Err("no TCP transport is created before this listener".into());
    }
    let s = w.subsystem(&nqn)?;
    if s.listeners.contains(&addr) {
        return Err(format!(
            "{nqn} already listens on {}:{}",
            addr.traddr, addr.trsvcid
        ));
    }
    s.listeners.push(addr.clone());
    Ok(format!(
        "listener on {}:{} ({}) for {nqn}",
        addr.traddr,
        addr.trsvcid,
        addr.adrfam.name()
    ))
}

/// An ANA state by SPDK's name.
fn ana_state(s: Option<&str>) -> Result<(), String> {
    match s {
        Some(s) if pmio_nvmf::AnaState::parse(s).is_none() => Err(format!(
            "ana_state {s:?}: optimized, non_optimized or inaccessible"
        )),
        _ => Ok(()),
    }
}

/// `nvmf_subsystem_listener_set_ana_state`.
pub fn nvmf_ana_state(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_nvmf::rpc::listener::SetAnaState =
        nvmf_declared(v, "nvmf_subsystem_listener_set_ana_state")?;
    ana_state(Some(&p.ana_state))?;
    let addr = p.listen_address.listen_addr().map_err(|e| e.message)?;
    let nqn = p.nqn;
    let s = w.subsystem(&nqn)?;
    if !s.ana_reporting {
        return Err(format!(
            "{nqn} has no ANA reporting (nvmf_create_subsystem -r)"
        ));
    }
    if !s.listeners.contains(&addr) {
        return Err(format!(
            "{nqn} does not listen on {}:{}",
            addr.traddr, addr.trsvcid
        ));
    }
    let g = p.anagrpid.unwrap_or(0);
    if g > s.max_ns {
        return Err(format!(
            "ANA group {g} is above {nqn}'s max_namespaces {}",
            s.max_ns
        ));
    }
    Ok(format!(
        "{nqn} listener {}:{}: ANA group {} {}",
        addr.traddr,
        addr.trsvcid,
        pmio_nvmf::ana::group_name(g),
        p.ana_state
    ))
}

/// `keyring_file_add_key`: the declaration, and the file as SPDK checks it (absolute path,
/// owner-only); the key's text is not read.
pub fn keyring_file_key(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_keyring::rpc::FileAddKey = declared(v, "keyring_file_add_key")?;
    if w.keys.contains(&p.name) {
        return Err(format!("key {} already exists", p.name));
    }
    pmio_keyring::keyring::check_key_file(std::path::Path::new(&p.path))
        .map_err(|e| format!("{}: {e}", p.name))?;
    w.keys.push(p.name.clone());
    Ok(format!("key {} from {}", p.name, p.path))
}

/// `nvmf_subsystem_add_host`.
pub fn nvmf_host(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_nvmf::rpc::host::AddHost = nvmf_declared(v, "nvmf_subsystem_add_host")?;
    for (k, given) in [
        ("dhchap_key", &p.dhchap_key),
        ("dhchap_ctrlr_key", &p.dhchap_ctrlr_key),
        ("psk", &p.psk),
    ] {
        if let Some(name) = given
            && !w.keys.contains(name)
        {
            return Err(format!(
                "parameter \"{k}\": no key {name} in the keyring (keyring_file_add_key first)"
            ));
        }
    }
    if p.dhchap_ctrlr_key.is_some() && p.dhchap_key.is_none() {
        return Err("a dhchap_ctrlr_key needs a dhchap_key".into());
    }
    let (nqn, host) = (p.nqn, p.host);
    let s = w.subsystem(&nqn)?;
    if s.hosts.contains(&host) {
        return Err(format!("host {host} is already admitted to {nqn}"));
    }
    s.hosts.push(host.clone());
    Ok(format!("host {host} admitted to {nqn}"))
}

/// `nvmf_subsystem_allow_any_host`.
pub fn nvmf_allow_any_host(v: &Value, w: &mut World) -> Result<String, String> {
    let p: pmio_nvmf::rpc::host::AllowAnyHost = nvmf_declared(v, "nvmf_subsystem_allow_any_host")?;
    let (nqn, allow) = (p.nqn, p.allow_any_host);
    w.subsystem(&nqn)?;
    Ok(format!("{nqn}: allow_any_host {allow}"))
}

/// `ublk_create_target`.
pub fn ublk_target(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "ublk_create_target")?;
    let mask = p.opt::<String>("cpumask")?;
    p.opt::<bool>("disable_user_copy")?;
    p.finish()?;
    if w.ublk_target {
        return Err("the ublk target already exists".into());
    }
    w.ublk_target = true;
    Ok(match mask {
        Some(m) => format!("ublk target on cores {m} (needs the kernel's ublk_drv)"),
        None => "ublk target on every reactor (needs the kernel's ublk_drv)".into(),
    })
}

/// `ublk_start_disk`.
pub fn ublk_disk(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "ublk_start_disk")?;
    let bdev: String = p.req("bdev_name")?;
    let id: u32 = p.req("ublk_id")?;
    let queues = p.opt::<u32>("num_queues")?.unwrap_or(1);
    let depth = p.opt::<u32>("queue_depth")?.unwrap_or(128);
    // pmio's own (UBLK_F_USER_COPY); absent: the kernel copies the data.
    let user_copy = p.opt::<bool>("user_copy")?.unwrap_or(false);
    p.finish()?;
    if !w.has_bdev(&bdev) {
        return Err(missing_bdev(&bdev));
    }
    if w.ublk.contains(&id) {
        return Err(format!("ublk disk {id} already exists"));
    }
    w.ublk.push(id);
    let copy = if user_copy { ", user copy" } else { "" };
    Ok(format!(
        "/dev/ublkb{id} on bdev {bdev} ({queues} queues of depth {depth}{copy})"
    ))
}

/// `vhost_create_blk_controller`, once pmio-tgt has it.
pub fn vhost_blk(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "vhost_create_blk_controller")?;
    let ctrlr: String = p.req("ctrlr")?;
    let dev: String = p.req("dev_name")?;
    p.opt::<String>("cpumask")?;
    let ro = p.opt::<bool>("readonly")?.unwrap_or(false);
    p.opt::<bool>("packed_ring")?;
    if let Some(t) = p.opt::<String>("transport")?
        && t != "vhost_user_blk"
    {
        return Err(format!("transport {t}: pmio serves vhost_user_blk only"));
    }
    p.finish()?;
    if !w.has_bdev(&dev) {
        return Err(missing_bdev(&dev));
    }
    if w.vhost.contains(&ctrlr) {
        return Err(format!("vhost controller {ctrlr} already exists"));
    }
    w.vhost.push(ctrlr.clone());
    let ro = if ro { ", read-only" } else { "" };
    Ok(format!(
        "vhost-user-blk controller {ctrlr} on bdev {dev}{ro}"
    ))
}
