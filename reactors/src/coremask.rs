//! Core masks as SPDK and fio users write them: `0x3`, `3`, `[0,1]`, `0-3,6`.
//!
//! Grammar (whitespace around the whole string and around list items is ignored):
//! - `0x…` / `0X…`: a hex bit mask, bit N = core N (SPDK `-m 0x3`). Any length up to
//!   [`MAX_CORES`] bits.
//! - bare hex digits without `,` or `-` (`3`, `f0`): also a hex mask, as SPDK reads `-m 3`.
//!   So `-m 1` means core 0; write `[1]` for core 1.
//! - `[items]` or bare `items` containing `,` or `-`: a decimal list of cores and inclusive
//!   ranges, `0-3,6` or `[0,1]`.

use std::fmt;
use std::str::FromStr;

use crate::sys::{self, MAX_CORES};

/// Why a core mask was refused. Each variant names the input and the problem.
#[derive(Debug, thiserror::Error)]
pub enum CoreMaskError {
    /// The string is empty or selects no core (`0x0`, `[]`).
    #[error("core mask {input:?} selects no cores")]
    Empty {
        /// The mask as given.
        input: String,
    },
    /// A `[` without its `]`, or the other way round.
    #[error("core mask {input:?} has unbalanced brackets (lists look like [0,1] or 0-3,6)")]
    UnbalancedBracket {
        /// The mask as given.
        input: String,
    },
    /// A character that is not a hex digit in a hex mask.
    #[error("core mask {input:?}: {ch:?} is not a hex digit (hex masks look like 0x3)")]
    BadHexDigit {
        /// The mask as given.
        input: String,
        /// The offending character.
        ch: char,
    },
    /// A list item that is neither a core number nor a range.
    #[error(
        "core mask {input:?}: {item:?} is not a core number or range (lists look like 0-3,6 or [0,1])"
    )]
    BadListItem {
        /// The mask as given.
        input: String,
        /// The offending list item.
        item: String,
    },
    /// A range whose start is above its end (`3-1`).
    #[error("core mask {input:?}: range {start}-{end} is reversed")]
    ReversedRange {
        /// The mask as given.
        input: String,
        /// First core of the range.
        start: u32,
        /// Last core of the range.
        end: u32,
    },
    /// A core number at or beyond [`MAX_CORES`].
    #[error("core mask {input:?}: core {core} is beyond the largest supported core {max}", max = MAX_CORES - 1)]
    CoreTooLarge {
        /// The mask as given.
        input: String,
        /// The core named (saturated to `u64::MAX` when even larger).
        core: u64,
    },
    /// The core does not exist on this machine or this process may not run on it.
    #[error(
        "core {core} does not exist or is not available to this process (available cores: {available})"
    )]
    Unavailable {
        /// The unavailable core.
        core: u32,
        /// The cores this process may use, as a list (`0-1`).
        available: String,
    },
    /// `sched_getaffinity` failed, so availability could not be checked.
    #[error("cannot read this process's CPU affinity: {0}")]
    Affinity(#[source] std::io::Error),
}

/// A set of cores, ascending and without duplicates, never empty.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CoreMask {
    cores: Vec<u32>,
}

impl CoreMask {
    /// Parses a mask (see the module grammar) and checks that every core exists and is
    /// available to this process (`sched_getaffinity`).
    pub fn parse(input: &str) -> Result<CoreMask, CoreMaskError> {
        let mask = CoreMask::parse_unchecked(input)?;
        mask.check_available()?;
        Ok(mask)
    }

    /// Parses a mask without checking the cores against this machine.
    pub fn parse_unchecked(input: &str) -> Result<CoreMask, CoreMaskError> {
        let text = input.trim();
        if text.is_empty() {
            return Err(CoreMaskError::Empty {
                input: input.to_string(),
            });
        }
        let cores = if let Some(rest) = text.strip_prefix('[') {
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| CoreMaskError::UnbalancedBracket {
                    input: input.to_string(),
                })?;
            parse_list(input, inner)?
        } else if text.ends_with(']') {
            return Err(CoreMaskError::UnbalancedBracket {
                input: input.to_string(),
            });
        } else if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            parse_hex(input, hex)?
        } else if text.contains([',', '-']) {
            parse_list(input, text)?
        } else {
            parse_hex(input, text)?
        };
        CoreMask::from_sorted(input, cores)
    }

    /// Builds a mask from core numbers (any order, duplicates allowed), without checking
    /// availability.
    pub fn from_cores(cores: impl IntoIterator<Item = u32>) -> Result<CoreMask, CoreMaskError> {
        let mut v: Vec<u32> = cores.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let input = format!("{v:?}");
        if let Some(&c) = v.iter().find(|&&c| c >= MAX_CORES) {
            return Err(CoreMaskError::CoreTooLarge {
                input,
                core: c as u64,
            });
        }
        CoreMask::from_sorted(&input, v)
    }

    /// All cores this process may run on (`sched_getaffinity`).
    pub fn available() -> Result<CoreMask, CoreMaskError> {
        let cores = sys::available_cores().map_err(CoreMaskError::Affinity)?;
        CoreMask::from_sorted("<affinity>", cores)
    }

    /// Fails with [`CoreMaskError::Unavailable`] naming the first core this process may not
    /// run on.
    pub fn check_available(&self) -> Result<(), CoreMaskError> {
        let avail = CoreMask::available()?;
        match self.cores.iter().find(|c| !avail.contains(**c)) {
            None => Ok(()),
            Some(&core) => Err(CoreMaskError::Unavailable {
                core,
                available: avail.to_list(),
            }),
        }
    }

    /// The cores, ascending.
    pub fn cores(&self) -> &[u32] {
        &self.cores
    }

    /// Number of cores (≥ 1).
    pub fn len(&self) -> usize {
        self.cores.len()
    }

    /// Always false: a `CoreMask` selects at least one core.
    pub fn is_empty(&self) -> bool {
        self.cores.is_empty()
    }

    /// Whether `core` is in the mask.
    pub fn contains(&self, core: u32) -> bool {
        self.cores.binary_search(&core).is_ok()
    }

    /// The lowest core (SPDK's main core by default).
    pub fn first(&self) -> u32 {
        self.cores[0]
    }

    /// The largest core.
    pub fn last(&self) -> u32 {
        self.cores[self.cores.len() - 1]
    }

    /// The mask as SPDK prints it: `0x3`.
    pub fn to_hex(&self) -> String {
        let digits = (self.last() / 4 + 1) as usize;
        let mut nibbles = vec![0u8; digits];
        for &c in &self.cores {
            nibbles[(c / 4) as usize] |= 1 << (c % 4);
        }
        let mut s = String::with_capacity(digits + 2);
        s.push_str("0x");
        for &n in nibbles.iter().rev() {
            s.push(char::from_digit(n as u32, 16).unwrap_or('0'));
        }
        s
    }

    /// The mask as a list without brackets: `0-3,6`. Note that a single core prints as `5`,
    /// which [`CoreMask::parse`] reads as a hex mask; [`fmt::Display`] adds brackets.
    pub fn to_list(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < self.cores.len() {
            let start = self.cores[i];
            let mut end = start;
            while i + 1 < self.cores.len() && self.cores[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !out.is_empty() {
                out.push(',');
            }
            if start == end {
                out.push_str(&start.to_string());
            } else {
                out.push_str(&format!("{start}-{end}"));
            }
            i += 1;
        }
        out
    }

    fn from_sorted(input: &str, cores: Vec<u32>) -> Result<CoreMask, CoreMaskError> {
        if cores.is_empty() {
            return Err(CoreMaskError::Empty {
                input: input.to_string(),
            });
        }
        debug_assert!(cores.windows(2).all(|w| w[0] < w[1]));
        Ok(CoreMask { cores })
    }
}

/// Prints the bracketed list form, `[0-3,6]`, which [`CoreMask::parse`] reads back.
impl fmt::Display for CoreMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.to_list())
    }
}

impl fmt::Debug for CoreMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CoreMask({self})")
    }
}

/// Same as [`CoreMask::parse`] (checks availability).
impl FromStr for CoreMask {
    type Err = CoreMaskError;

    fn from_str(s: &str) -> Result<CoreMask, CoreMaskError> {
        CoreMask::parse(s)
    }
}

/// Parses hex digits (no prefix); bit N of the number is core N.
fn parse_hex(input: &str, digits: &str) -> Result<Vec<u32>, CoreMaskError> {
    if digits.is_empty() {
        return Err(CoreMaskError::Empty {
            input: input.to_string(),
        });
    }
    let mut cores = Vec::new();
    for (pos, ch) in digits.chars().rev().enumerate() {
        let nibble = ch.to_digit(16).ok_or(CoreMaskError::BadHexDigit {
            input: input.to_string(),
            ch,
        })?;
        for bit in 0..4u64 {
            if nibble & (1 << bit) == 0 {
                continue;
            }
            let core = (pos as u64).saturating_mul(4).saturating_add(bit);
            if core >= MAX_CORES as u64 {
                return Err(CoreMaskError::CoreTooLarge {
                    input: input.to_string(),
                    core,
                });
            }
            cores.push(core as u32);
        }
    }
    cores.sort_unstable();
    Ok(cores)
}

/// Parses a comma-separated list of decimal cores and inclusive ranges.
fn parse_list(input: &str, list: &str) -> Result<Vec<u32>, CoreMaskError> {
    let mut cores = Vec::new();
    if list.trim().is_empty() {
        return Ok(cores);
    }
    for raw in list.split(',') {
        let item = raw.trim();
        let bad = || CoreMaskError::BadListItem {
            input: input.to_string(),
            item: item.to_string(),
        };
        let (start, end) = match item.split_once('-') {
            Some((a, b)) => (
                parse_core(input, a.trim()).ok_or_else(bad)??,
                parse_core(input, b.trim()).ok_or_else(bad)??,
            ),
            None => {
                let c = parse_core(input, item).ok_or_else(bad)??;
                (c, c)
            }
        };
        if start > end {
            return Err(CoreMaskError::ReversedRange {
                input: input.to_string(),
                start,
                end,
            });
        }
        cores.extend(start..=end);
    }
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

/// A decimal core number: `None` when not all ASCII digits, `Some(Err)` when too large.
fn parse_core(input: &str, s: &str) -> Option<Result<u32, CoreMaskError>> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let core = s.parse::<u64>().unwrap_or(u64::MAX);
    if core >= MAX_CORES as u64 {
        return Some(Err(CoreMaskError::CoreTooLarge {
            input: input.to_string(),
            core,
        }));
    }
    Some(Ok(core as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cores(s: &str) -> Vec<u32> {
        CoreMask::parse_unchecked(s).unwrap().cores().to_vec()
    }

    #[test]
    fn spdk_and_list_forms() {
        assert_eq!(cores("0x3"), vec![0, 1]);
        assert_eq!(cores("0X3"), vec![0, 1]);
        assert_eq!(cores("3"), vec![0, 1]);
        assert_eq!(cores("1"), vec![0]);
        assert_eq!(cores("0x10"), vec![4]);
        assert_eq!(cores("f0"), vec![4, 5, 6, 7]);
        assert_eq!(cores("[0,1]"), vec![0, 1]);
        assert_eq!(cores("[1]"), vec![1]);
        assert_eq!(cores("0-3,6"), vec![0, 1, 2, 3, 6]);
        assert_eq!(cores("[0-3,6]"), vec![0, 1, 2, 3, 6]);
        assert_eq!(cores(" [ 2 , 0 - 1 , 1 ] "), vec![0, 1, 2]);
        assert_eq!(cores("5,3"), vec![3, 5]);
        assert_eq!(cores("1023"), vec![0, 1, 5, 12]);
        assert_eq!(cores("[1023]"), vec![1023]);
        let long = format!("0x1{}", "0".repeat(200));
        assert_eq!(cores(&long), vec![800]);
    }

    #[test]
    fn bad_masks_name_the_problem() {
        let err = |s: &str| CoreMask::parse_unchecked(s).unwrap_err();
        assert!(matches!(err(""), CoreMaskError::Empty { .. }));
        assert!(matches!(err("0x0"), CoreMaskError::Empty { .. }));
        assert!(matches!(err("0x"), CoreMaskError::Empty { .. }));
        assert!(matches!(err("[]"), CoreMaskError::Empty { .. }));
        assert!(matches!(
            err("[0,1"),
            CoreMaskError::UnbalancedBracket { .. }
        ));
        assert!(matches!(
            err("0,1]"),
            CoreMaskError::UnbalancedBracket { .. }
        ));
        assert!(matches!(
            err("0x3g"),
            CoreMaskError::BadHexDigit { ch: 'g', .. }
        ));
        assert!(matches!(err("cores"), CoreMaskError::BadHexDigit { .. }));
        let e = err("0-3,x");
        assert!(matches!(&e, CoreMaskError::BadListItem { item, .. } if item == "x"));
        assert!(e.to_string().contains("\"x\" is not a core number"), "{e}");
        assert!(matches!(err("[0,,1]"), CoreMaskError::BadListItem { .. }));
        assert!(matches!(err("1-2-3"), CoreMaskError::BadListItem { .. }));
        assert!(matches!(err("-1"), CoreMaskError::BadListItem { .. }));
        assert!(matches!(err("[+1]"), CoreMaskError::BadListItem { .. }));
        assert!(matches!(
            err("3-1"),
            CoreMaskError::ReversedRange {
                start: 3,
                end: 1,
                ..
            }
        ));
        assert!(matches!(
            err("[1024]"),
            CoreMaskError::CoreTooLarge { core: 1024, .. }
        ));
        assert!(matches!(
            err("[99999999999999999999999]"),
            CoreMaskError::CoreTooLarge { .. }
        ));
        let huge = format!("0x1{}", "0".repeat(256));
        assert!(matches!(
            err(&huge),
            CoreMaskError::CoreTooLarge { core: 1024, .. }
        ));
    }

    #[test]
    fn availability_is_checked() {
        let avail = CoreMask::available().unwrap();
        // The whole affinity set and its first core are fine, in every notation.
        CoreMask::parse(&avail.to_hex()).unwrap();
        CoreMask::parse(&avail.to_string()).unwrap();
        CoreMask::parse(&format!("[{}]", avail.first())).unwrap();
        let missing = avail.last() + 1;
        let e = CoreMask::parse(&format!("[{}]", missing)).unwrap_err();
        assert!(
            matches!(&e, CoreMaskError::Unavailable { core, .. } if *core == missing),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("core {missing} does not exist")),
            "{msg}"
        );
        assert!(msg.contains(&avail.to_list()), "{msg}");
        assert!("[1023]".parse::<CoreMask>().is_err() || avail.contains(1023));
    }

    #[test]
    fn printing() {
        let m = CoreMask::from_cores([6, 0, 1, 2, 3, 3]).unwrap();
        assert_eq!(m.to_list(), "0-3,6");
        assert_eq!(m.to_string(), "[0-3,6]");
        assert_eq!(m.to_hex(), "0x4f");
        assert_eq!(CoreMask::from_cores([4]).unwrap().to_hex(), "0x10");
        assert_eq!((m.first(), m.last(), m.len()), (0, 6, 5));
        assert!(m.contains(6) && !m.contains(5) && !m.is_empty());
        assert!(CoreMask::from_cores([]).is_err());
        assert!(CoreMask::from_cores([MAX_CORES]).is_err());
    }

    proptest! {
        #[test]
        fn prop_parse_never_panics(s in "\\PC{0,40}") {
            let _ = CoreMask::parse_unchecked(&s);
        }

        #[test]
        fn prop_parse_never_panics_on_mask_alphabet(s in "[\\[\\]0-9a-fxX, -]{0,40}") {
            let _ = CoreMask::parse_unchecked(&s);
        }

        #[test]
        fn prop_round_trip(set in proptest::collection::btree_set(0u32..MAX_CORES, 1..40)) {
            let m = CoreMask::from_cores(set.iter().copied()).unwrap();
            let expect: Vec<u32> = set.iter().copied().collect();
            prop_assert_eq!(m.cores(), expect.as_slice());
            prop_assert_eq!(&CoreMask::parse_unchecked(&m.to_string()).unwrap(), &m);
            prop_assert_eq!(&CoreMask::parse_unchecked(&m.to_hex()).unwrap(), &m);
            prop_assert_eq!(&CoreMask::parse_unchecked(&format!("[{}]", m.to_list())).unwrap(), &m);
            if m.len() > 1 {
                // Unbracketed lists of several cores always contain ',' or '-'.
                prop_assert_eq!(&CoreMask::parse_unchecked(&m.to_list()).unwrap(), &m);
            }
        }

        #[test]
        fn prop_hex_u64_matches_bits(v in 1u64..) {
            let m = CoreMask::parse_unchecked(&format!("{v:#x}")).unwrap();
            let expect: Vec<u32> = (0..64).filter(|b| v & (1 << b) != 0).collect();
            prop_assert_eq!(m.cores(), expect.as_slice());
        }
    }
}
