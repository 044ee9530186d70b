//! Logical volumes as SPDK's lib/lvol keeps them on disk: an lvstore is a blobstore of type
//! `LVOLSTORE` whose super blob carries the store's `name` and `uuid`; every other blob is
//! an lvol with its own `name` and `uuid` xattrs, reachable as `lvs/lvol` or by its uuid.
//! Snapshots and clones are lvols whose blobs are snapshots and clones.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the lvstore: create, load, and the lvol operations by name |
//! | `xattr.rs` | the xattr values SPDK writes and the names it accepts |
//! | `uuid.rs` | uuids in SPDK's string form |
//!
//! ```
//! use pmio_blobstore::MemDevice;
//! use pmio_blobstore::lvol::{Lvstore, LvstoreOptions};
//!
//! let opts = LvstoreOptions { name: "lvs0".into(), cluster_size: 1 << 20, ..Default::default() };
//! let mut lvs = Lvstore::create(MemDevice::new(16 << 20, 512), &opts).unwrap();
//! lvs.create_lvol("vol", 4 << 20, true, Default::default()).unwrap();
//! let dev = lvs.unload().unwrap();
//!
//! let lvs = Lvstore::load(dev).unwrap();
//! assert_eq!(lvs.name(), "lvs0");
//! assert_eq!(lvs.lookup("lvs0/vol").unwrap().name, "vol");
//! ```

pub mod uuid;
pub mod xattr;

use std::collections::BTreeMap;

pub use uuid::Uuid;
use xattr::{
    LVOL_NAME_MAX, LVOLSTORE_BSTYPE, LVS_NAME_MAX, XATTR_NAME, XATTR_UUID, bad_lvol_name,
    check_name, lvol_name_value_at_create, name_value, parse_name_value, parse_uuid_value,
    uuid_value,
};

use crate::device::BlobDevice;
use crate::{
    BlobId, BlobOptions, Blobstore, BlobstoreOptions, ClearMethod, Error, LoadOptions, Result,
};

/// How [`Lvstore::create`] makes a store (`struct spdk_lvs_opts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvstoreOptions {
    /// The lvstore's name, 1 to 63 bytes. No default: SPDK requires one.
    pub name: String,
    /// The lvstore's uuid; `None` generates one (SPDK always generates it).
    pub uuid: Option<Uuid>,
    /// Cluster size in bytes. Default 4 MiB (`SPDK_LVS_OPTS_CLUSTER_SZ`).
    pub cluster_size: u32,
    /// How the data clusters are cleared at creation. Default unmap (`LVS_CLEAR_WITH_UNMAP`).
    pub clear_method: ClearMethod,
    /// Metadata pages per 100 clusters. Default 100: one per cluster.
    pub md_pages_per_cluster_ratio: u32,
}

impl Default for LvstoreOptions {
    fn default() -> Self {
        LvstoreOptions {
            name: String::new(),
            uuid: None,
            cluster_size: 4 << 20,
            clear_method: ClearMethod::Unmap,
            md_pages_per_cluster_ratio: 100,
        }
    }
}

/// One lvol: its blob and the names it is known by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lvol {
    /// Its name in the lvstore (the `name` xattr).
    pub name: String,
    /// Its uuid (the `uuid` xattr); `None` when missing or malformed, which SPDK tolerates.
    pub uuid: Option<Uuid>,
    /// The blob holding it.
    pub blob_id: BlobId,
}

/// An lvstore on a device `D`.
#[derive(Debug)]
pub struct Lvstore<D: BlobDevice> {
    bs: Blobstore<D>,
    name: String,
    uuid: Uuid,
    super_blob: BlobId,
    /// By blob id; a store has few enough lvols that lookups by name scan.
    lvols: BTreeMap<BlobId, Lvol>,
}

impl<D: BlobDevice> Lvstore<D> {
    /// Formats `dev` as an lvstore (`spdk_lvs_init`): a blobstore of type `LVOLSTORE`, then
    /// a super blob with the store's `uuid` and `name`.
    pub fn create(dev: D, opts: &LvstoreOptions) -> Result<Lvstore<D>> {
        check_name(&opts.name, LVS_NAME_MAX)?;
        let total_clusters = dev.size() / u64::from(opts.cluster_size.max(1));
        let num_md_pages = u64::from(opts.md_pages_per_cluster_ratio) * total_clusters / 100;
        let bs_opts = BlobstoreOptions {
            cluster_size: opts.cluster_size,
            num_md_pages: Some(
                u32::try_from(num_md_pages)
                    .map_err(|_| Error::InvalidOption(format!("{num_md_pages} metadata pages")))?,
            ),
            bstype: LVOLSTORE_BSTYPE,
            clear_method: opts.clear_method,
        };
        let mut bs = Blobstore::init(dev, &bs_opts)?;
        let uuid = opts.uuid.unwrap_or_else(Uuid::new_v4);
        let super_blob = bs.create_blob(&BlobOptions::default())?;
        bs.set_super_blob(super_blob)?;
        bs.set_xattr(super_blob, XATTR_UUID, &uuid_value(&uuid))?;
        bs.set_xattr(super_blob, XATTR_NAME, &name_value(&opts.name))?;
        Ok(Lvstore {
            bs,
            name: opts.name.clone(),
            uuid,
            super_blob,
            lvols: BTreeMap::new(),
        })
    }

    /// Opens the lvstore on `dev` (`spdk_lvs_load`): the blobstore (recovered if it was not
    /// unloaded cleanly), the super blob's `uuid` and `name`, and every other blob as an
    /// lvol. As in SPDK, an lvol without a usable name fails the load; one without a
    /// usable uuid is kept without one.
    pub fn load(dev: D) -> Result<Lvstore<D>> {
        let opts = LoadOptions {
            bstype: LVOLSTORE_BSTYPE,
            ..Default::default()
        };
        let bs = Blobstore::load(dev, &opts)?;
        let super_blob = bs.super_block().super_blob;
        let sb = bs
            .open_blob(super_blob)
            .map_err(|_| Error::NotAnLvstore(format!("no super blob ({super_blob:#x})")))?;
        let uuid = sb
            .xattr(XATTR_UUID)
            .and_then(parse_uuid_value)
            .ok_or_else(|| Error::NotAnLvstore("the super blob's uuid is missing or bad".into()))?;
        let name = sb
            .xattr(XATTR_NAME)
            .and_then(|v| parse_name_value(v, LVS_NAME_MAX))
            .ok_or_else(|| Error::NotAnLvstore("the super blob's name is missing or bad".into()))?;
        let mut lvols = BTreeMap::new();
        for id in bs.blob_ids().into_iter().filter(|&id| id != super_blob) {
            let blob = bs.open_blob(id)?;
            let name = blob
                .xattr(XATTR_NAME)
                .and_then(|v| parse_name_value(v, LVOL_NAME_MAX))
                .ok_or_else(|| bad_lvol_name(id))?;
            let uuid = blob.xattr(XATTR_UUID).and_then(parse_uuid_value);
            lvols.insert(
                id,
                Lvol {
                    name,
                    uuid,
                    blob_id: id,
                },
            );
        }
        Ok(Lvstore {
            bs,
            name,
            uuid,
            super_blob,
            lvols,
        })
    }

    /// Unloads the blobstore cleanly and returns the device.
    pub fn unload(self) -> Result<D> {
        self.bs.unload()
    }

    /// Drops the lvstore without unloading it, as a crash would, and returns the device.
    pub fn into_device(self) -> D {
        self.bs.into_device()
    }

    /// The lvstore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lvstore's uuid.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The blob holding the lvstore's name and uuid.
    pub fn super_blob(&self) -> BlobId {
        self.super_blob
    }

    /// The blobstore underneath, to read and write lvols' data by blob id.
    pub fn blobstore(&self) -> &Blobstore<D> {
        &self.bs
    }

    /// The blobstore underneath, mutable.
    pub fn blobstore_mut(&mut self) -> &mut Blobstore<D> {
        &mut self.bs
    }

    /// The lvols, by blob id.
    pub fn lvols(&self) -> impl Iterator<Item = &Lvol> {
        self.lvols.values()
    }

    /// The lvol of this name.
    pub fn lvol(&self, name: &str) -> Option<&Lvol> {
        self.lvols.values().find(|l| l.name == name)
    }

    /// The lvol an SPDK bdev name means: `lvs/lvol` (this store's name), or its uuid.
    pub fn lookup(&self, bdev_name: &str) -> Result<&Lvol> {
        let found = match bdev_name.split_once('/') {
            Some((lvs, lvol)) if lvs == self.name => self.lvol(lvol),
            Some(_) => None,
            None => {
                Uuid::parse(bdev_name).and_then(|u| self.lvols.values().find(|l| l.uuid == Some(u)))
            }
        };
        found.ok_or_else(|| Error::NoSuchLvol(bdev_name.to_string()))
    }

    /// SPDK's unique id of an lvol: its uuid, or `<lvs uuid>_<blob id>` when it has none.
    pub fn unique_id(&self, lvol: &Lvol) -> String {
        match lvol.uuid {
            Some(u) => u.to_string(),
            None => format!("{}_{}", self.uuid, lvol.blob_id),
        }
    }

    fn blob_of(&self, name: &str) -> Result<BlobId> {
        self.lvol(name)
            .map(|l| l.blob_id)
            .ok_or_else(|| Error::NoSuchLvol(name.to_string()))
    }

    /// A new lvol's name must be valid and free (`lvs_verify_lvol_name`).
    fn check_new_name(&self, name: &str) -> Result<()> {
        check_name(name, LVOL_NAME_MAX)?;
        if self.lvol(name).is_some() {
            return Err(Error::LvolExists(name.to_string()));
        }
        Ok(())
    }

    /// The xattrs of a new lvol, as `spdk_lvol_create` writes them.
    fn new_lvol_xattrs(name: &str, uuid: &Uuid) -> Vec<(String, Vec<u8>)> {
        vec![
            (XATTR_NAME.into(), lvol_name_value_at_create(name)),
            (XATTR_UUID.into(), uuid_value(uuid)),
        ]
    }

    fn remember(&mut self, name: &str, uuid: Uuid, blob_id: BlobId) -> BlobId {
        let lvol = Lvol {
            name: name.to_string(),
            uuid: Some(uuid),
            blob_id,
        };
        self.lvols.insert(blob_id, lvol);
        blob_id
    }

    /// Creates an lvol of `size` bytes, rounded up to whole clusters (`spdk_lvol_create`).
    pub fn create_lvol(
        &mut self,
        name: &str,
        size: u64,
        thin_provision: bool,
        clear_method: ClearMethod,
    ) -> Result<BlobId> {
        self.check_new_name(name)?;
        let uuid = Uuid::new_v4();
        let opts = BlobOptions {
            num_clusters: size.div_ceil(u64::from(self.bs.cluster_size())),
            thin_provision,
            clear_method,
            use_extent_table: true,
            xattrs: Self::new_lvol_xattrs(name, &uuid),
        };
        let id = self.bs.create_blob(&opts)?;
        Ok(self.remember(name, uuid, id))
    }

    /// Snapshots lvol `name` into a new read-only lvol `snapshot_name`; `name` becomes its
    /// clone (`spdk_lvol_create_snapshot`).
    pub fn create_snapshot(&mut self, name: &str, snapshot_name: &str) -> Result<BlobId> {
        let origin = self.blob_of(name)?;
        self.check_new_name(snapshot_name)?;
        let uuid = Uuid::new_v4();
        let id = self
            .bs
            .create_snapshot(origin, &Self::new_lvol_xattrs(snapshot_name, &uuid))?;
        Ok(self.remember(snapshot_name, uuid, id))
    }

    /// Clones the read-only lvol `snapshot_name` into a new thin lvol `clone_name`
    /// (`spdk_lvol_create_clone`).
    pub fn create_clone(&mut self, snapshot_name: &str, clone_name: &str) -> Result<BlobId> {
        let snap = self.blob_of(snapshot_name)?;
        self.check_new_name(clone_name)?;
        let uuid = Uuid::new_v4();
        let id = self
            .bs
            .create_clone(snap, &Self::new_lvol_xattrs(clone_name, &uuid))?;
        Ok(self.remember(clone_name, uuid, id))
    }

    /// Renames an lvol (`spdk_lvol_rename`: the name and a NUL, no padding).
    pub fn rename_lvol(&mut self, name: &str, new_name: &str) -> Result<()> {
        let id = self.blob_of(name)?;
        if name == new_name {
            return Ok(());
        }
        self.check_new_name(new_name)?;
        self.bs.set_xattr(id, XATTR_NAME, &name_value(new_name))?;
        self.lvols.get_mut(&id).expect("found above").name = new_name.to_string();
        Ok(())
    }

    /// Renames the lvstore (`spdk_lvs_rename`).
    pub fn rename(&mut self, new_name: &str) -> Result<()> {
        check_name(new_name, LVS_NAME_MAX)?;
        self.bs
            .set_xattr(self.super_blob, XATTR_NAME, &name_value(new_name))?;
        self.name = new_name.to_string();
        Ok(())
    }

    /// Resizes an lvol to `size` bytes, rounded up to whole clusters (`spdk_lvol_resize`).
    pub fn resize(&mut self, name: &str, size: u64) -> Result<()> {
        let id = self.blob_of(name)?;
        let clusters = size.div_ceil(u64::from(self.bs.cluster_size()));
        self.bs.resize(id, clusters)
    }

    /// Makes an lvol read-only for good (`spdk_lvol_set_read_only`).
    pub fn set_read_only(&mut self, name: &str) -> Result<()> {
        let id = self.blob_of(name)?;
        self.bs.set_read_only(id)
    }

    /// Inflates lvol `name` (`spdk_lvol_inflate`): it gets every cluster of its own and no
    /// parent. `allocated(i, c)` follows each cluster given storage (see
    /// [`Blobstore::inflate`]).
    pub fn inflate(&mut self, name: &str, allocated: impl FnMut(u64, u32)) -> Result<()> {
        let id = self.blob_of(name)?;
        self.bs.inflate(id, allocated)
    }

    /// Decouples lvol `name` from its parent snapshot (`spdk_lvol_decouple_parent`); see
    /// [`Blobstore::decouple_parent`].
    pub fn decouple_parent(&mut self, name: &str, allocated: impl FnMut(u64, u32)) -> Result<()> {
        let id = self.blob_of(name)?;
        self.bs.decouple_parent(id, allocated)
    }

    /// Deletes an lvol (`spdk_lvol_destroy`): a snapshot with one clone is merged into it,
    /// one with more clones is refused.
    pub fn delete_lvol(&mut self, name: &str) -> Result<()> {
        let id = self.blob_of(name)?;
        self.bs.delete_blob(id)?;
        self.lvols.remove(&id);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
