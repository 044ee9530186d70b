//! `framework_get_reactors`: one object per reactor, SPDK's `lib/event/app_rpc.c` shape.
//!
//! ```text
//! {"tick_rate": 1000000000, "pid": 4242, "reactors": [
//!   {"lcore": 0, "tid": 4243, "busy": 123, "idle": 456, "in_interrupt": true,
//!    "irq": 0, "sys": 2, "usr": 9,
//!    "lw_threads": [{"name": "reactor_0", "id": 1, "cpumask": "1", "elapsed": 789}]}]}
//! ```
//!
//! SPDK writes `core_freq` only when a CPU frequency governor is set; pmio never changes
//! frequencies, so the key is absent, as on an SPDK app without one.

use pmio_jsonrpc::{RpcError, decl};
use serde_json::{Value, json};

use super::{ReactorsRpc, TICK_RATE, cpumask, procstat, thread_id, thread_name};

pub(super) fn framework_get_reactors(
    r: &ReactorsRpc,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    let h = &r.handle;
    let elapsed = r.uptime_ns();
    let times = procstat::read(h.cores());
    let reactors: Vec<Value> = h
        .all_stats()
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            // SPDK reports 0s when /proc/stat has no line for the core.
            let t = match (times.get(i).copied().flatten(), r.start_times.get(i)) {
                (Some(now), Some(Some(start))) => now.since(*start),
                _ => procstat::CpuTimes::default(),
            };
            json!({
                "lcore": s.core,
                "tid": r.tids.get(i).copied().unwrap_or(0),
                "busy": s.busy_ns,
                "idle": s.idle_ns + s.sleep_ns,
                // Asleep waiting for work, as a reactor SPDK's dynamic scheduler put in
                // interrupt mode; a pmio reactor in interrupt mode polls while it has work.
                "in_interrupt": h.is_sleeping(s.core),
                "irq": t.irq,
                "sys": t.sys,
                "usr": t.usr,
                "lw_threads": [{
                    "name": thread_name(s.core),
                    "id": thread_id(s.core),
                    "cpumask": cpumask(s.core),
                    "elapsed": elapsed
                }]
            })
        })
        .collect();
    Ok(json!({
        "tick_rate": TICK_RATE,
        "pid": std::process::id(),
        "reactors": reactors
    }))
}
