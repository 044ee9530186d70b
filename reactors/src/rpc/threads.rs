//! `thread_get_stats` and `thread_get_pollers`: each reactor as one SPDK thread, SPDK's
//! `lib/event/app_rpc.c` shapes.
//!
//! A poller's counters are the ones its reactor keeps anyway ([`crate::PollerInfo`]: plain
//! cells bumped after each run, no atomics, no lock); listing them is one message to each
//! reactor, which copies its registry there (control path).
//!
//! ```text
//! {"tick_rate": 1000000000, "threads": [{"name": "reactor_0", "id": 1,
//!   "active_pollers": [{"name": "nvmf_tcp_poll_group", "id": 3, "state": "waiting",
//!                       "run_count": 81234, "busy_count": 512}],
//!   "timed_pollers": [{"name": "nvmf_tcp_accept", "id": 1, "state": "waiting",
//!                      "run_count": 40, "busy_count": 1, "period_ticks": 10000000}],
//!   "paused_pollers": []}]}
//! ```

use pmio_jsonrpc::{RpcError, decl};
use serde_json::{Value, json};

use super::{ReactorsRpc, TICK_RATE, cpumask, thread_id, thread_name};
use crate::PollerInfo;

pub(super) fn thread_get_stats(
    r: &ReactorsRpc,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    let threads: Vec<Value> = r
        .handle
        .all_stats()
        .into_iter()
        .map(|s| {
            json!({
                "name": thread_name(s.core),
                "id": thread_id(s.core),
                "cpumask": cpumask(s.core),
                "busy": s.busy_ns,
                "idle": s.idle_ns + s.sleep_ns,
                "active_pollers_count": s.active_pollers,
                "timed_pollers_count": s.timed_pollers,
                // pmio pollers are never paused: SPDK's count for a thread without paused ones.
                "paused_pollers_count": 0
            })
        })
        .collect();
    Ok(json!({"tick_rate": TICK_RATE, "threads": threads}))
}

pub(super) fn thread_get_pollers(
    r: &ReactorsRpc,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    let listed = r
        .handle
        .run_on_all(|ctx| (ctx.core(), ctx.pollers()))
        .map_err(|e| RpcError::errno_detail(-libc::ESHUTDOWN, e))?;
    let threads: Vec<Value> = listed
        .into_iter()
        .map(|(core, pollers)| thread_pollers(core, pollers))
        .collect();
    Ok(json!({"tick_rate": TICK_RATE, "threads": threads}))
}

/// One reactor's thread and its pollers, active then timed, each in registration order.
fn thread_pollers(core: u32, mut pollers: Vec<PollerInfo>) -> Value {
    pollers.sort_by_key(|p| p.id);
    let (timed, active): (Vec<_>, Vec<_>) = pollers.iter().partition(|p| p.period.is_some());
    json!({
        "name": thread_name(core),
        "id": thread_id(core),
        "active_pollers": active.into_iter().map(poller).collect::<Vec<_>>(),
        "timed_pollers": timed.into_iter().map(poller).collect::<Vec<_>>(),
        // pmio cannot pause a poller: always empty, as on an SPDK thread with none paused.
        "paused_pollers": []
    })
}

/// One poller in SPDK's shape: `period_ticks` only for a timed poller, as SPDK writes it.
fn poller(p: &PollerInfo) -> Value {
    let mut v = json!({
        "name": p.name,
        "id": p.id.as_u64(),
        // The listing runs as a message between poller runs: no poller is running, and an
        // unregistered one has left the list (SPDK's "running" and "unregistered" never show).
        "state": "waiting",
        "run_count": p.runs,
        "busy_count": p.busy_runs
    });
    if let Some(period) = p.period {
        let ticks = period.as_nanos() * u128::from(TICK_RATE) / 1_000_000_000;
        v["period_ticks"] = json!(u64::try_from(ticks).unwrap_or(u64::MAX));
    }
    v
}
