//! Each core's CPU times from `/proc/stat`, as SPDK's `framework_get_reactors` reports them
//! (`usr`, `sys`, `irq`: clock ticks, USER_HZ, since the app started; `irq` counts hard and
//! soft interrupts). Read on the RPC thread, never on a reactor.

/// One core's times, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub usr: u64,
    pub sys: u64,
    /// irq + softirq, as SPDK's `parse_proc_stat` adds them.
    pub irq: u64,
}

impl CpuTimes {
    /// The times spent since `start` (SPDK's `app_get_proc_stat`).
    pub fn since(self, start: CpuTimes) -> CpuTimes {
        CpuTimes {
            usr: self.usr.saturating_sub(start.usr),
            sys: self.sys.saturating_sub(start.sys),
            irq: self.irq.saturating_sub(start.irq),
        }
    }
}

/// The times of each of `cores`, in their order; `None` for a core the file does not list
/// (or when it cannot be read: SPDK then reports 0s).
pub(crate) fn read(cores: &[u32]) -> Vec<Option<CpuTimes>> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    cores.iter().map(|&c| parse(&text, c)).collect()
}

/// Core `core`'s line of `/proc/stat`'s `text`: `cpuN user nice system idle iowait irq
/// softirq ...`.
fn parse(text: &str, core: u32) -> Option<CpuTimes> {
    let want = format!("cpu{core}");
    let line = text
        .lines()
        .find(|l| l.split_ascii_whitespace().next() == Some(want.as_str()))?;
    let f: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| f.get(i).copied();
    Some(CpuTimes {
        usr: at(0)?,
        sys: at(2)?,
        irq: at(5)? + at(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10 1 20 300 4 5 6 0 0 0\n\
                        cpu0 7 1 11 150 2 3 4 0 0 0\n\
                        cpu2 3 0 9 150 2 2 2 0 0 0\n\
                        intr 12345\n";

    #[test]
    fn a_cores_line_and_a_missing_one() {
        assert_eq!(
            parse(STAT, 0),
            Some(CpuTimes {
                usr: 7,
                sys: 11,
                irq: 7
            })
        );
        assert_eq!(parse(STAT, 2).map(|t| t.irq), Some(4));
        // `cpu1` is offline; `cpu` alone is the sum, never a core.
        assert_eq!(parse(STAT, 1), None);
        assert_eq!(parse("cpu0 1 2\n", 0), None);
        let start = parse(STAT, 0).unwrap();
        let later = CpuTimes {
            usr: 9,
            sys: 11,
            irq: 8,
        };
        assert_eq!(
            later.since(start),
            CpuTimes {
                usr: 2,
                sys: 0,
                irq: 1
            }
        );
    }

    #[test]
    fn this_machines_cores_are_read() {
        let t = read(&[0]);
        assert_eq!(t.len(), 1);
        if std::path::Path::new("/proc/stat").exists() {
            assert!(t[0].is_some(), "cpu0 in /proc/stat");
        }
    }
}
