//! `plimsoll-host mcp serve-http`: the MCP server over TLS, its owner in
//! headless Chromium with a virtual authenticator, its clients the official
//! MCP Python SDK (`mcp_http/driver.py`), against a daemon at the kernel tier
//! (docker under gVisor); and the refusals to start that keep it off a weak daemon.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::Digest as _;

use super::docker::{docker_env, fixture, signed_plugin, start};
use super::early_answers;
use super::python::python_cmd;
use super::{scratch, wasm_daemon};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A free loopback port (bound, then released for the server to take).
fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

/// A receipts key and directory in `dir`.
fn receipts(dir: &std::path::Path) -> Vec<(String, String)> {
    let key = dir.join("receipts.key");
    let o = super::host().args(["attest", "keygen", "--out"]).arg(&key).output().expect("keygen");
    assert!(o.status.success(), "{o:?}");
    vec![
        ("PLIMSOLL_SIGNING_KEY_FILE".into(), key.display().to_string()),
        ("PLIMSOLL_RECEIPTS_DIR".into(), dir.join("receipts").display().to_string()),
    ]
}

/// A certificate for `localhost` in `dir`: its PEM path, its key's path, and its
/// SPKI's SHA-256 (base64), which Chromium is told to trust.
fn certificate(dir: &std::path::Path) -> (String, String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).expect("write cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("write key");
    let spki = base64::engine::general_purpose::STANDARD
        .encode(sha2::Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&ck.signing_key)));
    (cert.display().to_string(), key.display().to_string(), spki)
}

/// Everything a server printed, as it prints it.
type Lines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

fn printed(lines: &Lines) -> Vec<String> {
    lines.lock().map(|l| l.clone()).unwrap_or_default()
}

/// `serve-http` with `env`, once it has printed a line containing `until`.
fn serve(args: &[&str], env: &[(String, String)], until: &str) -> (Child, Lines) {
    let mut child = super::host()
        .args(["mcp", "serve-http"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve-http");
    let stderr = child.stderr.take().expect("stderr");
    let lines: Lines = Lines::default();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(mut l) = sink.lock() {
                l.push(line);
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if printed(&lines).iter().any(|l| l.contains(until)) {
            return (child, lines);
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let status = child.wait().ok();
    panic!("serve-http never printed {until:?} (exit {status:?}):\n{}", printed(&lines).join("\n"));
}

/// Runs `serve-http` expecting it to refuse to start; its stderr.
fn refused(args: &[&str], env: &[(String, String)]) -> String {
    let o = super::host()
        .args(["mcp", "serve-http"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("serve-http");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn serve_http_refuses_a_weak_daemon_no_receipts_and_no_tls() {
    let dir = scratch("mcp-http-refused");
    let (d, token) = wasm_daemon("mcp-http-refused", "assistant", &[]);
    let (cert, key, _) = certificate(&dir);
    let state = dir.join("state").display().to_string();
    let tls = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str(), "--state-dir", state.as_str()];
    let mut env = vec![
        ("PLIMSOLL_URL".to_string(), d.url()),
        ("PLIMSOLL_CALLER_TOKEN".to_string(), token),
        ("PLIMSOLL_MIN_ISOLATION".to_string(), "kernel".to_string()),
    ];
    assert!(
        refused(&tls, &env)
            .contains("serve-http signs every call: set PLIMSOLL_SIGNING_KEY_FILE and PLIMSOLL_RECEIPTS_DIR"),
    );
    env.extend(receipts(&dir));
    let e = refused(&tls, &env);
    assert!(
        e.contains(&format!(
            "the daemon at {} runs at the process tier: serve-http needs a daemon at kernel or vm",
            d.url()
        )),
        "{e}"
    );
    env[2].1 = "process".into();
    assert!(
        refused(&tls, &env).contains("PLIMSOLL_MIN_ISOLATION=process: serve-http runs code for remote connections")
    );
    assert!(
        refused(&["--state-dir", state.as_str()], &env).contains("serve-http needs TLS: give --tls-cert and --tls-key")
    );
    assert!(!std::path::Path::new(&state).exists(), "nothing was written by a server that did not start");
}

#[test]
fn a_browser_owner_approves_sdk_clients_over_tls() {
    let Some(fx) = fixture("runsc") else { return };
    let dir = scratch("mcp-http");
    let (plugin, pubkey) = signed_plugin(&fx, &dir);
    let mut daemon_env = docker_env(&fx, &plugin, &pubkey, "runsc");
    daemon_env.push(("SANDBOX_MAX_SESSIONS".into(), "6".into()));
    let daemon = start(&daemon_env);
    let (cert, key, spki) = certificate(&dir);
    let port = port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let state = dir.join("state").display().to_string();
    let mut env = vec![
        ("PLIMSOLL_URL".to_string(), daemon.url()),
        ("PLIMSOLL_CALLER_TOKEN".to_string(), super::docker::TOKEN.to_string()),
        ("PLIMSOLL_RUN_TIMEOUT_MS".to_string(), "60000".to_string()),
    ];
    env.extend(receipts(&dir));
    let args = ["--listen", &listen, "--tls-cert", &cert, "--tls-key", &key, "--state-dir", &state];
    let (mut server, lines) = serve(&args, &env, "with the setup code");
    let code = printed(&lines)
        .iter()
        .find_map(|l| l.split("with the setup code ").nth(1))
        .expect("the setup code")
        .trim()
        .to_string();
    let public = format!("https://localhost:{port}");
    let o = python_cmd()
        .arg(format!("{ROOT}/tests/e2e/mcp_http/driver.py"))
        .envs([("PUBLIC", public.as_str()), ("CODE", &code), ("SPKI", &spki), ("CA", &cert)])
        .output()
        .expect("driver");
    // An unauthenticated client's first POST gets its 401 and the challenge that
    // starts its OAuth discovery, over HTTP/2 (ALPN) as over HTTP/1.1.
    let bodies = early_answers::bodies(
        &dir,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#,
    );
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    early_answers::stress("mcp serve-http", &format!("{public}/mcp"), Some(Path::new(&cert)), &headers, &bodies, |s| {
        s.status == 401 && s.header("www-authenticate").is_some_and(|c| c.starts_with("Bearer "))
    });
    let _ = server.kill();
    let _ = server.wait();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.ends_with("done\n"), "{out}");
    // Nothing secret reached the log: no token the client held, the setup code once.
    let log = printed(&lines).join("\n");
    let secrets = out.lines().find_map(|l| l.strip_prefix("secrets: ")).expect("the client's tokens");
    for s in secrets.split_whitespace() {
        assert!(!log.contains(s), "a token is in the log:\n{log}");
    }
    assert_eq!(log.matches(code.as_str()).count(), 1, "{log}");
    assert!(log.contains("approved connection") && log.contains("revoked connection"), "{log}");
    // The passkey survives a restart: no new setup code, and the owner's file is private.
    let meta = std::fs::metadata(format!("{state}/owner.json")).expect("owner.json");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    let (mut again, lines) = serve(&args, &env, "listening on");
    let _ = again.kill();
    let _ = again.wait();
    assert!(!printed(&lines).iter().any(|l| l.contains("setup code")), "{:?}", printed(&lines));
}
