//! SPDK's latency histogram methods: `bdev_enable_histogram` and `bdev_get_histogram`, over the
//! registry's per-bdev switches ([`pmio::bdev::histogram`]), and their `save_config` part.
//!
//! Latencies are counted in ns, so `tsc_rate` is 10^9 (as `bdev_get_iostat`'s `tick_rate`):
//! SPDK's `scripts/histogram.py` reads the reply unchanged (`pmio-rpc bdev_get_histogram Null0 |
//! histogram.py`).

use std::sync::Arc;

use base64::Engine;
use pmio::Op;
use pmio::bdev::histogram::{GRANULARITY_DEFAULT, HistogramConfig, HistogramData, HistogramShape};
use pmio::request::OpSet;
use pmio_jsonrpc::error::strerror;
use pmio_jsonrpc::{Method, RUNTIME, RpcError, code, decl};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::host::BdevHost;
use super::params::call;

/// The methods of this module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_enable_histogram", RUNTIME, bdev_enable_histogram),
        Method::new("bdev_get_histogram", RUNTIME, bdev_get_histogram),
    ]
}

/// The tick rate of pmio's latencies: ns.
pub const TSC_RATE: u64 = 1_000_000_000;

/// `bdev_enable_histogram` parameters (SPDK's, with its defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EnableHistogram {
    /// Bdev name (or UUID).
    pub name: String,
    /// On or off.
    pub enable: bool,
    /// Count only this I/O type (SPDK's names: `read`, `write`, `unmap`, `flush`,
    /// `write_zeroes`, ...); default every type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opc: Option<String>,
    /// log2 of the buckets per range (SPDK's default 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granularity: Option<u8>,
    /// Smallest latency with buckets of its own, ns (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_nsec: Option<u64>,
    /// Latency above which every value shares the last bucket, ns (default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_nsec: Option<u64>,
}

/// `bdev_get_histogram` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GetHistogram {
    /// Bdev name (or UUID).
    pub name: String,
}

/// I/O types SPDK's `spdk_bdev_get_io_type` knows, with pmio's operation where pmio has one.
/// A type pmio never issues is accepted (SPDK accepts it for any bdev) and counts nothing.
const IO_TYPES: &[(&str, Option<Op>)] = &[
    ("read", Some(Op::Read)),
    ("write", Some(Op::Write)),
    ("unmap", Some(Op::Discard)),
    ("flush", Some(Op::Flush)),
    ("reset", None),
    ("nvme_admin", None),
    ("nvme_io", None),
    ("nvme_io_md", None),
    ("write_zeroes", Some(Op::WriteZeroes)),
    ("zcopy", None),
    ("get_zone_info", None),
    ("zone_management", None),
    ("zone_append", None),
    ("compare", None),
    ("compare_and_write", None),
    ("abort", None),
    ("seek_hole", None),
    ("seek_data", None),
    ("copy", None),
    ("nvme_iov_md", None),
    ("nvme_nssr", None),
];

/// The operations counted for SPDK's `opc`: every one without it, the one it names, none for
/// an I/O type pmio never issues (SPDK accepts any known type for any bdev); an unknown name is
/// refused as SPDK refuses it.
fn op_filter(opc: Option<&str>) -> Result<OpSet, RpcError> {
    let Some(opc) = opc else {
        return Ok(OpSet::ALL);
    };
    match IO_TYPES.iter().find(|(n, _)| *n == opc) {
        Some((_, Some(op))) => Ok(OpSet::EMPTY.with(*op)),
        Some((_, None)) => Ok(OpSet::EMPTY),
        None => Err(RpcError::new(
            code::INTERNAL_ERROR,
            format!("Invalid Io type: {opc}"),
        )),
    }
}

/// The switch's configuration for `p` (`None` when disabling).
pub fn config_of(p: &EnableHistogram) -> Result<Option<HistogramConfig>, RpcError> {
    let ops = op_filter(p.opc.as_deref())?;
    if !p.enable {
        return Ok(None);
    }
    let granularity = p.granularity.map_or(GRANULARITY_DEFAULT, u32::from);
    let shape = HistogramShape::new(
        granularity,
        p.min_nsec.unwrap_or(0),
        p.max_nsec.unwrap_or(u64::MAX),
    )
    .map_err(|e| RpcError::errno_detail(-libc::EINVAL, e))?;
    Ok(Some(HistogramConfig { shape, ops }))
}

fn bdev_enable_histogram(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: EnableHistogram = decl::decode(params)?;
    let dev = host
        .find_bdev(&p.name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    let name = dev.info().name.clone();
    let switch = host
        .registry
        .histogram(&name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    match config_of(&p)? {
        Some(c) => {
            switch.enable(c);
            log::info!(
                "bdev {name}: latency histogram on (granularity {}, {})",
                c.shape.granularity,
                p.opc.as_deref().unwrap_or("every I/O type")
            );
        }
        None => {
            switch.disable();
            log::info!("bdev {name}: latency histogram off");
        }
    }
    host.set_histogram_call(&name, p.enable.then(|| p.clone()));
    Ok(Value::Bool(true))
}

/// `bdev_get_histogram`'s result for merged counts `h`, in SPDK's member order.
pub fn histogram_json(h: &HistogramData) -> Value {
    json!({
        "histogram": base64::engine::general_purpose::STANDARD.encode(h.to_le_bytes()),
        "granularity": h.shape.granularity,
        "min_range": h.shape.min_range,
        "max_range": h.shape.max_range,
        "tsc_rate": TSC_RATE,
    })
}

/// Decodes `bdev_get_histogram`'s result back into counts.
pub fn histogram_from_json(v: &Value) -> Result<HistogramData, String> {
    let num = |k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("the reply has no \"{k}\""))
    };
    let shape = HistogramShape {
        granularity: num("granularity")?,
        min_range: num("min_range")?,
        max_range: num("max_range")?,
    };
    if shape.granularity == 0 || shape.granularity > 30 || shape.min_range > shape.max_range {
        return Err(format!(
            "the reply's histogram shape {shape:?} is not valid"
        ));
    }
    let b64 = v
        .get("histogram")
        .and_then(Value::as_str)
        .ok_or("the reply has no \"histogram\"")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("the reply's histogram is not base64: {e}"))?;
    HistogramData::from_le_bytes(shape, &bytes).ok_or_else(|| {
        format!(
            "the reply's histogram has {} bytes, its shape needs {}",
            bytes.len(),
            shape.num_buckets() * 8
        )
    })
}

fn bdev_get_histogram(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetHistogram = decl::decode(params)?;
    let dev = host
        .find_bdev(&p.name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    let name = &dev.info().name;
    let merged = host
        .registry
        .histogram(name)
        .and_then(|s| s.merged())
        .ok_or_else(|| {
            // SPDK: a channel without a histogram fails the merge with -EFAULT.
            RpcError::new(
                code::INTERNAL_ERROR,
                format!(
                    "{}: the latency histogram of bdev {name} is off (bdev_enable_histogram {name} -e)",
                    strerror(libc::EFAULT)
                ),
            )
        })?;
    Ok(histogram_json(&merged))
}

/// `bdev_enable_histogram` calls that turn every enabled histogram back on (for save_config,
/// as SPDK writes them: name, enable and opc only).
pub fn config(host: &Arc<BdevHost>) -> Vec<Value> {
    host.bdevs_in_order()
        .iter()
        .filter_map(|d| host.histogram_call(&d.info().name))
        .map(|p| {
            let saved = EnableHistogram {
                name: p.name.clone(),
                enable: true,
                opc: p.opc.clone(),
                ..EnableHistogram::default()
            };
            call("bdev_enable_histogram", &saved)
        })
        .collect()
}

/// Percentiles `table` lists.
const PERCENTILES: [f64; 7] = [50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];

/// Width of the longest bar of `table`'s chart.
const BAR_WIDTH: usize = 50;

/// `bdev_get_histogram`'s result as a person reads it (`pmio-rpc bdev_get_histogram --table`):
/// the I/O count, a table of percentiles, and a bar chart with one row per doubling of the
/// latency (SPDK's ranges), in microseconds.
pub fn table(v: &Value) -> Result<String, String> {
    use std::fmt::Write;
    let h = histogram_from_json(v)?;
    let tsc = v
        .get("tsc_rate")
        .and_then(Value::as_u64)
        .unwrap_or(TSC_RATE) as f64;
    let us = |ticks: u64| ticks as f64 * 1e6 / tsc;
    let total = h.total();
    let mut out = String::new();
    let _ = writeln!(out, "Latency histogram: {total} I/Os");
    if total == 0 {
        return Ok(out);
    }
    let nz = h.nonzero();
    let _ = writeln!(out, "\n  percentile   latency (us, at most)");
    let _ = writeln!(out, "  {:>10}   {:>12.3}", "min", us(nz[0].start));
    for p in PERCENTILES {
        let label = if p == 100.0 {
            "max".to_string()
        } else {
            format!("p{p}")
        };
        let _ = writeln!(out, "  {label:>10}   {:>12.3}", us(h.percentile(p)));
    }
    // One row per range: buckets of one range share a power of two.
    let per = h.shape.buckets_per_range();
    let mut rows: Vec<(u64, u64, u64)> = Vec::new();
    for (r, chunk) in h.buckets.chunks(per).enumerate() {
        let count: u64 = chunk.iter().sum();
        if count > 0 {
            let first = r * per;
            rows.push((
                h.shape.bucket_start(first),
                h.shape.bucket_end(first + per - 1),
                count,
            ));
        }
    }
    let top = rows.iter().map(|r| r.2).max().unwrap_or(1);
    let _ = writeln!(
        out,
        "\n  {:>23}   {:<BAR_WIDTH$}  {:>7}  {:>10}",
        "range (us)", "", "share", "I/Os"
    );
    for (start, end, count) in rows {
        let len = ((count as f64 / top as f64) * BAR_WIDTH as f64)
            .round()
            .max(1.0) as usize;
        let _ = writeln!(
            out,
            "  {:>10.3} - {:>10.3}   {:<BAR_WIDTH$}  {:>6.2}%  {count:>10}",
            us(start),
            us(end),
            "#".repeat(len),
            count as f64 * 100.0 / total as f64
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opc_names_are_spdks() {
        assert_eq!(op_filter(None).unwrap(), OpSet::ALL);
        assert_eq!(
            op_filter(Some("unmap")).unwrap(),
            OpSet::EMPTY.with(Op::Discard)
        );
        assert_eq!(op_filter(Some("reset")).unwrap(), OpSet::EMPTY);
        let e = op_filter(Some("reed")).unwrap_err();
        assert_eq!(e.code, code::INTERNAL_ERROR);
        assert!(e.message.starts_with("Invalid Io type"), "{}", e.message);
    }

    #[test]
    fn reply_round_trips() {
        let mut h = HistogramData::new(HistogramShape::default());
        h.tally(12_345);
        h.tally(7);
        let v = histogram_json(&h);
        assert_eq!(v["tsc_rate"], TSC_RATE);
        assert_eq!(histogram_from_json(&v).unwrap(), h);
        let mut bad = v.clone();
        bad["max_range"] = json!(56);
        assert!(histogram_from_json(&bad).is_err());
    }

    #[test]
    fn table_shows_percentiles_and_one_bar_per_range() {
        let mut h = HistogramData::new(HistogramShape::default());
        for _ in 0..900 {
            h.tally(10_000); // 10 us
        }
        for _ in 0..100 {
            h.tally(1_000_000); // 1 ms
        }
        let t = table(&histogram_json(&h)).unwrap();
        assert!(t.starts_with("Latency histogram: 1000 I/Os"), "{t}");
        let line = |label: &str| {
            t.lines()
                .find(|l| l.split_whitespace().next() == Some(label))
                .unwrap_or_else(|| panic!("no {label} in {t}"))
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<f64>()
                .unwrap()
        };
        assert!((10.0..10.2).contains(&line("p50")), "{t}");
        assert!((1000.0..1016.0).contains(&line("p99")), "{t}");
        let bars: Vec<&str> = t.lines().filter(|l| l.contains('#')).collect();
        assert_eq!(bars.len(), 2, "{t}");
        assert_eq!(bars[0].matches('#').count(), BAR_WIDTH);
        assert!(
            bars[0].contains("90.00%") && bars[1].contains("10.00%"),
            "{t}"
        );
        assert_eq!(bars[1].matches('#').count(), BAR_WIDTH / 9 + 1);
    }
}
