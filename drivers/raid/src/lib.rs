//! pmio-raid: RAID bdevs over any bdevs, laid out as SPDK's `bdev_raid` lays them out:
//! raid0 (striping), concat (members one after the other) and raid1 (mirroring, degraded
//! when a member fails).
//!
//! | file | job |
//! |---|---|
//! | `lib.rs` | the array ([`RaidDevice`]): its checks, geometry and what it tells about itself |
//! | `layout.rs` | where each block lives ([`Layout`]) |
//! | `queue.rs` | one reactor's queue: forwarding to the members' queues, raid1's rules |
//! | `rpc.rs`, `cli.rs` | SPDK's `bdev_raid_*` methods and pmio-rpc's subcommands |
//!
//! An array's queue on a reactor owns a queue of each member on that reactor and forwards
//! every request under its own tag, so the I/O path takes no lock, sends no message and
//! allocates nothing. raid0 and concat declare their strip as `boundary_blocks`, so the
//! block layer's splitter cuts every I/O at strip boundaries and each piece goes to one
//! member.
//!
//! Not built yet (SPDK has them): the on-disk superblock (`superblock: true` is refused),
//! adding or removing members of a running array, and raid1's rebuild of a returning member.
//! A raid1 member failed by an I/O error stays out of the array until the array is recreated.

#[cfg(feature = "cli")]
pub mod cli;
pub mod layout;
mod queue;
#[cfg(feature = "rpc")]
pub mod rpc;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, Uuid};

pub use layout::{Layout, RaidLevel};
pub use queue::Health;

/// What an array is made of.
pub struct RaidOptions {
    pub name: String,
    pub uuid: Option<Uuid>,
    pub level: RaidLevel,
    /// Strip size in KiB (raid0, concat: a power of two; raid1: 0).
    pub strip_size_kb: u32,
    /// The members, in order.
    pub members: Vec<Arc<dyn BlockDevice>>,
}

/// A RAID bdev.
pub struct RaidDevice {
    info: BdevInfo,
    name: Arc<str>,
    layout: Arc<Layout>,
    health: Arc<Health>,
    strip_size_kb: u32,
    members: Vec<Arc<dyn BlockDevice>>,
}

impl RaidDevice {
    /// Checks the members and the level's rules (SPDK's `raid_bdev_create` and
    /// `raid_bdev_configure`) and builds the array.
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
        let block_size = opts.members[0].info().block_size;
        if let Some(m) = opts
            .members
            .iter()
            .find(|m| m.info().block_size != block_size)
        {
            return Err(bad(format!(
                "base bdev {} has {}-byte blocks, {} has {block_size}",
                m.info().name,
                m.info().block_size,
                opts.members[0].info().name
            )));
        }
        let strip_blocks = match (level.has_strips(), opts.strip_size_kb) {
            (false, 0) => 0,
            (false, _) => return Err(bad(format!("{level} takes no strip size"))),
            (true, kb) if kb == 0 || !kb.is_power_of_two() => {
                return Err(bad(format!(
                    "strip size {kb} KiB is not a power of two above 0"
                )));
            }
            (true, kb) if u64::from(kb) * 1024 < u64::from(block_size) => {
                return Err(bad(format!(
                    "strip size {kb} KiB is smaller than a {block_size}-byte block"
                )));
            }
            (true, kb) => u64::from(kb) * 1024 / u64::from(block_size),
        };
        let sizes: Vec<u64> = opts.members.iter().map(|m| m.info().num_blocks).collect();
        let layout = Layout::new(level, strip_blocks, &sizes)
            .ok_or_else(|| bad("a base bdev is smaller than one strip".into()))?;
        let infos = || opts.members.iter().map(|m| m.info());
        let member_boundary = infos()
            .map(|i| i.boundary_blocks)
            .filter(|&b| b > 0)
            .min()
            .unwrap_or(0);
        let boundary_blocks = match (strip_blocks, member_boundary) {
            (0, b) => b,
            (s, 0) => s as u32,
            (s, b) => (s as u32).min(b),
        };
        let info = BdevInfo {
            name: opts.name.clone(),
            uuid: opts.uuid.unwrap_or_else(Uuid::new_v4),
            product_name: "Raid Volume".into(),
            block_size,
            num_blocks: layout.num_blocks,
            supported_ops: queue::common_ops(infos().map(|i| i.supported_ops)),
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: infos().map(|i| i.max_queue_depth).min().unwrap_or(1),
            max_transfer_blocks: infos().map(|i| i.max_transfer_blocks).min().unwrap_or(1),
            boundary_blocks,
        };
        info.validate()?;
        Ok(Arc::new(RaidDevice {
            name: Arc::from(opts.name.as_str()),
            health: Arc::new(Health::new(opts.members.len())),
            layout: Arc::new(layout),
            strip_size_kb: opts.strip_size_kb,
            members: opts.members,
            info,
        }))
    }

    pub fn level(&self) -> RaidLevel {
        self.layout.level
    }

    pub fn strip_size_kb(&self) -> u32 {
        self.strip_size_kb
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The members, in order.
    pub fn members(&self) -> &[Arc<dyn BlockDevice>] {
        &self.members
    }

    /// Which members are operational.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// SPDK's array state: `online` while it can serve every block, else `offline`.
    pub fn state(&self) -> &'static str {
        let up = self.health.operational_count();
        let enough = match self.level() {
            RaidLevel::Raid1 => up > 0,
            RaidLevel::Raid0 | RaidLevel::Concat => up == self.members.len(),
        };
        if enough { "online" } else { "offline" }
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
        let queues = self
            .members
            .iter()
            .map(|m| m.open_queue(HctxType::Default, 0, depth))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(queue::RaidQueue::new(
            Arc::clone(&self.name),
            Arc::clone(&self.layout),
            Arc::clone(&self.health),
            queues,
            depth,
        )))
    }

    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        for m in &self.members {
            // SAFETY: the caller's promise covers every member, which the array's queues hand
            // the same buffers to.
            unsafe { m.register_memory(regions) }
        }
    }

    fn dma_options(&self) -> pmio::dma::DmaOptions {
        self.members[0].dma_options()
    }
}
