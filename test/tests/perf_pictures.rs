//! pmio-perf's pictures: `--latency-histogram` prints SPDK's buckets as spdk_nvme_perf `-LL`
//! does, and counts every I/O of the timed phase once, at no less than the device's latency;
//! `--plot` writes an SVG (parsed here as XML) with one IOPS line per core and the latency
//! bars.

mod perf_util;

use perf_util::{json, perf};

/// The null device's completion delay.
const LATENCY_US: f64 = 100.0;

#[test]
fn perf_latency_histogram_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("run.svg");
    let dev = format!("null:latency_us={LATENCY_US}");
    let out = perf(&[
        "--dev",
        &dev,
        "-m",
        "0x1",
        "-d",
        "16",
        "-s",
        "8",
        "-c",
        "8",
        "-t",
        "2",
        "--warmup",
        "0.5",
        "--latency-histogram",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ios: u64 = text
        .split("ios=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ios= in {text}"));

    // spdk_nvme_perf -LL's two sections.
    let summary = text
        .find("Summary latency data for Null0")
        .unwrap_or_else(|| panic!("{text}"));
    let hist = text.find("Latency histogram for Null0").unwrap();
    assert!(summary < hist);
    let cut: Vec<(f64, f64)> = text[summary..hist]
        .lines()
        .filter_map(|l| {
            let (p, v) = l.split_once("% :")?;
            Some((
                p.trim().parse().ok()?,
                v.trim().strip_suffix("us")?.parse().ok()?,
            ))
        })
        .collect();
    assert_eq!(cut.first().map(|c| c.0), Some(1.0), "{text}");
    assert!(
        cut.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{text}"
    );
    // "%9.3f - %9.3f: %9.4f%%  (%9u)": start, end, cumulative share, count.
    let rows: Vec<(f64, f64, f64, u64)> = text[hist..]
        .lines()
        .filter_map(|l| {
            let (range, rest) = l.split_once(": ")?;
            let (a, b) = range.split_once(" - ")?;
            let (pct, n) = rest.split_once("%  (")?;
            Some((
                a.trim().parse().ok()?,
                b.trim().parse().ok()?,
                pct.trim().parse().ok()?,
                n.trim_end_matches(')').trim().parse().ok()?,
            ))
        })
        .collect();
    assert!(!rows.is_empty(), "{text}");
    assert_eq!(
        rows.iter().map(|r| r.3).sum::<u64>(),
        ios,
        "every I/O of the timed phase, once: {text}"
    );
    assert!(
        rows[0].1 > LATENCY_US,
        "nothing completes before its delay: {text}"
    );
    assert!((rows.last().unwrap().2 - 100.0).abs() < 1e-9, "{text}");

    // The picture: valid XML, both charts, one IOPS line, the latency bars.
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&svg_text).expect("the SVG is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect();
    for want in [
        "IOPS per second, per core",
        "Latency distribution (share of I/Os per doubling)",
        "core 0",
        "time (s)",
    ] {
        assert!(texts.iter().any(|t| t == want), "{want:?} in {texts:?}");
    }
    // The core's line: a polyline drawn 2 wide with a point per second of the run.
    let lines: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
        .collect();
    let most_points = lines
        .iter()
        .map(|n| {
            n.attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(most_points >= 2, "an IOPS line with a point per second");
    let bars = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some("#0000FF"))
        .count();
    assert!(bars >= 1, "latency bars");
}

#[test]
fn perf_latency_histogram_in_json() {
    let out = perf(&[
        "--dev",
        "null:latency_us=50",
        "-m",
        "0x1",
        "-d",
        "8",
        "-s",
        "4",
        "-c",
        "4",
        "-t",
        "1",
        "--latency-histogram",
        "--json",
    ]);
    assert!(out.status.success());
    let v = json(&out);
    let h = &v["latency_histograms"][0];
    assert_eq!(h["device"], "Null0", "{v}");
    let buckets = h["buckets"].as_array().unwrap();
    let n: u64 = buckets.iter().map(|b| b[2].as_u64().unwrap()).sum();
    assert_eq!(n, v["ios"].as_u64().unwrap(), "{v}");
    assert!(buckets[0][1].as_u64().unwrap() > 50_000, "{v}");
}
