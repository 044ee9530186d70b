//! The NVMe/TCP transport (NVMe over Fabrics, TP 8000): the same controller model as PCIe
//! (`crate::ctrlr`: bring-up, Identify, namespaces, bdevs) over TCP connections, as SPDK's
//! `nvme_tcp.c` beside `nvme_pcie.c`. [`connect`] returns the same [`crate::Controller`].
//!
//! - `options.rs`: [`TcpTarget`] (traddr, trsvcid, subnqn) and [`TcpOptions`] (digests, queue
//!   sizes, keep-alive, SPDK's reconnect knobs and their rules).
//! - `sock.rs`: the system calls: non-blocking connect, reads into buffers, one `writev`.
//! - `conn.rs`: one connection's PDU engine: ICReq/ICResp, commands by CID, in-capsule or
//!   R2T/H2CData writes, C2HData read straight into buffers, digests; any bad input from the
//!   target fails the connection, never the process.
//! - `admin.rs`: the admin queue over its connection (blocking callers only), and the
//!   controller's registers as Fabrics Property Get/Set.
//! - `qpair/`: [`TcpQpair`], an I/O queue pair on one connection, owned by one reactor;
//!   reconnects without blocking it; commands past `NvmeOptions::io_timeout` are aborted,
//!   then their connection is failed and reconnected.
//! - `ctrlr.rs`: [`connect`] and [`connect_with`], and the controller's thread: Keep Alive
//!   every KATO/2 and the reconnect policy (`reconnect_delay_sec`,
//!   `fast_io_fail_timeout_sec`, `ctrlr_loss_timeout_sec`).
//! - `abort.rs`: Aborts asked for by the queue pairs, sent by the controller's thread.
//! - `auth.rs`: in-band authentication (DH-HMAC-CHAP) of each queue a subsystem asks it of,
//!   with the keys of [`TcpOptions::dhchap`].
//! - `tls.rs`: TLS 1.3 with a PSK ([`TcpOptions::psk`]): each connection's handshake comes
//!   before its ICReq, inside `conn.rs`, so the set-up steps above it are the same.
//! - `aer.rs`: the Asynchronous Event Request the controller's thread keeps posted;
//!   namespace changes are read and logged.
//!
//! ```no_run
//! use pmio::BlockDevice;
//! use pmio_nvme::tcp::{self, TcpOptions, TcpTarget};
//!
//! let target = TcpTarget {
//!     traddr: "127.0.0.1".into(),
//!     trsvcid: "4420".into(),
//!     subnqn: "nqn.2016-06.io.spdk:cnode1".into(),
//! };
//! let ctrlr = tcp::connect("Nvme0", &target, TcpOptions::default())?;
//! assert_eq!(ctrlr.transport(), "TCP");
//! for bdev in ctrlr.bdevs() {
//!     println!("{} {} blocks", bdev.info().name, bdev.info().num_blocks);
//! }
//! ctrlr.detach()?;
//! # Ok::<(), pmio_nvme::NvmeError>(())
//! ```

mod abort;
pub(crate) mod admin;
mod aer;
mod auth;
mod conn;
mod ctrlr;
mod options;
mod qpair;
mod sock;
mod tls;

pub use auth::DhchapKeys;
pub use conn::ConnError;
pub(crate) use ctrlr::TcpCtrlr;
pub(crate) use ctrlr::shutdown;
pub use ctrlr::{connect, connect_with};
pub use options::{TcpOptions, TcpTarget};
pub use qpair::TcpQpair;
pub use tls::TlsKey;
