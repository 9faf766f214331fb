//! Files only this user may read (the owner's passkeys, the connections):
//! written whole to a 0600 temporary file, synced, and renamed over the old
//! one, so a crash leaves the old file or the new one, never half of either.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Which step of a write failed, and where.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct WriteError {
    /// `write`, `replace` or `sync`.
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Replaces `file` with `bytes`, mode 0600.
///
/// # Errors
///
/// The step that failed: writing the temporary file, renaming it, or
/// syncing the directory.
pub fn write(file: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let put = |path: &Path| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        // An old temporary file keeps its mode through `open`.
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    put(&tmp).map_err(|source| WriteError { action: "write", path: tmp.clone(), source })?;
    fs::rename(&tmp, file).map_err(|source| WriteError { action: "replace", path: file.to_path_buf(), source })?;
    if let Some(dir) = file.parent() {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|source| WriteError {
            action: "sync",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_at_0600_even_over_an_open_temporary() {
        let dir = std::env::temp_dir().join(format!("plimsoll-private-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("f.json");
        fs::write(dir.join("f.json.tmp"), b"old").expect("tmp");
        fs::set_permissions(dir.join("f.json.tmp"), fs::Permissions::from_mode(0o644)).expect("chmod");
        write(&file, b"one").expect("write");
        write(&file, b"two").expect("write");
        assert_eq!(fs::read(&file).expect("read"), b"two");
        assert_eq!(fs::metadata(&file).expect("meta").permissions().mode() & 0o777, 0o600);
        assert!(!dir.join("f.json.tmp").exists());
        let e = write(&dir.join("missing/f.json"), b"x").expect_err("no directory");
        assert_eq!(e.action, "write");
        let _ = fs::remove_dir_all(&dir);
    }
}
