//! The bdev layer's own methods: `bdev_get_bdevs` and `bdev_get_iostat`, over every bdev of the
//! host whichever module made it.

use std::sync::Arc;

use pmio_jsonrpc::{Method, RUNTIME, RpcError, decl};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::host::BdevHost;

/// The methods of this module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_get_bdevs", RUNTIME, bdev_get_bdevs),
        Method::new("bdev_get_iostat", RUNTIME, bdev_get_iostat),
        Method::new("bdev_examine", RUNTIME, bdev_examine),
    ]
}

/// `bdev_examine` parameters.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Examine {
    /// The bdev to examine.
    #[cfg_attr(feature = "cli", arg(short = 'b', long))]
    pub name: String,
}

/// `bdev_examine`: every module looks at the bdev again (an lvstore written on it since it
/// appeared is found). SPDK answers -ENODEV for an unknown bdev.
fn bdev_examine(host: &Arc<BdevHost>, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: Examine = decl::decode(params)?;
    let dev = host
        .find_bdev(&p.name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    host.examine(&dev.info().name);
    Ok(Value::Bool(true))
}

/// `bdev_get_bdevs` parameters.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetBdevs {
    /// One bdev, by name or UUID (default: every bdev).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'b', long))]
    pub name: Option<String>,
    /// Milliseconds SPDK waits for the bdev to appear. pmio bdevs exist as soon as their create
    /// method has answered, so there is nothing to wait for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub timeout: Option<u64>,
}

fn bdev_get_bdevs(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetBdevs = decl::decode(params)?;
    match p.name {
        Some(n) => {
            let dev = host
                .find_bdev(&n)
                .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
            Ok(json!([host.bdev_json(&*dev)]))
        }
        None => Ok(Value::Array(
            host.bdevs_in_order()
                .iter()
                .map(|d| host.bdev_json(&**d))
                .collect(),
        )),
    }
}

/// SPDK's `reset_mode` of `bdev_get_iostat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetMode {
    /// Every counter.
    All,
    /// Only the minimum and maximum latencies.
    Maxmin,
    /// Only the error counts.
    Error,
    /// Nothing (the default).
    None,
}

/// `bdev_get_iostat` parameters.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GetIostat {
    /// One bdev (exclusive with `names`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Several bdevs (newer SPDK clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// Reset after reading (newer SPDK clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_mode: Option<ResetMode>,
    /// Per-channel statistics: pmio keeps per-bdev totals only.
    #[serde(default)]
    pub per_channel: decl::BoolDefault<false>,
}

fn bdev_get_iostat(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetIostat = decl::decode(params)?;
    let reset = match p.reset_mode {
        None | Some(ResetMode::None) => None,
        Some(ResetMode::All) => Some("all"),
        Some(ResetMode::Maxmin) => Some("maxmin"),
        Some(ResetMode::Error) => Some("error"),
    };
    let wanted: Option<Vec<String>> = match (p.name, p.names) {
        (Some(n), None) => Some(vec![n]),
        (None, Some(ns)) => Some(ns),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(RpcError::decode(
                "parameters \"name\" and \"names\" are exclusive",
            ));
        }
    };
    let devs = match wanted {
        Some(ns) => ns
            .iter()
            .map(|n| {
                host.find_bdev(n)
                    .ok_or_else(|| RpcError::errno(-libc::ENODEV))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => host.bdevs_in_order(),
    };
    let bdevs: Vec<Value> = devs
        .iter()
        .map(|d| {
            let name = &d.info().name;
            let v = host.iostat_json(name);
            if let Some(m) = reset {
                host.reset_iostat(name, m);
            }
            v
        })
        .collect();
    Ok(json!({
        "tick_rate": 1_000_000_000u64,
        "ticks": host.uptime_ns(),
        "bdevs": bdevs
    }))
}
