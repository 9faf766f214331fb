//! A call's files, written under the work directory, and the session's storage.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::procs::Seat;

/// The writable mounts whose use counts against the session's disk budget,
/// beside the work directory.
const MOUNTS: [&str; 2] = ["/tmp", "/dev/shm"];
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

/// The most entries [`walked_kb`] looks at before it calls the storage full.
const WALK_LIMIT: usize = 200_000;

/// KiB in use on the session's writable mounts. Seated [`Seat::Hosted`] those
/// may share one filesystem with the vendor's own files, so the guest's files
/// under them are walked instead of the filesystems measured.
pub fn disk_used_kb(seat: Seat) -> u64 {
    match seat {
        Seat::Init => mounted_kb(),
        // SAFETY: getuid has no preconditions.
        Seat::Hosted => walked_kb(&roots(), unsafe { libc::getuid() }, WALK_LIMIT),
    }
}

/// KiB the files owned by `uid` under `roots` take (each inode once; links not
/// followed; other filesystems' entries too). Past `limit` entries the walk
/// stops and says `u64::MAX`: a tree that large is over any budget. Deleted
/// files still held open are not seen; the figure is an estimate the guest can
/// keep low, not a wall (the vendor's disk size is).
pub fn walked_kb(roots: &[&Path], uid: u32, limit: usize) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut seen = HashSet::new();
    let mut pending: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    let (mut entries, mut bytes) = (0usize, 0u64);
    while let Some(dir) = pending.pop() {
        let Ok(list) = std::fs::read_dir(&dir) else { continue };
        for entry in list.flatten() {
            entries += 1;
            if entries > limit {
                return u64::MAX;
            }
            let Ok(m) = entry.metadata() else { continue };
            if m.is_dir() {
                pending.push(entry.path());
            }
            if m.uid() == uid && seen.insert((m.dev(), m.ino())) {
                bytes = bytes.saturating_add(m.blocks().saturating_mul(512));
            }
        }
    }
    bytes / 1024
}

/// KiB in use on the mounts, as their filesystems count it (deleted-but-open
/// files included).
/// The work directory (unless one of [`MOUNTS`] holds it) and [`MOUNTS`].
fn roots() -> Vec<&'static Path> {
    let work = crate::procs::work();
    let inside = MOUNTS.iter().any(|m| work.starts_with(m));
    (!inside).then_some(work).into_iter().chain(MOUNTS.map(Path::new)).collect()
}

fn mounted_kb() -> u64 {
    roots()
        .iter()
        .filter_map(|m| {
            let c = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()).ok()?;
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
    fn a_walk_counts_the_owners_files_once_and_gives_up_past_its_limit() {
        use std::os::unix::fs::MetadataExt as _;
        let base = scratch("walk");
        std::fs::create_dir_all(base.join("a/b")).expect("dirs");
        std::fs::write(base.join("a/b/big"), vec![7u8; 256 << 10]).expect("big");
        std::fs::hard_link(base.join("a/b/big"), base.join("a/again")).expect("link");
        std::os::unix::fs::symlink("/usr", base.join("out")).expect("symlink");
        let uid = std::fs::metadata(&base).expect("meta").uid();
        let kb = walked_kb(&[base.as_path()], uid, 1000);
        // 256 KiB of data, counted once, plus the directories' own blocks.
        assert!((256..256 + 64).contains(&kb), "{kb} KiB");
        assert_eq!(walked_kb(&[base.as_path()], uid.wrapping_add(1), 1000), 0, "another owner's files");
        assert_eq!(walked_kb(&[base.as_path()], uid, 3), u64::MAX, "past the limit");
        assert_eq!(walked_kb(&[Path::new("/nonexistent-plimsoll")], uid, 3), 0);
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
