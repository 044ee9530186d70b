//! The lvol bdev over a malloc bdev, through the block layer's queue (splitting included).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::plug::Plug;
use pmio::{BlockDevice, DmaRegion, Io, IoBuf, IoStatus, Op};
use pmio_blobstore::ClearMethod;
use pmio_blobstore::lvol::LvstoreOptions;
use pmio_malloc::{MallocDevice, MallocOptions};

use crate::{LvolStore, Stop};

const CLUSTER: u32 = 64 << 10;

fn malloc(mib: u64) -> Arc<dyn BlockDevice> {
    MallocDevice::new(MallocOptions {
        name: "Malloc0".into(),
        num_blocks: (mib << 20) / 512,
        ..Default::default()
    })
    .unwrap()
}

fn store(base: &Arc<dyn BlockDevice>) -> Arc<LvolStore> {
    let opts = LvstoreOptions {
        name: "lvs0".into(),
        cluster_size: CLUSTER,
        ..Default::default()
    };
    LvolStore::create(Arc::clone(base), &opts).unwrap()
}

/// A queue and a buffer to do synchronous I/O with.
struct Q {
    q: BdevQueue,
    plug: Plug,
    buf: DmaRegion,
}

impl Q {
    fn open(dev: Arc<dyn BlockDevice>) -> Q {
        let q = BdevQueue::open(
            dev,
            BdevQueueOptions {
                depth: 16,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        q.register_plug(&mut plug);
        Q {
            q,
            plug,
            buf: DmaRegion::new(1 << 20).unwrap(),
        }
    }

    /// Runs one I/O of `nblocks` at `lba` on the first bytes of the buffer.
    fn io(&mut self, op: Op, lba: u64, nblocks: u32) -> IoStatus {
        let len = if op.has_data() { nblocks * 512 } else { 0 };
        // SAFETY: the buffer is ours and outlives the I/O, which completes before we return.
        let buf = unsafe { IoBuf::from_raw_parts(self.buf.as_ptr(), len) };
        let io = Io {
            op,
            lba,
            nblocks,
            buf,
            ..Io::default()
        };
        self.plug.begin();
        self.q.expect(&mut self.plug, &io);
        self.q.submit(&mut self.plug, &io).unwrap();
        self.plug.finish();
        self.q.flush();
        let mut status = IoStatus::Pending;
        let t0 = Instant::now();
        while self.q.outstanding() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "I/O hangs");
            self.q.poll(8, |rq| {
                // The base's extent never leaks out: the completion is the lvol's own.
                assert_eq!((rq.lba, rq.nblocks), (lba, nblocks), "extent reported");
                status = rq.status;
            });
        }
        status
    }

    fn write(&mut self, lba: u64, data: &[u8]) {
        self.buf.as_mut_slice()[..data.len()].copy_from_slice(data);
        let s = self.io(Op::Write, lba, (data.len() / 512) as u32);
        assert_eq!(s, IoStatus::Success, "write at {lba}");
    }

    fn read(&mut self, lba: u64, len: usize) -> Vec<u8> {
        let s = self.io(Op::Read, lba, (len / 512) as u32);
        assert_eq!(s, IoStatus::Success, "read at {lba}");
        self.buf.as_slice()[..len].to_vec()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_thin_lvol_reads_zeroes_and_back_what_was_written_across_clusters() {
    let base = malloc(16);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    let info = vol.info().clone();
    assert_eq!(info.num_blocks, (1 << 20) / 512);
    assert_eq!(info.boundary_blocks, CLUSTER / 512);
    assert_eq!(info.name, lvs.lvol("vol").unwrap().bdev_name);
    let mut q = Q::open(vol);
    assert!(q.read(0, 4096).iter().all(|&b| b == 0));
    assert_eq!(lvs.lvol("vol").unwrap().num_allocated_clusters, 0);
    // 32 KiB straddling the first cluster boundary: split in two, two clusters allocated.
    let lba = u64::from(CLUSTER / 512) - 16;
    let data = pattern(1, 32 << 10);
    q.write(lba, &data);
    assert_eq!(q.read(lba, data.len()), data);
    assert_eq!(lvs.lvol("vol").unwrap().num_allocated_clusters, 2);
    // Write-zeroes over a cluster that reads zero allocates nothing; over data it zeroes.
    assert_eq!(q.io(Op::WriteZeroes, 1024, 8), IoStatus::Success);
    assert_eq!(lvs.lvol("vol").unwrap().num_allocated_clusters, 2);
    assert_eq!(q.io(Op::WriteZeroes, lba, 8), IoStatus::Success);
    let back = q.read(lba, data.len());
    assert!(back[..4096].iter().all(|&b| b == 0));
    assert_eq!(back[4096..], data[4096..]);
    drop(q);
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn lvols_and_their_data_are_found_again_after_unload_and_after_a_crash() {
    let base = malloc(16);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 512 << 10, true, ClearMethod::Default)
        .unwrap();
    let name = vol.info().name.clone();
    let mut q = Q::open(vol);
    let a = pattern(7, 8192);
    q.write(100, &a);
    drop(q);
    lvs.stop(Stop::Unload).unwrap();

    let lvs = LvolStore::load(Arc::clone(&base)).unwrap();
    assert_eq!(lvs.name().unwrap(), "lvs0");
    let dev = lvs.devices().into_iter().next().unwrap();
    assert_eq!(dev.info().name, name);
    let mut q = Q::open(dev);
    assert_eq!(q.read(100, a.len()), a);
    let b = pattern(9, 4096);
    q.write(900, &b);
    drop(q);
    lvs.stop(Stop::Crash).unwrap();

    let lvs = LvolStore::load(Arc::clone(&base)).unwrap();
    let mut q = Q::open(lvs.devices().into_iter().next().unwrap());
    assert_eq!(q.read(100, a.len()), a);
    assert_eq!(q.read(900, b.len()), b);
    assert_eq!(lvs.lvol("vol").unwrap().num_allocated_clusters, 2);
}

#[test]
fn a_snapshot_keeps_the_old_data_and_the_origin_copies_on_write() {
    let base = malloc(16);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 256 << 10, false, ClearMethod::Default)
        .unwrap();
    let mut q = Q::open(vol);
    let a = pattern(1, 16 << 10);
    q.write(0, &a);
    let snap = lvs.snapshot("vol", "snap").unwrap();
    assert!(!snap.info().supported_ops.contains(Op::Write));
    let info = lvs.lvol("vol").unwrap();
    assert_eq!(info.base_snapshot.as_deref(), Some("snap"));
    assert!(info.thin, "the origin became a thin clone");
    assert_eq!(info.num_allocated_clusters, 0);
    assert!(lvs.lvol("snap").unwrap().is_snapshot);

    // The origin's queue, opened before the snapshot, now writes through copy-on-write.
    let b = pattern(2, 4096);
    q.write(8, &b);
    let mut expect = a.clone();
    expect[4096..8192].copy_from_slice(&b);
    assert_eq!(q.read(0, expect.len()), expect);
    assert_eq!(lvs.lvol("vol").unwrap().num_allocated_clusters, 1);
    let mut s = Q::open(snap);
    assert_eq!(s.read(0, a.len()), a);

    let clone = lvs.clone_lvol("snap", "clone").unwrap();
    let mut c = Q::open(clone);
    assert_eq!(c.read(0, a.len()), a);
    let d = pattern(3, 4096);
    c.write(0, &d);
    assert_eq!(c.read(0, 4096), d);
    assert_eq!(s.read(0, a.len()), a, "the snapshot is untouched");
    assert_eq!(q.read(0, expect.len()), expect, "the origin is untouched");
    assert_eq!(lvs.lvol("snap").unwrap().clones.len(), 2);
    drop((q, s, c));
    // Deleting a snapshot with clones is refused.
    assert!(lvs.delete_lvol("snap").is_err());
    lvs.delete_lvol("clone").unwrap();
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn a_snapshot_taken_while_writes_run_is_a_point_in_time() {
    let base = malloc(32);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    let blocks = vol.info().num_blocks;
    let writer = std::thread::spawn(move || {
        let mut q = Q::open(vol);
        // Rounds over every 4 KiB block, each stamped with its lba and round.
        for round in 1..=6u32 {
            for lba in (0..blocks).step_by(8) {
                let mut data = vec![0u8; 4096];
                for w in data.chunks_mut(16) {
                    w[..8].copy_from_slice(&lba.to_le_bytes());
                    w[8..12].copy_from_slice(&round.to_le_bytes());
                }
                q.write(lba, &data);
            }
        }
    });
    std::thread::sleep(Duration::from_millis(30));
    let snap = lvs.snapshot("vol", "snap").unwrap();
    writer.join().unwrap();
    let mut s = Q::open(snap);
    let mut q = Q::open(
        lvs.devices()
            .into_iter()
            .find(|d| d.info().name == lvs.lvol("vol").unwrap().bdev_name)
            .unwrap(),
    );
    for lba in (0..blocks).step_by(8) {
        let got = s.read(lba, 4096);
        // Every 16-byte stamp of the block is the same: a whole write or none.
        let first = &got[..12];
        assert!(
            got.chunks(16).all(|w| &w[..12] == first),
            "torn block {lba} in the snapshot"
        );
        if first.iter().any(|&b| b != 0) {
            assert_eq!(&first[..8], &lba.to_le_bytes());
        }
        let now = q.read(lba, 4096);
        assert_eq!(
            &now[8..12],
            &6u32.to_le_bytes(),
            "the origin has the last round"
        );
    }
    drop((s, q));
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn resize_grows_the_lvol_and_keeps_its_data() {
    let base = malloc(16);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 128 << 10, true, ClearMethod::Default)
        .unwrap();
    let mut q = Q::open(vol);
    let a = pattern(5, 4096);
    q.write(16, &a);
    let big = lvs.resize("vol", 512 << 10).unwrap();
    assert_eq!(big.info().num_blocks, (512 << 10) / 512);
    let mut q2 = Q::open(big);
    assert_eq!(q2.read(16, 4096), a);
    let tail = (512 << 10) / 512 - 8;
    q2.write(tail, &a);
    assert_eq!(q2.read(tail, 4096), a);
    // The old object keeps working within its old size.
    assert_eq!(q.read(16, 4096), a);
    let ro = lvs.set_read_only("vol").unwrap();
    assert!(!ro.info().supported_ops.contains(Op::Write));
    // A queue of the old object is refused writes once the lvol is read-only.
    q.buf.as_mut_slice()[..4096].copy_from_slice(&a);
    assert_eq!(q.io(Op::Write, 0, 8), IoStatus::Errno(libc::EPERM));
    drop((q, q2));
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn a_destroyed_store_is_not_found_again() {
    let base = malloc(16);
    let lvs = store(&base);
    lvs.create_lvol("vol", 128 << 10, true, ClearMethod::Default)
        .unwrap();
    lvs.snapshot("vol", "snap").unwrap();
    lvs.destroy().unwrap();
    let e = LvolStore::load(base).unwrap_err();
    assert!(e.to_string().contains("signature"), "{e}");
}

/// 4 KiB of `lba` and `round` stamped every 16 bytes.
fn stamp(lba: u64, round: u32) -> Vec<u8> {
    let mut data = vec![0u8; 4096];
    for w in data.chunks_mut(16) {
        w[..8].copy_from_slice(&lba.to_le_bytes());
        w[8..12].copy_from_slice(&round.to_le_bytes());
    }
    data
}

/// Writes `rounds` of stamps over every other 4 KiB block of `dev`, from a queue of its own on
/// a thread, while `during` runs.
fn writing_while(dev: Arc<dyn BlockDevice>, rounds: u32, during: impl FnOnce()) {
    let blocks = dev.info().num_blocks;
    let writer = std::thread::spawn(move || {
        let mut q = Q::open(dev);
        for round in 1..=rounds {
            for lba in (0..blocks).step_by(16) {
                q.write(lba, &stamp(lba, round));
            }
        }
    });
    during();
    writer.join().unwrap();
}

/// Every other block has the last round's stamp, the others `old`.
fn check_stamped(q: &mut Q, blocks: u64, round: u32, old: &[u8]) {
    for lba in (0..blocks).step_by(8) {
        let got = q.read(lba, 4096);
        if lba % 16 == 0 {
            assert_eq!(got, stamp(lba, round), "block {lba}");
        } else {
            let at = (lba * 512) as usize;
            assert_eq!(got, old[at..at + 4096], "block {lba}");
        }
    }
}

#[test]
fn inflate_decouple_and_delete_into_the_clone_keep_the_data_while_writes_run() {
    let base = malloc(32);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    let dev: Arc<dyn BlockDevice> = vol;
    let blocks = dev.info().num_blocks;
    let mut q = Q::open(Arc::clone(&dev));
    let old = pattern(9, 1 << 20);
    q.write(0, &old);
    lvs.snapshot("vol", "s1").unwrap();
    writing_while(Arc::clone(&dev), 3, || lvs.inflate("vol").unwrap());
    check_stamped(&mut q, blocks, 3, &old);
    let info = lvs.lvol("vol").unwrap();
    assert_eq!((info.base_snapshot, info.thin), (None, false));
    assert_eq!(info.num_allocated_clusters, info.num_clusters);
    assert!(lvs.lvol("s1").unwrap().clones.is_empty());
    assert!(lvs.decouple_parent("vol").is_err(), "no parent");

    // s2 with two clones is refused; with one (vol), it merges into vol under writes.
    lvs.snapshot("vol", "s2").unwrap();
    lvs.clone_lvol("s2", "c").unwrap();
    assert!(lvs.delete_lvol("s2").is_err());
    lvs.delete_lvol("c").unwrap();
    writing_while(Arc::clone(&dev), 2, || lvs.delete_lvol("s2").unwrap());
    let mut now = old.clone();
    for lba in (0..blocks).step_by(16) {
        let at = (lba * 512) as usize;
        now[at..at + 4096].copy_from_slice(&stamp(lba, 3));
    }
    check_stamped(&mut q, blocks, 2, &now);
    assert!(lvs.lvol("s2").is_err());
    let info = lvs.lvol("vol").unwrap();
    assert_eq!(info.base_snapshot, None);
    assert_eq!(info.num_allocated_clusters, info.num_clusters);

    // Decouple from s4: what s4 holds is copied in; s3 becomes the parent.
    lvs.snapshot("vol", "s3").unwrap();
    q.write(0, &stamp(0, 7));
    lvs.snapshot("vol", "s4").unwrap();
    lvs.decouple_parent("vol").unwrap();
    let info = lvs.lvol("vol").unwrap();
    assert_eq!(info.base_snapshot.as_deref(), Some("s3"));
    assert_eq!(info.num_allocated_clusters, 1);
    assert_eq!(q.read(0, 4096), stamp(0, 7));
    assert_eq!(q.read(8, 4096), now[4096..8192]);
    drop(q);
    let free = lvs.info().unwrap().free_clusters;
    lvs.delete_lvol("s4").unwrap();
    assert_eq!(lvs.info().unwrap().free_clusters, free + 1);
    lvs.stop(Stop::Unload).unwrap();
}

/// While an inflate runs (a cluster per job of the store's thread), the lvol's ancestry,
/// size and flags are not changed under it: snapshot, resize, read-only, delete, a second
/// inflate or decouple, and deleting its parent into it are refused with -EBUSY (SPDK's
/// `locked_operation_in_progress`); other lvols are not held back; all of it works again
/// once the inflate is over.
#[test]
fn an_lvol_being_inflated_refuses_changes_of_its_ancestry_with_ebusy() {
    let base = malloc(32);
    let lvs = store(&base);
    lvs.create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.create_lvol("other", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.snapshot("vol", "s1").unwrap();
    let id = lvs.lvol("vol").unwrap().blob_id;
    // The state between two of the inflate's jobs.
    lvs.call(move |o| {
        o.busy.insert(id);
        Ok(())
    })
    .unwrap();
    let busy = |r: crate::Result<()>, what: &str| match r {
        Err(e) => assert_eq!(e.errno(), -libc::EBUSY, "{what}: {e}"),
        Ok(()) => panic!("{what} went ahead during an inflate"),
    };
    busy(lvs.snapshot("vol", "s2").map(|_| ()), "snapshot");
    busy(lvs.resize("vol", 2 << 20).map(|_| ()), "resize");
    busy(lvs.set_read_only("vol").map(|_| ()), "set_read_only");
    busy(lvs.inflate("vol"), "a second inflate");
    busy(lvs.decouple_parent("vol"), "decouple_parent");
    busy(lvs.delete_lvol("s1"), "deleting its parent into it");
    busy(lvs.delete_lvol("vol"), "delete");
    // Other lvols and read-only use of the snapshot go on.
    lvs.snapshot("other", "s_other").unwrap();
    lvs.clone_lvol("s1", "c1").unwrap();
    lvs.rename_lvol("vol", "vol2").unwrap();
    lvs.call(move |o| {
        o.busy.remove(&id);
        Ok(())
    })
    .unwrap();
    lvs.inflate("vol2").unwrap();
    assert_eq!(lvs.lvol("vol2").unwrap().base_snapshot, None);
    lvs.snapshot("vol2", "s2").unwrap();
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn unmapping_whole_clusters_of_a_thin_lvol_frees_them() {
    let base = malloc(16);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    assert!(vol.info().supported_ops.contains(Op::Discard));
    let mut q = Q::open(vol);
    let per = u64::from(CLUSTER / 512);
    let data = pattern(4, 4 * CLUSTER as usize);
    q.write(0, &data);
    let allocated = || lvs.lvol("vol").unwrap().num_allocated_clusters;
    let free = || lvs.info().unwrap().free_clusters;
    assert_eq!(allocated(), 4);
    let free0 = free();

    // Half a cluster: the data goes, the cluster stays.
    assert_eq!(
        q.io(Op::Discard, 3 * per, (per / 2) as u32),
        IoStatus::Success
    );
    assert_eq!(allocated(), 4);
    // One whole cluster, then two at once (split at the cluster boundary): freed.
    assert_eq!(q.io(Op::Discard, per, per as u32), IoStatus::Success);
    assert_eq!((allocated(), free()), (3, free0 + 1));
    assert_eq!(q.read(per, CLUSTER as usize), vec![0; CLUSTER as usize]);
    assert_eq!(
        q.io(Op::Discard, 2 * per, 2 * per as u32),
        IoStatus::Success
    );
    assert_eq!((allocated(), free()), (1, free0 + 3));
    let c = CLUSTER as usize;
    assert_eq!(q.read(0, c), data[..c], "cluster 0 is untouched");
    assert_eq!(q.read(2 * per, 2 * c), vec![0; 2 * c]);
    // A freed cluster is allocated again by the next write to it.
    q.write(per, &data[..4096]);
    assert_eq!(allocated(), 2);
    assert_eq!(q.read(per, 4096), data[..4096]);

    // A clone reads its snapshot where it holds nothing: its clusters stay on unmap.
    lvs.snapshot("vol", "snap").unwrap();
    q.write(0, &data[..4096]);
    assert_eq!(allocated(), 1);
    assert_eq!(q.io(Op::Discard, 0, per as u32), IoStatus::Success);
    assert_eq!(allocated(), 1);
    drop(q);
    lvs.stop(Stop::Unload).unwrap();
}

#[test]
fn clusters_freed_while_another_queue_writes_leave_no_foreign_data() {
    let base = malloc(32);
    let lvs = store(&base);
    let vol = lvs
        .create_lvol("vol", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    let dev: Arc<dyn BlockDevice> = vol;
    let blocks = dev.info().num_blocks;
    let per = u64::from(CLUSTER / 512);
    let mut q = Q::open(Arc::clone(&dev));
    writing_while(Arc::clone(&dev), 4, || {
        for round in 0..3 {
            for c in (round % 2..blocks / per).step_by(2) {
                assert_eq!(q.io(Op::Discard, c * per, per as u32), IoStatus::Success);
            }
        }
    });
    for lba in (0..blocks).step_by(8) {
        let got = q.read(lba, 4096);
        if lba % 16 != 0 || got.iter().all(|&b| b == 0) {
            assert!(got.iter().all(|&b| b == 0), "block {lba} was never written");
            continue;
        }
        let round = u32::from_le_bytes(got[8..12].try_into().unwrap());
        assert!((1..=4).contains(&round), "block {lba}: {:?}", &got[..16]);
        assert_eq!(got, stamp(lba, round), "block {lba}");
    }
    drop(q);
    lvs.stop(Stop::Unload).unwrap();
}
