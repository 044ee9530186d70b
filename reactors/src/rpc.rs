//! SPDK's reactor methods (feature `rpc`): `framework_get_reactors` and `thread_get_stats`, in
//! SPDK's shapes (one lightweight thread per reactor, ticks in nanoseconds).

use pmio_jsonrpc::{Method, RUNTIME, RpcError, decl};
use serde_json::{Value, json};

use crate::{ReactorsHandle, now_ns};

/// What the reactor methods read: the reactors, each one's thread id, the start time.
pub struct ReactorsRpc {
    handle: ReactorsHandle,
    tids: Vec<i32>,
    start_ns: u64,
}

impl ReactorsRpc {
    /// The reactor methods' view of `handle`. Asks each reactor its thread id (one round
    /// trip).
    pub fn new(handle: ReactorsHandle) -> ReactorsRpc {
        // SAFETY: gettid has no preconditions.
        let tids = handle
            .run_on_all(|_| unsafe { libc::gettid() })
            .unwrap_or_default();
        ReactorsRpc {
            handle,
            tids,
            start_ns: now_ns(),
        }
    }

    /// Thread id of each reactor, in core order.
    pub fn tids(&self) -> &[i32] {
        &self.tids
    }

    /// Nanoseconds since this view was made (the daemon's start).
    pub fn uptime_ns(&self) -> u64 {
        now_ns().saturating_sub(self.start_ns)
    }
}

/// The reactor methods.
pub fn methods() -> Vec<Method<ReactorsRpc>> {
    vec![
        Method::new("framework_get_reactors", RUNTIME, framework_get_reactors),
        Method::new("thread_get_stats", RUNTIME, thread_get_stats),
    ]
}

fn framework_get_reactors(
    r: &ReactorsRpc,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    let h = &r.handle;
    let reactors: Vec<Value> = h
        .all_stats()
        .into_iter()
        .zip(r.tids.iter().copied())
        .map(|(s, tid)| {
            json!({
                "lcore": s.core,
                "tid": tid,
                "busy": s.busy_ns,
                "idle": s.idle_ns + s.sleep_ns,
                "in_interrupt": h.is_sleeping(s.core),
                "irq": 0,
                "sys": 0,
                "usr": 0,
                "lw_threads": [{
                    "name": format!("reactor_{}", s.core),
                    "id": s.core + 1,
                    "cpumask": format!("{:x}", 1u128 << s.core),
                    "elapsed": r.uptime_ns()
                }],
                "pollers": {"active": s.active_pollers, "timed": s.timed_pollers},
                "messages": s.messages,
                "wakeups": s.wakeups
            })
        })
        .collect();
    Ok(json!({
        "tick_rate": 1_000_000_000u64,
        "pid": std::process::id(),
        "reactors": reactors
    }))
}

fn thread_get_stats(
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
                "name": format!("reactor_{}", s.core),
                "id": s.core + 1,
                "cpumask": format!("{:x}", 1u128 << s.core),
                "busy": s.busy_ns,
                "idle": s.idle_ns + s.sleep_ns,
                "active_pollers_count": s.active_pollers,
                "timed_pollers_count": s.timed_pollers,
                "paused_pollers_count": 0
            })
        })
        .collect();
    Ok(json!({"tick_rate": 1_000_000_000u64, "threads": threads}))
}
