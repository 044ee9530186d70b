//! Command-line options of the examples: `--name VALUE` pairs and bare flags, nothing more.

/// The number after `--name`, or `default` when absent.
///
/// # Panics
///
/// When the value is not a number (an example's usage error).
pub fn number(name: &str, default: u64) -> u64 {
    value(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
    })
}

/// The word after `--name`, if given.
pub fn value(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next()?;
    args.next()
}
