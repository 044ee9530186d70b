//! A JSON-RPC 2.0 client on a unix stream socket, behaving as SPDK's `rpc/client.py`: requests
//! are pretty-printed JSON with no delimiter, ids count from 1 per connection, a response is the
//! next JSON value on the stream.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with an error object. `request` is the params with `method` and
    /// `req_id` added, as rpc.py prints it.
    Rpc {
        /// What was asked.
        request: Box<Value>,
        /// The error object.
        error: Box<Value>,
    },
    /// Connection-level failure, already worded as rpc.py words it.
    Transport(String),
}

impl CallError {
    /// What rpc.py prints for this error.
    pub fn render(&self) -> String {
        match self {
            CallError::Rpc { request, error } => [
                "request:".to_string(),
                py_dumps(request),
                "Got JSON-RPC error response".to_string(),
                "response:".to_string(),
                py_dumps(error),
            ]
            .join("\n"),
            CallError::Transport(m) => m.clone(),
        }
    }
}

/// One connection to pmio-tgt (or any SPDK-compatible server).
pub struct Client {
    sock: UnixStream,
    addr: String,
    next_id: u64,
    buf: Vec<u8>,
    timeout: Duration,
}

impl Client {
    /// Connects to the unix socket `path`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, CallError> {
        let addr = path.display().to_string();
        if timeout.is_zero() {
            return Err(CallError::Transport(format!(
                "Timeout value is invalid: {}\n",
                timeout.as_secs_f64()
            )));
        }
        let sock = UnixStream::connect(path).map_err(|e| {
            CallError::Transport(format!(
                "Error while connecting to {addr}\nIs pmio-tgt running?\nError details: {e}"
            ))
        })?;
        Ok(Client {
            sock,
            addr,
            next_id: 0,
            buf: Vec::new(),
            timeout,
        })
    }

    /// Calls `method`; `params` is sent only when it is a non-empty object (as rpc.py does).
    pub fn call(&mut self, method: &str, params: Option<Value>) -> Result<Value, CallError> {
        self.next_id += 1;
        let id = self.next_id;
        let params = params.filter(|p| !p.as_object().is_some_and(Map::is_empty) && !p.is_null());
        let mut req = Map::new();
        req.insert("jsonrpc".into(), json!("2.0"));
        req.insert("method".into(), json!(method));
        req.insert("id".into(), json!(id));
        if let Some(p) = &params {
            req.insert("params".into(), p.clone());
        }
        let bytes = serde_json::to_vec_pretty(&Value::Object(req)).expect("serialising JSON");
        let sent = self.sock.write_all(&bytes);
        let response = match sent.and_then(|_| self.recv()) {
            Ok(r) => r,
            // A daemon that is told to stop may close before answering.
            Err(_) if method == "spdk_kill_instance" => return Ok(json!({})),
            Err(e) => return Err(CallError::Transport(e.to_string())),
        };
        if let Some(error) = response.get("error") {
            let mut request = match params {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            request.insert("method".into(), json!(method));
            request.insert("req_id".into(), json!(id));
            return Err(CallError::Rpc {
                request: Box::new(Value::Object(request)),
                error: Box::new(error.clone()),
            });
        }
        Ok(response.get("result").cloned().unwrap_or(Value::Null))
    }

    fn recv(&mut self) -> io::Result<Value> {
        let deadline = Instant::now() + self.timeout;
        let mut chunk = [0u8; 4096];
        loop {
            let start = self
                .buf
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(self.buf.len());
            let mut it =
                serde_json::Deserializer::from_slice(&self.buf[start..]).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let end = start + it.byte_offset();
                    self.buf.drain(..end);
                    return Ok(v);
                }
                Some(Err(e)) if !e.is_eof() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("invalid response from {}: {e}", self.addr),
                    ));
                }
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "Timeout while waiting for response:\n{}\n",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "Connection closed with partial response:\n{}\n",
                            String::from_utf8_lossy(&self.buf)
                        ),
                    ));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

/// `json.dumps(v, indent=2)` as Python prints it: two-space indent, `": "` and `","`, non-ASCII
/// escaped as `\uXXXX`.
pub fn py_dumps(v: &Value) -> String {
    ascii_escape(serde_json::to_string_pretty(v).expect("serialising JSON"))
}

/// Escapes every non-ASCII character of serialised JSON as `\uXXXX` (Python's `ensure_ascii`).
/// Outside strings JSON is pure ASCII, so this only ever touches string contents.
pub fn ascii_escape(s: String) -> String {
    if s.is_ascii() {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_dumps_matches_python() {
        let v = json!({"name": "Null0", "list": [1, 2], "empty": [], "obj": {}, "u": "é😀"});
        assert_eq!(
            py_dumps(&v),
            "{\n  \"name\": \"Null0\",\n  \"list\": [\n    1,\n    2\n  ],\n  \"empty\": [],\n  \"obj\": {},\n  \"u\": \"\\u00e9\\ud83d\\ude00\"\n}"
        );
    }

    #[test]
    fn error_render_matches_rpc_py() {
        let e = CallError::Rpc {
            request: Box::new(json!({"name": "Null0", "method": "bdev_null_delete", "req_id": 1})),
            error: Box::new(json!({"code": -19, "message": "No such device"})),
        };
        assert_eq!(
            e.render(),
            "request:\n{\n  \"name\": \"Null0\",\n  \"method\": \"bdev_null_delete\",\n  \"req_id\": 1\n}\nGot JSON-RPC error response\nresponse:\n{\n  \"code\": -19,\n  \"message\": \"No such device\"\n}"
        );
    }

    #[test]
    fn talks_to_a_scripted_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut b = [0u8; 1024];
            while !got.ends_with(b"}") || got.iter().filter(|&&c| c == b'{').count() < 1 {
                let n = s.read(&mut b).unwrap();
                got.extend_from_slice(&b[..n]);
            }
            // Reply split in two writes, then an error for the second request.
            s.write_all(br#"{"jsonrpc":"2.0","id":1,"#).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"\"result\":\"Null0\"}\n").unwrap();
            let n = s.read(&mut b).unwrap();
            got.extend_from_slice(&b[..n]);
            s.write_all(
                br#"{"jsonrpc":"2.0","id":2,"error":{"code":-19,"message":"No such device"}}"#,
            )
            .unwrap();
            String::from_utf8(got).unwrap()
        });
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        let r = c
            .call(
                "bdev_null_create",
                Some(json!({"num_blocks": 8, "block_size": 512, "name": "Null0"})),
            )
            .unwrap();
        assert_eq!(r, json!("Null0"));
        let e = c.call("bdev_get_bdevs", None).unwrap_err();
        assert!(matches!(e, CallError::Rpc { .. }));
        assert!(e.render().contains("\"req_id\": 2"));
        let sent = server.join().unwrap();
        assert!(sent.starts_with(
            "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"bdev_null_create\",\n  \"id\": 1,\n  \"params\": {\n    \"num_blocks\": 8,"
        ));
        assert!(sent.contains("\"method\": \"bdev_get_bdevs\",\n  \"id\": 2\n}"));
    }

    #[test]
    fn missing_socket_is_a_clear_error() {
        let e = Client::connect(Path::new("/nonexistent/pmio.sock"), Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(e.render().contains("Is pmio-tgt running?"));
    }
}
