//! pmio-raid: RAID bdevs over any bdevs, laid out as SPDK's `bdev_raid` lays them out:
//! raid0 (striping), concat (members one after the other) and raid1 (mirroring, degraded
//! when a member fails).
//!
//! | file | job |
//! |---|---|
//! | `lib.rs` | the array ([`RaidDevice`]): its checks, geometry and what it tells about itself |
//! | `layout.rs` | where each block lives ([`Layout`]) |
//! | `health.rs` | which members take I/O ([`Health`]), failures waiting to be recorded |
//! | `superblock.rs` | SPDK's on-disk superblock, one codec ([`superblock::Superblock`]) |
//! | `member_io.rs` | synchronous metadata I/O on one member, off the reactors |
//! | `keeper.rs` | the array's superblock: written at create, on every change, read at assembly |
//! | `window.rs` | the rebuild window: front-end writes to it wait, nothing else does |
//! | `rebuild/` | the rebuild process: a task on a reactor, a window at a time, paced, retried |
//! | `bitmap.rs` | the write-intent bitmap: regions written while a member is away |
//! | `checkpoint.rs` | a rebuild's progress on its target, so a restart resumes it |
//! | `assembly.rs` | gathering members found at examine into arrays, refusing stale ones |
//! | `queue.rs` | one reactor's queue: forwarding to the members' queues, raid1's rules |
//! | `rpc.rs`, `cli.rs` | SPDK's `bdev_raid_*` methods and pmio-rpc's subcommands |
//!
//! An array's queue on a reactor owns a queue of each member on that reactor and forwards
//! every request under its own tag, so the I/O path takes no lock, sends no message and
//! allocates nothing. raid0 and concat declare their strip as `boundary_blocks`, so the
//! block layer's splitter cuts every I/O at strip boundaries and each piece goes to one
//! member.
//!
//! With a superblock (SPDK's layout, on every member at block 0, data 1 MiB in) an array is
//! assembled again from its members at examine, and a member whose superblock is older than
//! the others' is never read from. A raid1 member added to a running array (returning or
//! new) is rebuilt a window at a time while I/O goes on, by a task on a reactor with async
//! I/O that retries a failed I/O a few times; one that comes back gets only the regions the
//! write-intent bitmap marked while it was away, and a rebuild cut short by a restart
//! resumes from the checkpoint it keeps on its target.

pub mod assembly;
pub mod bitmap;
pub mod checkpoint;
#[cfg(feature = "cli")]
pub mod cli;
mod health;
pub mod keeper;
pub mod layout;
pub mod member_io;
mod queue;
pub mod rebuild;
#[cfg(feature = "rpc")]
pub mod rpc;
pub mod superblock;
#[cfg(test)]
mod tests;
pub mod window;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, Uuid};

use checkpoint::Checkpoint;
pub use health::{Health, SlotState};
pub use layout::{Layout, RaidLevel};
use rebuild::{Plan, Runner};
use superblock::{ArrayState, DATA_OFFSET_BYTES, MemberState, SbMember, Superblock};

/// What an array is made of.
pub struct RaidOptions {
    pub name: String,
    pub uuid: Option<Uuid>,
    pub level: RaidLevel,
    /// Strip size in KiB (raid0, concat: a power of two; raid1: 0).
    pub strip_size_kb: u32,
    /// The members, in order.
    pub members: Vec<Arc<dyn BlockDevice>>,
    /// Write SPDK's superblock on every member (their data then starts 1 MiB in).
    pub superblock: bool,
}

/// The member bdevs by slot (`None`: the slot is empty), shared with the queues, which
/// open queues of members that appear and drop those of members that leave.
pub(crate) type Slots = RwLock<Vec<Option<Arc<dyn BlockDevice>>>>;

/// What an array's queues share with it.
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) layout: Layout,
    pub(crate) health: Health,
    pub(crate) slots: Slots,
    /// The range a rebuild is copying now.
    pub(crate) window: window::Window,
    /// Regions written while a member is away (raid1).
    pub(crate) map: bitmap::DirtyMap,
    /// The sequence number of the superblock last written.
    pub(crate) sb_seq: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// Fails member `m` out on an I/O error; the write-intent bitmap starts tracking first,
    /// so no write can miss both the member and the map. True if this call did it.
    #[cold]
    pub(crate) fn fail_member(&self, m: usize) -> bool {
        self.start_tracking();
        self.health.fail(m)
    }

    /// Starts the write-intent bitmap for a member leaving now (raid1).
    pub(crate) fn start_tracking(&self) {
        if self.layout.level == RaidLevel::Raid1 {
            self.map
                .start(self.sb_seq.load(std::sync::atomic::Ordering::Acquire));
        }
    }
}

/// A RAID bdev.
pub struct RaidDevice {
    info: BdevInfo,
    shared: Arc<Shared>,
    strip_size_kb: u32,
    /// The superblock as last written (arrays made with one).
    sb: Option<Mutex<Superblock>>,
    /// The rebuild running or last run.
    process: Mutex<Option<Arc<rebuild::Process>>>,
    /// A rebuild an assembly found cut short, to resume ([`RaidDevice::resume`]): the slot
    /// and what is left.
    to_resume: Mutex<Option<(usize, rebuild::Plan)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RaidDevice {
    /// Checks the members and the level's rules (SPDK's `raid_bdev_create` and
    /// `raid_bdev_configure`), builds the array and, if asked, writes its superblock on every
    /// member (from the calling thread, which waits for it: never a reactor).
    pub fn new(opts: RaidOptions) -> Result<Arc<RaidDevice>, BdevError> {
        let bad = |reason: String| BdevError::InvalidConfig {
            name: opts.name.clone(),
            reason,
        };
        let level = opts.level;
        if opts.members.len() < level.min_members() {
            return Err(bad(format!(
                "{level} needs at least {} base bdevs, got {}",
                level.min_members(),
                opts.members.len()
            )));
        }
        if opts.members.len() > 32 {
            return Err(bad("at most 32 base bdevs".into()));
        }
        for (i, a) in opts.members.iter().enumerate() {
            if opts.members[..i]
                .iter()
                .any(|b| b.info().name == a.info().name)
            {
                return Err(bad(format!("base bdev {} is listed twice", a.info().name)));
            }
        }
        let block_size = check_block_sizes(&opts.name, &opts.members)?;
        let strip_blocks = strip_blocks(&opts.name, level, opts.strip_size_kb, block_size)?;
        if opts.superblock && opts.name.len() >= superblock::NAME_LEN {
            return Err(bad(format!(
                "a superblock holds names of at most {} bytes",
                superblock::NAME_LEN - 1
            )));
        }
        let data_offset = if opts.superblock {
            DATA_OFFSET_BYTES.div_ceil(u64::from(block_size))
        } else {
            0
        };
        let mut sizes = Vec::with_capacity(opts.members.len());
        for m in &opts.members {
            let i = m.info();
            sizes.push(i.num_blocks.checked_sub(data_offset).filter(|&b| b > 0).ok_or_else(
                || {
                    bad(format!(
                        "base bdev {} ({} blocks) is no larger than the superblock area ({data_offset} blocks)",
                        i.name, i.num_blocks
                    ))
                },
            )?);
        }
        let layout = Layout::new(level, strip_blocks, &sizes)
            .ok_or_else(|| bad("a base bdev is smaller than one strip".into()))?
            .with_data_offset(data_offset);
        let uuid = opts.uuid.unwrap_or_else(Uuid::new_v4);
        let sb = opts.superblock.then(|| Superblock {
            uuid,
            name: opts.name.clone(),
            raid_size: layout.num_blocks,
            block_size,
            level,
            strip_size: strip_blocks as u32,
            state: ArrayState::Online,
            seq_number: 0,
            num_base_bdevs: opts.members.len() as u8,
            members: opts
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| SbMember {
                    uuid: m.info().uuid,
                    data_offset,
                    data_size: layout.member_blocks[i],
                    state: MemberState::Configured,
                    slot: i as u8,
                })
                .collect(),
        });
        let states = vec![SlotState::Operational; opts.members.len()];
        let slots = opts.members.into_iter().map(Some).collect();
        let dev = RaidDevice::build(
            opts.name,
            uuid,
            opts.strip_size_kb,
            layout,
            slots,
            &states,
            sb,
        )?;
        if dev.sb.is_some() {
            keeper::write_superblock(&dev, |_| {}).map_err(|e| BdevError::Io {
                name: dev.info.name.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        Ok(dev)
    }

    /// Builds the array from its parts; starts the superblock writer if it has one.
    fn build(
        name: String,
        uuid: Uuid,
        strip_size_kb: u32,
        layout: Layout,
        slots: Vec<Option<Arc<dyn BlockDevice>>>,
        states: &[SlotState],
        sb: Option<Superblock>,
    ) -> Result<Arc<RaidDevice>, BdevError> {
        let present = || slots.iter().flatten().map(|m| m.info());
        let member_boundary = present()
            .map(|i| i.boundary_blocks)
            .filter(|&b| b > 0)
            .min()
            .unwrap_or(0);
        let boundary_blocks = match (layout.strip_blocks, member_boundary) {
            (0, b) => b,
            (s, 0) => s as u32,
            (s, b) => (s as u32).min(b),
        };
        let block_size = present().map(|i| i.block_size).next().unwrap_or(512);
        let info = BdevInfo {
            name: name.clone(),
            uuid,
            product_name: "Raid Volume".into(),
            block_size,
            num_blocks: layout.num_blocks,
            supported_ops: queue::common_ops(present().map(|i| i.supported_ops)),
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: present().map(|i| i.max_queue_depth).min().unwrap_or(1),
            max_transfer_blocks: present().map(|i| i.max_transfer_blocks).min().unwrap_or(1),
            boundary_blocks,
        };
        info.validate()?;
        let persistent = sb.is_some();
        let layout_blocks = layout.num_blocks;
        let sb_seq = sb.as_ref().map_or(0, |s| s.seq_number);
        let dev = Arc::new(RaidDevice {
            shared: Arc::new(Shared {
                name: Arc::from(name.as_str()),
                health: Health::new(states, persistent),
                layout,
                slots: RwLock::new(slots),
                window: window::Window::default(),
                map: bitmap::DirtyMap::new(layout_blocks, block_size, persistent),
                sb_seq: std::sync::atomic::AtomicU64::new(sb_seq),
            }),
            strip_size_kb,
            sb: sb.map(Mutex::new),
            process: Mutex::new(None),
            to_resume: Mutex::new(None),
            info,
        });
        if persistent {
            keeper::spawn(&dev);
        }
        Ok(dev)
    }

    /// Assembles an array from the superblock `sb` (the newest its members carry) and the
    /// members found, by slot; slots the superblock does not list as configured, or whose
    /// member was not found, stay empty (raid1 runs degraded; raid0 and concat refuse).
    pub fn assemble(
        sb: Superblock,
        found: Vec<Option<Arc<dyn BlockDevice>>>,
    ) -> Result<Arc<RaidDevice>, BdevError> {
        let bad = |reason: String| BdevError::InvalidConfig {
            name: sb.name.clone(),
            reason,
        };
        let n = sb.num_base_bdevs as usize;
        if found.len() != n || sb.members.len() != n {
            return Err(bad(format!(
                "superblock lists {} of {n} members, {} given",
                sb.members.len(),
                found.len()
            )));
        }
        let mut sizes = vec![0; n];
        let mut offsets = vec![0; n];
        for m in &sb.members {
            sizes[m.slot as usize] = m.data_size;
            offsets[m.slot as usize] = m.data_offset;
        }
        if offsets.iter().any(|&o| o != offsets[0]) {
            return Err(bad("members' data starts at different blocks".into()));
        }
        let layout = Layout::new(sb.level, u64::from(sb.strip_size), &sizes)
            .filter(|l| l.member_blocks == sizes && l.num_blocks == sb.raid_size)
            .ok_or_else(|| bad("superblock geometry does not add up to its size".into()))?
            .with_data_offset(offsets[0]);
        // A member the superblock lists as being rebuilt takes writes and resumes its copy.
        let spare = |slot: usize| {
            sb.members
                .iter()
                .any(|m| m.slot as usize == slot && m.state == MemberState::Spare)
        };
        let states: Vec<SlotState> = found
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                Some(_) if spare(i) => SlotState::Rebuilding,
                Some(_) => SlotState::Operational,
                None => SlotState::Missing,
            })
            .collect();
        if let Some(d) = found.iter().flatten().find(|d| {
            d.info().block_size != sb.block_size || d.info().num_blocks < offsets[0] + sizes[0]
        }) {
            return Err(bad(format!(
                "base bdev {} does not fit the superblock's geometry",
                d.info().name
            )));
        }
        let up = states
            .iter()
            .filter(|&&s| s == SlotState::Operational)
            .count();
        let enough = match sb.level {
            RaidLevel::Raid1 => up > 0,
            _ => up == n,
        };
        if !enough {
            return Err(bad(format!("{up} of {n} members present")));
        }
        let strip_kb = (u64::from(sb.strip_size) * u64::from(sb.block_size) / 1024) as u32;
        let dev = RaidDevice::build(
            sb.name.clone(),
            sb.uuid,
            strip_kb,
            layout,
            found,
            &states,
            Some(sb),
        )?;
        keeper::load_bitmap(&dev);
        // Read before tracking starts below: the bitmap as loaded says what was written.
        if let Some(slot) = states.iter().position(|&s| s == SlotState::Rebuilding) {
            let plan = dev.plan_to_resume(slot);
            *lock(&dev.to_resume) = Some((slot, plan));
        }
        if up < n {
            // Writes from now on miss the absent members: track them, and record who is
            // missing so a member that turns up later with the old superblock is behind.
            dev.shared.start_tracking();
            keeper::write_superblock(&dev, |_| {}).map_err(|e| BdevError::Io {
                name: dev.info.name.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        Ok(dev)
    }

    pub fn level(&self) -> RaidLevel {
        self.shared.layout.level
    }

    pub fn strip_size_kb(&self) -> u32 {
        self.strip_size_kb
    }

    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// The members by slot (`None`: the slot is empty).
    pub fn members(&self) -> Vec<Option<Arc<dyn BlockDevice>>> {
        self.shared
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether `name` is a member of the array taking I/O (a failed member is not: its bdev
    /// may go, as a vanished NVMe/TCP namespace does, and come back to be added again).
    pub fn has_member(&self, name: &str) -> bool {
        let h = self.health();
        self.members()
            .iter()
            .enumerate()
            .any(|(i, m)| h.writable(i) && m.as_ref().is_some_and(|m| m.info().name == name))
    }

    /// Whether `name` is in a slot of the array, failed or not.
    pub fn holds(&self, name: &str) -> bool {
        self.members()
            .iter()
            .flatten()
            .any(|m| m.info().name == name)
    }

    /// Which members take I/O.
    pub fn health(&self) -> &Health {
        &self.shared.health
    }

    /// The superblock as last written, if the array has one.
    pub fn superblock(&self) -> Option<Superblock> {
        self.sb.as_ref().map(|s| lock(s).clone())
    }

    /// The rebuild last started (running or not).
    pub fn last_process(&self) -> Option<Arc<rebuild::Process>> {
        lock(&self.process).clone()
    }

    /// The rebuild running now, if any.
    pub fn process(&self) -> Option<Arc<rebuild::Process>> {
        lock(&self.process).clone().filter(|p| !p.finished())
    }

    /// Adds `member` to an empty (or failed) slot of a raid1 array and starts rebuilding it
    /// on `runner`'s reactor (SPDK's `bdev_raid_add_base_bdev`); returns the slot. The member
    /// takes writes at once and reads once the rebuild has copied everything to it. Called
    /// off the reactors: it reads and writes the member's metadata synchronously.
    pub fn add_member(
        self: &Arc<Self>,
        member: Arc<dyn BlockDevice>,
        opts: rebuild::ProcessOptions,
        runner: &Runner,
    ) -> Result<usize, BdevError> {
        let bad = |reason: String| BdevError::InvalidConfig {
            name: self.info.name.clone(),
            reason,
        };
        if self.level() != RaidLevel::Raid1 {
            return Err(bad(format!(
                "a {} array takes no new base bdev once it runs",
                self.level()
            )));
        }
        let mi = member.info();
        let need = self.layout().data_offset + self.layout().member_blocks[0];
        if mi.block_size != self.info.block_size || mi.num_blocks < need {
            return Err(bad(format!(
                "base bdev {} ({} blocks of {} bytes) cannot hold {need} blocks of {}",
                mi.name, mi.num_blocks, mi.block_size, self.info.block_size
            )));
        }
        if self.process().is_some() {
            return Err(bad("a rebuild is already running".into()));
        }
        // Read before the member gets the array's current superblock below.
        let plan = self.plan_for(&member);
        let h = self.health();
        let slot = {
            let mut slots = self.shared.slots.write().unwrap_or_else(|p| p.into_inner());
            let taken = slots.iter().enumerate().any(|(i, m)| {
                h.writable(i) && m.as_ref().is_some_and(|m| m.info().name == mi.name)
            });
            if taken {
                return Err(bad(format!("base bdev {} is already a member", mi.name)));
            }
            let free = |i: &usize| matches!(h.state(*i), SlotState::Missing | SlotState::Failed);
            // The slot the member had, if it comes back; else the first free one.
            let own = self.superblock().and_then(|sb| {
                sb.member(&mi.uuid)
                    .map(|m| m.slot as usize)
                    .filter(|i| free(i))
            });
            let slot = own
                .or_else(|| (0..slots.len()).find(free))
                .ok_or_else(|| bad("every slot has a member".into()))?;
            slots[slot] = Some(Arc::clone(&member));
            slot
        };
        let fail = |e: String| {
            h.set(slot, SlotState::Missing);
            BdevError::Io {
                name: self.info.name.clone(),
                source: std::io::Error::other(e),
            }
        };
        // Where this rebuild starts, on the member before its superblock says it is being
        // rebuilt: a checkpoint left from an older rebuild is never read for this one.
        if self.sb.is_some() {
            let start = Checkpoint {
                array: self.info.uuid,
                member: mi.uuid,
                offset: plan.ranges.first().map_or(self.info.num_blocks, |r| r.0),
                full: plan.full,
            };
            keeper::write_checkpoint(self, &member, &start).map_err(|e| fail(e.to_string()))?;
        }
        h.set(slot, SlotState::Rebuilding);
        keeper::write_superblock(self, |_| {}).map_err(|e| fail(e.to_string()))?;
        self.start_process(slot, plan, opts, runner)
            .map_err(|e| fail(e.to_string()))?;
        Ok(slot)
    }

    /// Resumes the rebuild an assembly found cut short (a member its superblock lists as
    /// being rebuilt), on `runner`'s reactor; the slot, if there was one.
    pub fn resume(
        self: &Arc<Self>,
        opts: rebuild::ProcessOptions,
        runner: &Runner,
    ) -> Result<Option<usize>, BdevError> {
        let Some((slot, plan)) = lock(&self.to_resume).take() else {
            return Ok(None);
        };
        log::info!(
            "raid bdev {}: resuming the rebuild of slot {slot}: {} blocks left",
            self.info.name,
            plan.blocks()
        );
        self.start_process(slot, plan, opts, runner).map_err(|e| {
            self.shared.fail_member(slot);
            BdevError::Io {
                name: self.info.name.clone(),
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        Ok(Some(slot))
    }

    fn start_process(
        self: &Arc<Self>,
        slot: usize,
        plan: Plan,
        opts: rebuild::ProcessOptions,
        runner: &Runner,
    ) -> Result<(), rebuild::RebuildError> {
        let p = rebuild::start(self, slot, plan, opts, runner)?;
        *lock(&self.process) = Some(p);
        Ok(())
    }

    /// What a member joining must be copied:
    /// - one of this array that was current when tracking began (its own superblock, at the
    ///   bitmap's `since` or later, lists it configured): the regions the bitmap marked;
    /// - one whose rebuild was cut short (its own superblock lists it being rebuilt, at
    ///   `since` or later, and it carries that rebuild's checkpoint): what the checkpoint
    ///   says was left, and the regions written since it left;
    /// - any other: everything.
    fn plan_for(&self, member: &Arc<dyn BlockDevice>) -> Plan {
        let n = self.info.num_blocks;
        let map = &self.shared.map;
        if !map.active() {
            return Plan::full(n);
        }
        let mi = member.info();
        let sb = match keeper::read_superblock(member) {
            Ok(Some(sb)) if sb.uuid == self.info.uuid && sb.seq_number >= map.since() => sb,
            _ => return Plan::full(n),
        };
        let dirty = map.dirty_ranges(n);
        let plan = match sb.member(&mi.uuid).map(|m| m.state) {
            Some(MemberState::Configured) => Plan {
                ranges: dirty,
                full: false,
            },
            Some(MemberState::Spare) => match keeper::read_checkpoint(self, member) {
                Some(c) => {
                    let rest = self.rest_of(&c);
                    Plan {
                        ranges: checkpoint::union(&rest.ranges, &dirty),
                        full: rest.full,
                    }
                }
                None => return Plan::full(n),
            },
            _ => return Plan::full(n),
        };
        log::info!(
            "raid bdev {}: {} comes back at superblock {} (tracking since {}): \
             partial rebuild of {} blocks in {} ranges",
            self.info.name,
            mi.name,
            sb.seq_number,
            map.since(),
            plan.blocks(),
            plan.ranges.len()
        );
        plan
    }

    /// What is left of the rebuild of slot `slot` cut short by a restart: by its
    /// checkpoint, else everything. Every front-end write since the copy started reached the
    /// member, so what the checkpoint says is done is.
    fn plan_to_resume(&self, slot: usize) -> Plan {
        let n = self.info.num_blocks;
        let Some(member) = self.members()[slot].clone() else {
            return Plan::full(n);
        };
        match keeper::read_checkpoint(self, &member) {
            Some(c) => self.rest_of(&c),
            None => Plan::full(n),
        }
    }

    /// What checkpoint `c` says is left: of the whole array, or of the write-intent
    /// bitmap's regions (everything if the bitmap is not there to say).
    fn rest_of(&self, c: &Checkpoint) -> Plan {
        let n = self.info.num_blocks;
        let map = &self.shared.map;
        let base = if c.full {
            Plan::full(n)
        } else if map.active() || c.offset >= n {
            Plan {
                ranges: map.dirty_ranges(n),
                full: false,
            }
        } else {
            return Plan::full(n);
        };
        Plan {
            ranges: checkpoint::ranges_from(&base.ranges, c.offset),
            full: base.full,
        }
    }

    /// Takes member `name` out of a raid1 array (SPDK's `bdev_raid_remove_base_bdev`): it
    /// takes no more I/O and its slot is empty. Refused where it would leave no copy.
    pub fn remove_member(&self, name: &str) -> Result<usize, BdevError> {
        let bad = |reason: String| BdevError::InvalidConfig {
            name: self.info.name.clone(),
            reason,
        };
        let h = self.health();
        let slot = self
            .members()
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.info().name == name))
            .ok_or_else(|| bad(format!("{name} is not a base bdev of it")))?;
        let others = (0..h.slots())
            .filter(|&i| i != slot && h.operational(i))
            .count();
        if self.level() != RaidLevel::Raid1 || others == 0 {
            return Err(bad(format!(
                "removing {name} would leave the array without its data; delete the array instead"
            )));
        }
        if let Some(p) = self.process().filter(|p| p.target == slot) {
            p.stop();
        }
        self.shared.start_tracking();
        h.set(slot, SlotState::Missing);
        self.shared.slots.write().unwrap_or_else(|p| p.into_inner())[slot] = None;
        if let Err(e) = keeper::write_superblock(self, |_| {}) {
            log::error!(
                "raid bdev {}: superblock after removing {name}: {e}",
                self.info.name
            );
        }
        Ok(slot)
    }

    /// SPDK's array state: `online` while it can serve every block, else `offline`.
    pub fn state(&self) -> &'static str {
        let up = self.health().operational_count();
        let enough = match self.level() {
            RaidLevel::Raid1 => up > 0,
            RaidLevel::Raid0 | RaidLevel::Concat => up == self.health().slots(),
        };
        if enough { "online" } else { "offline" }
    }
}

/// Every member's block size, which must be one.
fn check_block_sizes(name: &str, members: &[Arc<dyn BlockDevice>]) -> Result<u32, BdevError> {
    let block_size = members[0].info().block_size;
    match members.iter().find(|m| m.info().block_size != block_size) {
        Some(m) => Err(BdevError::InvalidConfig {
            name: name.into(),
            reason: format!(
                "base bdev {} has {}-byte blocks, {} has {block_size}",
                m.info().name,
                m.info().block_size,
                members[0].info().name
            ),
        }),
        None => Ok(block_size),
    }
}

/// The strip in blocks from `strip_size_kb`, checked against the level's rules.
fn strip_blocks(name: &str, level: RaidLevel, kb: u32, block_size: u32) -> Result<u64, BdevError> {
    let bad = |reason: String| BdevError::InvalidConfig {
        name: name.into(),
        reason,
    };
    match (level.has_strips(), kb) {
        (false, 0) => Ok(0),
        (false, _) => Err(bad(format!("{level} takes no strip size"))),
        (true, kb) if kb == 0 || !kb.is_power_of_two() => Err(bad(format!(
            "strip size {kb} KiB is not a power of two above 0"
        ))),
        (true, kb) if u64::from(kb) * 1024 < u64::from(block_size) => Err(bad(format!(
            "strip size {kb} KiB is smaller than a {block_size}-byte block"
        ))),
        (true, kb) => Ok(u64::from(kb) * 1024 / u64::from(block_size)),
    }
}

impl BlockDevice for RaidDevice {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        Ok(Box::new(queue::RaidQueue::new(
            Arc::clone(&self.shared),
            depth,
        )?))
    }

    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        for m in self.members().iter().flatten() {
            // SAFETY: the caller's promise covers every member, which the array's queues hand
            // the same buffers to.
            unsafe { m.register_memory(regions) }
        }
    }

    fn dma_options(&self) -> pmio::dma::DmaOptions {
        match self.members().iter().flatten().next() {
            Some(m) => m.dma_options(),
            None => pmio::dma::DmaOptions::default(),
        }
    }
}
