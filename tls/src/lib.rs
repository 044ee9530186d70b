//! TLS 1.3 with pre-shared keys for NVMe/TCP (NVMe/TCP transport spec §3.6, TP 8011 and
//! TP 8018), on OpenSSL as SPDK uses it.
//!
//! - [`psk`]: from a configured PSK (`NVMeTLSkey-1:xx:...:`, parsed by `pmio-keyring`) to the
//!   retained PSK, the PSK identity (both versions) and the TLS PSK, as SPDK and libnvme derive
//!   them.
//! - `context.rs`: TLS 1.3 contexts with external PSKs only (no certificates, no tickets, the
//!   two suites); [`accept`] and [`connect`] wrap a non-blocking socket; the server finds keys
//!   through a [`PskLookup`].
//! - [`stream`]: [`TlsStream`], the handshake and the record layer driven by the owner's polls
//!   (a reactor), `WANT_READ`/`WANT_WRITE` as `WouldBlock`.
//! - `ffi.rs`: OpenSSL's session-based PSK calls the `openssl` crate does not wrap. Unsafe
//!   code is there and in the two callbacks of `context.rs` OpenSSL calls.
//!
//! ```
//! use pmio_keyring::TlsPsk;
//! use pmio_tls::psk::{IdentityVersion, PskIdentity, RetainedPsk};
//!
//! let key = TlsPsk::parse("NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:")?;
//! let host = "nqn.2016-06.io.spdk:host1";
//! let retained = RetainedPsk::derive(&key, host)?;
//! let id = PskIdentity::new(IdentityVersion::V0, &retained, host, "nqn.2016-06.io.spdk:cnode1")?;
//! assert_eq!(id.to_string(), "NVMe0R01 nqn.2016-06.io.spdk:host1 nqn.2016-06.io.spdk:cnode1");
//! assert_eq!(id.tls_psk(&retained)?.len(), 32);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod context;
#[allow(unsafe_code)]
mod ffi;
pub mod psk;
pub mod stream;

pub use context::{ClientPsk, PskLookup, TlsError, accept, connect};
pub use psk::{IdentityVersion, PskError, PskIdentity, RetainedPsk, TlsHash};
pub use stream::TlsStream;
