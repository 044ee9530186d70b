//! rpc.py's `bdev_lvol_*` subcommands for `pmio-rpc` (feature `cli`): rpc.py's positional
//! arguments and flags, turned into the methods' declarations.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::{
    Clone, Create, CreateLvstore, GetLvols, LvolRef, LvstoreRef, Rename, Resize, Snapshot,
};

/// The lvol module's subcommands.
#[derive(Subcommand, Debug)]
pub enum LvolCommand {
    /// Create an lvstore on a bdev; prints its uuid.
    #[command(name = "bdev_lvol_create_lvstore", rename_all = "kebab-case")]
    BdevLvolCreateLvstore {
        /// The base bdev.
        bdev_name: String,
        /// The lvstore's name.
        lvs_name: String,
        /// Cluster size in bytes (default 4 MiB).
        #[arg(short = 'c', long)]
        cluster_sz: Option<u32>,
        /// How the data clusters are cleared: none, unmap (default), write_zeroes.
        #[arg(long)]
        clear_method: Option<String>,
        /// Metadata pages per 100 clusters.
        #[arg(short = 'm', long)]
        md_pages_per_cluster_ratio: Option<u32>,
        /// Metadata page size (4096 only).
        #[arg(short = 's', long)]
        md_page_size: Option<u32>,
    },
    /// Delete an lvstore and its lvols.
    #[command(name = "bdev_lvol_delete_lvstore", rename_all = "kebab-case")]
    BdevLvolDeleteLvstore {
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        #[arg(short = 'l', long)]
        lvs_name: Option<String>,
    },
    /// Rename an lvstore.
    #[command(name = "bdev_lvol_rename_lvstore", rename_all = "kebab-case")]
    BdevLvolRenameLvstore { old_name: String, new_name: String },
    /// List lvstores, or one.
    #[command(name = "bdev_lvol_get_lvstores", rename_all = "kebab-case")]
    BdevLvolGetLvstores {
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        #[arg(short = 'l', long)]
        lvs_name: Option<String>,
    },
    /// Create an lvol; prints its bdev name (uuid).
    #[command(name = "bdev_lvol_create", rename_all = "kebab-case")]
    BdevLvolCreate {
        lvol_name: String,
        /// Size in MiB.
        size_in_mib: u64,
        /// Thin provisioned.
        #[arg(short = 't', long)]
        thin_provision: bool,
        /// The lvstore's uuid.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// The lvstore's name.
        #[arg(short = 'l', long)]
        lvs_name: Option<String>,
        /// none, unmap, write_zeroes.
        #[arg(short = 'c', long)]
        clear_method: Option<String>,
    },
    /// Delete an lvol (by bdev name or lvs/lvol).
    #[command(name = "bdev_lvol_delete", rename_all = "kebab-case")]
    BdevLvolDelete { name: String },
    /// List lvols.
    #[command(name = "bdev_lvol_get_lvols", rename_all = "kebab-case")]
    BdevLvolGetLvols {
        #[arg(short = 'u', long)]
        lvs_uuid: Option<String>,
        #[arg(short = 'l', long)]
        lvs_name: Option<String>,
    },
    /// Resize an lvol.
    #[command(name = "bdev_lvol_resize", rename_all = "kebab-case")]
    BdevLvolResize { name: String, size_in_mib: u64 },
    /// Make an lvol read-only.
    #[command(name = "bdev_lvol_set_read_only", rename_all = "kebab-case")]
    BdevLvolSetReadOnly { name: String },
    /// Give an lvol every cluster of its own and no parent snapshot.
    #[command(name = "bdev_lvol_inflate", rename_all = "kebab-case")]
    BdevLvolInflate { name: String },
    /// Copy in what an lvol's parent snapshot holds; the grandparent becomes its parent.
    #[command(name = "bdev_lvol_decouple_parent", rename_all = "kebab-case")]
    BdevLvolDecoupleParent { name: String },
    /// Rename an lvol.
    #[command(name = "bdev_lvol_rename", rename_all = "kebab-case")]
    BdevLvolRename { old_name: String, new_name: String },
    /// Snapshot an lvol; prints the snapshot's bdev name.
    #[command(name = "bdev_lvol_snapshot", rename_all = "kebab-case")]
    BdevLvolSnapshot {
        lvol_name: String,
        snapshot_name: String,
    },
    /// Clone a snapshot; prints the clone's bdev name.
    #[command(name = "bdev_lvol_clone", rename_all = "kebab-case")]
    BdevLvolClone {
        snapshot_name: String,
        clone_name: String,
    },
}

impl LvolCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Result<Request, String> {
        use LvolCommand as C;
        Ok(match self {
            C::BdevLvolCreateLvstore {
                bdev_name,
                lvs_name,
                cluster_sz,
                clear_method,
                md_pages_per_cluster_ratio,
                md_page_size,
            } => Request::new(
                "bdev_lvol_create_lvstore",
                &CreateLvstore {
                    bdev_name: bdev_name.clone(),
                    lvs_name: lvs_name.clone(),
                    cluster_sz: *cluster_sz,
                    clear_method: clear_method.clone(),
                    num_md_pages_per_cluster_ratio: *md_pages_per_cluster_ratio,
                    md_page_size: *md_page_size,
                },
                Print::Json,
            ),
            C::BdevLvolDeleteLvstore { uuid, lvs_name } => Request::new(
                "bdev_lvol_delete_lvstore",
                &LvstoreRef {
                    uuid: uuid.clone(),
                    lvs_name: lvs_name.clone(),
                },
                Print::Nothing,
            ),
            C::BdevLvolRenameLvstore { old_name, new_name } => Request::new(
                "bdev_lvol_rename_lvstore",
                &Rename {
                    old_name: old_name.clone(),
                    new_name: new_name.clone(),
                },
                Print::Nothing,
            ),
            C::BdevLvolGetLvstores { uuid, lvs_name } => Request::new_or_bare(
                "bdev_lvol_get_lvstores",
                &LvstoreRef {
                    uuid: uuid.clone(),
                    lvs_name: lvs_name.clone(),
                },
                Print::Dict,
            ),
            C::BdevLvolCreate {
                lvol_name,
                size_in_mib,
                thin_provision,
                uuid,
                lvs_name,
                clear_method,
            } => Request::new(
                "bdev_lvol_create",
                &Create {
                    uuid: uuid.clone(),
                    lvs_name: lvs_name.clone(),
                    lvol_name: lvol_name.clone(),
                    size_in_mib: *size_in_mib,
                    thin_provision: Some(*thin_provision),
                    clear_method: clear_method.clone(),
                },
                Print::Json,
            ),
            C::BdevLvolDelete { name } => Request::new(
                "bdev_lvol_delete",
                &LvolRef { name: name.clone() },
                Print::Nothing,
            ),
            C::BdevLvolGetLvols { lvs_uuid, lvs_name } => Request::new_or_bare(
                "bdev_lvol_get_lvols",
                &GetLvols {
                    lvs_uuid: lvs_uuid.clone(),
                    lvs_name: lvs_name.clone(),
                },
                Print::Dict,
            ),
            C::BdevLvolResize { name, size_in_mib } => Request::new(
                "bdev_lvol_resize",
                &Resize {
                    name: name.clone(),
                    size_in_mib: *size_in_mib,
                },
                Print::Nothing,
            ),
            C::BdevLvolSetReadOnly { name } => Request::new(
                "bdev_lvol_set_read_only",
                &LvolRef { name: name.clone() },
                Print::Nothing,
            ),
            C::BdevLvolInflate { name } => Request::new(
                "bdev_lvol_inflate",
                &LvolRef { name: name.clone() },
                Print::Nothing,
            ),
            C::BdevLvolDecoupleParent { name } => Request::new(
                "bdev_lvol_decouple_parent",
                &LvolRef { name: name.clone() },
                Print::Nothing,
            ),
            C::BdevLvolRename { old_name, new_name } => Request::new(
                "bdev_lvol_rename",
                &Rename {
                    old_name: old_name.clone(),
                    new_name: new_name.clone(),
                },
                Print::Nothing,
            ),
            C::BdevLvolSnapshot {
                lvol_name,
                snapshot_name,
            } => Request::new(
                "bdev_lvol_snapshot",
                &Snapshot {
                    lvol_name: lvol_name.clone(),
                    snapshot_name: snapshot_name.clone(),
                },
                Print::Json,
            ),
            C::BdevLvolClone {
                snapshot_name,
                clone_name,
            } => Request::new(
                "bdev_lvol_clone",
                &Clone {
                    snapshot_name: snapshot_name.clone(),
                    clone_name: clone_name.clone(),
                },
                Print::Json,
            ),
        })
    }
}
