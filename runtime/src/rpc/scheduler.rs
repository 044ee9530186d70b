//! pmio's own scheduler methods: `bdev_set_scheduler` and `bdev_get_scheduler`.
//!
//! A bdev's scheduler is `none` (requests go straight to the driver) or `mq-deadline` (one
//! [`SharedDeadline`] per bdev, shared by every reactor that runs
//! I/O on it, with Linux's tunables under their sysfs names and per-priority counters). The
//! daemon's I/O source, `perform_tests`, opens its queues in the block layer's mq-deadline mode
//! ([`SchedMode::MqDeadline`](pmio::bdev::SchedMode)): reactor `i` (its index in the core mask)
//! is the scheduler's owner `i`, with scheduler tags of its own, as Linux's per-hctx
//! `sched_tags`.
//!
//! `bdev_set_scheduler {"name", "scheduler": "none" | "mq-deadline", tunables…}` with the
//! tunables under Linux's `queue/iosched/` names (`read_expire`, `write_expire` in ms,
//! `writes_starved`, `front_merges` 0/1, `fifo_batch`, `prio_aging_expire` in ms,
//! `async_depth`) plus `nr_requests` (scheduler tags per reactor, default
//! `2 × min(queue depth, 128)`). Setting mq-deadline again retunes it in place (counters kept);
//! a new `nr_requests` builds a new instance with the same tunables (counters restart). A bdev
//! running perform_tests refuses any change (EBUSY), and a scheduler is replaced only after its
//! `teardown_check` (nothing queued or in flight). `bdev_get_scheduler {"name"?}` answers, per
//! bdev, `{"name", "scheduler", "tunables", "counters": {"rt" | "be" | "idle": {"inserted",
//! "merged", "dispatched", "completed", "queued"}}}` (O(1) counters owned by the scheduler).

use std::sync::Arc;

use pmio::sched::deadline::MAX_NR_REQUESTS;
use pmio::sched::{SchedKind, Scheduler, SharedDeadline, TUNABLES};
use pmio::{BdevInfo, PrioClass};
use serde_json::{Map, Value, json};

use super::host::BdevHost;
use pmio_jsonrpc::Method;
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::decl;
use serde::{Deserialize, Serialize};

/// The methods of this module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_set_scheduler", RUNTIME, bdev_set_scheduler),
        Method::new("bdev_get_scheduler", RUNTIME, bdev_get_scheduler),
    ]
}

/// The scheduler of bdev `name` (`none` unless set).
pub fn scheduler_of(t: &BdevHost, name: &str) -> Scheduler {
    t.scheduler(name).unwrap_or(Scheduler::None)
}

fn sched_error(e: impl std::fmt::Display) -> RpcError {
    RpcError::errno_detail(-libc::EINVAL, e)
}

/// Owners of a bdev's mq-deadline: one per reactor (reactor index `i` is owner `i`).
fn reactor_owners(t: &BdevHost) -> Result<u16, RpcError> {
    let n = t.reactors().cores().len().max(1);
    u16::try_from(n)
        .map_err(|_| sched_error(format_args!("{n} reactors: too many for mq-deadline")))
}

fn owners_of(dd: &SharedDeadline) -> u16 {
    dd.with_locked(|d| d.options().owners)
}

/// The tunables of `dd` that were set rather than derived: `async_depth` at its default (all
/// scheduler tags) is left out, so a rebuilt instance with other tags gets its own default.
fn set_tunables(dd: &SharedDeadline) -> Vec<(&'static str, u64)> {
    let total = u64::from(dd.nr_requests());
    dd.params()
        .into_iter()
        .filter(|&(k, v)| !(k == "async_depth" && v == total))
        .collect()
}

/// Scheduler tags of each owner (reactor): Linux's per-hctx `nr_requests`.
pub fn per_owner_tags(dd: &SharedDeadline) -> u32 {
    dd.with_locked(|d| d.options().per_owner())
}

/// A new mq-deadline for `info` with one owner per reactor, `per_owner` scheduler tags each
/// (default `2 × min(queue depth, 128)`) and the tunables `params` applied.
fn new_deadline(
    info: &BdevInfo,
    owners: u16,
    per_owner: Option<u32>,
    params: &[(&str, u64)],
) -> Result<Scheduler, RpcError> {
    let mut opts = info.deadline_options(info.max_queue_depth, owners);
    if let Some(nr) = per_owner {
        opts.nr_requests = nr
            .checked_mul(u32::from(owners))
            .filter(|&total| total <= MAX_NR_REQUESTS)
            .ok_or_else(|| {
                sched_error(format_args!(
                    "nr_requests {nr} per reactor x {owners} reactors exceeds {MAX_NR_REQUESTS} scheduler tags"
                ))
            })?;
    }
    let s = Scheduler::new(SchedKind::MqDeadline, opts).map_err(sched_error)?;
    if let Scheduler::MqDeadline(dd) = &s {
        for (k, v) in params {
            dd.set_param(k, *v).map_err(sched_error)?;
        }
    }
    Ok(s)
}

/// Checks the scheduler being replaced holds no request (`teardown_check`): EBUSY if it does.
fn retire(name: &str, old: &Scheduler) -> Result<(), RpcError> {
    old.teardown_check().map_err(|e| {
        RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {name}: its mq-deadline still holds requests: {e}"),
        )
    })
}

/// `bdev_set_scheduler` parameters: the scheduler and the tunables under Linux's
/// `queue/iosched/` names ([`TUNABLES`]).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SetScheduler {
    /// Bdev name.
    pub name: String,
    /// `none` or `mq-deadline`.
    pub scheduler: String,
    /// Read deadline, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub read_expire: Option<u64>,
    /// Write deadline, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub write_expire: Option<u64>,
    /// Read batches before a write batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub writes_starved: Option<u64>,
    /// Front merges, 0 or 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub front_merges: Option<u64>,
    /// Requests per batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub fifo_batch: Option<u64>,
    /// Priority aging, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub prio_aging_expire: Option<u64>,
    /// Tags asynchronous writes may take.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub async_depth: Option<u64>,
    /// Scheduler tags per reactor.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub nr_requests: Option<u32>,
}

impl SetScheduler {
    /// The tunables given, by their [`TUNABLES`] name.
    pub fn tunables(&self) -> Vec<(&'static str, u64)> {
        let given = [
            self.read_expire,
            self.write_expire,
            self.writes_starved,
            self.front_merges,
            self.fifo_batch,
            self.prio_aging_expire,
            self.async_depth,
        ];
        TUNABLES
            .into_iter()
            .zip(given)
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }
}

/// `bdev_get_scheduler` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetScheduler {
    /// One bdev (default: every bdev).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'b', long))]
    pub name: Option<String>,
}

fn bdev_set_scheduler(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SetScheduler = decl::decode(params)?;
    let (name, kind, nr_requests) = (p.name.clone(), p.scheduler.clone(), p.nr_requests);
    let tunables = p.tunables();
    let t = host;
    let kind = SchedKind::parse(&kind).map_err(sched_error)?;
    let dev = t
        .registry
        .get(&name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    if kind == SchedKind::None && (!tunables.is_empty() || nr_requests.is_some()) {
        return Err(sched_error("scheduler none has no tunables"));
    }
    // Held while switching: a perform_tests job cannot start on the bdev meanwhile.
    let _claim = t.try_claim(std::slice::from_ref(&name)).map_err(|_| {
        RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {name} is running perform_tests; change its scheduler after"),
        )
    })?;
    let owners = reactor_owners(t)?;
    let current = scheduler_of(t, &name);
    let sched = match (kind, current) {
        // Same scheduler, same tags: retune in place (counters kept), as writing Linux's
        // iosched files.
        (SchedKind::MqDeadline, Scheduler::MqDeadline(dd))
            if owners_of(&dd) == owners
                && nr_requests.is_none_or(|nr| nr == per_owner_tags(&dd)) =>
        {
            for (k, v) in &tunables {
                dd.set_param(k, *v).map_err(sched_error)?;
            }
            Scheduler::MqDeadline(dd)
        }
        (SchedKind::MqDeadline, current) => {
            // A new instance (first set, or other tags): the old one's settings carry over.
            let mut keep: Vec<(&str, u64)> = Vec::new();
            let mut per_owner = None;
            if let Scheduler::MqDeadline(old) = &current {
                keep = set_tunables(old);
                per_owner = Some(per_owner_tags(old));
            }
            keep.extend(tunables.iter().map(|&(k, v)| (k, v)));
            let per_owner = nr_requests.or(per_owner);
            let s = new_deadline(dev.info(), owners, per_owner, &keep)?;
            retire(&name, &current)?;
            s
        }
        (SchedKind::None, current) => {
            retire(&name, &current)?;
            Scheduler::None
        }
    };
    log::info!("bdev {name}: scheduler {}", sched.name());
    t.set_scheduler(&name, sched);
    Ok(Value::Bool(true))
}

/// `bdev_get_scheduler` object of one bdev.
fn sched_json(name: &str, s: &Scheduler) -> Value {
    match s {
        Scheduler::None => json!({"name": name, "scheduler": "none"}),
        Scheduler::MqDeadline(dd) => {
            let mut tun = Map::new();
            for (k, v) in dd.params() {
                tun.insert(k.to_string(), json!(v));
            }
            tun.insert("nr_requests".into(), json!(per_owner_tags(dd)));
            let mut counters = Map::new();
            for prio in PrioClass::ALL {
                let st = dd.stats(prio);
                counters.insert(
                    prio.name().to_string(),
                    json!({
                        "inserted": st.inserted,
                        "merged": st.merged,
                        "dispatched": st.dispatched,
                        "completed": st.completed,
                        "queued": st.queued
                    }),
                );
            }
            json!({
                "name": name,
                "scheduler": "mq-deadline",
                "tunables": tun,
                "counters": counters
            })
        }
    }
}

fn bdev_get_scheduler(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let name = decl::decode::<GetScheduler>(params)?.name;
    let t = host;
    let names = match name {
        Some(n) => {
            if t.registry.get(&n).is_none() {
                return Err(RpcError::errno(-libc::ENODEV));
            }
            vec![n]
        }
        None => t
            .bdevs_in_order()
            .iter()
            .map(|d| d.info().name.clone())
            .collect(),
    };
    Ok(Value::Array(
        names
            .iter()
            .map(|n| sched_json(n, &scheduler_of(t, n)))
            .collect(),
    ))
}

/// `bdev_set_scheduler` calls that restore every non-default scheduler (for save_config).
pub fn config(host: &Arc<BdevHost>) -> Vec<Value> {
    let t = host;
    let mut out = Vec::new();
    for d in t.bdevs_in_order() {
        let name = &d.info().name;
        if let Scheduler::MqDeadline(dd) = scheduler_of(t, name) {
            let mut params = Map::new();
            params.insert("name".into(), json!(name));
            params.insert("scheduler".into(), json!("mq-deadline"));
            for (k, v) in set_tunables(&dd) {
                params.insert(k.to_string(), json!(v));
            }
            params.insert("nr_requests".into(), json!(per_owner_tags(&dd)));
            out.push(json!({"method": "bdev_set_scheduler", "params": params}));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declaration_names_every_tunable_in_order() {
        let all = SetScheduler {
            read_expire: Some(1),
            write_expire: Some(2),
            writes_starved: Some(3),
            front_merges: Some(4),
            fifo_batch: Some(5),
            prio_aging_expire: Some(6),
            async_depth: Some(7),
            ..SetScheduler::default()
        };
        let v = serde_json::to_value(&all).unwrap();
        for (i, (k, n)) in all.tunables().into_iter().enumerate() {
            assert_eq!(k, TUNABLES[i]);
            assert_eq!(v[k], n, "{k}");
        }
        assert_eq!(all.tunables().len(), TUNABLES.len());
    }
}
