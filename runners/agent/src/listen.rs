//! The agent's way in where a vendor's exec takes a command's input whole, up
//! front (OpenShell's `ExecSandbox`): the agent listens on a Unix socket, and
//! each call is one exec of `plimsoll-agent relay`, which hands the agent its own
//! standard input, output and error over the socket (`SCM_RIGHTS`) and waits
//! until the agent has answered on them. The agent then reads the request from
//! the exec's input and writes the answer into the exec's output, exactly as on
//! an attached stream; the relay carries no byte of either.
//!
//! The socket is reachable by any process of the guest's uid, so nothing that
//! arrives on it is trusted: a request must carry the session key's MAC, and a
//! nonce already served is refused, so a request the guest read off an earlier
//! exec cannot be run twice. What a stranger sends costs it its connection, not
//! the session.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::pipes;

/// How long a connection may take to hand over its descriptors, and its
/// request to arrive on them.
pub const HANDOVER_WITHIN: Duration = Duration::from_secs(10);

/// The descriptors a relay hands over, in order: its stdin, stdout and stderr.
const HANDED: usize = 3;

/// Binds the agent's socket at `path`, readable and writable by its owner only.
///
/// # Errors
///
/// The path is taken or cannot be bound.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt as _;
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A message header over the one buffer `iov` and the ancillary room
/// `control`; it points into both, so it is used while they live.
fn message(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid value of a plain C struct.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

/// Sends `fds` over `conn` in one message, with this process's pid as its
/// data (a descriptor cannot travel alone; see [`accept`] for when the pid is read).
fn send_fds(conn: &UnixStream, fds: &[RawFd]) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let mut said = unsafe { libc::getpid() }.to_le_bytes();
    let mut iov = libc::iovec { iov_base: said.as_mut_ptr().cast(), iov_len: said.len() };
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u8; space];
    let msg = message(&mut iov, &mut control);
    // SAFETY: `msg` points at `control`, which has room for one header and
    // `payload` bytes (CMSG_SPACE), so the first header and its data are in bounds.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(header), payload);
    }
    // SAFETY: `msg` and everything it points at live until the call returns.
    if unsafe { libc::sendmsg(conn.as_raw_fd(), &msg, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives exactly [`HANDED`] descriptors from `conn` (close-on-exec, so no
/// child of the agent's inherits them); anything else is refused, and whatever
/// did arrive is closed.
fn receive_fds(conn: &UnixStream) -> io::Result<([OwnedFd; HANDED], Option<i32>)> {
    let mut said = [0u8; 4];
    let mut iov = libc::iovec { iov_base: said.as_mut_ptr().cast(), iov_len: said.len() };
    // Room for more than expected, so an oversized handover is seen and closed.
    let room = std::mem::size_of::<RawFd>() * (HANDED + 8);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(room as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut msg = message(&mut iov, &mut control);
    // SAFETY: `msg` and its buffers live until the call returns.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut got: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `control` up to `msg_controllen`; the CMSG macros
    // walk only headers inside it, and each SCM_RIGHTS header's data holds
    // `(cmsg_len - CMSG_LEN(0)) / 4` descriptors now open in this process.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    got.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("a connection handed over too many descriptors"));
    }
    let fds = <[OwnedFd; HANDED]>::try_from(got)
        .map_err(|g| io::Error::other(format!("a connection handed over {} descriptors, not 3", g.len())))?;
    Ok((fds, (n == 4).then(|| i32::from_le_bytes(said))))
}

/// A call's channel as a relay handed it over: the exec's input, output and error.
#[derive(Debug)]
pub struct Handed {
    /// The connecting process (the relay): the call's sweeps spare it and its
    /// ancestors, whose exit would end the exec before the answer is out.
    pub peer: i32,
    pub input: Deadlined,
    pub out: File,
    pub err: File,
    /// The connection, held until the answer is written: its close tells the
    /// relay to exit.
    _conn: UnixStream,
}

/// Accepts one connection on `listener` (which poll said is ready) and takes its
/// descriptors; None when nothing usable arrived within [`HANDOVER_WITHIN`].
pub fn accept(listener: &UnixListener) -> Option<Handed> {
    let (conn, _) = listener.accept().ok()?;
    conn.set_nonblocking(false).ok()?;
    conn.set_read_timeout(Some(HANDOVER_WITHIN)).ok()?;
    let peer = peer_pid(&conn).ok()?;
    let ([input, out, err], said) = receive_fds(&conn).ok()?;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // A kernel that names the listener as the peer (gVisor before 2023 does)
    // says nothing: then the relay's own word is taken. It is trusted no
    // further than the kernel's would be, as the call it carries must pass the
    // session key's MAC, which only the exec the plugin started can deliver.
    let peer = if peer == me { said.filter(|p| *p > 1 && *p != me)? } else { peer };
    let input = Deadlined { file: File::from(input), until: Instant::now() + HANDOVER_WITHIN };
    Some(Handed { peer, input, out: File::from(out), err: File::from(err), _conn: conn })
}

/// The process that connected `conn`, as the kernel recorded it at connect.
fn peer_pid(conn: &UnixStream) -> io::Result<i32> {
    // SAFETY: an all-zero ucred is a valid value of a plain C struct.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the sizes given.
    let r = unsafe {
        libc::getsockopt(conn.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// A reader that gives up at a deadline: a stranger's connection that hands over
/// a pipe it never writes cannot hold the agent.
#[derive(Debug)]
pub struct Deadlined {
    file: File,
    until: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut fds = [pipes::readable(self.file.as_raw_fd())];
            pipes::poll(&mut fds, Some(self.until));
            if pipes::ready(&fds[0]) {
                return self.file.read(buf);
            }
            if Instant::now() >= self.until {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the request did not arrive in time"));
            }
        }
    }
}

/// `plimsoll-agent relay SOCKET`: hands this process's stdin, stdout and stderr
/// to the agent listening on `socket`, and returns once the agent has answered
/// on them and let go.
///
/// # Errors
///
/// No agent listens there, or the handover failed: the call never reached it.
pub fn relay(socket: &Path) -> Result<(), String> {
    let conn =
        UnixStream::connect(socket).map_err(|e| format!("no session agent answers on {}: {e}", socket.display()))?;
    // The guest may not take the call's descriptors through this process's /proc.
    crate::procs::undumpable().map_err(|e| format!("prctl(PR_SET_DUMPABLE, 0): {e}"))?;
    send_fds(&conn, &[0, 1, 2]).map_err(|e| format!("handing the call to the agent: {e}"))?;
    let mut rest = [0u8; 64];
    // The agent closes the connection once its answer is out.
    while matches!((&conn).read(&mut rest), Ok(n) if n > 0) {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn pipe() -> (File, File) {
        let (r, w) = pipes::pipe().expect("pipe");
        (File::from(r), File::from(w))
    }

    #[test]
    fn three_descriptors_handed_over_reach_the_other_end_and_carry_its_bytes() {
        let (a, b) = UnixStream::pair().expect("pair");
        let (in_r, mut in_w) = pipe();
        let (mut out_r, out_w) = pipe();
        let (mut err_r, err_w) = pipe();
        send_fds(&a, &[in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()]).expect("send");
        drop((in_r, out_w, err_w));
        let ([input, out, err], said) = receive_fds(&b).expect("receive");
        // SAFETY: getpid has no preconditions.
        assert_eq!(said, Some(unsafe { libc::getpid() }), "the sender says its pid");
        in_w.write_all(b"request").expect("write");
        drop(in_w);
        let mut got = String::new();
        File::from(input).read_to_string(&mut got).expect("read");
        assert_eq!(got, "request");
        File::from(out).write_all(b"answer").expect("out");
        File::from(err).write_all(b"status").expect("err");
        let (mut o, mut e) = (String::new(), String::new());
        out_r.read_to_string(&mut o).expect("out back");
        err_r.read_to_string(&mut e).expect("err back");
        assert_eq!((o.as_str(), e.as_str()), ("answer", "status"));
    }

    #[test]
    fn the_peer_is_the_connecting_process() {
        let (a, _b) = UnixStream::pair().expect("pair");
        assert_eq!(peer_pid(&a).expect("peer"), i32::try_from(std::process::id()).expect("pid"));
    }

    #[test]
    fn a_handover_of_other_than_three_descriptors_is_refused() {
        let (a, b) = UnixStream::pair().expect("pair");
        let (r, w) = pipe();
        send_fds(&a, &[r.as_raw_fd(), w.as_raw_fd()]).expect("send");
        let e = receive_fds(&b).expect_err("two");
        assert_eq!(e.to_string(), "a connection handed over 2 descriptors, not 3");
        (&a).write_all(b"x").expect("plain byte");
        let e = receive_fds(&b).expect_err("none");
        assert_eq!(e.to_string(), "a connection handed over 0 descriptors, not 3");
    }

    #[test]
    fn a_request_that_never_comes_gives_up_at_its_deadline() {
        let (r, _w) = pipe();
        let mut d = Deadlined { file: r, until: Instant::now() + Duration::from_millis(50) };
        let e = d.read(&mut [0u8; 4]).expect_err("nothing came");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_relay_with_no_agent_says_so() {
        let dir = std::env::temp_dir().join(format!("plimsoll-agent-relay-{}", std::process::id()));
        let e = relay(&dir.join("nobody.sock")).expect_err("no agent");
        assert!(e.starts_with("no session agent answers on "), "{e}");
    }
}
