//! Framing of a JSON-RPC byte stream as SPDK speaks it: concatenated JSON values.
//!
//! Requests arrive as concatenated JSON values with no delimiter (rpc.py writes pretty-printed
//! objects with no trailing newline, several per connection, and a value may be split across
//! reads). [`Decoder`] accumulates bytes and yields complete values: serde_json's
//! `StreamDeserializer` tells an incomplete value ("EOF while parsing", wait for more bytes) from a
//! real syntax error (answer -32700 and close: a byte stream has no resync point). A small scanner
//! tracks nesting depth over the bytes as they arrive, so a deeply nested value is refused before
//! the parser recurses into it, and a value larger than the size limit is refused before it is
//! buffered whole.

use std::fmt;

use serde_json::Value;

use crate::error::{RpcError, code};

/// Largest request (one JSON value) accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Deepest nesting of arrays/objects accepted in one request.
pub const MAX_DEPTH: usize = 64;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::parse_call;
    use proptest::prelude::*;
    use serde_json::json;

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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

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
