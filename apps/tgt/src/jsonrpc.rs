//! JSON-RPC 2.0 as SPDK speaks it on a stream socket: framing, request validation, responses.
//!
//! Requests arrive as concatenated JSON values with no delimiter (rpc.py writes pretty-printed
//! objects with no trailing newline, several per connection, and a value may be split across
//! reads). [`Decoder`] accumulates bytes and yields complete values: serde_json's
//! `StreamDeserializer` tells an incomplete value ("EOF while parsing", wait for more bytes) from a
//! real syntax error (answer -32700 and close: a byte stream has no resync point). A small scanner
//! tracks nesting depth over the bytes as they arrive, so a deeply nested value is refused before
//! the parser recurses into it, and a value larger than the size limit is refused before it is
//! buffered whole.
//!
//! Responses are compact JSON plus `"\n"`, members in SPDK's order: `jsonrpc`, `id`, then `result`
//! or `error`.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// Largest request (one JSON value) accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Deepest nesting of arrays/objects accepted in one request.
pub const MAX_DEPTH: usize = 64;

/// JSON-RPC 2.0 error codes used by SPDK.
pub mod code {
    /// The bytes are not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// Valid JSON but not a JSON-RPC request object (also: batch arrays).
    pub const INVALID_REQUEST: i32 = -32600;
    /// No method of that name.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Parameters given to a method that takes none.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Bad or unknown parameters (SPDK reports decode failures with this code).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Method exists but is not callable in the current state (startup vs runtime).
    pub const INVALID_STATE: i32 = -1;
}

/// An error object of a JSON-RPC response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RpcError {
    /// JSON-RPC code or negative errno.
    pub code: i32,
    /// Human-readable message.
    pub message: String,
}

impl RpcError {
    /// An error with an explicit code and message.
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// `-32700 Parse error`.
    pub fn parse_error() -> RpcError {
        RpcError::new(code::PARSE_ERROR, "Parse error")
    }

    /// `-32600 Invalid request`, SPDK's text.
    pub fn invalid_request() -> RpcError {
        RpcError::new(code::INVALID_REQUEST, "Invalid request")
    }

    /// `-32601 Method not found`.
    pub fn method_not_found() -> RpcError {
        RpcError::new(code::METHOD_NOT_FOUND, "Method not found")
    }

    /// `-32602`, SPDK's text for parameters given to a method that takes none.
    pub fn no_params(method: &str) -> RpcError {
        RpcError::new(
            code::INVALID_PARAMS,
            format!("{method} method requires no parameters"),
        )
    }

    /// `-32603` for bad or unknown parameters: SPDK's text, then what was wrong.
    pub fn decode(detail: impl fmt::Display) -> RpcError {
        RpcError::new(
            code::INTERNAL_ERROR,
            format!("spdk_json_decode_object failed: {detail}"),
        )
    }

    /// A failed operation: negative errno with its strerror text (SPDK's form).
    pub fn errno(errno: i32) -> RpcError {
        let e = errno.abs();
        RpcError::new(-e, strerror(e))
    }

    /// A failed operation: negative errno, strerror text, then a detail naming the object.
    pub fn errno_detail(errno: i32, detail: impl fmt::Display) -> RpcError {
        let e = errno.abs();
        RpcError::new(-e, format!("{}: {detail}", strerror(e)))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// The C library's message for an errno value (without Rust's " (os error N)" suffix).
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno.abs()).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

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

/// Why a byte stream cannot go on: the connection is answered with `error` and closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Not JSON (at byte `offset` of the buffered request).
    Syntax(String),
    /// One request is larger than [`MAX_REQUEST_BYTES`].
    TooLarge,
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl FrameError {
    /// The error object sent before closing the connection.
    pub fn to_rpc(&self) -> RpcError {
        match self {
            FrameError::Syntax(_) => RpcError::parse_error(),
            FrameError::TooLarge => RpcError::new(
                code::PARSE_ERROR,
                format!("Parse error: request larger than {MAX_REQUEST_BYTES} bytes"),
            ),
            FrameError::TooDeep => RpcError::new(
                code::PARSE_ERROR,
                format!("Parse error: JSON nested deeper than {MAX_DEPTH} levels"),
            ),
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Syntax(e) => write!(f, "JSON syntax error: {e}"),
            FrameError::TooLarge => write!(f, "request larger than {MAX_REQUEST_BYTES} bytes"),
            FrameError::TooDeep => write!(f, "JSON nested deeper than {MAX_DEPTH} levels"),
        }
    }
}

/// Splits a byte stream into JSON values.
///
/// Feed bytes as they arrive with [`Decoder::feed`], then call [`Decoder::next_value`] until it
/// returns `Ok(None)` (more bytes needed). After an `Err` the stream is unusable.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes of `buf` the depth scanner has looked at.
    scanned: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Offset in `buf` of the first byte that went deeper than the limit.
    too_deep_at: Option<usize>,
    max_bytes: usize,
    max_depth: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(MAX_REQUEST_BYTES, MAX_DEPTH)
    }
}

impl Decoder {
    /// A decoder with the given limits.
    pub fn new(max_bytes: usize, max_depth: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            scanned: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            too_deep_at: None,
            max_bytes,
            max_depth,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        self.scan();
    }

    /// Bytes buffered and not yet returned as values.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether only whitespace is buffered (nothing was cut off mid-request).
    pub fn is_idle(&self) -> bool {
        self.buf.iter().all(u8::is_ascii_whitespace)
    }

    /// Tracks nesting depth over the newly fed bytes, outside strings.
    fn scan(&mut self) {
        if self.too_deep_at.is_some() {
            return;
        }
        for (i, &b) in self.buf[self.scanned..].iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        self.too_deep_at = Some(self.scanned + i);
                        break;
                    }
                }
                // A stray closer is a syntax error the parser reports; never underflow.
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
        }
        self.scanned = self.buf.len();
    }

    /// The next complete value, `Ok(None)` when more bytes are needed.
    pub fn next_value(&mut self) -> Result<Option<Value>, FrameError> {
        let limit = self.too_deep_at.unwrap_or(self.buf.len());
        let mut stream =
            serde_json::Deserializer::from_slice(&self.buf[..limit]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                let end = stream.byte_offset();
                // A number ending exactly at the end of the bytes so far may continue in the next
                // read ("12" then "3"): wait.
                if v.is_number() && end == self.buf.len() {
                    return Ok(None);
                }
                self.consume(end);
                Ok(Some(v))
            }
            Some(Err(e)) if e.is_eof() => {
                if self.too_deep_at.is_some() {
                    return Err(FrameError::TooDeep);
                }
                let start = self
                    .buf
                    .iter()
                    .position(|b| !b.is_ascii_whitespace())
                    .unwrap_or(self.buf.len());
                if self.buf.len() - start > self.max_bytes {
                    return Err(FrameError::TooLarge);
                }
                Ok(None)
            }
            Some(Err(e)) => Err(FrameError::Syntax(e.to_string())),
            None => {
                if self.too_deep_at.is_some() {
                    return Err(FrameError::TooDeep);
                }
                // Only whitespace: drop it so it does not count against the size limit.
                self.consume(limit);
                Ok(None)
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        self.scanned -= n;
        if let Some(at) = self.too_deep_at.as_mut() {
            *at -= n;
        }
    }
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

    #[test]
    fn split_reads_are_reassembled() {
        let req = br#"{"jsonrpc":"2.0","method":"spdk_get_version","id":"x\"}{"}"#;
        for cut in 0..req.len() {
            let mut d = Decoder::default();
            d.feed(&req[..cut]);
            assert_eq!(d.next_value().unwrap(), None, "cut at {cut}");
            d.feed(&req[cut..]);
            let v = d.next_value().unwrap().unwrap();
            assert_eq!(v["id"], json!("x\"}{"));
            assert_eq!(d.next_value().unwrap(), None);
            assert!(d.is_idle());
        }
    }

    #[test]
    fn number_at_end_of_buffer_waits() {
        let mut d = Decoder::default();
        d.feed(b"12");
        assert_eq!(d.next_value().unwrap(), None);
        d.feed(b"3 ");
        assert_eq!(d.next_value().unwrap(), Some(json!(123)));
    }

    #[test]
    fn syntax_error_is_fatal() {
        let mut d = Decoder::default();
        d.feed(br#"{"a":1}{"b":]"#);
        assert_eq!(d.next_value().unwrap(), Some(json!({"a": 1})));
        assert!(matches!(d.next_value(), Err(FrameError::Syntax(_))));
    }

    #[test]
    fn too_deep_is_refused_before_parsing() {
        let mut d = Decoder::default();
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        d.feed(ok.as_bytes());
        assert!(d.next_value().unwrap().is_some());
        // Far deeper than serde_json's own recursion limit, and never closed.
        d.feed(b"{\"ok\":1}");
        d.feed("[".repeat(100_000).as_bytes());
        assert_eq!(d.next_value().unwrap(), Some(json!({"ok": 1})));
        assert_eq!(d.next_value(), Err(FrameError::TooDeep));
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let mut d = Decoder::new(MAX_REQUEST_BYTES, 2);
        d.feed(br#"{"a":"[[[[{{{{\\\"[[["}"#);
        assert!(d.next_value().unwrap().is_some());
    }

    #[test]
    fn too_large_is_refused() {
        let mut d = Decoder::new(1000, MAX_DEPTH);
        d.feed(b"{\"a\":\"");
        d.feed(&[b'x'; 990]);
        assert_eq!(d.next_value().unwrap(), None);
        d.feed(&[b'x'; 20]);
        assert_eq!(d.next_value(), Err(FrameError::TooLarge));
        // Whitespace between requests does not count.
        let mut d = Decoder::new(100, MAX_DEPTH);
        for _ in 0..100 {
            d.feed(&[b' '; 99]);
            assert_eq!(d.next_value().unwrap(), None);
        }
        d.feed(b"{}");
        assert_eq!(d.next_value().unwrap(), Some(json!({})));
    }

    #[test]
    fn strerror_matches_spdk_text() {
        assert_eq!(strerror(libc::ENODEV), "No such device");
        assert_eq!(strerror(-libc::EEXIST), "File exists");
        assert_eq!(RpcError::errno(-19).message, "No such device");
        assert_eq!(RpcError::errno(-19).code, -19);
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

        /// Any sequence of valid requests, split anywhere, yields exactly those requests in order.
        #[test]
        fn prop_split_stream_round_trips(
            ids in proptest::collection::vec(any::<i64>(), 1..6),
            pretty in any::<bool>(),
            cuts in proptest::collection::vec(0usize..2000, 0..10),
        ) {
            let mut bytes = Vec::new();
            for id in &ids {
                let req = json!({"jsonrpc": "2.0", "method": "m", "id": id, "params": {"s": "}{[\""}});
                if pretty {
                    bytes.extend(serde_json::to_vec_pretty(&req).unwrap());
                } else {
                    bytes.extend(serde_json::to_vec(&req).unwrap());
                }
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let mut d = Decoder::default();
            let mut got = Vec::new();
            let mut at = 0;
            for c in cuts {
                d.feed(&bytes[at..c]);
                at = c;
                while let Some(v) = d.next_value().unwrap() {
                    got.push(parse_call(v).unwrap().id.unwrap().as_i64().unwrap());
                }
            }
            prop_assert_eq!(got, ids);
        }
    }
}
