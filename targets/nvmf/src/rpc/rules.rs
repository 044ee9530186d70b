//! SPDK's extra rules for the nvmf methods' keys, as small types the declarations use.
//!
//! - [`TgtName`]: `tgt_name` selects among SPDK's targets; pmio has one.
//! - [`Ignored`]: a key pmio accepts (its type checked) and ignores: it tunes what pmio does
//!   not have, or another transport's.
//! - [`Hex`]: an NGUID or EUI-64, hexadecimal digits without dashes (the declarations carry
//!   the text, as clients send it, and the methods parse it).
//! - [`refuse_given`], [`default_only_str`]: keys pmio does not implement, refused (-95) when
//!   given or given another value than SPDK's default (decl's `IntDefault`/`BoolDefault` cover
//!   numbers and booleans).

use std::fmt;
use std::str::FromStr;

use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::decl::{self, DecodeError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::errors::internal;

/// The target's one name: SPDK's default, which rpc.py sends when asked for none.
pub const TGT_NAME: &str = "nvmf_tgt";

/// `tgt_name`: accepted only as pmio's one target ([`TGT_NAME`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct TgtName(pub String);

impl TgtName {
    /// SPDK's -32603 "Unable to find a target." for any name but pmio's one.
    pub fn check(name: Option<&TgtName>) -> Result<(), RpcError> {
        match name {
            None => Ok(()),
            Some(n) if n.0 == TGT_NAME => Ok(()),
            Some(n) => Err(internal(
                "Unable to find a target.",
                format_args!("no target {:?} (pmio has one, {TGT_NAME})", n.0),
            )),
        }
    }
}

/// A name as a client gives it (pmio-rpc's `-t`): the method that decodes it checks it.
impl From<String> for TgtName {
    fn from(name: String) -> TgtName {
        TgtName(name)
    }
}

/// A declaration that names its target (every top-level nvmf declaration): the methods check
/// it with [`TgtName::check`] after decoding.
pub trait Targeted {
    /// The `tgt_name` given, if any.
    fn tgt_name(&self) -> Option<&TgtName>;
}

/// Implements [`Targeted`] for declarations with a `tgt_name: Option<TgtName>` field.
macro_rules! targeted {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::rpc::rules::Targeted for $t {
            fn tgt_name(&self) -> Option<&$crate::rpc::rules::TgtName> {
                self.tgt_name.as_ref()
            }
        }
    )*};
}
pub(crate) use targeted;

/// Decodes `params` into the declaration `T` as SPDK's nvmf methods decode theirs, and checks
/// its `tgt_name`: a missing, mistyped or unknown key is -32602 "Invalid parameters" naming the
/// key (the bdev methods answer -32603); a value pmio accepts only at SPDK's default is -95.
pub fn decode<T: DeserializeOwned + Targeted>(params: Option<&Value>) -> Result<T, RpcError> {
    let p: T = decl::decode(params).map_err(DecodeError::invalid_params)?;
    TgtName::check(p.tgt_name())?;
    Ok(p)
}

/// A key accepted and ignored: its type is checked, its value is not used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Ignored<T>(pub T);

/// `N` bytes written as `2N` hexadecimal digits without separators, as SPDK decodes NGUID
/// and EUI-64 (parsed from the text a client sent); displayed upper-case, as SPDK's replies
/// show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex<const N: usize>(pub [u8; N]);

/// Why a text is not a [`Hex`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not {digits} hexadecimal digits")]
pub struct HexError {
    /// The text given.
    pub text: String,
    /// How many digits were expected.
    pub digits: usize,
}

impl<const N: usize> FromStr for Hex<N> {
    type Err = HexError;

    fn from_str(s: &str) -> Result<Self, HexError> {
        let bad = || HexError {
            text: s.to_string(),
            digits: 2 * N,
        };
        if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; N];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Hex(out))
    }
}

impl<const N: usize> fmt::Display for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02X}"))
    }
}

/// A key pmio does not implement at all: refused (-95) when given, with `why`.
pub fn refuse_given<T>(key: &str, value: &Option<T>, why: &str) -> Result<(), RpcError> {
    match value {
        None => Ok(()),
        Some(_) => Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("parameter \"{key}\": {why}"),
        )),
    }
}

/// A string key pmio implements only at SPDK's default `default`: anything else is -95.
pub fn default_only_str(key: &str, value: Option<&str>, default: &str) -> Result<(), RpcError> {
    match value {
        None => Ok(()),
        Some(v) if v == default => Ok(()),
        Some(_) => Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("parameter \"{key}\" is supported only as \"{default}\""),
        )),
    }
}
