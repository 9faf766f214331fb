//! `plimsoll-agent dial HOST:PORT`: a TCP connection on stdin and stdout, so a
//! process outside a pod with no network can reach sandboxd in it through
//! `docker exec -i CONTAINER plimsoll-agent dial 127.0.0.1:8787`.
//!
//! Stdin is copied to the socket, whose write side is shut at stdin's end (the
//! request is complete); the socket is copied to stdout until the peer ends it
//! (the answer is complete), which ends the dial whether or not stdin has.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

/// Which end of a copy failed.
#[derive(Debug)]
enum Broke {
    Reading(io::Error),
    Writing(io::Error),
}

/// Copies `from` into `to` until `from` ends.
fn pump(mut from: impl Read, mut to: impl Write) -> Result<(), Broke> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return to.flush().map_err(Broke::Writing),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Broke::Reading(e)),
        };
        to.write_all(&buf[..n]).map_err(Broke::Writing)?;
    }
}

/// Connects to `addr` and carries `input` to it and its answer to `output`.
///
/// # Errors
///
/// Naming why: the connection could not be made, reading the socket or
/// `input` failed, or `output` would not take the answer. A failed write to
/// the socket is not one: the peer closed early, and its answer says why.
pub fn carry(addr: &str, input: impl Read + Send + 'static, output: impl Write) -> Result<(), String> {
    let conn = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    let up = conn.try_clone().map_err(|e| format!("sharing the connection: {e}"))?;
    let input_failed: Arc<Mutex<Option<String>>> = Arc::default();
    let failed = Arc::clone(&input_failed);
    std::thread::spawn(move || {
        if let Err(Broke::Reading(e)) = pump(input, &up) {
            *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("reading stdin: {e}"));
        }
        // The request is all sent (or will never be): tell the peer.
        let _ = up.shutdown(Shutdown::Write);
    });
    match pump(&conn, output) {
        Ok(()) => {}
        Err(Broke::Reading(e)) => return Err(format!("reading from {addr}: {e}")),
        Err(Broke::Writing(e)) => return Err(format!("writing stdout: {e}")),
    }
    match input_failed.lock().unwrap_or_else(PoisonError::into_inner).take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `plimsoll-agent dial HOST:PORT` on this process's stdin and stdout: exit 0,
/// or 1 with a line on stderr naming why.
pub fn main(addr: &str) -> ExitCode {
    let dup = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().map(File::from);
    // Raw descriptors: no buffer stands between the socket and the streams.
    let streams = dup(io::stdin().as_fd()).and_then(|i| Ok((i, dup(io::stdout().as_fd())?)));
    let outcome = match streams {
        Ok((input, output)) => carry(addr, input, output),
        Err(e) => Err(format!("taking stdin and stdout: {e}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plimsoll-agent dial: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn the_input_is_sent_whole_and_the_answer_comes_back() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let peer = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().expect("accept");
            let mut heard = Vec::new();
            // Ends only once the dial has shut its write side.
            c.read_to_end(&mut heard).expect("read");
            c.write_all(&heard.to_ascii_uppercase()).expect("write");
        });
        let mut answer = Vec::new();
        carry(&addr, io::Cursor::new(b"hello".to_vec()), &mut answer).expect("carried");
        assert_eq!(answer, b"HELLO");
        peer.join().expect("peer");
    }

    #[test]
    fn the_dial_ends_with_the_socket_even_while_stdin_is_open() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        std::thread::spawn(move || {
            let (mut c, _) = listener.accept().expect("accept");
            c.write_all(b"bye").expect("write");
        });
        // A pipe whose writer stays open: stdin never ends.
        let (r, _w) = crate::pipes::pipe().expect("pipe");
        let mut answer = Vec::new();
        carry(&addr, File::from(r), &mut answer).expect("carried");
        assert_eq!(answer, b"bye");
    }

    #[test]
    fn a_refused_connection_is_named() {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let e = carry(&format!("127.0.0.1:{port}"), io::empty(), io::sink()).expect_err("refused");
        assert!(e.starts_with(&format!("connecting to 127.0.0.1:{port}: ")), "{e}");
    }
}
