//! The store's behaviour on a RAM device: blobs, allocation, copy-on-write, load and
//! recovery, bad input. The crash-point replay is in `tests/crash_replay.rs`.

use super::*;
use crate::MemDevice;
use crate::format::{PAGE_SIZE, XATTR_SNAPSHOT_IN_PROGRESS};

const CS: u32 = 16 << 10;

fn opts() -> BlobstoreOptions {
    BlobstoreOptions {
        cluster_size: CS,
        num_md_pages: Some(64),
        ..Default::default()
    }
}

fn new_store() -> Blobstore<MemDevice> {
    Blobstore::init(MemDevice::new(2 << 20, 512), &opts()).unwrap()
}

fn thin(n: u64) -> BlobOptions {
    BlobOptions {
        num_clusters: n,
        thin_provision: true,
        ..Default::default()
    }
}

fn read(bs: &mut Blobstore<MemDevice>, id: BlobId, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    bs.read(id, off, &mut b).unwrap();
    b
}

/// Reloads after a clean unload and after a crash; both must give the same blobs.
fn reload_both(bs: Blobstore<MemDevice>) -> (Blobstore<MemDevice>, Blobstore<MemDevice>) {
    let crashed = bs.device().clone();
    let clean = Blobstore::load(bs.unload().unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(clean.super_block().clean, 1);
    let recovered = Blobstore::load(crashed, &LoadOptions::default()).unwrap();
    clean.verify().unwrap();
    recovered.verify().unwrap();
    assert_eq!(clean.blobs, recovered.blobs);
    assert_eq!(clean.used_clusters, recovered.used_clusters);
    assert_eq!(clean.used_md_pages, recovered.used_md_pages);
    (clean, recovered)
}

#[test]
fn init_load_empty() {
    let bs = new_store();
    assert_eq!(bs.super_block().clean, 0);
    let data = bs.total_data_clusters();
    assert_eq!(bs.free_clusters(), data);
    let (clean, _) = reload_both(bs);
    assert_eq!(clean.free_clusters(), data);
    assert!(clean.blob_ids().is_empty());
}

#[test]
fn thick_blob_allocates_and_delete_frees() {
    let mut bs = new_store();
    let free = bs.free_clusters();
    let id = bs
        .create_blob(&BlobOptions {
            num_clusters: 5,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(id, crate::format::page_to_blobid(0));
    assert_eq!(bs.free_clusters(), free - 5);
    assert_eq!(bs.open_blob(id).unwrap().num_allocated_clusters(), 5);
    bs.write(id, 0, &[1; 512]).unwrap();
    bs.write(id, u64::from(CS) * 5 - 512, &[2; 512]).unwrap();
    let (mut bs, _) = reload_both(bs);
    assert_eq!(read(&mut bs, id, 0, 512), vec![1; 512]);
    assert_eq!(
        read(&mut bs, id, u64::from(CS) * 5 - 512, 512),
        vec![2; 512]
    );
    bs.delete_blob(id).unwrap();
    assert_eq!(bs.free_clusters(), free);
    let (bs, _) = reload_both(bs);
    assert!(bs.open_blob(id).is_err());
}

#[test]
fn thin_blob_allocates_on_first_write() {
    for et in [true, false] {
        let mut bs = new_store();
        let free = bs.free_clusters();
        let id = bs
            .create_blob(&BlobOptions {
                use_extent_table: et,
                ..thin(10)
            })
            .unwrap();
        assert_eq!(bs.free_clusters(), free);
        assert_eq!(read(&mut bs, id, 0, 4096), vec![0; 4096]);
        bs.write(id, u64::from(CS) * 3 + 1024, &[9; 2048]).unwrap();
        assert_eq!(bs.free_clusters(), free - 1);
        assert!(bs.open_blob(id).unwrap().cluster(3).is_some());
        bs.write(id, u64::from(CS) * 3, &[8; 512]).unwrap();
        assert_eq!(
            bs.free_clusters(),
            free - 1,
            "second write to the cluster allocates nothing"
        );
        let (mut bs, _) = reload_both(bs);
        let b = read(&mut bs, id, u64::from(CS) * 3, 4096);
        assert_eq!(&b[..512], &[8; 512]);
        assert_eq!(&b[1024..3072], &[9; 2048]);
        assert_eq!(bs.open_blob(id).unwrap().uses_extent_table(), et);
        assert!(matches!(
            bs.write(id, u64::from(CS) * 10, &[0; 512]),
            Err(Error::BadRange { .. })
        ));
        assert!(matches!(
            bs.write(id, 100, &[0; 512]),
            Err(Error::BadRange { .. })
        ));
    }
}

#[test]
fn resize_grows_and_shrinks_across_extent_pages() {
    // 4 KiB clusters so a blob spans several extent pages (512 clusters each).
    let o = BlobstoreOptions {
        cluster_size: 4096,
        num_md_pages: Some(64),
        ..Default::default()
    };
    let mut bs = Blobstore::init(MemDevice::new(8 << 20, 4096), &o).unwrap();
    let free = bs.free_clusters();
    let thick = bs
        .create_blob(&BlobOptions {
            num_clusters: 600,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(bs.open_blob(thick).unwrap().extent_pages.len(), 2);
    bs.write(thick, 599 * 4096, &[5; 4096]).unwrap();
    bs.resize(thick, 1100).unwrap();
    assert_eq!(bs.free_clusters(), free - 1100);
    let (mut bs, _) = reload_both(bs);
    assert_eq!(read(&mut bs, thick, 599 * 4096, 4096), vec![5; 4096]);
    bs.resize(thick, 513).unwrap();
    assert_eq!(bs.free_clusters(), free - 513);
    assert_eq!(bs.open_blob(thick).unwrap().extent_pages.len(), 2);
    let thinb = bs.create_blob(&thin(2000)).unwrap();
    bs.write(thinb, 1999 * 4096, &[6; 4096]).unwrap();
    bs.resize(thinb, 1000).unwrap();
    assert_eq!(bs.open_blob(thinb).unwrap().num_allocated_clusters(), 0);
    let (mut bs, _) = reload_both(bs);
    assert_eq!(bs.free_clusters(), free - 513);
    bs.resize(thinb, 2000).unwrap();
    assert_eq!(
        read(&mut bs, thinb, 1999 * 4096, 4096),
        vec![0; 4096],
        "a shrink forgets"
    );
    assert!(matches!(bs.resize(thick, 100_000), Err(Error::NoSpace(_))));
}

#[test]
fn xattrs_and_read_only_persist() {
    let mut bs = new_store();
    let id = bs
        .create_blob(&BlobOptions {
            xattrs: vec![("name".into(), b"vol0".to_vec())],
            ..thin(4)
        })
        .unwrap();
    bs.set_xattr(id, "uuid", &[7; 16]).unwrap();
    // Three 3 KiB values: one beside the flags and small xattrs, one page each for the rest.
    for i in 0..3 {
        bs.set_xattr(id, &format!("big{i}"), &vec![i; 3000])
            .unwrap();
    }
    assert_eq!(bs.open_blob(id).unwrap().md_pages.len(), 3);
    assert!(bs.remove_xattr(id, "big1").unwrap());
    assert!(!bs.remove_xattr(id, "nope").unwrap());
    assert!(matches!(
        bs.set_xattr(id, "huge", &[0; 5000]),
        Err(Error::XattrTooLarge { .. })
    ));
    bs.set_read_only(id).unwrap();
    assert!(matches!(
        bs.write(id, 0, &[0; 512]),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(
        bs.set_xattr(id, "x", b"y"),
        Err(Error::MetadataReadOnly(_))
    ));
    let (bs, _) = reload_both(bs);
    let b = bs.open_blob(id).unwrap();
    assert_eq!(b.xattr("name"), Some(&b"vol0"[..]));
    assert_eq!(b.xattr("uuid"), Some(&[7u8; 16][..]));
    assert_eq!(b.xattr("big2"), Some(&vec![2u8; 3000][..]));
    assert_eq!(b.xattr("big1"), None);
    assert!(b.is_read_only());
}

#[test]
fn snapshot_copy_on_write_and_clone() {
    for et in [true, false] {
        let mut bs = new_store();
        let id = bs
            .create_blob(&BlobOptions {
                num_clusters: 4,
                use_extent_table: et,
                ..Default::default()
            })
            .unwrap();
        bs.write(id, 0, &vec![1; CS as usize]).unwrap();
        bs.write(id, u64::from(CS), &vec![2; CS as usize]).unwrap();
        let used = bs.free_clusters();
        let snap = bs.create_snapshot(id, &[]).unwrap();
        assert_eq!(
            bs.free_clusters(),
            used,
            "a snapshot takes the clusters, copies nothing"
        );
        assert_eq!(bs.open_blob(id).unwrap().parent(), Some(snap));
        assert!(bs.open_blob(snap).unwrap().is_read_only());
        assert!(
            bs.open_blob(snap)
                .unwrap()
                .internal_xattr(XATTR_SNAPSHOT_IN_PROGRESS)
                .is_none()
        );
        assert_eq!(read(&mut bs, id, 0, 512), vec![1; 512]);
        // First write to cluster 0 copies it, then overwrites 512 bytes.
        bs.write(id, 512, &[7; 512]).unwrap();
        assert_eq!(bs.free_clusters(), used - 1);
        let b = read(&mut bs, id, 0, 2048);
        assert_eq!(
            (&b[..512], &b[512..1024], &b[1024..]),
            (&[1u8; 512][..], &[7u8; 512][..], &[1u8; 1024][..])
        );
        assert_eq!(
            read(&mut bs, snap, 512, 512),
            vec![1; 512],
            "the snapshot is unchanged"
        );
        // A clone of the snapshot reads the snapshot and writes on its own.
        let clone = bs.create_clone(snap, &[]).unwrap();
        assert_eq!(read(&mut bs, clone, u64::from(CS), 512), vec![2; 512]);
        bs.write(clone, u64::from(CS), &[3; 512]).unwrap();
        assert_eq!(read(&mut bs, id, u64::from(CS), 512), vec![2; 512]);
        assert!(matches!(
            bs.create_clone(id, &[]),
            Err(Error::NotReadOnly(_))
        ));
        assert!(matches!(bs.delete_blob(snap), Err(Error::HasClones(_))));
        assert_eq!(bs.clones(snap).len(), 2);
        // A snapshot of a clone chains to the first snapshot.
        let snap2 = bs.create_snapshot(clone, &[]).unwrap();
        assert_eq!(bs.open_blob(snap2).unwrap().parent(), Some(snap));
        assert_eq!(
            read(&mut bs, clone, u64::from(CS), 1024),
            [vec![3; 512], vec![2; 512]].concat()
        );
        let (mut bs, _) = reload_both(bs);
        assert_eq!(read(&mut bs, clone, 0, 512), vec![1; 512]);
        assert_eq!(read(&mut bs, id, 512, 512), vec![7; 512]);
        // Deleting the clones frees what they allocated; then the snapshot can go.
        let free = bs.free_clusters();
        bs.delete_blob(id).unwrap();
        assert_eq!(bs.free_clusters(), free + 1);
        bs.delete_blob(clone).unwrap();
        bs.delete_blob(snap2).unwrap();
        bs.delete_blob(snap).unwrap();
        assert_eq!(bs.free_clusters(), bs.total_data_clusters());
        reload_both(bs);
    }
}

#[test]
fn clear_method_on_delete() {
    for (method, cleared) in [
        (ClearMethod::WriteZeroes, true),
        (ClearMethod::Unmap, true),
        (ClearMethod::None, false),
    ] {
        let mut bs = new_store();
        let id = bs
            .create_blob(&BlobOptions {
                num_clusters: 1,
                clear_method: method,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(bs.open_blob(id).unwrap().clear_method(), method);
        bs.write(id, 0, &[0xAA; 512]).unwrap();
        let c = bs.open_blob(id).unwrap().cluster(0).unwrap();
        bs.delete_blob(id).unwrap();
        let off = bs.geo.cluster_offset(c) as usize;
        assert_eq!(bs.device().bytes()[off] == 0, cleared, "{method:?}");
    }
}

#[test]
fn bad_stores_are_refused_with_a_reason() {
    let mut bs = new_store();
    let id = bs.create_blob(&thin(2)).unwrap();
    let root = bs.geo.md_page_offset(0) as usize;
    let dev = bs.unload().unwrap();

    let mut d = dev.clone();
    d.bytes_mut()[0] = b'X';
    assert!(matches!(
        Blobstore::load(d, &LoadOptions::default()),
        Err(Error::BadSignature { .. })
    ));

    let mut d = dev.clone();
    d.bytes_mut()[200] ^= 1;
    assert!(matches!(
        Blobstore::load(d, &LoadOptions::default()),
        Err(Error::CrcMismatch {
            what: "super block",
            ..
        })
    ));

    let lvs = LoadOptions {
        bstype: *b"LVOLSTORE\0\0\0\0\0\0\0",
        ..Default::default()
    };
    assert!(matches!(
        Blobstore::load(dev.clone(), &lvs),
        Err(Error::BstypeMismatch { .. })
    ));

    // The blob-id mask says a blob is there; its page fails its CRC.
    let mut d = dev.clone();
    d.bytes_mut()[root + 100] ^= 1;
    let e = Blobstore::load(d, &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&e, Error::AtPage { page: 0, source } if matches!(**source, Error::CrcMismatch { .. })),
        "{e}"
    );

    // The used-cluster mask marks the blob's... nothing; a used page marked free disagrees.
    let mut d = dev.clone();
    let mask_off = bs_mask_offset(&dev);
    d.bytes_mut()[mask_off + 5] = 0;
    let e = Blobstore::load(d, &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MaskDisagrees {
                mask: "used-page",
                ..
            }
        ),
        "{e}"
    );

    // A chain that loops back on itself.
    let mut bs = Blobstore::load(dev.clone(), &LoadOptions::default()).unwrap();
    for i in 0..2 {
        bs.set_xattr(id, &format!("x{i}"), &[1; 3000]).unwrap();
    }
    let second = bs.open_blob(id).unwrap().md_pages[1];
    let off = bs.geo.md_page_offset(second) as usize;
    let mut d = bs.into_device();
    let mut page = crate::format::MdPage::decode(&d.bytes()[off..off + PAGE_SIZE]).unwrap();
    page.next = second;
    d.bytes_mut()[off..off + PAGE_SIZE].copy_from_slice(&page.encode());
    let e = Blobstore::load(d, &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&e, Error::CorruptBlob { reason, .. } if reason.contains("loops")),
        "{e}"
    );
}

fn bs_mask_offset(dev: &MemDevice) -> usize {
    let sb = crate::format::SuperBlock::decode(&dev.bytes()[..PAGE_SIZE]).unwrap();
    sb.used_page_mask_start as usize * PAGE_SIZE
}

#[test]
fn recovery_rebuilds_masks_after_a_crash() {
    let mut bs = new_store();
    let a = bs
        .create_blob(&BlobOptions {
            num_clusters: 3,
            ..Default::default()
        })
        .unwrap();
    let b = bs.create_blob(&thin(8)).unwrap();
    bs.write(b, u64::from(CS) * 7, &[4; 512]).unwrap();
    bs.delete_blob(a).unwrap();
    let c = bs
        .create_blob(&BlobOptions {
            num_clusters: 2,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(c, a, "the freed id is reused");
    let free = bs.free_clusters();
    let mut r = Blobstore::load(bs.into_device(), &LoadOptions::default()).unwrap();
    r.verify().unwrap();
    assert_eq!(r.free_clusters(), free);
    assert_eq!(r.blob_ids(), vec![a, b]);
    assert_eq!(read(&mut r, b, u64::from(CS) * 7, 512), vec![4; 512]);
}

/// What `id` reads, one byte per 512-byte sector at the start of each cluster.
fn firsts(bs: &mut Blobstore<MemDevice>, id: BlobId) -> Vec<u8> {
    let n = bs.open_blob(id).unwrap().num_clusters();
    (0..n)
        .map(|i| {
            let b = read(bs, id, i * u64::from(CS), 512);
            assert!(b.iter().all(|&x| x == b[0]), "cluster {i} is not uniform");
            b[0]
        })
        .collect()
}

#[test]
fn decouple_inflate_and_delete_into_clone() {
    for extent_table in [true, false] {
        let mut bs = new_store();
        let cs = u64::from(CS);
        let a = bs
            .create_blob(&BlobOptions {
                use_extent_table: extent_table,
                ..thin(3)
            })
            .unwrap();
        bs.write(a, 0, &[1; 512]).unwrap();
        bs.write(a, cs, &[2; 512]).unwrap();
        let s1 = bs.create_snapshot(a, &[]).unwrap();
        bs.write(a, cs, &[3; 512]).unwrap();
        let s2 = bs.create_snapshot(a, &[]).unwrap();
        bs.write(a, 2 * cs, &[4; 512]).unwrap();
        // Garbage in every free cluster: what inflate zeroes must not show through.
        for c in 0..bs.geo.total_clusters {
            if !bs.used_clusters.get(c) {
                let off = bs.geo.cluster_offset(c) as usize;
                bs.dev.bytes_mut()[off..off + CS as usize].fill(0xEE);
            }
        }
        assert_eq!(firsts(&mut bs, a), [1, 3, 4]);
        assert!(matches!(
            bs.decouple_parent(s1, |_, _| {}),
            Err(Error::ReadOnly(_))
        ));

        // Decouple: only what the parent (s2) holds is copied; the parent is now s1.
        let mut got = Vec::new();
        bs.decouple_parent(a, |i, c| got.push((i, c))).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1);
        assert_eq!(bs.open_blob(a).unwrap().cluster(1), Some(got[0].1));
        assert_eq!(bs.open_blob(a).unwrap().parent(), Some(s1));
        assert!(bs.open_blob(a).unwrap().is_thin_provisioned());
        assert!(bs.clones(s2).is_empty());
        assert_eq!(firsts(&mut bs, a), [1, 3, 4]);

        // Inflate: everything else, then no parent and thick.
        let mut got = Vec::new();
        bs.inflate(a, |i, _| got.push(i)).unwrap();
        assert_eq!(got, [0]);
        let b = bs.open_blob(a).unwrap();
        assert_eq!((b.parent(), b.is_thin_provisioned()), (None, false));
        assert_eq!(firsts(&mut bs, a), [1, 3, 4]);
        assert!(matches!(
            bs.decouple_parent(a, |_, _| {}),
            Err(Error::NoParent(_))
        ));

        // A thin blob without a parent inflates to zeroes, not to what the device held.
        let z = bs.create_blob(&thin(2)).unwrap();
        bs.write(z, 0, &[5; 512]).unwrap();
        bs.inflate(z, |_, _| {}).unwrap();
        let mut whole = vec![0u8; 2 * CS as usize];
        bs.read(z, 0, &mut whole).unwrap();
        assert!(
            whole[CS as usize..].iter().all(|&x| x == 0),
            "inflated cluster reads zeroes"
        );

        // a left s1 at the inflate: s2 is its only clone now, so s1 merges into it.
        assert_eq!(bs.clones(s1), [s2]);
        let free = bs.free_clusters();
        // s1 holds clusters 0 and 1 (2s); s2 holds cluster 1 (3s): s2 takes cluster 0 and
        // s1's cluster 1 is freed.
        bs.delete_blob(s1).unwrap();
        assert_eq!(bs.free_clusters(), free + 1);
        assert!(bs.open_blob(s1).is_err());
        assert_eq!(bs.open_blob(s2).unwrap().parent(), None);
        assert_eq!(firsts(&mut bs, s2), [1, 3, 0]);

        // A writable clone takes its snapshot's clusters where it has none.
        let t = bs.create_snapshot(a, &[]).unwrap();
        bs.write(a, 0, &[9; 512]).unwrap();
        let c2 = bs.create_clone(t, &[]).unwrap();
        assert!(matches!(bs.delete_blob(t), Err(Error::HasClones(_))));
        bs.delete_blob(c2).unwrap();
        let free = bs.free_clusters();
        bs.delete_blob(t).unwrap();
        assert_eq!(bs.free_clusters(), free + 1, "t's cluster 0 is freed");
        assert_eq!(bs.open_blob(a).unwrap().parent(), None);
        assert_eq!(bs.open_blob(a).unwrap().num_allocated_clusters(), 3);
        assert_eq!(firsts(&mut bs, a), [9, 3, 4]);
        let (mut bs, _) = reload_both(bs);
        assert_eq!(firsts(&mut bs, a), [9, 3, 4]);
        assert_eq!(firsts(&mut bs, s2), [1, 3, 0]);
    }
}

#[test]
fn an_unmapped_cluster_of_a_thin_blob_without_parent_is_freed() {
    for extent_table in [true, false] {
        let mut bs = new_store();
        let cs = u64::from(CS);
        let id = bs
            .create_blob(&BlobOptions {
                use_extent_table: extent_table,
                ..thin(3)
            })
            .unwrap();
        bs.write(id, 0, &[1; 512]).unwrap();
        bs.write(id, cs, &[2; 512]).unwrap();
        let free = bs.free_clusters();
        let c = bs.open_blob(id).unwrap().cluster(0).unwrap();
        assert_eq!(bs.release_unmapped(id, 0).unwrap(), Some(c));
        assert_eq!(bs.free_clusters(), free + 1);
        assert_eq!(bs.open_blob(id).unwrap().cluster(0), None);
        assert_eq!(firsts(&mut bs, id), [0, 2, 0]);
        assert_eq!(
            bs.release_unmapped(id, 0).unwrap(),
            None,
            "nothing left to free"
        );
        assert!(matches!(
            bs.release_unmapped(id, 3),
            Err(Error::BadRange { .. })
        ));
        // A clone reads its parent where it holds nothing, a thick blob holds everything:
        // neither gives clusters back.
        let snap = bs.create_snapshot(id, &[]).unwrap();
        bs.write(id, cs, &[3; 512]).unwrap();
        assert!(matches!(
            bs.release_unmapped(id, 1),
            Err(Error::KeepsClusters(_))
        ));
        assert!(matches!(
            bs.release_unmapped(snap, 1),
            Err(Error::ReadOnly(_))
        ));
        let thick = bs
            .create_blob(&BlobOptions {
                num_clusters: 1,
                ..Default::default()
            })
            .unwrap();
        assert!(matches!(
            bs.release_unmapped(thick, 0),
            Err(Error::KeepsClusters(_))
        ));
        let (mut bs, _) = reload_both(bs);
        assert_eq!(firsts(&mut bs, snap), [0, 2, 0]);
        assert_eq!(firsts(&mut bs, id), [0, 3, 0]);
    }
}
