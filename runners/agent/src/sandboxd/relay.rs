//! `POST /v1/relay?port=N`: a granted run's way to the host's broker in a pod
//! with no way out. The host dials in through the API server's pod proxy with
//! an HTTP/1.1 upgrade to [`PROTOCOL`]; sandboxd connects to the guest's broker
//! relay (`plimsoll-agent broker-relay`) on loopback port `N`, answers
//! `101 Switching Protocols`, and carries the bytes both ways until either
//! side ends. The host joins the stream to the run's broker socket and to
//! nothing else, so the pod gains no network path: the connection comes in.
//!
//! Nothing here is trusted: the token admits the request, and the guest, who
//! owns every loopback port it can listen on, gains nothing a connection to
//! its own relay does not already give it. Ports below 1024 (only root could
//! listen there) and sandboxd's own are refused.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use super::http::{Head, Refusal};

/// The protocol the relay upgrades to.
pub const PROTOCOL: &str = "plimsoll-relay";

/// How long connecting to the guest's relay may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// What the 101 answer says, whole.
pub fn switching() -> Vec<u8> {
    format!("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {PROTOCOL}\r\n\r\n").into_bytes()
}

/// Whether `head` asks to upgrade to [`PROTOCOL`].
fn upgrades(head: &Head) -> bool {
    let connection =
        head.all("Connection").iter().flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let upgrade = head.all("Upgrade");
    connection && upgrade.len() == 1 && upgrade[0].trim().eq_ignore_ascii_case(PROTOCOL)
}

/// The loopback port the request names.
fn port(head: &Head, own: u16) -> Result<u16, Refusal> {
    let query = head.target.split_once('?').map_or("", |(_, q)| q);
    let given: Vec<&str> = query.split('&').filter_map(|kv| kv.strip_prefix("port=")).collect();
    let [given] = given.as_slice() else {
        return Err(Refusal::new(400, "name the guest's relay port once, as ?port=N"));
    };
    match given.parse::<u16>() {
        Ok(p) if p >= 1024 && p != own => Ok(p),
        _ => Err(Refusal::new(
            400,
            format!("port {given:?} is not one the guest's relay may hold (1024 to 65535, not sandboxd's {own})"),
        )),
    }
}

/// Checks the request and connects to the guest's relay: the connection to
/// carry once the 101 is sent.
///
/// # Errors
///
/// The refusal to answer instead: not an upgrade (426), no body allowed (400),
/// a port refused (400), nothing listening there (502).
pub fn open(head: &Head, own_port: u16) -> Result<TcpStream, Refusal> {
    if !upgrades(head) {
        return Err(Refusal::new(426, format!("/v1/relay is an HTTP/1.1 upgrade to {PROTOCOL} (Connection: Upgrade)")));
    }
    if head.body_length(false)? != 0 {
        return Err(Refusal::new(400, "a relay request carries no body"));
    }
    let port = port(head, own_port)?;
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let conn = TcpStream::connect_timeout(&to, CONNECT_WITHIN)
        .map_err(|e| Refusal::new(502, format!("nothing takes a connection on 127.0.0.1:{port}: {e}")))?;
    let _ = conn.set_nodelay(true);
    Ok(conn)
}

/// Copies `from` into `to` until `from` ends, then ends `to`'s writing.
fn pump(mut from: &TcpStream, mut to: &TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Carries `client` (the upgraded request's connection, whose bytes past the
/// head are `started`) to `relay` and back until both ways end.
pub fn carry(client: &TcpStream, relay: TcpStream, started: &[u8]) {
    let _ = client.set_read_timeout(None);
    let _ = client.set_write_timeout(None);
    if (&relay).write_all(started).is_err() {
        return;
    }
    let Ok(down_client) = client.try_clone() else { return };
    let Ok(down_relay) = relay.try_clone() else { return };
    let down = std::thread::Builder::new().name("sandboxd-relay".into()).spawn(move || pump(&down_relay, &down_client));
    pump(client, &relay);
    if let Ok(down) = down {
        let _ = down.join();
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn head(target: &str, headers: &[(&str, &str)]) -> Head {
        Head {
            method: "POST".into(),
            target: target.into(),
            headers: headers.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }

    const UPGRADE: [(&str, &str); 2] = [("Connection", "keep-alive, Upgrade"), ("Upgrade", PROTOCOL)];

    #[test]
    fn every_bad_request_is_refused_by_name() {
        let refused = |h: Head| open(&h, 8787).expect_err("refused");
        let plain = refused(head("/v1/relay?port=5000", &[]));
        assert_eq!(
            (plain.status, plain.message.as_str()),
            (426, "/v1/relay is an HTTP/1.1 upgrade to plimsoll-relay (Connection: Upgrade)")
        );
        let other = refused(head("/v1/relay?port=5000", &[("Connection", "Upgrade"), ("Upgrade", "websocket")]));
        assert_eq!(other.status, 426);
        let body = refused(head("/v1/relay?port=5000", &[UPGRADE[0], UPGRADE[1], ("Content-Length", "3")]));
        assert_eq!((body.status, body.message.as_str()), (400, "a relay request carries no body"));
        for (target, why) in [
            ("/v1/relay", "name the guest's relay port once, as ?port=N"),
            ("/v1/relay?port=1&port=2", "name the guest's relay port once, as ?port=N"),
            (
                "/v1/relay?port=80",
                "port \"80\" is not one the guest's relay may hold (1024 to 65535, not sandboxd's 8787)",
            ),
            (
                "/v1/relay?port=8787",
                "port \"8787\" is not one the guest's relay may hold (1024 to 65535, not sandboxd's 8787)",
            ),
            (
                "/v1/relay?port=x",
                "port \"x\" is not one the guest's relay may hold (1024 to 65535, not sandboxd's 8787)",
            ),
        ] {
            let r = refused(head(target, &UPGRADE));
            assert_eq!((r.status, r.message.as_str()), (400, why), "{target}");
        }
    }

    #[test]
    fn a_port_nobody_listens_on_is_a_bad_gateway() {
        let free = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let r = open(&head(&format!("/v1/relay?port={free}"), &UPGRADE), 8787).expect_err("refused");
        assert_eq!(r.status, 502);
        assert!(r.message.starts_with(&format!("nothing takes a connection on 127.0.0.1:{free}: ")), "{}", r.message);
    }

    #[test]
    fn the_upgraded_connection_is_carried_both_ways() {
        let relay = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = relay.local_addr().expect("addr").port();
        let echo = std::thread::spawn(move || {
            let (mut c, _) = relay.accept().expect("accept");
            let mut got = Vec::new();
            c.read_to_end(&mut got).expect("read");
            c.write_all(&[b"echo:", &got[..]].concat()).expect("write");
        });
        let front = TcpListener::bind("127.0.0.1:0").expect("bind");
        let front_addr = front.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let (client, _) = front.accept().expect("accept");
            let to = open(&head(&format!("/v1/relay?port={port}"), &UPGRADE), 8787).expect("opened");
            carry(&client, to, b"early ");
        });
        let mut c = TcpStream::connect(front_addr).expect("connect");
        c.write_all(b"bytes").expect("write");
        c.shutdown(Shutdown::Write).expect("half-close");
        let mut back = Vec::new();
        c.read_to_end(&mut back).expect("read");
        assert_eq!(back, b"echo:early bytes");
        echo.join().expect("echo");
        server.join().expect("server");
    }
}
