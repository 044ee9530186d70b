//! `framework_get_scheduler`: the scheduler in effect, in SPDK's shape (`lib/event/app_rpc.c`),
//! answered from what `framework_set_scheduler` mapped ([`super::Settings`]).
//!
//! ```text
//! {"scheduler_name": "static", "scheduler_period": 0, "isolated_core_mask": "0",
//!  "scheduling_core": 0}
//! ```
//!
//! pmio never moves work between reactors, so what SPDK calls the scheduler's options are
//! reported as an SPDK app reports their absence:
//! - `scheduler_name`: the name `framework_set_scheduler` was given (`static`, `dynamic`,
//!   `gscheduler`), or `static` before any call: SPDK's default, and what pmio's reactors do.
//! - `scheduler_period`: `0`, SPDK's value before a period is set: pmio has no scheduling pass,
//!   and `framework_set_scheduler`'s `period` is ignored (see `plans::framework_set_scheduler`).
//! - `isolated_core_mask`: `"0"`, SPDK's empty mask: pmio isolates no core.
//! - `scheduling_core`: the main (first) reactor's core, SPDK's default scheduling core.
//! - `governor_name`: absent, as without a governor: pmio does not change CPU frequencies.
//! - `dynamic`'s `load_limit`, `core_limit`, `core_busy`: absent, as for a scheduler without
//!   options: pmio ignores them (an idle reactor sleeps instead of moving its work).

use pmio_jsonrpc::{RpcError, decl};
use serde_json::{Value, json};

use super::SchedChoice;
use crate::Daemon;

/// The RPC method: no parameters, callable in both states (as SPDK's).
pub fn framework_get_scheduler(
    rpc: &(dyn Daemon + 'static),
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    let state = rpc.settings().state();
    let main_core = rpc.reactors().cores().first().copied().unwrap_or(0);
    Ok(in_effect(state.scheduler.as_ref(), main_core))
}

/// The answer for the last `framework_set_scheduler` choice and parameters `saved` (none yet:
/// `None`), the main reactor on `main_core`.
fn in_effect(saved: Option<&(SchedChoice, Value)>, main_core: u32) -> Value {
    let name = match saved {
        Some((choice, params)) => match params.get("name").and_then(Value::as_str) {
            Some(n) => n.to_string(),
            None => default_name(*choice).to_string(),
        },
        None => "static".to_string(),
    };
    json!({
        "scheduler_name": name,
        "scheduler_period": 0,
        "isolated_core_mask": "0",
        "scheduling_core": main_core
    })
}

/// SPDK's name for a choice whose saved parameters lost theirs.
fn default_name(choice: SchedChoice) -> &'static str {
    match choice {
        SchedChoice::Static => "static",
        SchedChoice::Dynamic => "dynamic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_made_or_spdks_default() {
        let rows: [(Option<(SchedChoice, Value)>, &str); 4] = [
            (None, "static"),
            (
                Some((
                    SchedChoice::Dynamic,
                    json!({"name": "dynamic", "period": 5}),
                )),
                "dynamic",
            ),
            (
                Some((SchedChoice::Static, json!({"name": "gscheduler"}))),
                "gscheduler",
            ),
            (Some((SchedChoice::Dynamic, json!({}))), "dynamic"),
        ];
        for (saved, name) in rows {
            let v = in_effect(saved.as_ref(), 2);
            assert_eq!(
                v,
                json!({"scheduler_name": name, "scheduler_period": 0,
                       "isolated_core_mask": "0", "scheduling_core": 2}),
                "{saved:?}"
            );
        }
    }
}
