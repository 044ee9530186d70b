//! Stores SPDK v25.09 wrote, opened by pmio-blobstore: the images under `tests/fixtures/`
//! (made by `make-fixtures.sh` there, with spdk_tgt and spdk_dd) are loaded, every lvol is
//! found by the xattrs SPDK's lib/lvol gives it, and every lvol is read back whole: its
//! CRC-32 must be the one of SPDK's own read-back of it (in the manifest), and the ranges
//! the script wrote must hold their pattern — a clone reading through to its snapshot
//! included. The dirty image (SPDK killed with SIGKILL) is recovered first.
//!
//! Data pattern (as the script writes it): the 8-byte little-endian word at byte offset x
//! of an lvol, inside a write of tag t, is `(t << 56) | x`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use pmio_blobstore::format::SuperBlock;
use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
use pmio_blobstore::{BlobDevice, BlobId, Blobstore, LoadOptions, MemDevice};

/// SPDK's AIO bdev block size in the script.
const BLOCK: u32 = 512;
/// The lvstore's blobstore type (`lvs_bs_opts`: "LVOLSTORE").
const LVOLSTORE: [u8; 16] = *b"LVOLSTORE\0\0\0\0\0\0\0";

/// The gunzipped image in a RAM device.
fn image(name: &str) -> MemDevice {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut bytes)
        .unwrap();
    let mut dev = MemDevice::new(bytes.len() as u64, BLOCK);
    dev.bytes_mut().copy_from_slice(&bytes);
    dev
}

/// One lvol as the manifest tells it (SPDK's bdev_get_bdevs at the time).
#[derive(Debug, Default)]
struct LvolFacts {
    uuid: String,
    size: u64,
    thin: bool,
    snapshot: bool,
    parent: Option<String>,
    clusters: u64,
    read_only: bool,
    /// CRC-32 (zlib's) of the whole lvol as SPDK read it back.
    crc32: u32,
    /// (offset, len, tag)
    data: Vec<(u64, u64, u64)>,
}

#[derive(Debug, Default)]
struct Manifest {
    lvs_name: String,
    lvs_uuid: String,
    cluster_size: u32,
    total_data_clusters: u32,
    free_clusters: u32,
    lvols: BTreeMap<String, LvolFacts>,
}

fn manifest(name: &str) -> Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut m = Manifest::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let kv: BTreeMap<&str, &str> = words.iter().filter_map(|w| w.split_once('=')).collect();
        match words.first() {
            Some(&"lvs") => {
                m.lvs_name = words[1].to_string();
                m.lvs_uuid = kv["uuid"].to_string();
                m.cluster_size = kv["cluster_size"].parse().unwrap();
                m.total_data_clusters = kv["total_data_clusters"].parse().unwrap();
                m.free_clusters = kv["free_clusters"].parse().unwrap();
            }
            Some(&"lvol") => {
                let l = m.lvols.entry(words[1].to_string()).or_default();
                l.uuid = kv["uuid"].to_string();
                l.size = kv["size"].parse().unwrap();
                l.thin = kv["thin"] == "1";
                l.snapshot = kv["snapshot"] == "1";
                l.parent = (kv["parent"] != "-").then(|| kv["parent"].to_string());
                l.clusters = kv["clusters"].parse().unwrap();
                l.crc32 = u32::from_str_radix(kv["crc32"].trim_start_matches("0x"), 16).unwrap();
            }
            Some(&"readonly") => m.lvols.get_mut(words[1]).unwrap().read_only = true,
            Some(&"data") => {
                let n = |i: usize| words[i].parse::<u64>().unwrap();
                let l = m.lvols.get_mut(words[1]).unwrap();
                l.data.push((n(2), n(3), n(4)));
            }
            _ => panic!("{name}: unknown manifest line {line:?}"),
        }
    }
    m
}

/// A C string xattr value: up to its first NUL, which SPDK always stores.
fn c_str(v: &[u8]) -> &str {
    let end = v.iter().position(|&b| b == 0).expect("NUL-terminated");
    std::str::from_utf8(&v[..end]).unwrap()
}

/// The words a write of `tag` puts at lvol bytes `off..off + len`.
fn pattern(tag: u64, off: u64, len: u64) -> Vec<u8> {
    (off..off + len)
        .step_by(8)
        .flat_map(|x| ((tag << 56) | x).to_le_bytes())
        .collect()
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

/// Loads `image`, checks it against `manifest` and returns the store.
fn check_fixture(image_name: &str, manifest_name: &str, clean: u32) -> Blobstore<MemDevice> {
    let dev = image(image_name);
    let m = manifest(manifest_name);
    // The clean flag as SPDK left it (bytes 16..20 of the super block).
    assert_eq!(
        u32::from_le_bytes(dev.bytes()[16..20].try_into().unwrap()),
        clean,
        "{image_name}: clean flag"
    );
    let opts = LoadOptions {
        bstype: LVOLSTORE,
        ..Default::default()
    };
    let mut bs = Blobstore::load(dev, &opts).unwrap_or_else(|e| panic!("{image_name}: {e}"));
    bs.verify().unwrap();
    assert_eq!(bs.super_block().bstype, LVOLSTORE);
    assert_eq!(bs.cluster_size(), m.cluster_size);
    assert_eq!(bs.io_unit_size(), BLOCK);
    assert_eq!(bs.total_data_clusters(), m.total_data_clusters);
    assert_eq!(
        bs.free_clusters(),
        m.free_clusters,
        "{image_name}: free clusters"
    );

    // The lvstore's super blob: its name and uuid (`super_blob_init_cb`).
    let super_blob = bs.super_block().super_blob;
    let sb = bs.open_blob(super_blob).unwrap();
    assert_eq!(c_str(sb.xattr("name").unwrap()), m.lvs_name);
    let uuid = sb.xattr("uuid").unwrap();
    assert_eq!(uuid.len(), 37, "SPDK_UUID_STRING_LEN");
    assert_eq!(c_str(uuid), m.lvs_uuid);

    // Every other blob is an lvol with a name and a uuid (`load_next_lvol`).
    let mut by_name: BTreeMap<String, BlobId> = BTreeMap::new();
    for id in bs.blob_ids() {
        if id == super_blob {
            continue;
        }
        let blob = bs.open_blob(id).unwrap();
        let name = c_str(blob.xattr("name").expect("lvol name")).to_string();
        by_name.insert(name, id);
    }
    assert_eq!(
        by_name.keys().collect::<Vec<_>>(),
        m.lvols.keys().collect::<Vec<_>>(),
        "{image_name}: lvols"
    );
    for (name, facts) in &m.lvols {
        let id = by_name[name];
        let blob = bs.open_blob(id).unwrap();
        assert_eq!(c_str(blob.xattr("uuid").unwrap()), facts.uuid, "{name}");
        // spdk_lvol_create stores the name NUL-padded to 64 bytes; spdk_lvol_rename stores
        // the name and one NUL ("thick" was renamed from "thick0").
        let name_len = if name == "thick" { name.len() + 1 } else { 64 };
        assert_eq!(
            blob.xattr("name").unwrap().len(),
            name_len,
            "{name}: name xattr"
        );
        assert_eq!(
            blob.num_clusters() * u64::from(m.cluster_size),
            facts.size,
            "{name}: size"
        );
        assert_eq!(blob.is_thin_provisioned(), facts.thin, "{name}: thin");
        // spdk_blob_opts_init: use_extent_table = true, so every lvol has extent pages.
        assert!(blob.uses_extent_table(), "{name}: extent table");
        assert_eq!(
            blob.num_allocated_clusters(),
            facts.clusters,
            "{name}: clusters"
        );
        assert_eq!(
            blob.is_read_only(),
            facts.read_only || facts.snapshot,
            "{name}: read-only"
        );
        assert_eq!(
            blob.parent(),
            facts.parent.as_ref().map(|p| by_name[p]),
            "{name}: parent"
        );
        assert_eq!(
            !bs.clones(id).is_empty(),
            facts.snapshot,
            "{name}: snapshot"
        );

        let mut got = vec![0u8; facts.size as usize];
        bs.read(id, 0, &mut got).unwrap();
        for &(off, len, tag) in &facts.data {
            let want = pattern(tag, off, len);
            let range = &got[off as usize..(off + len) as usize];
            if let Some(at) = range.iter().zip(&want).position(|(g, w)| g != w) {
                let at = at & !7;
                panic!(
                    "{image_name}: lvol {name} at {:#x}: got {:02x?}, want {:02x?}",
                    off + at as u64,
                    &range[at..at + 8],
                    &want[at..at + 8]
                );
            }
        }
        assert_eq!(
            crc32(&got),
            facts.crc32,
            "{image_name}: {name} differs from SPDK's read-back"
        );
    }
    bs
}

#[test]
fn spdk_clean_lvstore_opens_with_its_lvols_and_data() {
    let bs = check_fixture("spdk-clean.img.gz", "spdk-clean.manifest", 1);
    assert_eq!(bs.super_block().clean, 1);
}

#[test]
fn spdk_dirty_lvstore_is_recovered_with_its_lvols_and_data() {
    check_fixture("spdk-dirty.img.gz", "spdk-dirty.manifest", 0);
}

#[test]
fn spdk_clean_lvstore_round_trips_through_pmio() {
    // Written by pmio after SPDK: a new write to the clone, a clean unload, a load.
    let mut bs = check_fixture("spdk-clean.img.gz", "spdk-clean.manifest", 1);
    let ids = bs.blob_ids();
    let clone = ids
        .iter()
        .copied()
        .find(|&id| bs.open_blob(id).unwrap().xattr("name").map(c_str) == Some("clone"))
        .unwrap();
    let data = pattern(11, 0x10_0000, 4096);
    bs.write(clone, 0x10_0000, &data).unwrap();
    let dev = bs.unload().unwrap();
    assert_eq!(dev.bytes()[16], 1, "clean after unload");
    let mut bs = Blobstore::load(dev, &LoadOptions::default()).unwrap();
    bs.verify().unwrap();
    let mut got = vec![0u8; 4096];
    bs.read(clone, 0x10_0000, &mut got).unwrap();
    assert_eq!(got, data);
    // The snapshot's data under the clone is untouched.
    bs.read(clone, 0, &mut got).unwrap();
    assert_eq!(got[..8], (3u64 << 56).to_le_bytes());
    assert!(bs.device().block_count() > 0);
}

#[test]
fn spdk_lvstores_open_as_lvstores() {
    for (img, man) in [
        ("spdk-clean.img.gz", "spdk-clean.manifest"),
        ("spdk-dirty.img.gz", "spdk-dirty.manifest"),
    ] {
        let m = manifest(man);
        let lvs = Lvstore::load(image(img)).unwrap_or_else(|e| panic!("{img}: {e}"));
        assert_eq!(lvs.name(), m.lvs_name);
        assert_eq!(lvs.uuid().to_string(), m.lvs_uuid);
        let mut names: Vec<&str> = lvs.lvols().map(|l| l.name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            m.lvols.keys().map(String::as_str).collect::<Vec<_>>()
        );
        for (name, facts) in &m.lvols {
            let by_alias = lvs.lookup(&format!("{}/{name}", m.lvs_name)).unwrap();
            assert_eq!(by_alias.uuid.unwrap().to_string(), facts.uuid);
            assert_eq!(lvs.lookup(&facts.uuid).unwrap(), by_alias);
        }
    }
}

#[test]
fn pmio_lays_out_an_lvstore_as_spdk_does() {
    // The same device, cluster size and name as make-fixtures.sh gives SPDK.
    let spdk = SuperBlock::decode(&image("spdk-clean.img.gz").bytes()[..4096]).unwrap();
    let opts = LvstoreOptions {
        name: "lvs_fx".into(),
        cluster_size: 1 << 20,
        ..Default::default()
    };
    let lvs = Lvstore::create(MemDevice::new(16 << 20, BLOCK), &opts).unwrap();
    let dev = lvs.unload().unwrap();
    let ours = SuperBlock::decode(&dev.bytes()[..4096]).unwrap();
    assert_eq!(ours, spdk);
}
