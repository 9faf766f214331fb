//! The broker relay: a granted run's way to the host's broker where the
//! sandbox has no way out at all (an OpenShell sandbox: no network rule, and no
//! host socket can be mounted). The run's client connects to a Unix socket
//! here, as it would to the socket the host mounts into its own containers;
//! the host dials in through the vendor's port forward (OpenShell's
//! `ForwardTcp`) to a loopback port here; the relay pairs each client
//! connection with the oldest forwarded connection waiting and carries the
//! bytes both ways. The host joins each forwarded connection to the run's
//! broker socket once the client's first bytes arrive through it.
//!
//! Nothing here is trusted or holds a secret: the broker admits a call on the
//! run's token, which the client presents, and the relay runs as the guest, who
//! may kill it or take its port and gain nothing the client does not already
//! have. The relay holds at most [`MAX_CONNECTIONS`] connections; a client
//! connection left unpaired for [`PAIR_WITHIN`] is closed.

use std::collections::VecDeque;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::pipes;

/// The most connections the relay holds at once, waiting or paired.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client connection waits for a forwarded one.
pub const PAIR_WITHIN: Duration = Duration::from_secs(30);

/// The relay's two listeners.
pub struct Listeners {
    clients: UnixListener,
    forwards: TcpListener,
}

impl Listeners {
    /// Binds the clients' socket at `socket` (its owner's only: the guest's)
    /// and a loopback port the system picks.
    ///
    /// # Errors
    ///
    /// Either could not be bound.
    pub fn bind(socket: &Path) -> io::Result<Listeners> {
        use std::os::unix::fs::PermissionsExt as _;
        let clients = UnixListener::bind(socket)?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
        let forwards = TcpListener::bind(("127.0.0.1", 0))?;
        clients.set_nonblocking(true)?;
        forwards.set_nonblocking(true)?;
        Ok(Listeners { clients, forwards })
    }

    /// The loopback port forwarded connections arrive at.
    ///
    /// # Errors
    ///
    /// The system would not say.
    pub fn port(&self) -> io::Result<u16> {
        Ok(self.forwards.local_addr()?.port())
    }

    /// Pairs and carries connections until both listeners fail.
    pub fn serve(self) {
        let live = Arc::new(AtomicUsize::new(0));
        let mut clients: VecDeque<(UnixStream, Instant)> = VecDeque::new();
        let mut forwards: VecDeque<TcpStream> = VecDeque::new();
        loop {
            while !clients.is_empty() && !forwards.is_empty() {
                if let (Some((client, _)), Some(forward)) = (clients.pop_front(), forwards.pop_front()) {
                    carry(client, forward, Arc::clone(&live));
                }
            }
            let now = Instant::now();
            let before = clients.len();
            clients.retain(|(_, at)| now.duration_since(*at) < PAIR_WITHIN);
            live.fetch_sub(before - clients.len(), Ordering::SeqCst);
            let mut fds = vec![pipes::readable(self.clients.as_raw_fd()), pipes::readable(self.forwards.as_raw_fd())];
            // A forwarded connection says nothing before its client does: one
            // that becomes readable while it waits has been closed.
            fds.extend(forwards.iter().map(|f| pipes::readable(f.as_raw_fd())));
            let wake = clients.front().map(|(_, at)| *at + PAIR_WITHIN);
            pipes::poll(&mut fds, wake);
            let mut i = 0;
            forwards.retain(|_| {
                i += 1;
                let gone = pipes::ready(&fds[i + 1]);
                if gone {
                    live.fetch_sub(1, Ordering::SeqCst);
                }
                !gone
            });
            let mut failed = 0;
            if pipes::ready(&fds[0]) {
                match self.clients.accept() {
                    Ok((c, _)) if admit(&live) && c.set_nonblocking(false).is_ok() => {
                        clients.push_back((c, Instant::now()));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => failed += 1,
                }
            }
            if pipes::ready(&fds[1]) {
                match self.forwards.accept() {
                    Ok((f, _)) if admit(&live) && f.set_nonblocking(false).is_ok() => forwards.push_back(f),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => failed += 1,
                }
            }
            if failed == 2 {
                return;
            }
        }
    }
}

/// Takes a place for one more connection, if there is one.
fn admit(live: &AtomicUsize) -> bool {
    live.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_CONNECTIONS).then_some(n + 1)).is_ok()
}

/// Carries bytes between a client and a forwarded connection, each way on its
/// own thread, passing each side's end on to the other; gives both places
/// back once both ways have ended.
fn carry(client: UnixStream, forward: TcpStream, live: Arc<AtomicUsize>) {
    let (Ok(client_in), Ok(forward_in)) = (client.try_clone(), forward.try_clone()) else {
        live.fetch_sub(2, Ordering::SeqCst);
        return;
    };
    let up = std::thread::spawn(move || {
        pump(client_in, &forward);
        let _ = forward.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        pump(forward_in, &client);
        let _ = client.shutdown(Shutdown::Write);
        let _ = up.join();
        live.fetch_sub(2, Ordering::SeqCst);
    });
}

/// Copies `from` into `to` until `from` ends or either fails.
fn pump(mut from: impl io::Read, mut to: impl io::Write) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    fn relay() -> (std::path::PathBuf, u16) {
        let dir = std::env::temp_dir().join(format!("plimsoll-relay-{}-{:?}", std::process::id(), Instant::now()));
        std::fs::create_dir_all(&dir).expect("dir");
        let socket = dir.join("host-api.sock");
        let l = Listeners::bind(&socket).expect("bind");
        let port = l.port().expect("port");
        std::thread::spawn(move || l.serve());
        (socket, port)
    }

    #[test]
    fn a_client_is_paired_with_the_oldest_forwarded_connection_and_bytes_go_both_ways() {
        let (socket, port) = relay();
        let first = TcpStream::connect(("127.0.0.1", port)).expect("forward");
        let second = TcpStream::connect(("127.0.0.1", port)).expect("forward");
        std::thread::sleep(Duration::from_millis(100));
        let mut client = UnixStream::connect(&socket).expect("client");
        client.write_all(b"POST /call").expect("write");
        client.shutdown(Shutdown::Write).expect("half-close");
        let mut heard = Vec::new();
        (&first).read_to_end(&mut heard).expect("read");
        assert_eq!(heard, b"POST /call");
        (&first).write_all(b"HTTP/1.1 200").expect("answer");
        first.shutdown(Shutdown::Write).expect("half-close");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).expect("read");
        assert_eq!(answer, b"HTTP/1.1 200");
        // The second still waits for a client of its own.
        second.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
        let mut none = [0u8; 1];
        assert!((&second).read(&mut none).is_err(), "the second forward was paired with nobody");
    }

    #[test]
    fn a_forwarded_connection_closed_while_it_waits_is_never_paired() {
        let (socket, port) = relay();
        let closed = TcpStream::connect(("127.0.0.1", port)).expect("forward");
        std::thread::sleep(Duration::from_millis(100));
        drop(closed);
        std::thread::sleep(Duration::from_millis(100));
        let live = TcpStream::connect(("127.0.0.1", port)).expect("forward");
        std::thread::sleep(Duration::from_millis(100));
        let mut client = UnixStream::connect(&socket).expect("client");
        client.write_all(b"ping").expect("write");
        let mut heard = [0u8; 4];
        (&live).read_exact(&mut heard).expect("the live forward carries the client");
        assert_eq!(&heard, b"ping");
    }

    #[test]
    fn a_client_waits_for_a_forward_that_comes_later() {
        let (socket, port) = relay();
        let mut client = UnixStream::connect(&socket).expect("client");
        client.write_all(b"early").expect("write");
        std::thread::sleep(Duration::from_millis(150));
        let forward = TcpStream::connect(("127.0.0.1", port)).expect("forward");
        let mut heard = [0u8; 5];
        (&forward).read_exact(&mut heard).expect("read");
        assert_eq!(&heard, b"early");
    }
}
