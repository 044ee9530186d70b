//! NVMe and NVMe/TCP wire formats, shared by pmio's NVMe driver (and its NVMe/TCP host) and its
//! NVMe/TCP target. Pure: no I/O, no sockets, no threads, no unsafe code.
//!
//! - [`pdu`]: NVMe/TCP PDUs (TP 8000) parsed in place and encoded into a stack buffer, for
//!   both ends of a connection; `pdu/receive.rs` parses and says what to do about a bad PDU,
//!   `pdu/send.rs` encodes heads and data digests.
//!
//! ```
//! use pmio_nvme_spec::pdu::{self, Header, Link, R2T, Side};
//!
//! // The target asks the host for 8 KiB of command 7's data.
//! let target = Link::new(Side::Controller, pdu::max_plen_for_data(128 * 1024));
//! let host = Link::new(Side::Host, pdu::max_plen_for_data(128 * 1024));
//! let r2t = Header::R2T(R2T { cccid: 7, ttag: 1, r2to: 0, r2tl: 8192 });
//! let mut head = [0u8; pdu::MAX_HEAD_LEN];
//! let enc = pdu::encode(&r2t, 0, &target, &mut head)?;
//!
//! // What the host read from its socket: one whole PDU, borrowed, not copied.
//! let (got, used) = pdu::parse(&head[..enc.head_len], &host)?.expect("a whole PDU");
//! assert_eq!(got.header, r2t);
//! assert_eq!(used, enc.head_len);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod pdu;
