//! Checking a configuration without applying it: `pmio-tgt --check-config FILE`, and the first
//! pass of every load.
//!
//! Each call is classified by the [table](super::table); settings are planned; object-creating
//! calls are checked against a [`World`]: the names the file (and, for a load at run time, the
//! running daemon) creates, so a namespace on a bdev nobody creates, a listener before any
//! transport or a duplicate name is found before anything exists. Nothing here touches a
//! device, a port or a reactor: the operator runs it on the machine where SPDK still serves.
//! The checks mirror the parameter decoding of the pmio methods; a test pins the two together
//! (the SPDK files that check clean also load).

use std::path::Path;

use pmio::Uuid;
use pmio_null::{NullDevice, NullOptions};
use pmio_nvmf::subsystem::{DISCOVERY_NQN, ListenAddr, Subsystem, SubsystemParams, TransportOpts};
use serde_json::{Map, Value, json};

use super::document::{ConfigCall, Document};
use super::report::{Report, Verdict};
use super::settings::NoteKind;
use super::table::{self, Handling, SECTIONS};
use crate::methods::Rpc;

/// A check of one object-creating call: what it would create, or what is wrong.
pub type CheckFn = fn(&Value, &mut World) -> Result<String, String>;

/// A subsystem as the checks see it.
#[derive(Clone, Debug)]
struct SubSeen {
    nqn: String,
    max_ns: u32,
    nsids: Vec<u32>,
    hosts: Vec<String>,
    listeners: Vec<ListenAddr>,
}

/// The objects that exist at a point of the check: those of the running daemon (for a load at
/// run time) and those the calls so far create.
#[derive(Clone, Debug)]
pub struct World {
    /// The methods of this pmio-tgt (a vhost entry is a create when its method is one).
    methods: Vec<&'static str>,
    bdevs: Vec<(String, Option<Uuid>)>,
    ctrlrs: Vec<(String, String)>,
    transport: Option<TransportOpts>,
    subsystems: Vec<SubSeen>,
    vhost: Vec<String>,
}

impl Default for World {
    fn default() -> World {
        World {
            methods: crate::methods::all_methods()
                .iter()
                .map(|m| m.name)
                .collect(),
            bdevs: Vec::new(),
            ctrlrs: Vec::new(),
            transport: None,
            subsystems: vec![SubSeen {
                nqn: DISCOVERY_NQN.into(),
                max_ns: 0,
                nsids: Vec::new(),
                hosts: Vec::new(),
                listeners: Vec::new(),
            }],
            vhost: Vec::new(),
        }
    }
}

impl World {
    /// What a running daemon has.
    pub fn of(rpc: &Rpc) -> World {
        let t = &rpc.target;
        let c = t.nvmf.config();
        World {
            methods: rpc.method_names(false),
            bdevs: t
                .registry
                .list()
                .iter()
                .map(|d| (d.info().name.clone(), Some(d.info().uuid)))
                .collect(),
            ctrlrs: t.ctrlrs().into_iter().map(|c| (c.name, c.traddr)).collect(),
            transport: c.transport.clone(),
            subsystems: c
                .subsystems
                .iter()
                .map(|s| SubSeen {
                    nqn: s.nqn.clone(),
                    max_ns: s.max_namespaces,
                    nsids: s.namespaces.iter().map(|n| n.nsid).collect(),
                    hosts: s.hosts.clone(),
                    listeners: s.listeners.clone(),
                })
                .collect(),
            vhost: if rpc.states_of("vhost_get_controllers").is_some() {
                rpc.invoke("vhost_get_controllers", None)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| c["ctrlr"].as_str().map(str::to_string))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether bdev `name` (a name, a UUID alias, or `<ctrlr>n<nsid>` of a controller
    /// attached in this file) would exist.
    fn has_bdev(&self, name: &str) -> bool {
        if self.bdevs.iter().any(|(n, _)| n == name) {
            return true;
        }
        if let Some(u) = Uuid::parse(name)
            && self.bdevs.iter().any(|(_, id)| *id == Some(u))
        {
            return true;
        }
        self.ctrlrs.iter().any(|(c, _)| {
            name.strip_prefix(c.as_str())
                .and_then(|r| r.strip_prefix('n'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }

    fn add_bdev(&mut self, name: &str, uuid: Option<Uuid>) -> Result<(), String> {
        if self.bdevs.iter().any(|(n, _)| n == name) {
            return Err(format!("bdev {name} already exists"));
        }
        self.bdevs.push((name.to_string(), uuid));
        Ok(())
    }

    fn subsystem(&mut self, nqn: &str) -> Result<&mut SubSeen, String> {
        self.subsystems
            .iter_mut()
            .find(|s| s.nqn == nqn)
            .ok_or_else(|| format!("subsystem {nqn} is not created before this call"))
    }
}

/// Checks a document against `world`: one line per call (and per empty section, per ignored
/// key of a setting). Refusals are [`Verdict::Refuse`] lines; the load may go on only if
/// there are none.
pub fn check(doc: &Document, mut world: World) -> Report {
    let mut r = Report::default();
    let mut calls = doc.calls.iter();
    for s in &doc.sections {
        let origin = format!("subsystems[{}] ({})", s.index, s.name);
        let known = SECTIONS.contains(&s.name.as_str());
        match (known, s.calls) {
            (true, 0) => r.push(Verdict::Ignore, &origin, "-", "empty section"),
            (false, 0) => r.push(
                Verdict::Ignore,
                &origin,
                "-",
                format!(
                    "section {} is unknown to SPDK v25.09 and pmio; empty",
                    s.name
                ),
            ),
            (false, n) => r.push(
                Verdict::Refuse,
                &origin,
                "-",
                format!(
                    "unknown section {} with {n} calls: neither SPDK v25.09 nor pmio has this \
                     subsystem, and what it configures is not skipped silently",
                    s.name
                ),
            ),
            (true, _) => {}
        }
        for c in calls.by_ref().take(s.calls) {
            if known {
                check_call(&mut r, c, &mut world);
            }
        }
    }
    r
}

/// One call: its report lines, `world` updated with what it creates.
fn check_call(r: &mut Report, c: &ConfigCall, world: &mut World) {
    let params = c.params.clone().unwrap_or_else(|| json!({}));
    let Some(entry) = table::lookup(&c.method) else {
        r.push(
            Verdict::Refuse,
            &c.origin,
            &c.method,
            format!(
                "Unknown method {}: neither SPDK v25.09's save_config nor pmio writes it",
                c.method
            ),
        );
        return;
    };
    let registered = world.methods.contains(&entry.method);
    let handling = entry.handling(registered);
    match handling {
        Handling::Refuse(path, why) | Handling::Vhost(path, why, _) => {
            let obj = table::param(&params, path).unwrap_or_else(|| "?".into());
            r.push(
                Verdict::Refuse,
                &c.origin,
                &c.method,
                format!("{obj}: {why}"),
            );
        }
        Handling::Ignore(why) => r.push(Verdict::Ignore, &c.origin, &c.method, why),
        Handling::Setting(plan) => match plan(c.params.as_ref()) {
            Err(e) => r.push(Verdict::Refuse, &c.origin, &c.method, e.message),
            Ok(p) => {
                if p.maps() {
                    let mut text = p.summary(NoteKind::Mapped);
                    let same = p.summary(NoteKind::Same);
                    if !same.is_empty() {
                        if !text.is_empty() {
                            text.push_str("; ");
                        }
                        text.push_str(&same);
                    }
                    r.push(Verdict::Map, &c.origin, &c.method, text);
                }
                for n in p.notes.iter().filter(|n| n.kind == NoteKind::Ignored) {
                    r.push(Verdict::Ignore, &c.origin, &c.method, n.to_string());
                }
            }
        },
        Handling::Create(cr) | Handling::Set(cr) => {
            let verdict = match handling {
                Handling::Set(_) => Verdict::Set,
                _ => Verdict::Create,
            };
            match (cr.check)(&params, world) {
                Ok(text) => r.push(verdict, &c.origin, &c.method, text),
                Err(e) => r.push(
                    Verdict::Refuse,
                    &c.origin,
                    &c.method,
                    format!("{}: {e}", (cr.what)(&params)),
                ),
            }
        }
    }
}

/// `pmio-tgt --check-config FILE`: prints the report; true when the file would load.
pub fn run(path: &Path) -> anyhow::Result<bool> {
    let doc = super::load(path)?;
    let r = check(&doc, World::default());
    print!("{}", r.render());
    let ok = r.count(Verdict::Refuse) == 0;
    println!(
        "{}: {}",
        path.display(),
        if ok {
            "pmio-tgt -c would load this configuration"
        } else {
            "pmio-tgt -c would refuse this configuration (nothing would start)"
        }
    );
    Ok(ok)
}

// --- parameter checks, mirroring the methods' decoding ---

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

    /// Keys accepted whatever their value.
    fn accept(&mut self, keys: &[&str]) {
        for k in keys {
            self.map.remove(*k);
        }
    }

    /// A key that must be absent, with why.
    fn absent(&mut self, k: &str, why: &str) -> Result<(), String> {
        match self.opt::<Value>(k)? {
            None => Ok(()),
            Some(_) => Err(format!("parameter \"{k}\": {why}")),
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

/// `bdev_null_create`.
pub fn bdev_null(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "bdev_null_create")?;
    let name: String = p.req("name")?;
    let num_blocks: u64 = p.req("num_blocks")?;
    let block_size: u32 = p.req("block_size")?;
    let id = uuid(p.opt("uuid")?)?;
    let pbs: Option<u32> = p.opt("physical_block_size")?;
    for k in [
        "md_size",
        "dif_type",
        "dif_pi_format",
        "preferred_write_granularity",
        "preferred_write_alignment",
        "optimal_write_size",
        "preferred_unmap_granularity",
        "preferred_unmap_alignment",
    ] {
        p.default_only(k, json!(0))?;
    }
    p.default_only("dif_is_head_of_md", json!(false))?;
    p.finish()?;
    ram_bdev(&name, num_blocks, block_size, id, pbs)?;
    w.add_bdev(&name, id)?;
    Ok(format!(
        "bdev {name}: null, {num_blocks} blocks of {block_size} bytes"
    ))
}

/// `bdev_malloc_create`.
pub fn bdev_malloc(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "bdev_malloc_create")?;
    let name: Option<String> = p.opt("name")?;
    let num_blocks: u64 = p.req("num_blocks")?;
    let block_size: u32 = p.req("block_size")?;
    let id = uuid(p.opt("uuid")?)?;
    let pbs: Option<u32> = p.opt("physical_block_size")?;
    for k in [
        "optimal_io_boundary",
        "md_size",
        "dif_type",
        "dif_pi_format",
    ] {
        p.default_only(k, json!(0))?;
    }
    p.default_only("md_interleave", json!(false))?;
    p.default_only("dif_is_head_of_md", json!(false))?;
    p.default_only("numa_id", json!(-1))?;
    p.finish()?;
    let name = name.unwrap_or_else(|| {
        (0..)
            .map(|i| format!("Malloc{i}"))
            .find(|n| !w.has_bdev(n))
            .unwrap_or_default()
    });
    ram_bdev(&name, num_blocks, block_size, id, pbs)?;
    w.add_bdev(&name, id)?;
    let mib = num_blocks.saturating_mul(u64::from(block_size)) >> 20;
    Ok(format!(
        "bdev {name}: malloc, {num_blocks} blocks of {block_size} bytes ({mib} MiB of RAM)"
    ))
}

/// `bdev_uring_create`.
pub fn bdev_uring(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "bdev_uring_create")?;
    let filename: String = p.req("filename")?;
    let name: String = p.req("name")?;
    let bs: Option<u32> = p.opt("block_size")?;
    let id = uuid(p.opt("uuid")?)?;
    let direct: Option<bool> = p.opt("direct")?;
    p.finish()?;
    if let Some(b) = bs.filter(|&b| b != 0)
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
    let io = if direct == Some(false) {
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

/// `bdev_nvme_attach_controller`: PCIe only; the device must be there.
pub fn nvme_attach(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "bdev_nvme_attach_controller")?;
    let name: String = p.req("name")?;
    let trtype: String = p.req("trtype")?;
    let traddr: String = p.req("traddr")?;
    p.opt::<u16>("num_io_queues")?;
    for k in [
        "prchk_reftag",
        "prchk_guard",
        "hdgst",
        "ddgst",
        "allow_unrecognized_csi",
        "disable_sq_flow_control",
    ] {
        p.default_only(k, json!(false))?;
    }
    p.default_only("multipath", json!("disable"))?;
    if let Some(o) = p.opt::<Map<String, Value>>("multipath_opts")?
        && !o.is_empty()
    {
        return Err("multipath_opts: pmio attaches one path per controller".into());
    }
    // SPDK writes hostnqn for every controller; a PCIe controller has no use for it.
    p.accept(&[
        "hostnqn",
        "ctrlr_loss_timeout_sec",
        "reconnect_delay_sec",
        "fast_io_fail_timeout_sec",
        "fabrics_connect_timeout_us",
        "max_bdevs",
    ]);
    if !trtype.eq_ignore_ascii_case("pcie") {
        let subnqn: Option<String> = p.opt("subnqn")?;
        return Err(format!(
            "trtype {trtype}: pmio attaches PCIe controllers only; the namespaces of {} at \
             {traddr} would be missing",
            subnqn.as_deref().unwrap_or("this controller")
        ));
    }
    for k in [
        "adrfam",
        "trsvcid",
        "subnqn",
        "hostaddr",
        "hostsvcid",
        "psk",
        "dhchap_key",
        "dhchap_ctrlr_key",
        "priority",
    ] {
        p.absent(k, "does not apply to trtype PCIe")?;
    }
    p.finish()?;
    if let Some((_, a)) = w.ctrlrs.iter().find(|(n, _)| *n == name) {
        if a.eq_ignore_ascii_case(&traddr) {
            return Ok(format!(
                "NVMe controller {name} at {traddr}: already attached"
            ));
        }
        return Err(format!("controller {name} is already attached at {a}"));
    }
    if let Some((n, _)) = w
        .ctrlrs
        .iter()
        .find(|(_, a)| a.eq_ignore_ascii_case(&traddr))
    {
        return Err(format!("{traddr} is already attached as controller {n}"));
    }
    let dev = Path::new("/sys/bus/pci/devices").join(&traddr);
    if !dev.exists() {
        return Err(format!("no PCI device at {traddr}"));
    }
    let driver = std::fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
    let note = match driver.as_deref() {
        Some("vfio-pci") => "bound to vfio-pci".to_string(),
        Some(d) => format!("bound to {d}: bind it to vfio-pci (pmio-setup) before starting"),
        None => "bound to no driver: bind it to vfio-pci (pmio-setup) before starting".into(),
    };
    w.ctrlrs.push((name.clone(), traddr.clone()));
    Ok(format!(
        "NVMe controller {name} at {traddr} ({note}); one bdev {name}n<NSID> per namespace"
    ))
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
    let mut p = P::new(v, "nvmf_create_subsystem")?;
    let sp = SubsystemParams {
        nqn: p.req("nqn")?,
        serial_number: p.opt("serial_number")?,
        model_number: p.opt("model_number")?,
        allow_any_host: p.opt("allow_any_host")?.unwrap_or(false),
        max_namespaces: p.opt("max_namespaces")?.unwrap_or(0),
        min_cntlid: p.opt("min_cntlid")?,
        max_cntlid: p.opt("max_cntlid")?,
    };
    tgt_name(&mut p)?;
    for k in ["ana_reporting", "passthrough", "enable_nssr"] {
        p.default_only(k, json!(false))?;
    }
    p.default_only("max_discard_size_kib", json!(0))?;
    p.default_only("max_write_zeroes_size_kib", json!(0))?;
    p.finish()?;
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
    n.default_only("anagrpid", json!(0))?;
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
    s.nsids.push(nsid);
    Ok(format!("namespace {nsid} of {nqn} on bdev {bdev}"))
}

/// Why a bdev a namespace names is not there: SPDK names hint at what made it.
pub fn missing_bdev(name: &str) -> String {
    let hint = if name.contains('/') {
        " (a name with '/' is an SPDK logical volume, found by examine on its base bdev: pmio \
         has no lvol)"
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

fn listen_addr(v: &Value) -> Result<ListenAddr, String> {
    let mut l = P::new(v, "listen_address")?;
    let trtype: String = l.req("trtype")?;
    let traddr: String = l.req("traddr")?;
    let trsvcid: Option<String> = l.opt("trsvcid")?;
    let adrfam: Option<String> = l.opt("adrfam")?;
    l.finish()?;
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(format!("trtype {trtype}: pmio listens on TCP only"));
    }
    let port = trsvcid.ok_or("trsvcid (the port) is required for TCP")?;
    ListenAddr::new(&traddr, &port, adrfam.as_deref()).map_err(|e| e.to_string())
}

/// `nvmf_subsystem_add_listener`.
pub fn nvmf_listener(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "nvmf_subsystem_add_listener")?;
    let nqn: String = p.req("nqn")?;
    let addr = listen_addr(&p.req::<Value>("listen_address")?)?;
    tgt_name(&mut p)?;
    if p.opt::<bool>("secure_channel")? == Some(true) {
        return Err(
            "secure_channel: pmio has no TLS; hosts that require it could not connect".into(),
        );
    }
    p.default_only("ana_state", json!("optimized"))?;
    p.opt::<String>("sock_impl")?;
    p.finish()?;
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

/// `nvmf_subsystem_add_host`.
pub fn nvmf_host(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "nvmf_subsystem_add_host")?;
    let nqn: String = p.req("nqn")?;
    let host: String = p.req("host")?;
    tgt_name(&mut p)?;
    p.absent("psk", "pmio has no TLS: this host could not connect")?;
    for k in ["dhchap_key", "dhchap_ctrlr_key"] {
        p.absent(k, "pmio has no DH-HMAC-CHAP: this host could not connect")?;
    }
    p.finish()?;
    let s = w.subsystem(&nqn)?;
    if s.hosts.contains(&host) {
        return Err(format!("host {host} is already admitted to {nqn}"));
    }
    s.hosts.push(host.clone());
    Ok(format!("host {host} admitted to {nqn}"))
}

/// `nvmf_subsystem_allow_any_host`.
pub fn nvmf_allow_any_host(v: &Value, w: &mut World) -> Result<String, String> {
    let mut p = P::new(v, "nvmf_subsystem_allow_any_host")?;
    let nqn: String = p.req("nqn")?;
    let allow: bool = p.req("allow_any_host")?;
    tgt_name(&mut p)?;
    p.finish()?;
    w.subsystem(&nqn)?;
    Ok(format!("{nqn}: allow_any_host {allow}"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::document::parse;

    const SAMPLE: &str = include_str!("../../tests/fixtures/spdk-v25.09-sample.json");
    const NVMF: &str = include_str!("../../tests/fixtures/spdk-v25.09-nvmf.json");

    #[test]
    fn the_spdk_sample_checks_clean() {
        let r = check(&parse(SAMPLE).unwrap(), World::default());
        assert_eq!(r.count(Verdict::Refuse), 0, "{}", r.render());
        assert_eq!(r.count(Verdict::Create), 2, "{}", r.render());
        // Mapped: sock_set_default_impl, sock_impl_set_options (posix), bdev_nvme_set_options,
        // bdev_nvme_set_hotplug, bdev_wait_for_examine, framework_set_scheduler,
        // nvmf_set_config, nvmf_set_crdt.
        assert_eq!(r.count(Verdict::Map), 8, "{}", r.render());
        let text = r.render();
        for want in [
            "iobuf_set_options",
            "accel_set_options",
            "bdev_set_options",
            "bdev_raid_set_options",
            "iscsi_set_options",
            "nvmf_set_max_subsystems",
            "subsystems[0] (keyring)",
            "subsystems[6] (scsi)",
        ] {
            assert!(
                r.lines.iter().any(|l| l.verdict == Verdict::Ignore
                    && (l.method == want || l.origin.starts_with(want))),
                "{want} not ignored:\n{text}"
            );
        }
    }

    #[test]
    fn the_spdk_nvmf_fixture_checks_clean() {
        let r = check(&parse(NVMF).unwrap(), World::default());
        assert_eq!(r.count(Verdict::Refuse), 0, "{}", r.render());
        let created: Vec<&str> = r
            .lines
            .iter()
            .filter(|l| l.verdict == Verdict::Create)
            .map(|l| l.method.as_str())
            .collect();
        assert_eq!(
            created,
            [
                "bdev_malloc_create",
                "bdev_malloc_create",
                "bdev_null_create",
                "nvmf_create_transport",
                "nvmf_subsystem_add_listener",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_host",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_listener",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_ns",
                "nvmf_subsystem_add_listener",
            ]
        );
    }

    fn refusal(doc: &str) -> String {
        let r = check(&parse(doc).unwrap(), World::default());
        let out: Vec<String> = r
            .refusals()
            .map(|l| format!("{} {}", l.method, l.text))
            .collect();
        assert!(!out.is_empty(), "{doc} checked clean");
        out.join("\n")
    }

    fn one(section: &str, method: &str, params: Value) -> String {
        json!({"subsystems": [{"subsystem": section, "config": [
            {"method": method, "params": params}]}]})
        .to_string()
    }

    #[test]
    fn refusals_name_method_and_object() {
        for (section, method, params, want) in [
            (
                "bdev",
                "bdev_raid_create",
                json!({"name": "Raid0", "raid_level": "raid1", "base_bdevs": ["a", "b"]}),
                "bdev_raid_create Raid0: pmio has no RAID",
            ),
            (
                "iscsi",
                "iscsi_create_target_node",
                json!({"name": "iqn.2016-06.io.spdk:disk1", "luns": []}),
                "iqn.2016-06.io.spdk:disk1: pmio has no iSCSI target",
            ),
            (
                "bdev",
                "bdev_nvme_attach_controller",
                json!({"name": "Nvme1", "trtype": "TCP", "traddr": "10.0.0.2", "subnqn": "nqn.x:y"}),
                "pmio attaches PCIe controllers only; the namespaces of nqn.x:y",
            ),
            (
                "bdev",
                "bdev_lvol_create_lvstore",
                json!({"bdev_name": "Nvme0n1", "lvs_name": "lvs0"}),
                "lvs0: pmio has no logical volumes",
            ),
            (
                "keyring",
                "keyring_file_add_key",
                json!({"name": "key0", "path": "/tmp/k"}),
                "key0: pmio has no TLS",
            ),
            ("bdev", "bdev_frobnicate", json!({}), "Unknown method"),
            (
                "frob",
                "bdev_malloc_create",
                json!({"num_blocks": 8, "block_size": 512}),
                "unknown section frob",
            ),
        ] {
            let e = refusal(&one(section, method, params));
            assert!(e.contains(want), "{method}: {e}");
        }
    }

    /// A vhost-blk controller is created once pmio-tgt has the method, refused before.
    #[test]
    fn vhost_follows_the_method_table() {
        const VHOST: &str = include_str!("../../tests/fixtures/spdk-v25.09-vhost-blk.json");
        let doc = parse(VHOST).unwrap();
        let mut world = World::default();
        let has = world.methods.contains(&"vhost_create_blk_controller");
        let r = check(&doc, world.clone());
        let line = r
            .lines
            .iter()
            .find(|l| l.method == "vhost_create_blk_controller")
            .unwrap();
        if has {
            assert_eq!(line.verdict, Verdict::Create, "{}", r.render());
            assert_eq!(
                line.text,
                "vhost-user-blk controller vhost.0 on bdev Malloc1"
            );
        }
        world
            .methods
            .retain(|m| *m != "vhost_create_blk_controller");
        let r = check(&doc, world);
        let line = r
            .lines
            .iter()
            .find(|l| l.method == "vhost_create_blk_controller")
            .unwrap();
        assert_eq!(line.verdict, Verdict::Refuse);
        assert!(
            line.text
                .starts_with("vhost.0: this pmio-tgt has no vhost-user-blk target"),
            "{}",
            line.text
        );
    }

    #[test]
    fn references_and_values_are_checked() {
        let bad_ns = r#"{"subsystems":[{"subsystem":"nvmf","config":[
            {"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2016-06.io.spdk:c1"}},
            {"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2016-06.io.spdk:c1",
              "namespace":{"bdev_name":"lvs0/lv0"}}}]}]}"#;
        assert!(refusal(bad_ns).contains("SPDK logical volume"));
        let no_transport = r#"{"subsystems":[{"subsystem":"nvmf","config":[
            {"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2014-08.org.nvmexpress.discovery",
              "listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"4420"}}}]}]}"#;
        assert!(refusal(no_transport).contains("no TCP transport"));
        let e = refusal(&one(
            "bdev",
            "bdev_null_create",
            json!({"name": "N", "num_blocks": 8, "block_size": 500}),
        ));
        assert!(e.contains("500"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_null_create",
            json!({"name": "N", "num_blocks": "many", "block_size": 512}),
        ));
        assert!(e.contains("\"num_blocks\""), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_malloc_create",
            json!({"name": "M", "num_blocks": 8, "block_size": 512, "md_size": 8}),
        ));
        assert!(e.contains("md_size"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_aio_create",
            json!({"name": "A", "filename": "/nonexistent/x", "readonly": true}),
        ));
        assert!(e.contains("read-only"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_nvme_attach_controller",
            json!({"name": "Nvme0", "trtype": "PCIe", "traddr": "ffff:ff:1f.7"}),
        ));
        assert!(e.contains("no PCI device at ffff:ff:1f.7"), "{e}");
        let e = refusal(&one(
            "bdev",
            "bdev_nvme_set_options",
            json!({"action_on_timeout": "explode"}),
        ));
        assert!(e.contains("explode"), "{e}");
    }
}
