//! The array's superblock on its members: written at create and on every change of a
//! member's state (its sequence number raised each time), read back at examine.
//!
//! A member failed by an I/O error is recorded by the array's superblock writer, a plain
//! thread woken by [`Health`](crate::Health): it writes the superblock (the failed member
//! marked failed) to every member still taking writes, durably, and only then lets the
//! queues acknowledge the I/O that failed on that member from the other copies.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use pmio::BlockDevice;

use crate::bitmap::BITMAP_OFFSET_BYTES;
use crate::checkpoint::{CHECKPOINT_LEN, CHECKPOINT_OFFSET_BYTES, Checkpoint};
use crate::member_io::{MemberIo, MemberIoError};
use crate::superblock::{MemberState, SbError, Superblock};
use crate::{RaidDevice, SlotState, lock};

/// Why a member's superblock could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Io(#[from] MemberIoError),
    #[error("bdev {name}: {source}")]
    Bad {
        name: String,
        #[source]
        source: SbError,
    },
}

thread_local! {
    /// The superblock writer thread's member queues, kept open between writes (`None` on
    /// other threads, which open a queue per write): opening one on an NVMe/TCP member is
    /// a new connection, too slow to make for every bitmap update.
    static KEPT: RefCell<Option<Vec<MemberIo>>> = const { RefCell::new(None) };
}

/// Runs `f` on a metadata queue of `m` that moves `cap` bytes: the writer thread's kept one,
/// else a new one. A queue that failed is not kept.
fn with_io<R>(
    m: &Arc<dyn BlockDevice>,
    cap: usize,
    f: impl FnOnce(&mut MemberIo) -> Result<R, MemberIoError>,
) -> Result<R, MemberIoError> {
    KEPT.with_borrow_mut(|kept| {
        let Some(kept) = kept else {
            return f(&mut MemberIo::with_capacity(Arc::clone(m), cap)?);
        };
        let at = match kept
            .iter()
            .position(|io| Arc::ptr_eq(io.bdev(), m) && io.capacity() >= cap)
        {
            Some(i) => i,
            None => {
                kept.push(MemberIo::with_capacity(Arc::clone(m), cap.max(BITMAP_IO))?);
                kept.len() - 1
            }
        };
        let r = f(&mut kept[at]);
        if r.is_err() {
            kept.swap_remove(at);
        }
        r
    })
}

/// Bytes the writer's kept queues move: the largest bitmap.
const BITMAP_IO: usize = (crate::bitmap::MAX_BITS / 8) as usize + 4096;

/// Closes the writer's kept queues of devices no longer among `members`.
fn prune_kept(members: &[Option<Arc<dyn BlockDevice>>]) {
    KEPT.with_borrow_mut(|kept| {
        if let Some(kept) = kept {
            kept.retain(|io| members.iter().flatten().any(|m| Arc::ptr_eq(m, io.bdev())));
        }
    });
}

/// The superblock on `dev`, `None` if it carries none (no signature).
pub fn read_superblock(dev: &Arc<dyn BlockDevice>) -> Result<Option<Superblock>, LoadError> {
    let bs = dev.info().block_size as usize;
    let mut io = MemberIo::open(Arc::clone(dev))?;
    let head = io.read(0, superblock_head_len(bs))?;
    let Some(length) = Superblock::peek_length(&head) else {
        return Ok(None);
    };
    let bytes = if length > head.len() && length <= crate::superblock::MAX_LEN {
        io.read(0, length.next_multiple_of(bs))?
    } else {
        head
    };
    Superblock::decode(&bytes)
        .map(Some)
        .map_err(|source| LoadError::Bad {
            name: dev.info().name.clone(),
            source,
        })
}

/// Bytes read first: whole blocks covering the header and a few members.
fn superblock_head_len(block_size: usize) -> usize {
    4096usize.max(block_size).next_multiple_of(block_size)
}

/// The superblock's view of slot state `s`.
fn member_state(s: SlotState) -> MemberState {
    match s {
        SlotState::Operational => MemberState::Configured,
        SlotState::Rebuilding => MemberState::Spare,
        SlotState::Failed => MemberState::Failed,
        SlotState::Missing => MemberState::Missing,
    }
}

/// Applies `change`, raises the sequence number, takes the members' states from the array's
/// health and writes the superblock durably to every member taking writes. A member the
/// write fails on is failed out (and recorded by the next write). Errors only when no
/// member took it.
pub(crate) fn write_superblock(
    dev: &RaidDevice,
    change: impl FnOnce(&mut Superblock),
) -> Result<u64, MemberIoError> {
    let Some(sb) = &dev.sb else { return Ok(0) };
    let mut sb = lock(sb);
    change(&mut sb);
    sb.seq_number += 1;
    let health = dev.health();
    let members = dev.members();
    for m in &mut sb.members {
        let slot = m.slot as usize;
        m.state = member_state(health.state(slot));
        if let Some(d) = &members[slot] {
            m.uuid = d.info().uuid;
        }
    }
    let bytes = sb.encode();
    dev.shared
        .sb_seq
        .store(sb.seq_number, std::sync::atomic::Ordering::Release);
    let mut last_err = None;
    let mut written = 0;
    for (slot, m) in members.iter().enumerate() {
        let Some(m) = m else { continue };
        if !health.writable(slot) {
            continue;
        }
        match with_io(m, bytes.len(), |io| io.write_durable(0, &bytes)) {
            Ok(()) => written += 1,
            Err(e) => {
                log::error!(
                    "raid bdev {}: superblock {} not written to member {}: {e}",
                    sb.name,
                    sb.seq_number,
                    m.info().name
                );
                dev.shared.fail_member(slot);
                last_err = Some(e);
            }
        }
    }
    log::info!(
        "raid bdev {}: superblock {} written to {written} members",
        sb.name,
        sb.seq_number
    );
    match (written, last_err) {
        (0, Some(e)) => Err(e),
        _ => Ok(sb.seq_number),
    }
}

/// Block of the write-intent bitmap on a member.
fn bitmap_lba(dev: &RaidDevice) -> u64 {
    BITMAP_OFFSET_BYTES / u64::from(dev.info().block_size)
}

/// Writes the write-intent bitmap durably to every member taking writes, then records its
/// generation durable (what the queues' held writes wait for).
pub(crate) fn write_bitmap(dev: &RaidDevice) {
    let map = &dev.shared.map;
    let generation = map.generation();
    let bytes = map.encode(&dev.info().uuid);
    let health = dev.health();
    let mut written = 0;
    for (slot, m) in dev.members().iter().enumerate() {
        let Some(m) = m else { continue };
        if !health.writable(slot) {
            continue;
        }
        let r = with_io(m, bytes.len(), |io| {
            io.write_durable(bitmap_lba(dev), &bytes)
        });
        match r {
            Ok(()) => written += 1,
            Err(e) => {
                log::error!(
                    "raid bdev {}: write-intent bitmap not written to {}: {e}",
                    dev.info().name,
                    m.info().name
                );
                dev.shared.fail_member(slot);
            }
        }
    }
    if written == 0 {
        log::error!(
            "raid bdev {}: write-intent bitmap reached no member",
            dev.info().name
        );
    }
    // With no member left to hold data there is nothing to protect by waiting.
    map.set_durable(generation);
}

/// Loads the write-intent bitmap an assembled array's members carry (the first operational
/// member's), so a restart keeps what it tracked.
pub(crate) fn load_bitmap(dev: &RaidDevice) {
    let map = &dev.shared.map;
    let h = dev.health();
    let Some(m) = dev
        .members()
        .into_iter()
        .enumerate()
        .find(|(i, m)| m.is_some() && h.operational(*i))
        .and_then(|(_, m)| m)
    else {
        return;
    };
    let len = map.encoded_len();
    let r = MemberIo::with_capacity(Arc::clone(&m), len)
        .and_then(|mut io| io.read(bitmap_lba(dev), len));
    match r.map(|b| map.load(&dev.info().uuid, &b)) {
        Ok(Ok(())) => {
            map.set_durable(map.generation());
            log::info!(
                "raid bdev {}: write-intent bitmap loaded from {} (tracking {}, since superblock {})",
                dev.info().name,
                m.info().name,
                map.active(),
                map.since()
            );
        }
        Ok(Err(e)) => log::info!("raid bdev {}: {e} on {}", dev.info().name, m.info().name),
        Err(e) => log::warn!(
            "raid bdev {}: write-intent bitmap unreadable: {e}",
            dev.info().name
        ),
    }
}

/// Block of a rebuild's checkpoint on its target.
fn checkpoint_lba(dev: &RaidDevice) -> u64 {
    CHECKPOINT_OFFSET_BYTES / u64::from(dev.info().block_size)
}

/// The rebuild checkpoint `member` carries for array `dev`, if a valid one of it (a
/// missing or unreadable one is `None`: the caller copies everything then).
pub(crate) fn read_checkpoint(
    dev: &RaidDevice,
    member: &Arc<dyn BlockDevice>,
) -> Option<Checkpoint> {
    let r = MemberIo::open(Arc::clone(member))
        .and_then(|mut io| io.read(checkpoint_lba(dev), CHECKPOINT_LEN));
    match r.map(|b| Checkpoint::decode(&b)) {
        Ok(Ok(c)) if c.array == dev.info().uuid && c.member == member.info().uuid => Some(c),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => {
            log::info!(
                "raid bdev {}: {} has {e}",
                dev.info().name,
                member.info().name
            );
            None
        }
        Err(e) => {
            log::warn!(
                "raid bdev {}: rebuild checkpoint of {} unreadable: {e}",
                dev.info().name,
                member.info().name
            );
            None
        }
    }
}

/// Writes `c` durably on `member` (a rebuild about to start records where it starts before
/// the superblock says the member is being rebuilt).
pub(crate) fn write_checkpoint(
    dev: &RaidDevice,
    member: &Arc<dyn BlockDevice>,
    c: &Checkpoint,
) -> Result<(), MemberIoError> {
    MemberIo::open(Arc::clone(member))
        .and_then(|mut io| io.write_durable(checkpoint_lba(dev), &c.encode()))
}

/// Wipes the superblock from every member of `dev` (`bdev_raid_delete` with `clear_sb`), so
/// no examine assembles the array again. Errors are logged: a member that kept it is refused
/// later as a member of no running array, or assembles alone.
pub fn clear_superblock(dev: &RaidDevice) {
    let Some(sb) = dev.superblock() else { return };
    let zeros = vec![0u8; sb.length()];
    for m in dev.members().iter().flatten() {
        if let Err(e) = MemberIo::open(Arc::clone(m)).and_then(|mut io| io.write_durable(0, &zeros))
        {
            log::error!(
                "raid bdev {}: superblock not cleared on {}: {e}",
                sb.name,
                m.info().name
            );
        }
    }
}

/// Starts the superblock writer of `dev`; it ends when the array is dropped.
pub(crate) fn spawn(dev: &Arc<RaidDevice>) {
    let weak: Weak<RaidDevice> = Arc::downgrade(dev);
    let shared = Arc::clone(&dev.shared);
    let name = format!("raid-sb-{}", dev.shared.name);
    let started = std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            KEPT.set(Some(Vec::new()));
            loop {
                let changed = shared.health.wait_change(Duration::from_millis(100));
                let Some(dev) = weak.upgrade() else { break };
                prune_kept(&dev.members());
                let pending = shared.health.failed_mask()
                    & !(0..shared.health.slots())
                        .filter(|&i| shared.health.recorded(i))
                        .fold(0u32, |m, i| m | 1 << i);
                let map_behind = !shared.map.durable(shared.map.generation());
                if !changed && pending == 0 && !map_behind {
                    continue;
                }
                // The bitmap first: tracking began before the member left, so the map the
                // superblock's change implies is on disk when that change is.
                if map_behind {
                    write_bitmap(&dev);
                }
                if changed || pending != 0 {
                    record_failures(&dev, pending);
                }
            }
        });
    if let Err(e) = started {
        log::error!(
            "raid bdev {}: no superblock writer thread ({e}); failures are recorded at once",
            dev.shared.name
        );
        dev.health().mark_recorded(u32::MAX);
    }
}

/// Writes a superblock recording the failed members in `pending`, then lets the queues
/// acknowledge what failed on them.
fn record_failures(dev: &RaidDevice, pending: u32) {
    match write_superblock(dev, |_| {}) {
        Ok(_) => dev.health().mark_recorded(pending),
        Err(e) => {
            // No member took the write: none is left to hold current data, so nothing is
            // protected by waiting; the I/O completes with what the members answered.
            log::error!(
                "raid bdev {}: superblock reached no member ({e}); the array has no current copy left",
                dev.shared.name
            );
            dev.health().mark_recorded(pending);
        }
    }
}
