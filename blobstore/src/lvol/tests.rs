use super::*;
use crate::MemDevice;

fn lvs() -> Lvstore<MemDevice> {
    let opts = LvstoreOptions {
        name: "lvs0".into(),
        cluster_size: 1 << 20,
        ..Default::default()
    };
    Lvstore::create(MemDevice::new(16 << 20, 512), &opts).unwrap()
}

#[test]
fn create_writes_spdks_super_blob() {
    let lvs = lvs();
    let bs = lvs.blobstore();
    assert_eq!(bs.super_block().bstype, LVOLSTORE_BSTYPE);
    assert_eq!(bs.super_block().super_blob, lvs.super_blob());
    let sb = bs.open_blob(lvs.super_blob()).unwrap();
    assert_eq!(sb.xattr("name").unwrap(), b"lvs0\0");
    assert_eq!(
        sb.xattr("uuid").unwrap(),
        uuid_value(&lvs.uuid()).as_slice()
    );
    assert_eq!(sb.num_clusters(), 0);
    // ratio 100: one metadata page per cluster, as SPDK's lvs_init gives 16 MiB / 1 MiB.
    assert_eq!(bs.super_block().md_len, 16);
}

#[test]
fn lvols_survive_unload_and_crash_by_name_and_uuid() {
    let mut lvs = lvs();
    let thin = lvs
        .create_lvol("thin", 3 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.create_lvol("thick", 1, false, ClearMethod::Default)
        .unwrap();
    let blob = lvs.blobstore().open_blob(thin).unwrap();
    assert_eq!(
        blob.xattr("name").unwrap().len(),
        64,
        "padded as spdk_lvol_create"
    );
    assert_eq!(blob.num_clusters(), 3);
    assert_eq!(
        lvs.blobstore()
            .open_blob(lvs.blob_of("thick").unwrap())
            .unwrap()
            .num_clusters(),
        1,
        "rounded up to a cluster"
    );
    lvs.blobstore_mut().write(thin, 4096, &[5; 4096]).unwrap();
    let uuid = lvs.lvol("thin").unwrap().uuid.unwrap();

    let lvs = Lvstore::load(lvs.unload().unwrap()).unwrap();
    assert_eq!(lvs.lookup("lvs0/thin").unwrap().blob_id, thin);
    assert_eq!(lvs.lookup(&uuid.to_string()).unwrap().blob_id, thin);
    assert_eq!(
        lvs.unique_id(lvs.lookup("lvs0/thin").unwrap()),
        uuid.to_string()
    );
    assert!(matches!(
        lvs.lookup("other/thin"),
        Err(Error::NoSuchLvol(_))
    ));
    assert!(matches!(lvs.lookup("lvs0/none"), Err(Error::NoSuchLvol(_))));

    // Without an unload: the load recovers and finds the same lvols.
    let mut lvs = Lvstore::load(lvs.into_device()).unwrap();
    let mut names: Vec<_> = lvs.lvols().map(|l| l.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["thick", "thin"]);
    let mut buf = [0u8; 4096];
    lvs.blobstore_mut().read(thin, 4096, &mut buf).unwrap();
    assert_eq!(buf, [5; 4096]);
}

#[test]
fn names_are_checked_as_spdk_does() {
    let mut lvs = lvs();
    lvs.create_lvol("a", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    assert_eq!(
        lvs.create_lvol("a", 1 << 20, true, ClearMethod::Default),
        Err(Error::LvolExists("a".into()))
    );
    for bad in ["", &"x".repeat(64)] {
        assert!(matches!(
            lvs.create_lvol(bad, 1 << 20, true, ClearMethod::Default),
            Err(Error::InvalidName { .. })
        ));
    }
    let opts = LvstoreOptions::default();
    assert!(matches!(
        Lvstore::create(MemDevice::new(16 << 20, 512), &opts),
        Err(Error::InvalidName { .. })
    ));
}

#[test]
fn rename_lvol_and_lvstore() {
    let mut lvs = lvs();
    let id = lvs
        .create_lvol("a", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.create_lvol("b", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    assert_eq!(
        lvs.rename_lvol("a", "b"),
        Err(Error::LvolExists("b".into()))
    );
    lvs.rename_lvol("a", "c").unwrap();
    assert_eq!(
        lvs.blobstore()
            .open_blob(id)
            .unwrap()
            .xattr("name")
            .unwrap(),
        b"c\0"
    );
    lvs.rename("lvs1").unwrap();
    let lvs = Lvstore::load(lvs.unload().unwrap()).unwrap();
    assert_eq!(lvs.name(), "lvs1");
    assert_eq!(lvs.lookup("lvs1/c").unwrap().blob_id, id);
    assert!(lvs.lvol("a").is_none());
}

#[test]
fn snapshot_clone_resize_read_only_delete() {
    let mut lvs = lvs();
    let base = lvs
        .create_lvol("base", 2 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.blobstore_mut().write(base, 0, &[1; 4096]).unwrap();
    let snap = lvs.create_snapshot("base", "snap").unwrap();
    let clone = lvs.create_clone("snap", "clone").unwrap();
    lvs.blobstore_mut().write(clone, 4096, &[2; 4096]).unwrap();
    assert_eq!(
        lvs.create_snapshot("base", "snap"),
        Err(Error::LvolExists("snap".into()))
    );
    lvs.resize("base", 4 << 20).unwrap();
    lvs.create_lvol("ro", 1 << 20, true, ClearMethod::Default)
        .unwrap();
    lvs.set_read_only("ro").unwrap();
    assert!(matches!(lvs.delete_lvol("snap"), Err(Error::HasClones(_))));

    let mut lvs = Lvstore::load(lvs.unload().unwrap()).unwrap();
    let bs = lvs.blobstore();
    assert_eq!(bs.open_blob(base).unwrap().parent(), Some(snap));
    assert_eq!(bs.open_blob(clone).unwrap().parent(), Some(snap));
    assert_eq!(bs.open_blob(base).unwrap().num_clusters(), 4);
    assert!(
        bs.open_blob(lvs.blob_of("ro").unwrap())
            .unwrap()
            .is_read_only()
    );
    let snap_blob = bs.open_blob(snap).unwrap();
    assert!(snap_blob.is_read_only());
    assert_eq!(snap_blob.xattr("name").unwrap().len(), 64);
    let mut buf = [0u8; 8192];
    lvs.blobstore_mut().read(clone, 0, &mut buf).unwrap();
    assert_eq!((buf[0], buf[4096]), (1, 2));
    lvs.delete_lvol("ro").unwrap();
    assert!(lvs.lvol("ro").is_none());
    assert!(
        Lvstore::load(lvs.unload().unwrap())
            .unwrap()
            .lvol("ro")
            .is_none()
    );
}

#[test]
fn a_store_without_lvstore_xattrs_is_refused() {
    let opts = BlobstoreOptions {
        cluster_size: 1 << 20,
        bstype: LVOLSTORE_BSTYPE,
        ..Default::default()
    };
    let bs = Blobstore::init(MemDevice::new(16 << 20, 512), &opts).unwrap();
    let dev = bs.unload().unwrap();
    assert!(matches!(Lvstore::load(dev), Err(Error::NotAnLvstore(_))));

    let mut bs = Blobstore::init(MemDevice::new(16 << 20, 512), &opts).unwrap();
    let id = bs.create_blob(&BlobOptions::default()).unwrap();
    bs.set_super_blob(id).unwrap();
    bs.set_xattr(id, "uuid", b"not a uuid").unwrap();
    assert!(matches!(
        Lvstore::load(bs.unload().unwrap()),
        Err(Error::NotAnLvstore(_))
    ));

    // An lvol blob without a name fails the load, as in SPDK.
    let mut lvs = lvs();
    lvs.blobstore_mut()
        .create_blob(&BlobOptions::default())
        .unwrap();
    assert!(matches!(
        Lvstore::load(lvs.unload().unwrap()),
        Err(Error::CorruptBlob { .. })
    ));
}
