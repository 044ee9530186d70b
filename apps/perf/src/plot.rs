//! `--plot FILE.svg`: one picture of the run, drawn with plotters' SVG backend (text is SVG
//! `<text>`, sized by plotters' built-in estimate: no font files are read). Top: IOPS each
//! second, one line per core. Bottom: the latency distribution, the share of I/Os in each
//! doubling of latency.

use std::path::Path;

use anyhow::{Context, anyhow};
use hdrhistogram::Histogram;
use plotters::prelude::*;

/// IOPS of each core over one second of the run.
#[derive(Clone, Debug)]
pub struct Second {
    /// End of the second, since the start of the run (s).
    pub t: f64,
    /// (core, IOPS) of each core.
    pub cores: Vec<(u32, f64)>,
}

/// One bar of the latency distribution: latencies in `[lo, hi)` ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatBar {
    pub lo: u64,
    pub hi: u64,
    pub count: u64,
}

/// The latencies of `hist` grouped by power of two (ns), lowest first, empty groups between the
/// first and the last kept (so the axis is continuous).
pub fn latency_bars(hist: &Histogram<u64>) -> Vec<LatBar> {
    let mut counts = [0u64; 64];
    for v in hist.iter_recorded() {
        let ns = v.value_iterated_to().max(1);
        counts[63 - ns.leading_zeros() as usize] += v.count_at_value();
    }
    let Some(first) = counts.iter().position(|&c| c > 0) else {
        return Vec::new();
    };
    let last = counts.iter().rposition(|&c| c > 0).unwrap_or(first);
    (first..=last)
        .map(|i| LatBar {
            lo: 1u64 << i,
            hi: 1u64.checked_shl(i as u32 + 1).unwrap_or(u64::MAX),
            count: counts[i],
        })
        .collect()
}

/// A latency in ns as a short label (`512ns`, `16us`, `2ms`).
fn lat_label(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}us", trim(ns as f64 / 1e3))
    } else if ns < 1_000_000_000 {
        format!("{}ms", trim(ns as f64 / 1e6))
    } else {
        format!("{}s", trim(ns as f64 / 1e9))
    }
}

fn trim(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Writes the picture to `path`.
pub fn write(path: &Path, title: &str, seconds: &[Second], bars: &[LatBar]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1000, 800)).into_drawing_area();
    draw(&root, title, seconds, bars).map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    root.present()
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("writing {}", path.display()))
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    seconds: &[Second],
    bars: &[LatBar],
) -> DrawResult {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically(400);
    iops_chart(&top, seconds)?;
    latency_chart(&bottom, bars)
}

fn iops_chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    s: &[Second],
) -> DrawResult {
    let t_max = s.last().map_or(1.0, |x| x.t).max(1.0);
    let y_max = s
        .iter()
        .flat_map(|x| x.cores.iter().map(|c| c.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption("IOPS per second, per core", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("IOPS")
        .y_label_formatter(&|v| format!("{:.0}k", v / 1e3))
        .draw()?;
    let mut cores: Vec<u32> = s.iter().flat_map(|x| x.cores.iter().map(|c| c.0)).collect();
    cores.sort_unstable();
    cores.dedup();
    for (i, core) in cores.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = s
            .iter()
            .filter_map(|x| x.cores.iter().find(|c| c.0 == *core).map(|c| (x.t, c.1)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(format!("core {core}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn latency_chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    bars: &[LatBar],
) -> DrawResult {
    let total: u64 = bars.iter().map(|b| b.count).sum::<u64>().max(1);
    let pct: Vec<f64> = bars
        .iter()
        .map(|b| b.count as f64 * 100.0 / total as f64)
        .collect();
    let n = bars.len().max(1) as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Latency distribution (share of I/Os per doubling)",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d((0u32..n).into_segmented(), 0.0..100.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("latency (from)")
        .y_desc("% of I/Os")
        .x_label_formatter(&|v| match v {
            SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => bars
                .get(*i as usize)
                .map(|b| lat_label(b.lo))
                .unwrap_or_default(),
            SegmentValue::Last => String::new(),
        })
        .draw()?;
    chart.draw_series(
        plotters::series::Histogram::vertical(&chart)
            .style(BLUE.mix(0.7).filled())
            .margin(3)
            .data(pct.iter().enumerate().map(|(i, &p)| (i as u32, p))),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_group_by_doubling() {
        let mut h = pmio_runtime::job::new_hist();
        h.record_n(1_000, 3).unwrap(); // [512, 1024)
        h.record_n(5_000, 1).unwrap(); // [4096, 8192)
        let bars = latency_bars(&h);
        assert_eq!(bars.len(), 4);
        assert_eq!((bars[0].lo, bars[0].hi, bars[0].count), (512, 1024, 3));
        assert_eq!(bars[1].count + bars[2].count, 0);
        assert_eq!((bars[3].lo, bars[3].count), (4096, 1));
        assert_eq!(lat_label(512), "512ns");
        assert_eq!(lat_label(16_384), "16us");
        assert_eq!(lat_label(2_097_152), "2.1ms");
    }
}
