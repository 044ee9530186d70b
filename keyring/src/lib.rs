//! pmio's keyring: named keys, as SPDK's `lib/keyring` and its `keyring_file` module keep
//! them, and the two key formats NVMe over Fabrics uses.
//!
//! - [`format`](mod@format): DH-HMAC-CHAP secrets (`DHHC-1:xx:...:`) and TLS PSKs in the interchange format
//!   (`NVMeTLSkey-1:xx:...:`), parsed with their CRC-32 checked; the secret bytes are wiped on
//!   drop and never shown by `Debug`.
//! - [`keyring`]: a [`Keyring`] (a daemon has one, shared by its NVMe-oF target and NVMe host)
//!   of [`Key`]s read from owner-only files when used.
//! - `rpc` (feature `rpc`): `keyring_file_add_key`, `keyring_file_remove_key`,
//!   `keyring_get_keys` and the "keyring" section of `save_config`; `cli` (feature `cli`):
//!   their `pmio-rpc` subcommands.
//!
//! A key is never logged, never returned by a method and never written by `save_config`: only
//! its name and its file's path are.
//!
//! ```
//! use pmio_keyring::format::{DhchapSecret, SecretHash};
//!
//! let s = DhchapSecret::new(SecretHash::Sha256, &[0x11; 32])?;
//! let text = s.encode();
//! assert!(text.starts_with("DHHC-1:01:"));
//! assert_eq!(DhchapSecret::parse(&text)?.key(), &[0x11; 32]);
//! # Ok::<(), pmio_keyring::format::FormatError>(())
//! ```

#![forbid(unsafe_code)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod format;
pub mod keyring;
#[cfg(feature = "rpc")]
pub mod rpc;

pub use format::{DhchapSecret, FormatError, PskHash, SecretHash, TlsPsk};
pub use keyring::{Key, KeyError, KeyInfo, Keyring};
