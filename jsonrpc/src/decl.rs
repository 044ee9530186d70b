//! One declaration per method's parameters: a struct with serde's derive, decoded with SPDK's
//! rules and texts.
//!
//! SPDK declares each method's parameters once, as a decoder table
//! (`spdk_json_object_decoder`: name, decode function, optional); pmio declares them once as a
//! struct. The server decodes with it ([`decode`]), `--check-config` checks a configuration's
//! calls with it, and `pmio-rpc` builds the same struct from its command line and serializes it,
//! so a key is named in one place.
//!
//! The struct derives `Deserialize` with `#[serde(deny_unknown_fields)]`; optional keys are
//! `Option<T>` or carry `#[serde(default)]`; a deprecated name is `#[serde(alias = "old")]`.
//! `null` counts as absent, as in SPDK's decoders. SPDK's extra rules are small types:
//! [`IntDefault`] and [`BoolDefault`] for a key SPDK's client always sends (or a tunable pmio
//! does not have), accepted only at SPDK's default value.
//!
//! The errors keep SPDK's code and text and name the key: `-32603 "spdk_json_decode_object
//! failed: missing required parameter \"name\""` (the bdev methods), or through
//! [`DecodeError::invalid_params`] `-32602 "Invalid parameters: ..."` (the nvmf methods); a value
//! pmio accepts only at its default is `-95` in both.
//!
//! ```
//! use pmio_jsonrpc::decl::{self, IntDefault};
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize, Debug)]
//! #[serde(deny_unknown_fields)]
//! struct Create {
//!     name: String,
//!     #[serde(default)]
//!     md_size: IntDefault<0>,
//! }
//! let c: Create = decl::decode(Some(&json!({"name": "M0", "md_size": 0}))).unwrap();
//! assert_eq!(c.name, "M0");
//! let e = decl::decode::<Create>(Some(&json!({"name": "M0", "bogus": 1}))).unwrap_err();
//! assert_eq!(e.to_string(), "unknown parameter \"bogus\"");
//! let e: pmio_jsonrpc::RpcError = decl::decode::<Create>(Some(&json!({"name": "M0", "md_size": 8})))
//!     .unwrap_err()
//!     .into();
//! assert_eq!(e.code, -95);
//! ```

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{RpcError, code};

/// Why a method's parameters were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Missing, mistyped or unknown key, or `params` not an object: SPDK's decode failure.
    #[error("{0}")]
    Invalid(String),
    /// A key pmio accepts only at SPDK's default was given another value.
    #[error("parameter \"{key}\" is supported only as {default}")]
    OnlyDefault {
        /// The key (dotted for nested objects).
        key: String,
        /// SPDK's default, as JSON.
        default: String,
    },
}

impl DecodeError {
    /// The reply of SPDK methods that answer a decode failure with `-32602 "Invalid
    /// parameters"` (the nvmf methods); [`DecodeError::OnlyDefault`] stays `-95`.
    pub fn invalid_params(self) -> RpcError {
        match self {
            DecodeError::Invalid(d) => {
                RpcError::new(code::INVALID_PARAMS, format!("Invalid parameters: {d}"))
            }
            e @ DecodeError::OnlyDefault { .. } => e.into(),
        }
    }
}

impl From<DecodeError> for RpcError {
    /// The bdev methods' reply: `-32603 "spdk_json_decode_object failed: ..."`, or `-95`.
    fn from(e: DecodeError) -> RpcError {
        match e {
            DecodeError::Invalid(d) => RpcError::decode(d),
            e @ DecodeError::OnlyDefault { .. } => RpcError::errno_detail(-libc::EOPNOTSUPP, e),
        }
    }
}

/// Decodes a method's `params` (absent or `null`: no keys) into its declaration `T`.
pub fn decode<T: DeserializeOwned>(params: Option<&Value>) -> Result<T, DecodeError> {
    let map = match params {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => without_nulls(m),
        Some(_) => return Err(DecodeError::Invalid("params must be an object".into())),
    };
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        explain(&path, &e.into_inner().to_string())
    })
}

/// A copy of `m` without its `null` values, at every level of objects (SPDK's decoders treat
/// `null` as absent).
fn without_nulls(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let v = match v {
                Value::Object(inner) => Value::Object(without_nulls(inner)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Prefix of the serde message [`IntDefault`] and [`BoolDefault`] raise; the rest is the default.
const ONLY_DEFAULT: &str = "\u{1}only-default:";

/// SPDK's text for serde's message `msg` about the key at `path` (`.` at the top level).
fn explain(path: &str, msg: &str) -> DecodeError {
    // The full name of `key`: serde's path is the enclosing object's, or already ends in the
    // key (an unknown field is reported at its own position).
    let at = |key: &str| match path {
        "" | "." => key.to_string(),
        p if p == key || p.ends_with(&format!(".{key}")) => p.to_string(),
        p => format!("{p}.{key}"),
    };
    if let Some(default) = msg.strip_prefix(ONLY_DEFAULT) {
        return DecodeError::OnlyDefault {
            key: path.to_string(),
            default: default.to_string(),
        };
    }
    if let Some(key) = backticked(msg, "missing field `") {
        return DecodeError::Invalid(format!("missing required parameter \"{}\"", at(key)));
    }
    if let Some(key) = backticked(msg, "unknown field `") {
        return DecodeError::Invalid(format!("unknown parameter \"{}\"", at(key)));
    }
    if let Some(key) = backticked(msg, "duplicate field `") {
        return DecodeError::Invalid(format!("parameter \"{}\" given twice", at(key)));
    }
    match path {
        "" | "." => DecodeError::Invalid(msg.to_string()),
        p => DecodeError::Invalid(format!("parameter \"{p}\": {msg}")),
    }
}

/// The name between `` prefix` `` and the next backtick of `msg`.
fn backticked<'a>(msg: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = msg.strip_prefix(prefix)?;
    rest.split('`').next()
}

/// JSON's name of `v`'s type, for messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An integer key pmio accepts only at SPDK's default `V` (`md_size`, `dif_type`, ...): any
/// other number is refused with -95 naming the key, another type with SPDK's decode failure.
/// Holds the value given, so a client can send what its user asked for and hear the refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntDefault<const V: i64>(pub i64);

impl<const V: i64> Default for IntDefault<V> {
    fn default() -> Self {
        IntDefault(V)
    }
}

impl<'de, const V: i64> Deserialize<'de> for IntDefault<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match &v {
            Value::Number(n) if n.as_i64() == Some(V) => Ok(IntDefault(V)),
            // Any other number: refused as unsupported. A float equal to V is still V.
            Value::Number(n) if n.as_f64() == Some(V as f64) => Ok(IntDefault(V)),
            Value::Number(_) => Err(D::Error::custom(format_args!("{ONLY_DEFAULT}{V}"))),
            other => Err(D::Error::custom(format_args!(
                "invalid type {}, expected number",
                type_name(other)
            ))),
        }
    }
}

impl<const V: i64> Serialize for IntDefault<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.0)
    }
}

impl<const V: i64> IntDefault<V> {
    /// Whether the key holds its default (what a server accepts).
    pub fn is_default(&self) -> bool {
        self.0 == V
    }
}

/// A boolean key pmio accepts only at SPDK's default `V` (`dif_is_head_of_md: false`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoolDefault<const V: bool>(pub bool);

impl<const V: bool> Default for BoolDefault<V> {
    fn default() -> Self {
        BoolDefault(V)
    }
}

impl<'de, const V: bool> Deserialize<'de> for BoolDefault<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(b) if b == V => Ok(BoolDefault(V)),
            Value::Bool(_) => Err(D::Error::custom(format_args!("{ONLY_DEFAULT}{V}"))),
            other => Err(D::Error::custom(format_args!(
                "invalid type {}, expected boolean",
                type_name(&other)
            ))),
        }
    }
}

impl<const V: bool> Serialize for BoolDefault<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(self.0)
    }
}

impl<const V: bool> BoolDefault<V> {
    /// Whether the key holds its default.
    pub fn is_default(&self) -> bool {
        self.0 == V
    }
}

/// A declaration for methods that take no parameters: anything given is refused with SPDK's
/// `-32602 "<method> method requires no parameters"` by [`no_params`].
pub fn no_params(method: &str, params: Option<&Value>) -> Result<(), RpcError> {
    match params {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(RpcError::no_params(method)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize, Serialize, Debug, Default)]
    #[serde(deny_unknown_fields)]
    struct Create {
        name: String,
        num_blocks: Option<u64>,
        #[serde(default, alias = "blocksize")]
        block_size: u32,
        #[serde(default)]
        md_size: IntDefault<0>,
        #[serde(default)]
        numa_id: IntDefault<-1>,
        #[serde(default)]
        md_interleave: BoolDefault<false>,
        listen: Option<Listen>,
    }

    #[derive(Deserialize, Serialize, Debug, Default)]
    #[serde(deny_unknown_fields)]
    struct Listen {
        trtype: String,
        port: Option<u16>,
    }

    fn msg(v: Value) -> String {
        decode::<Create>(Some(&v)).unwrap_err().to_string()
    }

    #[test]
    fn required_optional_unknown_and_null() {
        let c: Create = decode(Some(&json!({"name": "N", "num_blocks": null}))).unwrap();
        assert_eq!(
            (c.name.as_str(), c.num_blocks, c.block_size),
            ("N", None, 0)
        );
        assert_eq!(msg(json!({})), "missing required parameter \"name\"");
        assert_eq!(
            msg(json!({"name": "N", "bogus": 1})),
            "unknown parameter \"bogus\""
        );
        assert_eq!(
            decode::<Create>(Some(&json!([1]))).unwrap_err().to_string(),
            "params must be an object"
        );
        assert!(decode::<Create>(None).is_err());
    }

    #[test]
    fn wrong_types_name_the_key_nested_too() {
        assert!(msg(json!({"name": 5})).starts_with("parameter \"name\": invalid type"));
        let m = msg(json!({"name": "N", "block_size": 1u64 << 40}));
        assert!(m.starts_with("parameter \"block_size\":"), "{m}");
        assert_eq!(
            msg(json!({"name": "N", "listen": {"port": 1}})),
            "missing required parameter \"listen.trtype\""
        );
        assert_eq!(
            msg(json!({"name": "N", "listen": {"trtype": "tcp", "x": 1}})),
            "unknown parameter \"listen.x\""
        );
        let m = msg(json!({"name": "N", "listen": {"trtype": "tcp", "port": "a"}}));
        assert!(
            m.starts_with("parameter \"listen.port\": invalid type"),
            "{m}"
        );
    }

    #[test]
    fn defaults_accepted_others_refused_with_95() {
        let c: Create = decode(Some(
            &json!({"name": "N", "md_size": 0, "numa_id": -1, "md_interleave": false}),
        ))
        .unwrap();
        assert!(c.md_size.is_default() && c.numa_id.is_default() && c.md_interleave.is_default());
        let e: RpcError = decode::<Create>(Some(&json!({"name": "N", "md_size": 8})))
            .unwrap_err()
            .into();
        assert_eq!(e.code, -libc::EOPNOTSUPP);
        assert!(
            e.message.contains("\"md_size\" is supported only as 0"),
            "{}",
            e.message
        );
        let e: RpcError = decode::<Create>(Some(&json!({"name": "N", "md_interleave": true})))
            .unwrap_err()
            .into();
        assert_eq!(e.code, -libc::EOPNOTSUPP);
        let e: RpcError = decode::<Create>(Some(&json!({"name": "N", "numa_id": "x"})))
            .unwrap_err()
            .into();
        assert_eq!(e.code, code::INTERNAL_ERROR);
        assert!(e.message.contains("\"numa_id\""), "{}", e.message);
    }

    #[test]
    fn alias_and_error_styles() {
        let c: Create = decode(Some(&json!({"name": "N", "blocksize": 512}))).unwrap();
        assert_eq!(c.block_size, 512);
        let e: RpcError = decode::<Create>(Some(&json!({}))).unwrap_err().into();
        assert_eq!(e.code, -32603);
        assert_eq!(
            e.message,
            "spdk_json_decode_object failed: missing required parameter \"name\""
        );
        let e = decode::<Create>(Some(&json!({})))
            .unwrap_err()
            .invalid_params();
        assert_eq!(e.code, -32602);
        assert_eq!(
            e.message,
            "Invalid parameters: missing required parameter \"name\""
        );
    }

    #[test]
    fn a_client_built_value_round_trips() {
        let c = Create {
            name: "M".into(),
            md_size: IntDefault(8),
            ..Default::default()
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["md_size"], 8);
        let e: RpcError = decode::<Create>(Some(&v)).unwrap_err().into();
        assert_eq!(e.code, -95);
    }
}
