//! Strict decoding of a method's `params` object, with errors that name the parameter.
//!
//! SPDK decodes parameters with `spdk_json_decode_object`, which rejects unknown keys and wrong
//! types with `-32603 "spdk_json_decode_object failed"`. pmio keeps that code and text and adds
//! which parameter was wrong. Keys that SPDK's client always sends (`store_true` flags as
//! `false`, SPDK-only tunables at their defaults) are accepted with [`Params::accept_default`].

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::RpcError;

/// The parameters of one call, consumed key by key.
#[derive(Debug)]
pub struct Params {
    map: Map<String, Value>,
}

impl Params {
    /// Wraps `params` (absent/`null` = no parameters; anything but an object is refused).
    pub fn new(params: Option<&Value>) -> Result<Params, RpcError> {
        match params {
            None | Some(Value::Null) => Ok(Params { map: Map::new() }),
            Some(Value::Object(m)) => Ok(Params { map: m.clone() }),
            Some(_) => Err(RpcError::decode("params must be an object")),
        }
    }

    /// A required parameter.
    pub fn req<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, RpcError> {
        match self.opt(key)? {
            Some(v) => Ok(v),
            None => Err(RpcError::decode(format_args!(
                "missing required parameter \"{key}\""
            ))),
        }
    }

    /// An optional parameter (`null` counts as absent).
    pub fn opt<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, RpcError> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| RpcError::decode(format_args!("parameter \"{key}\": {e}"))),
        }
    }

    /// A parameter pmio does not implement but accepts at SPDK's default value `default`
    /// (e.g. `"dif_is_head_of_md": false`); any other value is refused with -95 naming it.
    pub fn accept_default(&mut self, key: &str, default: Value) -> Result<(), RpcError> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(()),
            Some(v) if v == default => Ok(()),
            Some(Value::Bool(_)) if default.is_boolean() => Err(not_supported(key, &default)),
            Some(Value::Number(_)) if default.is_number() => Err(not_supported(key, &default)),
            Some(Value::String(_)) if default.is_string() => Err(not_supported(key, &default)),
            Some(v) => Err(RpcError::decode(format_args!(
                "parameter \"{key}\": invalid type {}, expected {}",
                type_name(&v),
                type_name(&default)
            ))),
        }
    }

    /// Ends decoding: any key not consumed is an unknown parameter.
    pub fn finish(self) -> Result<(), RpcError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(RpcError::decode(format_args!("unknown parameter \"{k}\""))),
        }
    }
}

fn not_supported(key: &str, default: &Value) -> RpcError {
    RpcError::errno_detail(
        -libc::EOPNOTSUPP,
        format_args!("parameter \"{key}\" is supported only as {default}"),
    )
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn required_optional_unknown() {
        let v = json!({"name": "Null0", "num_blocks": 8, "bogus": 1});
        let mut p = Params::new(Some(&v)).unwrap();
        assert_eq!(p.req::<String>("name").unwrap(), "Null0");
        assert_eq!(p.opt::<u64>("num_blocks").unwrap(), Some(8));
        assert_eq!(p.opt::<u64>("absent").unwrap(), None);
        let e = p.finish().unwrap_err();
        assert_eq!(e.code, -32603);
        assert!(e.message.starts_with("spdk_json_decode_object failed"));
        assert!(e.message.contains("\"bogus\""), "{}", e.message);
    }

    #[test]
    fn wrong_type_names_the_parameter() {
        let v = json!({"name": 5});
        let mut p = Params::new(Some(&v)).unwrap();
        let e = p.opt::<String>("name").unwrap_err();
        assert_eq!(e.code, -32603);
        assert!(e.message.contains("\"name\""), "{}", e.message);
        let e = Params::new(Some(&json!({})))
            .unwrap()
            .req::<String>("name")
            .unwrap_err();
        assert!(e.message.contains("missing required parameter \"name\""));
        assert!(Params::new(Some(&json!([1]))).is_err());
    }

    #[test]
    fn defaults_accepted_others_refused() {
        let v = json!({"dif_is_head_of_md": false, "md_size": 0, "md_interleave": true, "x": "s"});
        let mut p = Params::new(Some(&v)).unwrap();
        p.accept_default("dif_is_head_of_md", json!(false)).unwrap();
        p.accept_default("md_size", json!(0)).unwrap();
        let e = p.accept_default("md_interleave", json!(false)).unwrap_err();
        assert_eq!(e.code, -libc::EOPNOTSUPP);
        assert!(e.message.contains("md_interleave"));
        let e = p.accept_default("x", json!(0)).unwrap_err();
        assert_eq!(e.code, -32603);
        p.finish().unwrap();
    }
}
