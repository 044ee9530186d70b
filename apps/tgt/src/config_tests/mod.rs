//! Loading configurations into pmio-tgt (`pmio-config` over this daemon's methods): the SPDK
//! samples, rollback of a failed load, rpc.py's replay sessions.

mod keys;
mod load;
mod session;
pub(crate) mod testutil;
