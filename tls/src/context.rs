//! TLS 1.3 with external PSKs only, as NVMe/TCP uses it: no certificates, no session tickets,
//! the two cipher suites the transport spec names; the server finds the PSK by the identity
//! the client offers ([`PskLookup`]), the client offers one identity and its key
//! ([`ClientPsk`]).
//!
//! A ClientHello without a PSK, with an identity nobody knows or with a binder made from
//! another key, fails the handshake (there is no certificate to fall back on).

use std::net::TcpStream;
use std::os::raw::{c_int, c_uchar};
use std::sync::{Arc, OnceLock};

use foreign_types::ForeignTypeRef;
use openssl::ex_data::Index;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslMode, SslOptions, SslRef,
    SslSessionCacheMode, SslStream, SslVersion,
};
use openssl_sys::{EVP_MD, SSL, SSL_SESSION};
use zeroize::Zeroizing;

use crate::ffi;
use crate::psk::{IdentityVersion, PskError, PskIdentity, RetainedPsk, TlsHash};
use crate::stream::TlsStream;

/// Why a TLS connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// OpenSSL refused to build the context or the connection.
    #[error("OpenSSL: {0}")]
    Ssl(#[from] openssl::error::ErrorStack),
    /// The key could not be derived.
    #[error(transparent)]
    Psk(#[from] PskError),
}

/// Both cipher suites of NVMe/TCP (TP 8011): the server takes either.
const CIPHER_SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

/// How a server finds the key of an identity.
pub trait PskLookup: Send + Sync {
    /// The TLS PSK `identity` names, or `None` to refuse it (unknown host or subsystem, no key
    /// configured, a version 1 digest that is not the key's). Called during the handshake, on
    /// the connection's thread.
    fn tls_psk(&self, identity: &PskIdentity) -> Option<Zeroizing<Vec<u8>>>;
}

/// What the server's callback sees of its connection.
struct ServerState {
    lookup: Arc<dyn PskLookup>,
    /// The identity whose key was handed to OpenSSL (the handshake then proved the client
    /// holds it).
    chosen: Option<PskIdentity>,
}

/// What the client's callback offers.
struct ClientState {
    identity: Vec<u8>,
    hash: TlsHash,
    key: Zeroizing<Vec<u8>>,
}

fn server_index() -> Index<Ssl, ServerState> {
    static I: OnceLock<Index<Ssl, ServerState>> = OnceLock::new();
    *I.get_or_init(|| Ssl::new_ex_index().expect("OpenSSL ex_data index"))
}

fn client_index() -> Index<Ssl, ClientState> {
    static I: OnceLock<Index<Ssl, ClientState>> = OnceLock::new();
    *I.get_or_init(|| Ssl::new_ex_index().expect("OpenSSL ex_data index"))
}

/// TLS 1.3 only, no tickets (an NVMe/TCP peer never resumes), partial writes (a non-blocking
/// owner sends what the socket takes).
fn builder(method: SslMethod) -> Result<SslContextBuilder, TlsError> {
    let mut b = SslContextBuilder::new(method)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_ciphersuites(CIPHER_SUITES)?;
    b.set_options(SslOptions::NO_TICKET);
    b.set_num_tickets(0)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_mode(SslMode::ENABLE_PARTIAL_WRITE | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    Ok(b)
}

/// The context in `cell`, built once by `builder` and `install` (the PSK callback).
fn cached(
    cell: &'static OnceLock<SslContext>,
    method: SslMethod,
    install: impl FnOnce(&mut SslContextBuilder),
) -> Result<SslContext, TlsError> {
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let mut b = builder(method)?;
    install(&mut b);
    Ok(cell.get_or_init(|| b.build()).clone())
}

fn server_context() -> Result<SslContext, TlsError> {
    static CTX: OnceLock<SslContext> = OnceLock::new();
    cached(&CTX, SslMethod::tls_server(), |b| {
        ffi::set_find_session(b, find_session)
    })
}

fn client_context() -> Result<SslContext, TlsError> {
    static CTX: OnceLock<SslContext> = OnceLock::new();
    cached(&CTX, SslMethod::tls_client(), |b| {
        ffi::set_use_session(b, use_session)
    })
}

/// OpenSSL's server callback: looks the offered identity up. Returning 1 with no session
/// declines the identity (the handshake then fails: nothing else authenticates the client);
/// 0 aborts the handshake.
unsafe extern "C" fn find_session(
    ssl: *mut SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL calls this with its live SSL, `identity_len` readable bytes at
    // `identity` and a writable `sess`, for the duration of the call.
    let (ssl_ref, id) = unsafe {
        *sess = std::ptr::null_mut();
        (
            SslRef::from_ptr_mut(ssl),
            std::slice::from_raw_parts(identity, identity_len),
        )
    };
    let Some(state) = ssl_ref.ex_data_mut(server_index()) else {
        return 0;
    };
    let ident = match PskIdentity::parse(id) {
        Ok(i) => i,
        Err(e) => {
            log::warn!("tls: {e}");
            return 1;
        }
    };
    let Some(key) = state.lookup.tls_psk(&ident) else {
        return 1;
    };
    // SAFETY: `ssl` is the live SSL of this callback.
    let s = unsafe { ffi::psk_session(ssl, &key, ident.hash.cipher_id()) };
    if s.is_null() {
        return 0;
    }
    state.chosen = Some(ident);
    // SAFETY: `sess` is writable (above); OpenSSL takes the session's reference.
    unsafe { *sess = s };
    1
}

/// OpenSSL's client callback: offers the identity and its session, unless the handshake's
/// hash (`md`, known after a HelloRetryRequest) is not the key's.
unsafe extern "C" fn use_session(
    ssl: *mut SSL,
    md: *const EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL calls this with its live SSL and writable out-pointers; `md` is null
    // or a live digest.
    let ssl_ref = unsafe {
        *sess = std::ptr::null_mut();
        SslRef::from_ptr_mut(ssl)
    };
    let Some(state) = ssl_ref.ex_data(client_index()) else {
        return 0;
    };
    if !md.is_null() {
        // SAFETY: non-null, live for the call (above).
        let size = unsafe { openssl::md::MdRef::from_ptr(md.cast_mut()) }.size();
        if size != state.hash.key_len() {
            return 1;
        }
    }
    // SAFETY: `ssl` is the live SSL of this callback.
    let s = unsafe { ffi::psk_session(ssl, &state.key, state.hash.cipher_id()) };
    if s.is_null() {
        return 0;
    }
    // SAFETY: the out-pointers are writable (above); OpenSSL copies the identity before the
    // state (kept in the SSL's ex_data) could go, and takes the session's reference.
    unsafe {
        *id = state.identity.as_ptr();
        *idlen = state.identity.len();
        *sess = s;
    }
    1
}

/// A server side of TLS on an accepted socket (non-blocking); the handshake runs at
/// [`TlsStream::handshake`].
pub fn accept(sock: TcpStream, lookup: Arc<dyn PskLookup>) -> Result<TlsStream, TlsError> {
    let mut ssl = Ssl::new(&*server_context()?)?;
    ssl.set_ex_data(
        server_index(),
        ServerState {
            lookup,
            chosen: None,
        },
    );
    ssl.set_accept_state();
    let stream = SslStream::new(ssl, sock)?;
    Ok(TlsStream::new(stream))
}

/// A client side of TLS on a connected socket (non-blocking), offering `psk`.
pub fn connect(sock: TcpStream, psk: ClientPsk) -> Result<TlsStream, TlsError> {
    let mut ssl = Ssl::new(&*client_context()?)?;
    // Offer only the key's suite: the server cannot pick one the PSK is not for.
    ssl.set_ciphersuites(psk.identity.hash.cipher_suite())?;
    ssl.set_ex_data(
        client_index(),
        ClientState {
            identity: psk.identity.to_string().into_bytes(),
            hash: psk.identity.hash,
            key: psk.key,
        },
    );
    ssl.set_connect_state();
    let stream = SslStream::new(ssl, sock)?;
    Ok(TlsStream::new(stream))
}

impl TlsStream {
    /// On the server side, the identity the client proved it holds the key of (once the
    /// handshake is done).
    pub fn peer_identity(&self) -> Option<&PskIdentity> {
        if !self.is_established() {
            return None;
        }
        self.ssl().ex_data(server_index())?.chosen.as_ref()
    }
}

/// A client's PSK for one host and subsystem: its identity and TLS PSK, derived from the
/// configured key at connection time.
pub struct ClientPsk {
    pub identity: PskIdentity,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ClientPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPsk")
            .field("identity", &self.identity.to_string())
            .finish_non_exhaustive()
    }
}

impl ClientPsk {
    /// The identity (`version`) and TLS PSK of `configured` from `hostnqn` to `subnqn`.
    pub fn derive(
        configured: &pmio_keyring::TlsPsk,
        hostnqn: &str,
        subnqn: &str,
        version: IdentityVersion,
    ) -> Result<ClientPsk, TlsError> {
        let retained = RetainedPsk::derive(configured, hostnqn)?;
        let identity = PskIdentity::new(version, &retained, hostnqn, subnqn)?;
        let key = identity.tls_psk(&retained)?;
        Ok(ClientPsk { identity, key })
    }
}
