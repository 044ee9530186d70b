//! JSON-RPC 2.0 requests and responses: request validation, response encoding, one value's
//! handling.
//!
//! Responses are compact JSON plus `"\n"`, members in SPDK's order: `jsonrpc`, `id`, then `result`
//! or `error`.

use serde::Serialize;
use serde_json::Value;

use crate::error::RpcError;

/// One validated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// `None` for a notification (no `id` member): it gets no reply.
    pub id: Option<Value>,
    /// Method name.
    pub method: String,
    /// `None` when absent or `null`.
    pub params: Option<Value>,
}

/// Validates one decoded JSON value as a JSON-RPC request.
///
/// On error returns the id to answer with (`null` when it could not be determined) and the error.
pub fn parse_call(v: Value) -> Result<Call, (Value, RpcError)> {
    let mut obj = match v {
        Value::Object(m) => m,
        // Batch arrays and scalars: SPDK answers -32600 with a null id.
        _ => return Err((Value::Null, RpcError::invalid_request())),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::Null | Value::Number(_) | Value::String(_))) => Some(id),
        Some(_) => return Err((Value::Null, RpcError::invalid_request())),
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    match obj.get("jsonrpc") {
        None => {}
        Some(Value::String(s)) if s == "2.0" => {}
        Some(_) => return Err((reply_id, RpcError::invalid_request())),
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => return Err((reply_id, RpcError::invalid_request())),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => None,
        Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
        Some(_) => return Err((reply_id, RpcError::invalid_request())),
    };
    Ok(Call { id, method, params })
}

#[derive(Serialize)]
struct Response<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

/// Encodes a response (compact JSON + `"\n"`), appending it to `out`.
pub fn encode_response(out: &mut Vec<u8>, id: &Value, outcome: &Result<Value, RpcError>) {
    let resp = match outcome {
        Ok(result) => Response {
            jsonrpc: "2.0",
            id,
            result: Some(result),
            error: None,
        },
        Err(error) => Response {
            jsonrpc: "2.0",
            id,
            result: None,
            error: Some(error),
        },
    };
    // Serialising a Value and plain structs into a Vec cannot fail.
    serde_json::to_writer(&mut *out, &resp).expect("serialising a JSON value into memory");
    out.push(b'\n');
}

/// What the connection does with one decoded value.
pub enum Step {
    /// Answer with this response (already encoded) and go on.
    Reply,
    /// A notification: no answer.
    Silent,
}

/// Processes one decoded value: validates it, calls `dispatch` for valid requests and appends the
/// encoded response (if any) to `out`.
pub fn handle_value(
    v: Value,
    out: &mut Vec<u8>,
    dispatch: impl FnOnce(&Call) -> Result<Value, RpcError>,
) -> Step {
    match parse_call(v) {
        Err((id, err)) => {
            encode_response(out, &id, &Err(err));
            Step::Reply
        }
        Ok(call) => {
            let outcome = dispatch(&call);
            match &call.id {
                Some(id) => {
                    encode_response(out, id, &outcome);
                    Step::Reply
                }
                None => Step::Silent,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Decoder;
    use proptest::prelude::*;
    use serde_json::json;

    fn respond(req: &str) -> String {
        let mut d = Decoder::default();
        d.feed(req.as_bytes());
        let mut out = Vec::new();
        while let Some(v) = d.next_value().unwrap() {
            handle_value(v, &mut out, |c| match c.method.as_str() {
                "spdk_get_version" if c.params.is_some() => Err(RpcError::no_params(&c.method)),
                "spdk_get_version" => Ok(json!({"version": "pmio"})),
                _ => Err(RpcError::method_not_found()),
            });
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pretty_request_without_newline_is_answered() {
        let req = "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"spdk_get_version\",\n  \"id\": 1\n}";
        assert_eq!(
            respond(req),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"version\":\"pmio\"}}\n"
        );
    }

    #[test]
    fn two_requests_in_one_write_get_two_answers() {
        let out = respond(
            r#"{"jsonrpc":"2.0","method":"spdk_get_version","id":10}{"jsonrpc":"2.0","method":"x","id":11}"#,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with(r#"{"jsonrpc":"2.0","id":10,"result""#));
        assert_eq!(
            lines[1],
            r#"{"jsonrpc":"2.0","id":11,"error":{"code":-32601,"message":"Method not found"}}"#
        );
    }

    #[test]
    fn ids_are_echoed_whatever_their_type() {
        for id in [r#""abc""#, "null", "7", "-3", "1.5", "18446744073709551615"] {
            let out = respond(&format!(
                r#"{{"jsonrpc":"2.0","method":"spdk_get_version","id":{id}}}"#
            ));
            assert!(
                out.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result""#)),
                "{out}"
            );
        }
    }

    #[test]
    fn spdk_edge_cases() {
        assert_eq!(
            respond(r#"{"jsonrpc":"2.0","method":"spdk_get_version","id":4,"params":{}}"#),
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32602,\"message\":\"spdk_get_version method requires no parameters\"}}\n"
        );
        assert!(
            respond(r#"{"jsonrpc":"2.0","method":"spdk_get_version","id":3,"params":null}"#)
                .contains("\"result\"")
        );
        assert!(respond(r#"{"method":"spdk_get_version","id":5}"#).contains("\"result\""));
        assert_eq!(
            respond(r#"{"jsonrpc":"2.0","method":"spdk_get_version"}"#),
            ""
        );
        assert_eq!(
            respond(r#"[{"jsonrpc":"2.0","method":"spdk_get_version","id":6}]"#),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid request\"}}\n"
        );
        assert_eq!(respond(r#"{"jsonrpc":"2.0","method":"#), "");
    }

    #[test]
    fn invalid_requests() {
        for (req, id) in [
            (r#"{"jsonrpc":"1.0","method":"m","id":1}"#, "1"),
            (r#"{"jsonrpc":"2.0","method":5,"id":2}"#, "2"),
            (r#"{"jsonrpc":"2.0","id":3}"#, "3"),
            (r#"{"jsonrpc":"2.0","method":"m","id":4,"params":5}"#, "4"),
            (r#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#, "null"),
            (r#"[]"#, "null"),
            (r#""string""#, "null"),
            (r#"true "#, "null"),
        ] {
            assert_eq!(
                respond(req),
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32600,\"message\":\"Invalid request\"}}}}\n"
                ),
                "{req}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random bytes in random chunks never panic the decoder, and every outcome is either a
        /// value, "more please" or a fatal frame error.
        #[test]
        fn prop_random_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            cuts in proptest::collection::vec(0usize..512, 0..8),
        ) {
            let mut d = Decoder::new(256, 8);
            let mut cuts = cuts;
            cuts.push(data.len());
            cuts.sort_unstable();
            let mut at = 0;
            'outer: for c in cuts {
                let c = c.min(data.len());
                d.feed(&data[at..c]);
                at = c;
                loop {
                    match d.next_value() {
                        Ok(Some(v)) => {
                            let mut out = Vec::new();
                            handle_value(v, &mut out, |_| Err(RpcError::method_not_found()));
                            if !out.is_empty() {
                                prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
                            }
                        }
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
        }
    }
}
