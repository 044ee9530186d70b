//! Named keys (SPDK's `lib/keyring`) and the one module that provides them here, key files
//! (`module/keyring/file`).
//!
//! A key is added under a name with the path of a file that holds its text; the file must be
//! given by an absolute path, belong to the daemon's user and be readable by nobody else (SPDK's
//! rule, checked when the key is added and again each time it is read). The text is read when a
//! user needs it (a Connect's authentication, an attach), as SPDK's `spdk_key_get_key` does, so
//! replacing the file rotates the key for the next connection. Users hold a key by `Arc`: a key
//! removed from the keyring stays usable by those that hold it, and is listed as removed until
//! the last of them lets it go.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use zeroize::Zeroizing;

use crate::format::{DhchapSecret, FormatError, TlsPsk};

/// The file module's name, as SPDK's `keyring_get_keys` reports it.
pub const FILE_MODULE: &str = "keyring_file";

/// Largest key file read (the longest DH-HMAC-CHAP text, a 64-byte key, is 103 bytes).
const MAX_KEY_FILE: u64 = 4096;

/// Why a keyring operation failed. Never carries the key's text.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A key file must be named by an absolute path.
    #[error("non-absolute paths are not allowed: {0}")]
    NotAbsolute(PathBuf),
    /// The file cannot be inspected or read.
    #[error("could not read key file '{path}': {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is readable by others than its owner, or not owned by the daemon's user.
    #[error("invalid permissions for key file '{path}': 0{mode:o}")]
    Permissions { path: PathBuf, mode: u32 },
    /// The file is larger than any key text.
    #[error("key file '{path}' is {size} bytes: too large for a key")]
    TooLarge { path: PathBuf, size: u64 },
    /// A key of that name exists.
    #[error("key '{0}' already exists")]
    Exists(String),
    /// No key of that name.
    #[error("key '{0}' does not exist")]
    NotFound(String),
    /// The key's text is not in the format its user needs.
    #[error("key '{name}': {source}")]
    Format {
        name: String,
        #[source]
        source: FormatError,
    },
}

impl KeyError {
    /// The errno SPDK answers this failure with (its RPC error code, negated).
    pub fn errno(&self) -> i32 {
        match self {
            KeyError::NotAbsolute(_) | KeyError::Permissions { .. } => libc_errno::EPERM,
            KeyError::Io { source, .. } => source.raw_os_error().unwrap_or(libc_errno::EIO),
            KeyError::TooLarge { .. } => libc_errno::ENOBUFS,
            KeyError::Exists(_) => libc_errno::EEXIST,
            KeyError::NotFound(_) => libc_errno::ENOENT,
            KeyError::Format { .. } => libc_errno::EINVAL,
        }
    }
}

/// The errno values of [`KeyError::errno`] (Linux's numbers).
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EEXIST: i32 = 17;
    pub const EINVAL: i32 = 22;
    pub const ENOBUFS: i32 = 105;
}

/// One named key.
#[derive(Debug)]
pub struct Key {
    name: String,
    path: PathBuf,
}

impl Key {
    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file its text is read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The module that provides it.
    pub fn module(&self) -> &'static str {
        FILE_MODULE
    }

    /// The key's text, read from its file now (permissions checked again), in memory wiped on
    /// drop. Blocks for one small local read: call it at connection set-up, never per I/O.
    pub fn text(&self) -> Result<Zeroizing<String>, KeyError> {
        let size = check_key_file(&self.path)?;
        let io = |source| KeyError::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::File::open(&self.path).map_err(io)?;
        let mut buf = Zeroizing::new(Vec::with_capacity(size as usize));
        f.by_ref()
            .take(MAX_KEY_FILE + 1)
            .read_to_end(&mut buf)
            .map_err(io)?;
        let text = std::str::from_utf8(&buf)
            .map_err(|_| KeyError::Format {
                name: self.name.clone(),
                source: FormatError::Base64,
            })?
            .to_string();
        Ok(Zeroizing::new(text))
    }

    /// The key as a DH-HMAC-CHAP secret (`DHHC-1:...`).
    pub fn dhchap(&self) -> Result<DhchapSecret, KeyError> {
        DhchapSecret::parse(&self.text()?).map_err(|source| self.format_error(source))
    }

    /// The key as a TLS PSK in the interchange format (`NVMeTLSkey-1:...`).
    pub fn tls_psk(&self) -> Result<TlsPsk, KeyError> {
        TlsPsk::parse(&self.text()?).map_err(|source| self.format_error(source))
    }

    fn format_error(&self, source: FormatError) -> KeyError {
        log::error!("keyring: key '{}' is not usable: {source}", self.name);
        KeyError::Format {
            name: self.name.clone(),
            source,
        }
    }
}

/// SPDK's checks of a key file: an absolute path, a regular file of the daemon's user that
/// nobody else may read or write. Returns its size.
pub fn check_key_file(path: &Path) -> Result<u64, KeyError> {
    if !path.is_absolute() {
        return Err(KeyError::NotAbsolute(path.to_path_buf()));
    }
    let md = std::fs::metadata(path).map_err(|source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // The process's own /proc entry belongs to its user: its uid without a libc call.
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if md.mode() & 0o077 != 0 || Some(md.uid()) != uid {
        return Err(KeyError::Permissions {
            path: path.to_path_buf(),
            mode: md.mode(),
        });
    }
    if md.len() > MAX_KEY_FILE {
        return Err(KeyError::TooLarge {
            path: path.to_path_buf(),
            size: md.len(),
        });
    }
    Ok(md.len())
}

/// What `keyring_get_keys` reports of one key: never its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub name: String,
    pub module: &'static str,
    /// Removed from the keyring but still held by a user.
    pub removed: bool,
    /// Found by probing a module (SPDK's keyring_linux); always false here.
    pub probed: bool,
    /// References: the keyring's own (unless removed) and each user's.
    pub refcnt: usize,
    pub path: PathBuf,
}

#[derive(Default)]
struct Keys {
    /// In the order they were added (SPDK's list order).
    live: Vec<Arc<Key>>,
    /// Removed while held by a user.
    removed: Vec<Weak<Key>>,
}

/// The named keys of a process.
#[derive(Default)]
pub struct Keyring {
    keys: Mutex<Keys>,
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `keyring_file_add_key`: key `name` read from `path` (checked now: absolute, owner-only).
    pub fn file_add_key(&self, name: &str, path: &Path) -> Result<(), KeyError> {
        let mut keys = self.lock();
        if keys.live.iter().any(|k| k.name == name) {
            log::error!("keyring: key '{name}' already exists");
            return Err(KeyError::Exists(name.to_string()));
        }
        check_key_file(path).inspect_err(|e| log::error!("keyring: key '{name}': {e}"))?;
        keys.live.push(Arc::new(Key {
            name: name.to_string(),
            path: path.to_path_buf(),
        }));
        log::info!("keyring: added key '{name}' from {}", path.display());
        Ok(())
    }

    /// `keyring_file_remove_key`: users that hold the key keep it.
    pub fn file_remove_key(&self, name: &str) -> Result<(), KeyError> {
        let mut keys = self.lock();
        let at = keys
            .live
            .iter()
            .position(|k| k.name == name)
            .ok_or_else(|| KeyError::NotFound(name.to_string()))?;
        let key = keys.live.remove(at);
        keys.removed.retain(|w| w.strong_count() > 0);
        if Arc::strong_count(&key) > 1 {
            keys.removed.push(Arc::downgrade(&key));
        }
        log::info!("keyring: removed key '{name}'");
        Ok(())
    }

    /// The key `name`, held by the caller until it drops it.
    pub fn get(&self, name: &str) -> Result<Arc<Key>, KeyError> {
        self.lock()
            .live
            .iter()
            .find(|k| k.name == name)
            .cloned()
            .ok_or_else(|| {
                log::error!("keyring: key '{name}' does not exist");
                KeyError::NotFound(name.to_string())
            })
    }

    /// Every key, live ones first in the order they were added, then removed ones still held.
    pub fn keys(&self) -> Vec<KeyInfo> {
        let keys = self.lock();
        // `listing`: references this listing holds itself (a removed key is upgraded to be read).
        let info = |k: &Arc<Key>, removed: bool, listing: usize| KeyInfo {
            name: k.name.clone(),
            module: k.module(),
            removed,
            probed: false,
            refcnt: Arc::strong_count(k) - listing,
            path: k.path.clone(),
        };
        let mut out: Vec<KeyInfo> = keys.live.iter().map(|k| info(k, false, 0)).collect();
        out.extend(
            keys.removed
                .iter()
                .filter_map(Weak::upgrade)
                .map(|k| info(&k, true, 1)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::SecretHash;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn file_keys_follow_spdks_rules() {
        let dir = tempfile::tempdir().unwrap();
        let secret = DhchapSecret::new(SecretHash::Sha256, &[3u8; 32]).unwrap();
        let good = key_file(dir.path(), "k0", &format!("{}\n", &*secret.encode()), 0o600);
        let open = key_file(dir.path(), "k1", &secret.encode(), 0o644);
        let ring = Keyring::new();
        ring.file_add_key("key0", &good).unwrap();
        let e = ring.file_add_key("key1", &open).unwrap_err();
        assert!(matches!(e, KeyError::Permissions { .. }), "{e}");
        assert_eq!(e.errno(), 1);
        assert_eq!(
            ring.file_add_key("key2", Path::new("relative/k0"))
                .unwrap_err()
                .errno(),
            1
        );
        assert_eq!(
            ring.file_add_key("key3", &dir.path().join("missing"))
                .unwrap_err()
                .errno(),
            2
        );
        assert_eq!(ring.file_add_key("key0", &good).unwrap_err().errno(), 17);
        // Read back: the secret it holds.
        assert_eq!(ring.get("key0").unwrap().dhchap().unwrap(), secret);
        // A file made readable by others after it was added is refused when read.
        let k = ring.get("key0").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(k.dhchap(), Err(KeyError::Permissions { .. })));
        // Not a TLS PSK.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(matches!(k.tls_psk(), Err(KeyError::Format { .. })));
    }

    #[test]
    fn removed_keys_stay_with_their_users() {
        let dir = tempfile::tempdir().unwrap();
        let secret = DhchapSecret::new(SecretHash::None, &[9u8; 48]).unwrap();
        let path = key_file(dir.path(), "k", &secret.encode(), 0o600);
        let ring = Keyring::new();
        ring.file_add_key("a", &path).unwrap();
        ring.file_add_key("b", &path).unwrap();
        let held = ring.get("a").unwrap();
        let list = ring.keys();
        assert_eq!(
            list.iter()
                .map(|k| (&*k.name, k.refcnt))
                .collect::<Vec<_>>(),
            [("a", 2), ("b", 1)]
        );
        ring.file_remove_key("a").unwrap();
        assert_eq!(ring.file_remove_key("a").unwrap_err().errno(), 2);
        assert!(ring.get("a").is_err());
        let list = ring.keys();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (&*list[1].name, list[1].removed, list[1].refcnt),
            ("a", true, 1)
        );
        assert_eq!(held.dhchap().unwrap(), secret);
        drop(held);
        assert_eq!(ring.keys().len(), 1);
        // The name is free again.
        ring.file_add_key("a", &path).unwrap();
    }
}
