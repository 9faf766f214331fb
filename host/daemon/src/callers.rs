//! Editing a clients file: create, list, rotate, revoke.
//!
//! Tokens are 32 random bytes in hex, printed once and stored only as their SHA-256.
//! Every edit takes a lock (a `<file>.lock` directory), refuses a symlink or any file
//! that is not a regular one, and replaces the file atomically (write, fsync, rename)
//! with mode 0600. A running daemon reads the file once: restart it after an edit.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::auth::{ClientEntry, ClientsFile, SCOPE_RUN, fingerprint, valid_id};

/// Why an edit was refused or failed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum CallersError {
    /// The path is a symlink or not a regular file.
    #[error("{0} is not a regular file (a symlink or something else); refusing to edit it")]
    NotRegular(String),
    /// Another edit holds the lock.
    #[error("{0} is locked by another edit (remove {0}.lock if no edit is running)")]
    Locked(String),
    /// The caller ID is not acceptable.
    #[error("caller id {0:?} must be non-empty, trimmed, without control characters, and not *")]
    BadId(String),
    /// A scope is not acceptable.
    #[error("scope {0:?} is empty or has whitespace")]
    BadScope(String),
    /// Creating an ID that exists.
    #[error("caller {0:?} already exists; use rotate to give it a new token")]
    Exists(String),
    /// Editing an ID that does not exist.
    #[error("no caller {0:?} in the file")]
    NoSuchCaller(String),
    /// Revoking the last caller would leave a file the daemon refuses.
    #[error("caller {0:?} is the last one; a clients file must list at least one caller (delete the file instead)")]
    LastCaller(String),
    /// The existing file is invalid.
    #[error(transparent)]
    Invalid(#[from] crate::auth::ClientsError),
    /// An I/O failure.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// No randomness for a token.
    #[error("no randomness for a token: {0}")]
    Random(String),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CallersError + 'a {
    move |source| CallersError::Io { what, path: path.display().to_string(), source }
}

/// A new token: 32 random bytes, hex.
pub fn new_token() -> Result<String, CallersError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| CallersError::Random(e.to_string()))?;
    Ok(hex::encode(b))
}

struct Lock(PathBuf);

impl Lock {
    fn take(file: &Path) -> Result<Lock, CallersError> {
        let mut p = file.as_os_str().to_owned();
        p.push(".lock");
        let lock = PathBuf::from(p);
        match fs::create_dir(&lock) {
            Ok(()) => Ok(Lock(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(CallersError::Locked(file.display().to_string()))
            }
            Err(e) => Err(io("locking", file)(e)),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// Reads the file if it exists (`None` if not), refusing anything but a regular file.
fn read_existing(path: &Path) -> Result<Option<ClientsFile>, CallersError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("reading", path)(e)),
        Ok(m) if !m.file_type().is_file() => Err(CallersError::NotRegular(path.display().to_string())),
        Ok(_) => Ok(Some(ClientsFile::read(path)?)),
    }
}

fn write(path: &Path, file: &ClientsFile) -> Result<(), CallersError> {
    let mut text = serde_json::to_string_pretty(file).map_err(|e| io("encoding", path)(std::io::Error::other(e)))?;
    text.push('\n');
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let mut f =
        fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io("creating", &tmp))?;
    let done = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)))
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = fs::remove_file(&tmp);
        return Err(io("writing", path)(e));
    }
    Ok(())
}

fn check_scopes(scopes: &[String]) -> Result<Vec<String>, CallersError> {
    if scopes.is_empty() {
        return Ok(vec![SCOPE_RUN.to_string()]);
    }
    let mut out: Vec<String> = Vec::new();
    for s in scopes {
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return Err(CallersError::BadScope(s.clone()));
        }
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Ok(out)
}

/// Adds caller `id` (default scope `code:run`) and returns its new token.
///
/// # Errors
///
/// [`CallersError`]; the file is unchanged.
pub fn create(path: &Path, id: &str, scopes: &[String]) -> Result<String, CallersError> {
    if !valid_id(id) {
        return Err(CallersError::BadId(id.to_string()));
    }
    let scopes = check_scopes(scopes)?;
    let _lock = Lock::take(path)?;
    let mut file = read_existing(path)?.unwrap_or_default();
    if file.clients.iter().any(|c| c.id == id) {
        return Err(CallersError::Exists(id.to_string()));
    }
    let token = new_token()?;
    file.clients.push(ClientEntry {
        id: id.to_string(),
        token_sha256: fingerprint(&token),
        scopes,
        paid_seconds_per_day: None,
    });
    write(path, &file)?;
    Ok(token)
}

/// The callers and their scopes (never tokens or fingerprints).
///
/// # Errors
///
/// [`CallersError`] when the file cannot be read or is invalid.
pub fn list(path: &Path) -> Result<Vec<(String, Vec<String>)>, CallersError> {
    let file = read_existing(path)?.ok_or_else(|| io("reading", path)(std::io::ErrorKind::NotFound.into()))?;
    Ok(file.clients.into_iter().map(|c| (c.id, c.scopes)).collect())
}

/// Gives caller `id` a new token (the old one stops working once daemons restart).
///
/// # Errors
///
/// [`CallersError`]; the file is unchanged.
pub fn rotate(path: &Path, id: &str) -> Result<String, CallersError> {
    let _lock = Lock::take(path)?;
    let mut file = read_existing(path)?.ok_or_else(|| CallersError::NoSuchCaller(id.to_string()))?;
    let entry =
        file.clients.iter_mut().find(|c| c.id == id).ok_or_else(|| CallersError::NoSuchCaller(id.to_string()))?;
    let token = new_token()?;
    entry.token_sha256 = fingerprint(&token);
    write(path, &file)?;
    Ok(token)
}

/// Removes caller `id`.
///
/// # Errors
///
/// [`CallersError`]; the file is unchanged.
pub fn revoke(path: &Path, id: &str) -> Result<(), CallersError> {
    let _lock = Lock::take(path)?;
    let mut file = read_existing(path)?.ok_or_else(|| CallersError::NoSuchCaller(id.to_string()))?;
    let before = file.clients.len();
    file.clients.retain(|c| c.id != id);
    if file.clients.len() == before {
        return Err(CallersError::NoSuchCaller(id.to_string()));
    }
    if file.clients.is_empty() {
        return Err(CallersError::LastCaller(id.to_string()));
    }
    write(path, &file)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::auth::Verifier;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("plimsoll-callers-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        dir.join("clients.json")
    }

    #[test]
    fn create_rotate_revoke() {
        let path = scratch("lifecycle");
        let t1 = create(&path, "ci", &[]).expect("create");
        assert_eq!(t1.len(), 64);
        assert_eq!(fs::metadata(&path).expect("meta").mode() & 0o777, 0o600);
        let t2 = create(&path, "bot", &["code:run".into(), "x".into()]).expect("create");
        assert_eq!(
            list(&path).expect("list"),
            vec![("ci".into(), vec!["code:run".into()]), ("bot".into(), vec!["code:run".into(), "x".into()])]
        );
        let text = fs::read_to_string(&path).expect("read");
        assert!(!text.contains(&t1) && !text.contains(&t2), "a token reached the file");
        let v = Verifier::clients(&ClientsFile::read(&path).expect("valid"));
        assert_eq!(v.verify(Some(format!("Bearer {t1}").as_bytes())).expect("ci").id, "ci");
        let t3 = rotate(&path, "ci").expect("rotate");
        let v = Verifier::clients(&ClientsFile::read(&path).expect("valid"));
        let rotated = v.verify(Some(format!("Bearer {t1}").as_bytes()));
        assert_eq!(rotated.map(|c| c.id), Err(crate::auth::AuthError::Invalid), "the rotated token");
        assert!(v.verify(Some(format!("Bearer {t3}").as_bytes())).is_ok());
        revoke(&path, "bot").expect("revoke");
        assert!(matches!(revoke(&path, "bot"), Err(CallersError::NoSuchCaller(_))));
        assert!(matches!(revoke(&path, "ci"), Err(CallersError::LastCaller(_))));
        assert!(matches!(create(&path, "ci", &[]), Err(CallersError::Exists(_))));
        assert!(matches!(create(&path, " x", &[]), Err(CallersError::BadId(_))));
        assert!(!path.with_extension("json.lock").exists());
    }

    #[test]
    fn a_symlink_is_refused() {
        let path = scratch("symlink");
        let real = path.with_file_name("real.json");
        create(&real, "ci", &[]).expect("create");
        std::os::unix::fs::symlink(&real, &path).expect("symlink");
        assert!(matches!(create(&path, "b", &[]), Err(CallersError::NotRegular(_))));
    }

    #[test]
    fn a_held_lock_refuses_the_edit() {
        let path = scratch("lock");
        let _held = Lock::take(&path).expect("lock");
        assert!(matches!(create(&path, "a", &[]), Err(CallersError::Locked(_))));
        assert!(!path.exists());
    }
}
