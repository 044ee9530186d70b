//! The TLS 1.3 external-PSK calls of OpenSSL (1.1.1 and later) that the `openssl` crate does
//! not wrap: the session-based PSK callbacks and the few `SSL_SESSION` setters a PSK session
//! is built with (SPDK's `module/sock/posix/posix.c` uses the same ones). The legacy
//! `SSL_CTX_set_psk_*_callback` would do for SHA-256 only: OpenSSL gives their PSKs
//! TLS_AES_128_GCM_SHA256, and a SHA-384 PSK needs its own session.
//!
//! Everything unsafe of the crate is here, each call a few lines with what it relies on.

use std::os::raw::{c_int, c_uchar};

use openssl_sys::{EVP_MD, SSL, SSL_CIPHER, SSL_CTX, SSL_SESSION};

/// `SSL_psk_find_session_cb_func`: the server looks a ClientHello's identity up.
pub(crate) type FindSessionCb = unsafe extern "C" fn(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int;

/// `SSL_psk_use_session_cb_func`: the client offers its identity and session.
pub(crate) type UseSessionCb = unsafe extern "C" fn(
    ssl: *mut SSL,
    md: *const EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int;

unsafe extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut SSL_CTX, cb: Option<FindSessionCb>);
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut SSL_CTX, cb: Option<UseSessionCb>);
    fn SSL_SESSION_new() -> *mut SSL_SESSION;
    fn SSL_SESSION_set1_master_key(
        sess: *mut SSL_SESSION,
        key: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn SSL_SESSION_set_cipher(sess: *mut SSL_SESSION, cipher: *const SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(sess: *mut SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut SSL, ptr: *const c_uchar) -> *const SSL_CIPHER;
}

/// Installs the server's lookup on a context being built.
pub(crate) fn set_find_session(ctx: &mut openssl::ssl::SslContextBuilder, cb: FindSessionCb) {
    // SAFETY: `ctx.as_ptr()` is the live SSL_CTX the builder owns; the callback is a plain
    // function that lives for the program.
    unsafe { SSL_CTX_set_psk_find_session_callback(ctx.as_ptr(), Some(cb)) }
}

/// Installs the client's offer on a context being built.
pub(crate) fn set_use_session(ctx: &mut openssl::ssl::SslContextBuilder, cb: UseSessionCb) {
    // SAFETY: as for `set_find_session`.
    unsafe { SSL_CTX_set_psk_use_session_callback(ctx.as_ptr(), Some(cb)) }
}

/// A new TLS 1.3 session holding `key` as its PSK for cipher suite `cipher_id` (two bytes,
/// RFC 8446 B.4), or null if OpenSSL does not know the suite or cannot allocate. The caller
/// hands it to OpenSSL through a PSK callback's `sess` (which takes the reference).
///
/// # Safety
/// `ssl` must be the live SSL object of the callback this is called from.
pub(crate) unsafe fn psk_session(
    ssl: *mut SSL,
    key: &[u8],
    cipher_id: [u8; 2],
) -> *mut SSL_SESSION {
    // SAFETY: `ssl` is live (the contract); `cipher_id` is the two bytes the call reads.
    let cipher = unsafe { SSL_CIPHER_find(ssl, cipher_id.as_ptr()) };
    if cipher.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: no arguments; a null result is checked.
    let sess = unsafe { SSL_SESSION_new() };
    if sess.is_null() {
        return sess;
    }
    // SAFETY: `sess` is the new session this function owns; OpenSSL copies `key` (its length
    // is passed) and keeps `cipher`, a static table entry.
    let ok = unsafe {
        SSL_SESSION_set1_master_key(sess, key.as_ptr(), key.len()) == 1
            && SSL_SESSION_set_cipher(sess, cipher) == 1
            && SSL_SESSION_set_protocol_version(sess, openssl_sys::TLS1_3_VERSION) == 1
    };
    if !ok {
        // SAFETY: the only reference to `sess`, not handed out.
        unsafe { openssl_sys::SSL_SESSION_free(sess) };
        return std::ptr::null_mut();
    }
    sess
}
