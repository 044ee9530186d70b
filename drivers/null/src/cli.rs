//! rpc.py's `bdev_null_*` subcommands for `pmio-rpc` (feature `cli`): rpc.py's positional
//! arguments and flags, turned into the methods' declarations ([`NullCreate`]).

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request, mib_to_blocks};
use pmio_jsonrpc::decl::{BoolDefault, IntDefault};
use pmio_runtime::rpc::params::DeleteBdev;

use crate::rpc::NullCreate;

/// The null module's subcommands.
#[derive(Subcommand, Debug)]
pub enum NullCommand {
    /// Create a null bdev.
    #[command(name = "bdev_null_create", rename_all = "kebab-case")]
    BdevNullCreate {
        /// Bdev name.
        name: String,
        /// Size in MiB.
        total_size: u64,
        /// Block size in bytes.
        block_size: u32,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Physical block size.
        #[arg(short = 'p', long)]
        physical_block_size: Option<u32>,
        /// Metadata size per block (pmio supports 0).
        #[arg(short = 'm', long)]
        md_size: Option<i64>,
        /// DIF type (pmio supports 0).
        #[arg(short = 't', long)]
        dif_type: Option<i64>,
        /// DIF at the head of metadata.
        #[arg(short = 'd', long)]
        dif_is_head_of_md: bool,
    },
    /// Delete a null bdev.
    #[command(name = "bdev_null_delete", rename_all = "kebab-case")]
    BdevNullDelete {
        /// Bdev name.
        name: String,
    },
}

impl NullCommand {
    /// The call this subcommand makes, with rpc.py's keys (store_true flags sent as `false`).
    pub fn request(&self) -> Result<Request, String> {
        Ok(match self {
            NullCommand::BdevNullCreate {
                name,
                total_size,
                block_size,
                uuid,
                physical_block_size,
                md_size,
                dif_type,
                dif_is_head_of_md,
            } => {
                let p = NullCreate {
                    num_blocks: mib_to_blocks(*total_size as f64, u64::from(*block_size))?,
                    block_size: *block_size,
                    physical_block_size: *physical_block_size,
                    name: name.clone(),
                    uuid: uuid.clone(),
                    md_size: md_size.map(IntDefault),
                    dif_type: dif_type.map(IntDefault),
                    dif_is_head_of_md: Some(BoolDefault(*dif_is_head_of_md)),
                    ..NullCreate::default()
                };
                Request::new("bdev_null_create", &p, Print::Json)
            }
            NullCommand::BdevNullDelete { name } => Request::new(
                "bdev_null_delete",
                &DeleteBdev { name: name.clone() },
                Print::Nothing,
            ),
        })
    }
}
