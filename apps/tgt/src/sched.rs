//! pmio's own scheduler methods: `bdev_set_scheduler` and `bdev_get_scheduler`.
//!
//! A bdev's scheduler is `none` (requests go straight to the driver) or `mq-deadline` (one
//! [`SharedDeadline`](pmio::sched::SharedDeadline) per bdev, shared by every reactor that runs
//! I/O on it, with Linux's tunables under their sysfs names and per-priority counters). The
//! daemon's I/O source, `perform_tests`, routes through it.
//!
//! `bdev_set_scheduler {"name", "scheduler": "none" | "mq-deadline", tunables…}` with the
//! tunables under Linux's `queue/iosched/` names (`read_expire`, `write_expire` in ms,
//! `writes_starved`, `front_merges` 0/1, `fifo_batch`, `prio_aging_expire` in ms,
//! `async_depth`) plus `nr_requests`; setting mq-deadline again retunes it in place (counters
//! kept). `bdev_get_scheduler {"name"?}` answers, per bdev, `{"name", "scheduler", "tunables",
//! "counters": {"rt" | "be" | "idle": {"inserted", "merged", "dispatched", "completed",
//! "queued"}}}` (O(1) counters owned by the scheduler).

use pmio::PrioClass;
use pmio::sched::{DeadlineOptions, SchedKind, Scheduler, TUNABLES};
use serde_json::{Map, Value, json};

use crate::jsonrpc::RpcError;
use crate::methods::{Method, RUNTIME, Rpc};
use crate::params::Params;
use crate::target::Target;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method {
            name: "bdev_set_scheduler",
            states: RUNTIME,
            run: bdev_set_scheduler,
        },
        Method {
            name: "bdev_get_scheduler",
            states: RUNTIME,
            run: bdev_get_scheduler,
        },
    ]
}

/// The scheduler of bdev `name` (`none` unless set).
pub fn scheduler_of(t: &Target, name: &str) -> Scheduler {
    t.scheduler(name).unwrap_or(Scheduler::None)
}

fn sched_error(e: impl std::fmt::Display) -> RpcError {
    RpcError::errno_detail(-libc::EINVAL, e)
}

fn bdev_set_scheduler(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let kind: String = p.req("scheduler")?;
    let mut tunables = Vec::new();
    for t in TUNABLES {
        if let Some(v) = p.opt::<u64>(t)? {
            tunables.push((t, v));
        }
    }
    let nr_requests: Option<u32> = p.opt("nr_requests")?;
    p.finish()?;
    let t = &rpc.target;
    let kind = SchedKind::parse(&kind).map_err(sched_error)?;
    let dev = t
        .registry
        .get(&name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    if kind == SchedKind::None && (!tunables.is_empty() || nr_requests.is_some()) {
        return Err(sched_error("scheduler none has no tunables"));
    }
    if t.is_claimed(&name) {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {name} is running perform_tests; change its scheduler after"),
        ));
    }
    let current = scheduler_of(t, &name);
    let sched = match (kind, current) {
        // Same scheduler: retune in place (counters kept), as writing Linux's iosched files.
        (SchedKind::MqDeadline, Scheduler::MqDeadline(dd)) if nr_requests.is_none() => {
            for (k, v) in &tunables {
                dd.set_param(k, *v).map_err(sched_error)?;
            }
            Scheduler::MqDeadline(dd)
        }
        (SchedKind::MqDeadline, _) => {
            let i = dev.info();
            let mut opts =
                DeadlineOptions::for_device(i.max_queue_depth, i.max_transfer_blocks, i.block_size);
            if let Some(nr) = nr_requests {
                opts.nr_requests = nr;
            }
            let s = Scheduler::new(SchedKind::MqDeadline, opts).map_err(sched_error)?;
            if let Scheduler::MqDeadline(dd) = &s {
                for (k, v) in &tunables {
                    dd.set_param(k, *v).map_err(sched_error)?;
                }
            }
            s
        }
        (SchedKind::None, _) => Scheduler::None,
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
            tun.insert("nr_requests".into(), json!(dd.nr_requests()));
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

fn bdev_get_scheduler(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: Option<String> = p.opt("name")?;
    p.finish()?;
    let t = &rpc.target;
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
pub fn config(rpc: &Rpc) -> Vec<Value> {
    let t = &rpc.target;
    let mut out = Vec::new();
    for d in t.bdevs_in_order() {
        let name = &d.info().name;
        if let Scheduler::MqDeadline(dd) = scheduler_of(t, name) {
            let mut params = Map::new();
            params.insert("name".into(), json!(name));
            params.insert("scheduler".into(), json!("mq-deadline"));
            for (k, v) in dd.params() {
                params.insert(k.to_string(), json!(v));
            }
            params.insert("nr_requests".into(), json!(dd.nr_requests()));
            out.push(json!({"method": "bdev_set_scheduler", "params": params}));
        }
    }
    out
}
