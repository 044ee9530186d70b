//! mq-deadline's options (validated once, at construction) and its runtime tunables (Linux's
//! `queue/iosched/` sysfs files, set and read by name).

use crate::request::{Op, ReqFlags};

use super::Deadline;
use crate::sched::SchedError;

/// Largest number of scheduler tags over all owners: ids must fit 16 bits (the sort sets
/// pack them with the sector). A sort set shifts up to as many keys as it holds on insert and
/// remove, so very deep configurations pay a longer `memmove` (8 bytes per queued request of
/// the same class and direction).
pub const MAX_NR_REQUESTS: u32 = 1 << 16;

/// Linux's `BLKDEV_DEFAULT_RQ`.
const BLKDEV_DEFAULT_RQ: u32 = 128;

/// Largest time tunable accepted, in ms (one year).
const MAX_TIME_MS: u64 = 365 * 24 * 3600 * 1000;

/// Names of the runtime tunables, as Linux's sysfs files.
pub const TUNABLES: [&str; 7] = [
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "fifo_batch",
    "prio_aging_expire",
    "async_depth",
];

/// Default number of scheduler tags for a device queue of `queue_depth` entries:
/// `2 × min(queue_depth, 128)` (Linux's `blk_mq_default_nr_requests`).
pub fn default_nr_requests(queue_depth: u32) -> u32 {
    2 * queue_depth.clamp(1, BLKDEV_DEFAULT_RQ)
}

/// Tunables and device limits of an mq-deadline instance. Defaults are Linux's.
///
/// Times are in milliseconds, as in Linux's `queue/iosched/` sysfs files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineOptions {
    /// Deadline of a read after insertion (default 500 ms).
    pub read_expire_ms: u64,
    /// Deadline of a write after insertion (default 5000 ms).
    pub write_expire_ms: u64,
    /// How many times reads may be preferred over waiting writes (default 2).
    pub writes_starved: u32,
    /// Whether a request may be merged in front of a queued one (default true).
    pub front_merges: bool,
    /// Longest sequential batch dispatched in one direction (default 16).
    pub fifo_batch: u32,
    /// A BE or IDLE request waiting longer than this is dispatched ahead of higher classes
    /// (default 10000 ms; 0 is rejected: it would let BE and IDLE overtake RT).
    pub prio_aging_expire_ms: u64,
    /// Shallow tag depth for everything that is not a synchronous read (0 = `nr_requests`,
    /// Linux's current default).
    pub async_depth: u32,
    /// Scheduler tags: request ids are `0..nr_requests` (default `2 × min(QD, 128)` = 256).
    pub nr_requests: u32,
    /// Queues (reactors) that may insert and dispatch: owners are `0..owners` (default 64).
    pub owners: u16,
    /// Device limit: largest request, in blocks (default unlimited).
    pub max_transfer_blocks: u32,
    /// Device limit: no request crosses a multiple of this many blocks (default 0: none), as
    /// the block layer's split leaves none across the device's boundary.
    pub boundary_blocks: u32,
    /// Device limit: buffer segments per request (default 1: a pmio request carries one
    /// buffer, so only requests whose buffers are contiguous in memory merge).
    pub max_segments: u32,
    /// Device logical block size in bytes (to tell contiguous buffers; default 512).
    pub block_size: u32,
}

impl Default for DeadlineOptions {
    fn default() -> Self {
        DeadlineOptions {
            read_expire_ms: 500,
            write_expire_ms: 5000,
            writes_starved: 2,
            front_merges: true,
            fifo_batch: 16,
            prio_aging_expire_ms: 10_000,
            async_depth: 0,
            nr_requests: default_nr_requests(BLKDEV_DEFAULT_RQ),
            owners: 64,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
            max_segments: 1,
            block_size: 512,
        }
    }
}

impl DeadlineOptions {
    /// Defaults for a device with the given queue depth, transfer limit and block size.
    pub fn for_device(queue_depth: u32, max_transfer_blocks: u32, block_size: u32) -> Self {
        DeadlineOptions {
            nr_requests: default_nr_requests(queue_depth),
            max_transfer_blocks,
            block_size,
            ..DeadlineOptions::default()
        }
    }

    /// Defaults for a device opened by `owners` reactors, each with its own hardware queue of
    /// `queue_depth` entries: each owner gets `default_nr_requests(queue_depth)` scheduler
    /// tags of its own (Linux's per-hctx `sched_tags`), and owner `o`'s request ids are
    /// `o × per_owner + tag` (see [`DeadlineOptions::per_owner`]).
    pub fn for_queues(
        queue_depth: u32,
        owners: u16,
        max_transfer_blocks: u32,
        block_size: u32,
    ) -> Self {
        DeadlineOptions {
            nr_requests: default_nr_requests(queue_depth) * u32::from(owners.max(1)),
            owners: owners.max(1),
            max_transfer_blocks,
            block_size,
            ..DeadlineOptions::default()
        }
    }

    /// Scheduler tags per owner when ids are split evenly (`nr_requests / owners`): owner
    /// `o` uses ids `o × per_owner .. (o + 1) × per_owner`.
    pub fn per_owner(&self) -> u32 {
        self.nr_requests / u32::from(self.owners.max(1))
    }

    /// Checks every field; called once at construction so the hot path never re-checks.
    pub fn validate(&self) -> Result<(), SchedError> {
        let bad =
            |name: &'static str, reason: String| Err(SchedError::InvalidOption { name, reason });
        if self.prio_aging_expire_ms == 0 {
            return bad("prio_aging_expire", "must be greater than 0".into());
        }
        // Keep ms → ns conversions far from overflow (about 584 years in u64 ns).
        for (name, v) in [
            ("read_expire", self.read_expire_ms),
            ("write_expire", self.write_expire_ms),
            ("prio_aging_expire", self.prio_aging_expire_ms),
        ] {
            if v > MAX_TIME_MS {
                return bad(name, format!("{v} ms exceeds {MAX_TIME_MS} ms"));
            }
        }
        if self.nr_requests == 0 || self.nr_requests > MAX_NR_REQUESTS {
            return bad(
                "nr_requests",
                format!("{} not in 1..={MAX_NR_REQUESTS}", self.nr_requests),
            );
        }
        if self.async_depth > self.nr_requests {
            return bad(
                "async_depth",
                format!(
                    "{} exceeds nr_requests {}",
                    self.async_depth, self.nr_requests
                ),
            );
        }
        if self.owners == 0 {
            return bad("owners", "must be at least 1".into());
        }
        if self.max_transfer_blocks == 0 {
            return bad("max_transfer_blocks", "must be at least 1".into());
        }
        if self.max_segments == 0 {
            return bad("max_segments", "must be at least 1".into());
        }
        if self.block_size == 0 || !self.block_size.is_power_of_two() {
            return bad(
                "block_size",
                format!("{} is not a power of two", self.block_size),
            );
        }
        Ok(())
    }

    /// The effective shallow depth for asynchronous requests.
    pub fn effective_async_depth(&self) -> u32 {
        if self.async_depth == 0 {
            self.nr_requests
        } else {
            self.async_depth
        }
    }

    /// Deadlines after insertion per direction (read, write), in ns.
    pub(super) fn fifo_expire_ns(&self) -> [u64; 2] {
        [
            ms_to_ns(self.read_expire_ms),
            ms_to_ns(self.write_expire_ms),
        ]
    }

    /// `prio_aging_expire` in ns.
    pub(super) fn aging_ns(&self) -> u64 {
        ms_to_ns(self.prio_aging_expire_ms)
    }
}

/// Per-class "limit the tag depth" answer for the tag layer (`dd_limit_depth`): the shallow
/// depth for everything that is not a synchronous read, `None` (no limit, batching allowed)
/// for reads and for flush/FUA requests, which Linux never limits.
pub fn limit_depth_for(op: Op, flags: ReqFlags, async_depth: u32) -> Option<u32> {
    if op == Op::Read || op == Op::Flush || flags.contains(ReqFlags::FUA) {
        None
    } else {
        Some(async_depth)
    }
}

impl Deadline {
    /// Sets a tunable by its Linux sysfs name (times in ms, front_merges 0/1).
    pub fn set_param(&mut self, name: &str, value: u64) -> Result<(), SchedError> {
        let mut o = self.opts.clone();
        let to_u32 = |v: u64| {
            u32::try_from(v).map_err(|_| SchedError::InvalidOption {
                name: param_name(name),
                reason: format!("{v} is too large"),
            })
        };
        match name {
            "read_expire" => o.read_expire_ms = value,
            "write_expire" => o.write_expire_ms = value,
            "writes_starved" => o.writes_starved = to_u32(value)?,
            "front_merges" => match value {
                0 => o.front_merges = false,
                1 => o.front_merges = true,
                _ => {
                    return Err(SchedError::InvalidOption {
                        name: "front_merges",
                        reason: format!("{value} is not 0 or 1"),
                    });
                }
            },
            "fifo_batch" => o.fifo_batch = to_u32(value)?,
            "prio_aging_expire" => o.prio_aging_expire_ms = value,
            "async_depth" => {
                let v = to_u32(value)?;
                if v == 0 {
                    return Err(SchedError::InvalidOption {
                        name: "async_depth",
                        reason: "must be at least 1".into(),
                    });
                }
                o.async_depth = v;
            }
            _ => return Err(SchedError::UnknownParam(name.to_string())),
        }
        o.validate()?;
        self.fifo_expire_ns = o.fifo_expire_ns();
        self.aging_ns = o.aging_ns();
        self.async_depth = o.effective_async_depth();
        self.opts = o;
        Ok(())
    }

    /// Reads a tunable by its Linux sysfs name.
    pub fn get_param(&self, name: &str) -> Result<u64, SchedError> {
        let o = &self.opts;
        Ok(match name {
            "read_expire" => o.read_expire_ms,
            "write_expire" => o.write_expire_ms,
            "writes_starved" => u64::from(o.writes_starved),
            "front_merges" => u64::from(o.front_merges),
            "fifo_batch" => u64::from(o.fifo_batch),
            "prio_aging_expire" => o.prio_aging_expire_ms,
            "async_depth" => u64::from(self.async_depth),
            _ => return Err(SchedError::UnknownParam(name.to_string())),
        })
    }
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// `name` as the `&'static str` an error carries ("unknown" if it is no tunable).
fn param_name(name: &str) -> &'static str {
    TUNABLES
        .iter()
        .find(|&&n| n == name)
        .copied()
        .unwrap_or("unknown")
}
