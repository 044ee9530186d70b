//! Parameters of the nvmf methods as SPDK's rpc.py sends them.

use super::*;

/// A method's parameters, decoded as SPDK's nvmf methods decode theirs: a missing, mistyped or
/// unknown key is -32602 "Invalid parameters" (the bdev methods answer -32603), naming the key.
pub(super) struct Args(Params);

/// Turns a [`Params`] decode error (-32603) into SPDK's nvmf reply; other errors (-95 for a
/// value pmio accepts only at its default) pass unchanged.
pub(super) fn nvmf_decode(e: RpcError) -> RpcError {
    if e.code != code::INTERNAL_ERROR {
        return e;
    }
    let detail = e
        .message
        .strip_prefix("spdk_json_decode_object failed: ")
        .unwrap_or(&e.message);
    invalid(detail)
}

impl Args {
    pub(super) fn new(params: Option<&Value>) -> Result<Args, RpcError> {
        Params::new(params).map(Args).map_err(nvmf_decode)
    }

    pub(super) fn req<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, RpcError> {
        self.0.req(key).map_err(nvmf_decode)
    }

    pub(super) fn opt<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, RpcError> {
        self.0.opt(key).map_err(nvmf_decode)
    }

    /// A key pmio implements only at SPDK's default `value`: anything else is -95.
    pub(super) fn default_only(&mut self, key: &str, value: Value) -> Result<(), RpcError> {
        self.0.accept_default(key, value).map_err(nvmf_decode)
    }

    /// Keys accepted (their type checked) and ignored: they tune what pmio does not have.
    pub(super) fn ignore<T: DeserializeOwned>(&mut self, keys: &[&str]) -> Result<(), RpcError> {
        for k in keys {
            self.opt::<T>(k)?;
        }
        Ok(())
    }

    /// A key pmio does not implement at all: refused (-95) when given.
    pub(super) fn unsupported(&mut self, key: &str, why: &str) -> Result<(), RpcError> {
        match self.opt::<Value>(key)? {
            None => Ok(()),
            Some(_) => Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!("parameter \"{key}\": {why}"),
            )),
        }
    }

    /// `tgt_name`: SPDK's -32603 "Unable to find a target." for any name but pmio's one.
    pub(super) fn target_name(&mut self) -> Result<(), RpcError> {
        match self.opt::<String>("tgt_name")? {
            None => Ok(()),
            Some(n) if n == TGT_NAME => Ok(()),
            Some(n) => Err(internal(
                "Unable to find a target.",
                format_args!("no target {n:?} (pmio has one, {TGT_NAME})"),
            )),
        }
    }

    pub(super) fn finish(self) -> Result<(), RpcError> {
        self.0.finish().map_err(nvmf_decode)
    }
}

/// `n` bytes from `2n` hexadecimal digits, as SPDK decodes NGUID and EUI-64 (no dashes).
pub(super) fn hex_bytes<const N: usize>(key: &str, s: &str) -> Result<[u8; N], RpcError> {
    let bad = || {
        invalid(format_args!(
            "{key} {s:?} is not {} hexadecimal digits",
            2 * N
        ))
    };
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Upper-case hexadecimal without separators (SPDK's NGUID and EUI-64 in replies).
pub(super) fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// `listen_address` of the listener methods: TCP only (any case); `trsvcid` required; `adrfam`
/// taken from the address when absent.
pub(super) fn listen_address(a: &mut Args) -> Result<ListenAddr, RpcError> {
    let obj: Map<String, Value> = a.req("listen_address")?;
    let mut l = Args::new(Some(&Value::Object(obj)))?;
    let trtype: String = l.req("trtype")?;
    let traddr: String = l.req("traddr")?;
    let trsvcid: Option<String> = l.opt("trsvcid")?;
    let adrfam: Option<String> = l.opt("adrfam")?;
    l.finish()?;
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(invalid(format_args!(
            "trtype {trtype:?}: pmio listens on TCP only"
        )));
    }
    let Some(trsvcid) = trsvcid else {
        return Err(invalid("trsvcid (the port) is required for TCP"));
    };
    ListenAddr::new(&traddr, &trsvcid, adrfam.as_deref()).map_err(|e| nvmf_error(&e))
}
