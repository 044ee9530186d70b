//! rpc.py's `bdev_uring_*` subcommands for `pmio-rpc` (feature `cli`), turned into the methods'
//! declarations ([`UringCreate`]).

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};
use pmio_runtime::rpc::params::DeleteBdev;

use crate::rpc::UringCreate;

/// The uring module's subcommands.
#[derive(Subcommand, Debug)]
pub enum UringCommand {
    /// Create a bdev on a file or block device through io_uring.
    #[command(name = "bdev_uring_create", rename_all = "kebab-case")]
    BdevUringCreate {
        /// File or block device path.
        filename: String,
        /// Bdev name.
        name: String,
        /// Block size (default: the device's logical block size; for files the file
        /// system's direct-I/O alignment).
        block_size: Option<u32>,
        /// UUID.
        #[arg(short = 'u', long)]
        uuid: Option<String>,
        /// Buffered I/O instead of O_DIRECT (pmio; for file systems without O_DIRECT).
        #[arg(long)]
        buffered: bool,
    },
    /// Delete a uring bdev.
    #[command(name = "bdev_uring_delete", rename_all = "kebab-case")]
    BdevUringDelete {
        /// Bdev name.
        name: String,
    },
}

impl UringCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Result<Request, String> {
        Ok(match self {
            UringCommand::BdevUringCreate {
                filename,
                name,
                block_size,
                uuid,
                buffered,
            } => {
                let p = UringCreate {
                    filename: filename.clone(),
                    name: name.clone(),
                    block_size: *block_size,
                    uuid: uuid.clone(),
                    direct: buffered.then_some(false),
                };
                Request::new("bdev_uring_create", &p, Print::Json)
            }
            UringCommand::BdevUringDelete { name } => Request::new(
                "bdev_uring_delete",
                &DeleteBdev { name: name.clone() },
                Print::Nothing,
            ),
        })
    }
}
