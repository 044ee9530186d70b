//! Writes an lvstore with pmio-blobstore into a file, for SPDK to open: the manual check
//! of the pmio → SPDK direction (`tests/fixtures/make-fixtures.sh check FILE`).
//!
//! `cargo run -p pmio-blobstore --example write_lvstore -- FILE` makes FILE (32 MiB,
//! 512-byte blocks, 1 MiB clusters) holding lvstore "pmio_lvs" with a thick lvol, a thin
//! one, a snapshot and its clone (written after the clone), a resized lvol, a renamed one
//! and a read-only one; an inflated clone ("inf"), a clone decoupled from its parent
//! snapshot onto its grandparent ("dec"), and a clone its snapshot was deleted into
//! ("mrg": the clusters moved, not copied), unloaded cleanly; and FILE.manifest, the ranges
//! written as
//! "data LVOL OFFSET LEN TAG" (each 8-byte word at lvol offset x holds `(TAG << 56) | x`).
//! With `--dirty` after FILE the store is dropped without an unload, as a crash leaves it
//! (clean = 0, masks never written), so SPDK must recover it.

use std::io::Write;

use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
use pmio_blobstore::{ClearMethod, MemDevice};

const MIB: u64 = 1 << 20;

fn pattern(tag: u64, off: u64, len: u64) -> Vec<u8> {
    (off..off + len)
        .step_by(8)
        .flat_map(|x| ((tag << 56) | x).to_le_bytes())
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: write_lvstore FILE [--dirty]")?;
    let dirty = std::env::args().nth(2).as_deref() == Some("--dirty");
    let opts = LvstoreOptions {
        name: "pmio_lvs".into(),
        cluster_size: MIB as u32,
        // Four metadata pages per cluster: ten blobs and their extent pages need more than
        // the default one per cluster of a 16-cluster device.
        md_pages_per_cluster_ratio: 400,
        ..Default::default()
    };
    let mut lvs = Lvstore::create(MemDevice::new(32 * MIB, 512), &opts)?;
    let mut manifest = String::new();
    // write: the pattern into an lvol, noted in the manifest when it is what reads back.
    let write = |lvs: &mut Lvstore<MemDevice>, lvol: &str, off: u64, len: u64, tag: u64| {
        let id = lvs.lvol(lvol).expect("created").blob_id;
        lvs.blobstore_mut().write(id, off, &pattern(tag, off, len))
    };
    let dflt = ClearMethod::Default;

    lvs.create_lvol("thick", 2 * MIB, false, dflt)?;
    lvs.create_lvol("thin", 4 * MIB, true, dflt)?;
    lvs.create_lvol("base", 3 * MIB, true, dflt)?;
    lvs.create_lvol("grow", MIB, true, dflt)?;
    lvs.create_lvol("old_name", MIB, true, dflt)?;
    lvs.create_lvol("ro", MIB, true, dflt)?;
    let mut note = |lvol: &str, off: u64, len: u64, tag: u64| {
        manifest.push_str(&format!("data {lvol} {off} {len} {tag}\n"));
    };
    for (lvol, off, len, tag) in [
        ("thick", 0, 8192, 21),
        ("thick", MIB + 4096, 4096, 21),
        ("thin", 4096, 8192, 22),
        ("thin", 3 * MIB, 4096, 22),
        ("base", 0, 16384, 23),
        ("base", 2 * MIB, 4096, 23),
        ("grow", 0, 4096, 26),
        ("old_name", 0, 4096, 27),
        ("ro", 0, 4096, 28),
    ] {
        write(&mut lvs, lvol, off, len, tag)?;
        if lvol != "base" && lvol != "old_name" {
            note(lvol, off, len, tag);
        }
    }
    lvs.create_snapshot("base", "snap")?;
    lvs.create_clone("snap", "clone")?;
    write(&mut lvs, "clone", 4096, 4096, 24)?;
    write(&mut lvs, "base", 2 * MIB + 8192, 4096, 25)?;
    lvs.resize("grow", 3 * MIB)?;
    write(&mut lvs, "grow", 2 * MIB + 8192, 4096, 29)?;
    lvs.rename_lvol("old_name", "renamed")?;
    lvs.set_read_only("ro")?;

    // The lineage changes: each lvol written before and after its snapshots, so its data
    // comes from more than one blob until the change.
    for l in ["inf", "dec", "mrg"] {
        lvs.create_lvol(l, 2 * MIB, true, dflt)?;
    }
    write(&mut lvs, "inf", 0, 8192, 31)?;
    lvs.create_snapshot("inf", "inf_snap")?;
    write(&mut lvs, "inf", MIB, 4096, 32)?;
    lvs.inflate("inf", |_, _| {})?;
    write(&mut lvs, "dec", 0, 8192, 33)?;
    lvs.create_snapshot("dec", "dec_s1")?;
    write(&mut lvs, "dec", MIB, 4096, 34)?;
    lvs.create_snapshot("dec", "dec_s2")?;
    write(&mut lvs, "dec", MIB + 8192, 4096, 35)?;
    lvs.decouple_parent("dec", |_, _| {})?;
    write(&mut lvs, "mrg", 0, 8192, 36)?;
    lvs.create_snapshot("mrg", "mrg_snap")?;
    write(&mut lvs, "mrg", MIB, 4096, 37)?;
    lvs.delete_lvol("mrg_snap")?;
    for (lvol, off, len, tag) in [
        ("snap", 0, 16384, 23),
        ("snap", 2 * MIB, 4096, 23),
        ("base", 0, 16384, 23),
        ("base", 2 * MIB, 4096, 23),
        ("base", 2 * MIB + 8192, 4096, 25),
        ("clone", 0, 4096, 23),
        ("clone", 4096, 4096, 24),
        ("clone", 8192, 8192, 23),
        ("clone", 2 * MIB, 4096, 23),
        ("grow", 2 * MIB + 8192, 4096, 29),
        ("renamed", 0, 4096, 27),
        ("inf", 0, 8192, 31),
        ("inf", MIB, 4096, 32),
        ("inf_snap", 0, 8192, 31),
        ("dec", 0, 8192, 33),
        ("dec", MIB, 4096, 34),
        ("dec", MIB + 8192, 4096, 35),
        ("dec_s1", 0, 8192, 33),
        ("dec_s2", MIB, 4096, 34),
        ("mrg", 0, 8192, 36),
        ("mrg", MIB, 4096, 37),
    ] {
        note(lvol, off, len, tag);
    }
    let uuid = lvs.uuid();
    let dev = if dirty {
        lvs.into_device()
    } else {
        lvs.unload()?
    };
    std::fs::write(&path, dev.bytes())?;
    std::fs::File::create(format!("{path}.manifest"))?.write_all(manifest.as_bytes())?;
    println!("{path}: lvstore pmio_lvs {uuid}");
    Ok(())
}
