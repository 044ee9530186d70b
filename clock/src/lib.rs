//! pmio's clock: monotonic nanoseconds on CLOCK_MONOTONIC's scale, cheap enough to read once
//! per batch on the I/O path and once per reactor turn. The block layer (request stamps,
//! latency) and the reactors (turns, timed pollers) read this one clock, so their values
//! compare.

/// Monotonic clock in nanoseconds, on CLOCK_MONOTONIC's scale. Read once per batch on the
/// I/O path, never per I/O.
///
/// Where the kernel itself keeps time with the TSC (clocksource `tsc`, CPU flags
/// `constant_tsc` and `nonstop_tsc`) it is the TSC, scaled by a multiply and a shift, from one
/// CLOCK_MONOTONIC reading: the vDSO call costs more (its data page is cold after every wait in
/// the kernel). The rate is measured once, at the first call, against CLOCK_MONOTONIC over
/// ~5 ms spent asleep. Elsewhere it is `clock_gettime(CLOCK_MONOTONIC)`.
#[inline]
pub fn now_ns() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if let Some(t) = TSC.get_or_init(Tsc::calibrate) {
        return t.now_ns();
    }
    monotonic_ns()
}

/// Which clock [`now_ns`] reads: `"tsc"` or `"monotonic"`.
pub fn clock_source() -> &'static str {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if TSC.get_or_init(Tsc::calibrate).is_some() {
        return "tsc";
    }
    "monotonic"
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
static TSC: std::sync::OnceLock<Option<Tsc>> = std::sync::OnceLock::new();

/// ns = mono_base + (tsc - tsc_base) * mult >> 32
#[cfg(all(target_arch = "x86_64", not(miri)))]
struct Tsc {
    mono_base: u64,
    tsc_base: u64,
    mult: u64,
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
impl Tsc {
    #[cold]
    fn calibrate() -> Option<Tsc> {
        if !tsc_is_reliable() {
            return None;
        }
        let (t0, c0) = tsc_sample();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (t1, c1) = tsc_sample();
        let ns = t1.saturating_sub(t0).max(1);
        let ticks = c1.saturating_sub(c0).max(1);
        let mult = ((u128::from(ns) << 32) / u128::from(ticks)).min(u128::from(u64::MAX));
        log::debug!("clock: TSC at {:.3} GHz", ticks as f64 / ns as f64);
        Some(Tsc {
            mono_base: t0,
            tsc_base: c0,
            mult: mult as u64,
        })
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        let d = rdtsc().saturating_sub(self.tsc_base);
        self.mono_base + ((u128::from(d) * u128::from(self.mult)) >> 32) as u64
    }
}

/// One (CLOCK_MONOTONIC ns, TSC) pair: the TSC read between two clock reads, the pair with
/// the shortest bracket of five tries, its time the bracket's midpoint.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn tsc_sample() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let a = monotonic_ns();
        let c = rdtsc();
        let b = monotonic_ns();
        let width = b.saturating_sub(a);
        if width < best.0 {
            best = (width, a + width / 2, c);
        }
    }
    (best.1, best.2)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and exists on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The kernel uses the TSC as clocksource and the CPU says it is invariant.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn tsc_is_reliable() -> bool {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    if source.trim() != "tsc" {
        return false;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic() {
        let mut last = now_ns();
        for _ in 0..10_000 {
            let t = now_ns();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
    }

    #[test]
    fn clock_follows_clock_monotonic() {
        let (a, m0) = (now_ns(), monotonic_ns());
        // Same scale: within a millisecond of CLOCK_MONOTONIC (plus 0.1 % of its value since
        // the calibration, which is at most the test binary's age here).
        assert!(a.abs_diff(m0) < 1_000_000, "{a} vs {m0}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (b, m1) = (now_ns(), monotonic_ns());
        let el = m1 - m0;
        // Rate within 1 % + 0.5 ms of CLOCK_MONOTONIC's over 50 ms.
        assert!(
            (b - a).abs_diff(el) < el / 100 + 500_000,
            "{} vs {el} ({})",
            b - a,
            clock_source()
        );
    }
}
