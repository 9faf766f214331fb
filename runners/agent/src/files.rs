//! A call's files, written under the work directory, and the session's storage.

use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// The writable mounts whose use counts against the session's disk budget.
const MOUNTS: [&str; 3] = ["/work", "/tmp", "/dev/shm"];
/// The most symbolic links one path may pass through, as the kernel allows.
const MAX_LINKS: usize = 40;

/// One file of a call: a relative path and its content in base64.
#[derive(Debug, Deserialize)]
pub struct File {
    pub path: String,
    pub content: String,
}

/// Where `rel` lands under `base` once every symbolic link is followed (links that
/// lead nowhere yet are followed too); refused when it is absolute, has an empty,
/// `.` or `..` part, or lands outside `base`.
pub fn safe_path(base: &Path, rel: &str) -> Result<PathBuf, String> {
    let illegal = || format!("illegal file path: {rel}");
    if rel.starts_with('/') || rel.split('/').any(|seg| matches!(seg, "" | "." | "..")) {
        return Err(illegal());
    }
    let full = resolve(&base.join(rel)).ok_or_else(illegal)?;
    let base = resolve(base).ok_or_else(illegal)?;
    if full.starts_with(&base) && full != base { Ok(full) } else { Err(illegal()) }
}

/// `path` with every symbolic link replaced by its target, as far as the links
/// exist (realpath without requiring the last parts to exist). None past
/// [`MAX_LINKS`] links.
fn resolve(path: &Path) -> Option<PathBuf> {
    let parts =
        |p: &Path| p.components().rev().map(|c: Component<'_>| PathBuf::from(c.as_os_str())).collect::<Vec<_>>();
    let mut links = 0;
    let mut done = PathBuf::from("/");
    let mut pending = parts(path);
    while let Some(part) = pending.pop() {
        match part.to_str() {
            Some("/") => done = PathBuf::from("/"),
            Some(".") => {}
            Some("..") => {
                done.pop();
            }
            _ => {
                let next = done.join(&part);
                match std::fs::symlink_metadata(&next) {
                    Ok(m) if m.file_type().is_symlink() => {
                        links += 1;
                        if links > MAX_LINKS {
                            return None;
                        }
                        let target = std::fs::read_link(&next).ok()?;
                        pending.extend(parts(&target));
                    }
                    _ => done = next,
                }
            }
        }
    }
    Some(done)
}

/// Writes each file in order under `base`; the first that fails stops the call and is named.
pub fn write_files(base: &Path, files: &[File]) -> Result<(), String> {
    for f in files {
        let full = safe_path(base, &f.path)?;
        let content = base64::engine::general_purpose::STANDARD
            .decode(&f.content)
            .map_err(|e| format!("writing {}: the content is not base64 ({e})", f.path))?;
        let written =
            full.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&full, content));
        if let Err(e) = written {
            let errno = e.raw_os_error().unwrap_or(0);
            return Err(format!("writing {}: {} (errno {errno})", f.path, strerror(&e)));
        }
    }
    Ok(())
}

/// The error's text without Rust's " (os error N)" suffix.
fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// KiB in use on the session's writable mounts.
pub fn disk_used_kb() -> u64 {
    MOUNTS
        .iter()
        .filter_map(|m| {
            let c = std::ffi::CString::new(*m).ok()?;
            // SAFETY: an all-zero statvfs is a valid value of a plain C struct.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: `c` is a NUL-terminated path and `s` a valid out-pointer.
            (unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0)
                .then(|| s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(s.f_frsize))
        })
        .sum::<u64>()
        / 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("plimsoll-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[test]
    fn paths_that_leave_the_work_directory_are_refused_by_name() {
        let base = scratch("paths");
        std::os::unix::fs::symlink("/etc", base.join("out")).expect("link");
        std::os::unix::fs::symlink("../../elsewhere/x", base.join("dangling")).expect("link");
        std::os::unix::fs::symlink("sub", base.join("in")).expect("link");
        for bad in ["/etc/passwd", "a/../b", "./a", "a//b", "", "..", "out/passwd", "dangling"] {
            assert_eq!(safe_path(&base, bad), Err(format!("illegal file path: {bad}")), "{bad}");
        }
        let base_real = resolve(&base).expect("base");
        assert_eq!(safe_path(&base, "a/b.txt"), Ok(base_real.join("a/b.txt")));
        assert_eq!(safe_path(&base, "in/c.txt"), Ok(base_real.join("sub/c.txt")));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn files_are_written_in_order_and_the_first_failure_is_named() {
        let base = scratch("write");
        let files = vec![
            File { path: "d/one.txt".into(), content: "b25l".into() },
            File { path: "../two.txt".into(), content: "".into() },
            File { path: "three.txt".into(), content: "".into() },
        ];
        assert_eq!(write_files(&base, &files), Err("illegal file path: ../two.txt".into()));
        assert_eq!(std::fs::read(base.join("d/one.txt")).expect("written"), b"one");
        assert!(!base.join("three.txt").exists(), "nothing after the failure is written");
        std::fs::create_dir(base.join("taken")).expect("dir");
        let r = write_files(&base, &[File { path: "taken".into(), content: "".into() }]);
        assert_eq!(r, Err("writing taken: Is a directory (errno 21)".into()));
        let r = write_files(&base, &[File { path: "x".into(), content: "!!".into() }]);
        assert!(r.is_err_and(|e| e.starts_with("writing x: the content is not base64")));
        let _ = std::fs::remove_dir_all(&base);
    }
}
