//! Non-blocking pipes and `poll`, the agent's only way of waiting.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

/// What one read of a non-blocking pipe gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    Data(Vec<u8>),
    /// Nothing now.
    Empty,
    /// The writer is gone.
    Eof,
}

/// A new pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes `fd` non-blocking.
pub fn nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor the caller holds open, with integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One read of up to 64 KiB from a non-blocking descriptor.
pub fn read_some(fd: RawFd) -> Read {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            buf.truncate(n as usize);
            return Read::Data(buf);
        }
        if n == 0 {
            return Read::Eof;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Read::Empty,
            // Any other failure of a pipe read means the pipe is unusable.
            _ => return Read::Eof,
        }
    }
}

/// Writes what a non-blocking descriptor takes now; returns the bytes written,
/// or an error once the reader is gone.
pub fn write_some(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `data` is valid for reads of its length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(0),
            _ => return Err(e),
        }
    }
}

/// Waits until one of `fds` is ready (each with its events) or `deadline`
/// (never, when None); fills in each entry's `revents`. Tell entries apart by
/// position, never by `events`: gVisor rewrites `events` on return.
pub fn poll(fds: &mut [libc::pollfd], deadline: Option<Instant>) {
    let timeout = match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Round up so a wait never ends just before its deadline.
            i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
        }
    };
    for f in fds.iter_mut() {
        f.revents = 0;
    }
    // SAFETY: `fds` is a valid slice of pollfd for its length.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if n < 0 {
        // EINTR: the caller loops and looks at its deadline again.
        for f in fds.iter_mut() {
            f.revents = 0;
        }
    }
}

/// A poll entry for reading `fd`.
pub fn readable(fd: RawFd) -> libc::pollfd {
    libc::pollfd { fd, events: libc::POLLIN, revents: 0 }
}

/// A poll entry for writing `fd`.
pub fn writable(fd: RawFd) -> libc::pollfd {
    libc::pollfd { fd, events: libc::POLLOUT, revents: 0 }
}

/// The entry has something to read, or its writer is gone.
pub fn ready(p: &libc::pollfd) -> bool {
    p.revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_reads_data_then_nothing_then_its_end() {
        let (r, w) = pipe().expect("pipe");
        nonblocking(&r).expect("nonblocking");
        assert_eq!(read_some(r.as_raw_fd()), Read::Empty);
        assert_eq!(write_some(w.as_raw_fd(), b"hi").expect("write"), 2);
        let mut p = [readable(r.as_raw_fd())];
        poll(&mut p, Some(Instant::now()));
        assert!(ready(&p[0]));
        assert_eq!(read_some(r.as_raw_fd()), Read::Data(b"hi".to_vec()));
        drop(w);
        assert_eq!(read_some(r.as_raw_fd()), Read::Eof);
    }

    #[test]
    fn a_write_to_a_pipe_nobody_reads_fails() {
        let (r, w) = pipe().expect("pipe");
        drop(r);
        assert_eq!(
            write_some(w.as_raw_fd(), b"x").map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::BrokenPipe)
        );
    }
}
