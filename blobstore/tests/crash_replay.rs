//! Crash-point replay: a device that records every write and flush under a scripted,
//! randomised workload; then every prefix of the log up to each flush, and samples of the
//! writes between two flushes reordered and partly dropped (what a power cut may leave),
//! each loaded and checked against what the workload had been told:
//!
//! - the store loads (and `verify` holds: no cluster owned twice, the maps match);
//! - a blob whose creation was acknowledged before the last durable flush exists, unless
//!   its deletion had begun;
//! - every block of every surviving blob holds the value its last write acknowledged
//!   before that flush, or a value written after it — never an older or a foreign one.
//!
//! Writes are recorded in 4 KiB pieces, the unit the device is trusted to write atomically,
//! so a sample can also tear a larger write. `CRASH_DEBUG=1` traces the workload's steps.

use std::collections::{BTreeMap, BTreeSet};

use pmio_blobstore::{
    BlobDevice, BlobId, BlobOptions, Blobstore, BlobstoreOptions, LoadOptions, MemDevice, Result,
};

const CS: u32 = 16 << 10;
const BLOCK: u64 = 512;
const ATOMIC: u64 = 4096;
/// Reordered-and-dropped samples per stretch between two flushes.
const SAMPLES_PER_GAP: usize = 6;

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    Zero { offset: u64, len: u64 },
    Flush,
}

impl Op {
    fn apply(&self, image: &mut [u8]) {
        match self {
            Op::Write { offset, data } => {
                image[*offset as usize..*offset as usize + data.len()].copy_from_slice(data)
            }
            Op::Zero { offset, len } => image[*offset as usize..(*offset + *len) as usize].fill(0),
            Op::Flush => {}
        }
    }
}

/// A RAM device that logs what reaches it, split at 4 KiB boundaries.
struct RecordingDevice {
    mem: MemDevice,
    log: Vec<Op>,
}

impl RecordingDevice {
    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
        let mut at = offset;
        std::iter::from_fn(move || {
            (at < offset + len).then(|| {
                let end = ((at / ATOMIC + 1) * ATOMIC).min(offset + len);
                let piece = (at, end - at);
                at = end;
                piece
            })
        })
    }
}

impl BlobDevice for RecordingDevice {
    fn block_len(&self) -> u32 {
        self.mem.block_len()
    }
    fn block_count(&self) -> u64 {
        self.mem.block_count()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.mem.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.mem.write(offset, data)?;
        for (o, l) in Self::pieces(offset, data.len() as u64) {
            let s = (o - offset) as usize;
            self.log.push(Op::Write {
                offset: o,
                data: data[s..s + l as usize].to_vec(),
            });
        }
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        self.mem.write_zeroes(offset, len)?;
        for (o, l) in Self::pieces(offset, len) {
            self.log.push(Op::Zero { offset: o, len: l });
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.log.push(Op::Flush);
        Ok(())
    }
}

/// xorshift64*: a deterministic generator, so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One write the workload was told about: log positions where it started and was
/// acknowledged, and the tag its blocks carry.
#[derive(Debug, Clone, Copy)]
struct Written {
    start: usize,
    ack: usize,
    tag: u32,
}

/// What the workload knows: blobs, their creation/deletion, and every block's writes.
#[derive(Default)]
struct Model {
    /// Log positions where the blob's latest incarnation's creation started and was acknowledged.
    created: BTreeMap<BlobId, (usize, usize)>,
    deleting: BTreeMap<BlobId, usize>,
    blocks: BTreeMap<BlobId, BTreeMap<u64, Vec<Written>>>,
}

fn block_bytes(tag: u32, block: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(BLOCK as usize);
    while b.len() < BLOCK as usize {
        b.extend_from_slice(&tag.to_le_bytes());
        b.extend_from_slice(&(block as u32).to_le_bytes());
    }
    b
}

/// The tag of an unmap: the block reads zeroes.
const ZEROES: u32 = u32::MAX;

/// The tag a block read back carries ([`ZEROES`] for zeroes), or None if it is not a block
/// the workload wrote.
fn block_tag(bytes: &[u8], block: u64) -> Option<u32> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(ZEROES);
    }
    let tag = u32::from_le_bytes(bytes[..4].try_into().unwrap());
    (bytes == block_bytes(tag, block).as_slice()).then_some(tag)
}

struct Workload {
    bs: Blobstore<RecordingDevice>,
    model: Model,
    rng: Rng,
    next_tag: u32,
    /// Metadata changes that succeeded, by kind (the figure says what was exercised).
    done: BTreeMap<&'static str, usize>,
}

impl Workload {
    fn pos(&self) -> usize {
        self.bs.device().log.len()
    }

    fn live(&self) -> Vec<BlobId> {
        self.bs.blob_ids()
    }

    fn pick(&mut self, from: &[BlobId]) -> Option<BlobId> {
        (!from.is_empty()).then(|| from[self.rng.below(from.len() as u64) as usize])
    }

    fn create(&mut self, thin: bool) {
        let et = self.rng.below(3) != 0;
        let opts = BlobOptions {
            num_clusters: 1 + self.rng.below(4),
            thin_provision: thin,
            use_extent_table: et,
            ..Default::default()
        };
        let start = self.pos();
        if let Ok(id) = self.bs.create_blob(&opts) {
            self.created(id, start);
        }
    }

    /// A blob id may be a deleted blob's again: the new blob's record replaces the old.
    fn created(&mut self, id: BlobId, start: usize) {
        self.model.created.insert(id, (start, self.pos()));
        self.model.deleting.remove(&id);
    }

    fn write(&mut self) {
        let writable: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| !self.bs.open_blob(id).unwrap().is_read_only())
            .collect();
        let Some(id) = self.pick(&writable) else {
            return;
        };
        let blocks = self.bs.open_blob(id).unwrap().num_clusters() * u64::from(CS) / BLOCK;
        if blocks == 0 {
            return;
        }
        let first = self.rng.below(blocks);
        let n = (1 + self.rng.below(12)).min(blocks - first);
        self.next_tag += 1;
        let tag = self.next_tag;
        let data: Vec<u8> = (first..first + n)
            .flat_map(|b| block_bytes(tag, b))
            .collect();
        let start = self.pos();
        {
            // A write that failed part way (no space) may have landed in part: never durable.
            let ack = if self.bs.write(id, first * BLOCK, &data).is_ok() {
                self.pos()
            } else {
                usize::MAX
            };
            let m = self.model.blocks.entry(id).or_default();
            for b in first..first + n {
                m.entry(b).or_default().push(Written { start, ack, tag });
            }
        }
    }

    fn snapshot(&mut self) {
        let live = self.live();
        let Some(id) = self.pick(&live) else { return };
        if self.bs.open_blob(id).unwrap().is_read_only() {
            return;
        }
        let copy = self.model.blocks.get(&id).cloned().unwrap_or_default();
        let start = self.pos();
        if let Ok(s) = self.bs.create_snapshot(id, &[]) {
            self.count("snapshot");
            self.created(s, start);
            self.model.blocks.insert(s, copy);
        }
    }

    fn clone_snapshot(&mut self) {
        let ro: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| self.bs.open_blob(id).unwrap().is_read_only())
            .collect();
        let Some(s) = self.pick(&ro) else { return };
        let copy = self.model.blocks.get(&s).cloned().unwrap_or_default();
        let start = self.pos();
        if let Ok(c) = self.bs.create_clone(s, &[]) {
            self.created(c, start);
            self.model.blocks.insert(c, copy);
        }
    }

    /// A leaf, or a snapshot with one clone (merged into it: the clone reads the same).
    fn delete(&mut self) {
        // Half the time a merge, when there is a snapshot to merge: they are rarer.
        let clones = if self.rng.below(2) == 0 { 1..=1 } else { 0..=1 };
        let mut leaves: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| clones.contains(&self.bs.clones(id).len()))
            .collect();
        if leaves.is_empty() {
            leaves = self
                .live()
                .into_iter()
                .filter(|&id| self.bs.clones(id).len() <= 1)
                .collect();
        }
        let Some(id) = self.pick(&leaves) else { return };
        self.model.deleting.insert(id, self.pos());
        self.model.blocks.remove(&id);
        let merge = !self.bs.clones(id).is_empty();
        self.bs.delete_blob(id).unwrap();
        self.count(if merge {
            "snapshot merged into its clone"
        } else {
            "delete"
        });
    }

    /// Inflate or decouple a clone: its contents do not change.
    fn detach(&mut self) {
        let clones: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| {
                let b = self.bs.open_blob(id).unwrap();
                b.parent().is_some() && !b.is_read_only()
            })
            .collect();
        let Some(id) = self.pick(&clones) else { return };
        let (what, r) = if self.rng.below(2) == 0 {
            ("inflate", self.bs.inflate(id, |_, _| {}))
        } else {
            ("decouple", self.bs.decouple_parent(id, |_, _| {}))
        };
        if r.is_ok() {
            self.count(what);
        }
    }

    /// What an lvol queue does before it writes a cluster it lacks: the cluster is allocated
    /// with its inherited data, and reads the same.
    fn allocate(&mut self) {
        let thin: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| {
                let b = self.bs.open_blob(id).unwrap();
                b.is_thin_provisioned() && !b.is_read_only() && b.num_clusters() > 0
            })
            .collect();
        let Some(id) = self.pick(&thin) else { return };
        let i = self
            .rng
            .below(self.bs.open_blob(id).unwrap().num_clusters());
        if self.bs.allocate_cluster(id, i).is_ok() {
            self.count("allocate_cluster");
        }
    }

    /// An unmap of a whole cluster of a thin blob without a parent: the cluster is freed and
    /// its blocks read zeroes.
    fn unmap(&mut self) {
        let thin: Vec<BlobId> = self
            .live()
            .into_iter()
            .filter(|&id| {
                let b = self.bs.open_blob(id).unwrap();
                b.is_thin_provisioned() && b.parent().is_none() && !b.is_read_only()
            })
            .collect();
        let Some(id) = self.pick(&thin) else { return };
        let b = self.bs.open_blob(id).unwrap();
        let Some(i) = (0..b.num_clusters()).find(|&i| b.cluster(i).is_some()) else {
            return;
        };
        let start = self.pos();
        let freed = self.bs.release_unmapped(id, i).unwrap();
        assert!(freed.is_some());
        let ack = self.pos();
        let per = u64::from(CS) / BLOCK;
        let m = self.model.blocks.entry(id).or_default();
        for blk in i * per..(i + 1) * per {
            m.entry(blk).or_default().push(Written {
                start,
                ack,
                tag: ZEROES,
            });
        }
        self.count("unmap frees a cluster");
    }

    fn count(&mut self, what: &'static str) {
        *self.done.entry(what).or_default() += 1;
    }

    fn resize(&mut self) {
        let live = self.live();
        let Some(id) = self.pick(&live) else { return };
        let b = self.bs.open_blob(id).unwrap();
        if b.is_md_read_only() {
            return;
        }
        let n = b.num_clusters();
        let to = if self.rng.below(2) == 0 {
            n + 1 + self.rng.below(3)
        } else {
            n.saturating_sub(1)
        };
        // Blocks past a shrink are forgotten from the moment it starts.
        let keep = to * u64::from(CS) / BLOCK;
        if let Some(m) = self.model.blocks.get_mut(&id) {
            m.retain(|&blk, _| blk < keep);
        }
        let _ = self.bs.resize(id, to);
    }

    fn step(&mut self) {
        let r = self.rng.below(25);
        if std::env::var_os("CRASH_DEBUG").is_some() {
            eprintln!("pos {} op {r} live {:x?}", self.pos(), self.live());
        }
        match r {
            0..=1 => self.create(true),
            2 => self.create(false),
            3..=10 => self.write(),
            11..=12 => {
                self.bs.flush().unwrap();
            }
            13 => self.snapshot(),
            14 => self.clone_snapshot(),
            15 => self.delete(),
            16 => self.resize(),
            20 => self.detach(),
            21..=22 => self.allocate(),
            23..=24 => self.unmap(),
            17 => {
                let live = self.live();
                if let Some(id) = self.pick(&live) {
                    let _ = self
                        .bs
                        .set_xattr(id, "name", format!("v{}", self.next_tag).as_bytes());
                }
            }
            _ => {
                let live = self.live();
                if let Some(id) = self.pick(&live)
                    && self.bs.clones(id).is_empty()
                    && self.rng.below(4) == 0
                {
                    let _ = self.bs.set_read_only(id);
                }
            }
        }
    }
}

/// Checks one crash state: `durable` log entries are known to have reached the disk.
/// Log entries at or past `horizon` had not been issued at the cut.
fn check(
    image: &[u8],
    durable: usize,
    horizon: usize,
    model: &Model,
) -> std::result::Result<(), String> {
    let mut dev = MemDevice::new(image.len() as u64, 512);
    dev.bytes_mut().copy_from_slice(image);
    let mut bs = Blobstore::load(dev, &LoadOptions::default()).map_err(|e| format!("load: {e}"))?;
    bs.verify().map_err(|e| format!("verify: {e}"))?;
    let present: BTreeSet<BlobId> = bs.blob_ids().into_iter().collect();
    for (&id, &(_, ack)) in &model.created {
        let deleting = model.deleting.get(&id).is_some_and(|&d| d < horizon);
        if ack <= durable && !deleting && !present.contains(&id) {
            return Err(format!(
                "blob {id:#x} acknowledged at {ack} (durable {durable}) is gone"
            ));
        }
    }
    for (id, blocks) in &model.blocks {
        // An id can be a deleted blob's again; the model is of the latest blob with it.
        let incarnation_started = model
            .created
            .get(id)
            .is_some_and(|&(start, _)| start < horizon);
        if !present.contains(id) || !incarnation_started {
            continue;
        }
        let size = bs.open_blob(*id).unwrap().num_clusters() * u64::from(CS);
        for (&blk, writes) in blocks {
            if (blk + 1) * BLOCK > size {
                continue;
            }
            let Some(last) = writes.iter().rposition(|w| w.ack <= durable) else {
                continue;
            };
            // The last durable write, or any issued after it.
            let later = writes[last + 1..].iter().filter(|w| w.start < horizon);
            let allowed: Vec<u32> = std::iter::once(&writes[last])
                .chain(later)
                .map(|w| w.tag)
                .collect();
            let mut buf = vec![0u8; BLOCK as usize];
            bs.read(*id, blk * BLOCK, &mut buf)
                .map_err(|e| format!("read: {e}"))?;
            match block_tag(&buf, blk) {
                Some(t) if allowed.contains(&t) => {}
                got => {
                    return Err(format!(
                        "blob {id:#x} block {blk}: read {got:?} {:?}, allowed {allowed:?} (durable {durable}) {writes:?} parent {:x?}",
                        &buf[..8],
                        bs.open_blob(*id).unwrap().parent()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Replays every crash point of one workload; returns (points tried, failures).
fn replay(seed: u64, steps: usize) -> (usize, Vec<String>, BTreeMap<&'static str, usize>) {
    let opts = BlobstoreOptions {
        cluster_size: CS,
        num_md_pages: Some(128),
        ..Default::default()
    };
    let dev = RecordingDevice {
        mem: MemDevice::new(4 << 20, 512),
        log: Vec::new(),
    };
    let mut dev = Blobstore::init(dev, &opts).unwrap().into_device();
    dev.log.clear();
    let base = dev.mem.bytes().to_vec();
    let bs = Blobstore::load(dev, &LoadOptions::default()).unwrap();
    let mut w = Workload {
        bs,
        model: Model::default(),
        rng: Rng(seed),
        next_tag: 0,
        done: BTreeMap::new(),
    };
    for _ in 0..steps {
        w.step();
    }
    let (model, mut rng) = (std::mem::take(&mut w.model), Rng(seed ^ 0x9E37_79B9));
    let done = std::mem::take(&mut w.done);
    let log = w.bs.unload().unwrap().log;

    let mut tried = 0;
    let mut failures = Vec::new();
    let mut image = base;
    let mut durable = 0; // log entries through the last flush applied to `image`
    let flushes: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Op::Flush))
        .map(|(i, _)| i)
        .collect();
    let mut run = |img: &[u8], durable: usize, horizon: usize, what: String, tried: &mut usize| {
        *tried += 1;
        if let Err(e) = check(img, durable, horizon, &model) {
            failures.push(format!("seed {seed}, {what}: {e}"));
        }
    };
    let mut gap_start = 0;
    for &f in flushes.iter().chain(std::iter::once(&log.len())) {
        let gap: Vec<usize> = (gap_start..f)
            .filter(|&i| !matches!(log[i], Op::Flush))
            .collect();
        // In-order prefixes of the gap: the writes that reached the disk before the cut.
        let mut img = image.clone();
        for (k, &i) in gap.iter().enumerate() {
            log[i].apply(&mut img);
            if k + 1 < gap.len() {
                run(&img, durable, f, format!("prefix to {i}"), &mut tried);
            }
        }
        // Reordered, with some dropped.
        for s in 0..SAMPLES_PER_GAP.min(gap.len().saturating_sub(1)) {
            let mut picked: Vec<usize> =
                gap.iter().copied().filter(|_| rng.below(3) != 0).collect();
            for i in (1..picked.len()).rev() {
                picked.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut img = image.clone();
            picked.iter().for_each(|&i| log[i].apply(&mut img));
            run(
                &img,
                durable,
                f,
                format!("gap {gap_start}..{f} sample {s}"),
                &mut tried,
            );
        }
        // The flush itself: everything before it is durable.
        gap.iter().for_each(|&i| log[i].apply(&mut image));
        if f < log.len() {
            durable = f + 1;
            run(&image, durable, f, format!("flush at {f}"), &mut tried);
        }
        gap_start = f + 1;
    }
    (tried, failures, done)
}

#[test]
fn crash_point_replay() {
    let mut total = 0;
    let mut failures = Vec::new();
    let mut done: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in [1u64, 0xB10B, 0x5EED_0003, 77] {
        let (tried, f, d) = replay(seed, 120);
        total += tried;
        for (k, n) in d {
            *done.entry(k).or_default() += n;
        }
        failures.extend(f);
    }
    println!(
        "crash-point replay: {total} crash points tried, {} inconsistencies",
        failures.len()
    );
    println!("  metadata changes replayed: {done:?}");
    for f in failures.iter().take(10) {
        println!("  {f}");
    }
    assert!(total > 1000, "only {total} crash points");
    for what in [
        "snapshot merged into its clone",
        "inflate",
        "decouple",
        "allocate_cluster",
        "unmap frees a cluster",
    ] {
        assert!(
            done.get(what).is_some_and(|&n| n > 0),
            "the workload never ran {what}"
        );
    }
    assert!(failures.is_empty(), "{} inconsistencies", failures.len());
}
