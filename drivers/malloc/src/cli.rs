//! rpc.py's `bdev_malloc_*` subcommands for `pmio-rpc` (feature `cli`): rpc.py's positional
//! arguments and flags, turned into the methods' declarations ([`MallocCreate`]).

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request, mib_to_blocks};
use pmio_jsonrpc::decl::{BoolDefault, IntDefault};
use pmio_runtime::rpc::params::DeleteBdev;

use crate::rpc::MallocCreate;

/// The malloc module's subcommands.
#[derive(Subcommand, Debug)]
pub enum MallocCommand {
    /// Create a malloc (RAM) bdev.
    #[command(name = "bdev_malloc_create", rename_all = "kebab-case")]
    BdevMallocCreate {
        /// Size in MiB.
        total_size: f64,
        /// Block size in bytes.
        block_size: u32,
        /// Bdev name (default: Malloc0, Malloc1, …).
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Physical block size.
        #[arg(short = 'p', long)]
        physical_block_size: Option<u32>,
        /// Optimal I/O boundary in blocks.
        #[arg(short = 'o', long)]
        optimal_io_boundary: Option<i64>,
        /// Metadata size per block.
        #[arg(short = 'm', long)]
        md_size: Option<i64>,
        /// Interleave metadata.
        #[arg(short = 'i', long)]
        md_interleave: bool,
        /// DIF type.
        #[arg(short = 't', long)]
        dif_type: Option<i64>,
        /// DIF at the head of metadata.
        #[arg(short = 'd', long)]
        dif_is_head_of_md: bool,
    },
    /// Delete a malloc bdev.
    #[command(name = "bdev_malloc_delete", rename_all = "kebab-case")]
    BdevMallocDelete {
        /// Bdev name.
        name: String,
    },
}

impl MallocCommand {
    /// The call this subcommand makes, with rpc.py's keys (store_true flags sent as `false`).
    pub fn request(&self) -> Result<Request, String> {
        Ok(match self {
            MallocCommand::BdevMallocCreate {
                total_size,
                block_size,
                name,
                uuid,
                physical_block_size,
                optimal_io_boundary,
                md_size,
                md_interleave,
                dif_type,
                dif_is_head_of_md,
            } => {
                let p = MallocCreate {
                    num_blocks: mib_to_blocks(*total_size, u64::from(*block_size))?,
                    block_size: *block_size,
                    physical_block_size: *physical_block_size,
                    name: name.clone(),
                    uuid: uuid.clone(),
                    optimal_io_boundary: optimal_io_boundary.map(IntDefault),
                    md_size: md_size.map(IntDefault),
                    md_interleave: Some(BoolDefault(*md_interleave)),
                    dif_type: dif_type.map(IntDefault),
                    dif_is_head_of_md: Some(BoolDefault(*dif_is_head_of_md)),
                    ..MallocCreate::default()
                };
                Request::new("bdev_malloc_create", &p, Print::Json)
            }
            MallocCommand::BdevMallocDelete { name } => Request::new(
                "bdev_malloc_delete",
                &DeleteBdev { name: name.clone() },
                Print::Nothing,
            ),
        })
    }
}
