//! The fake for real, over mutual TLS and HTTP/2 with containers behind it:
//! ignored by default, as it needs docker and the sandbox image
//! (`images/out/sandbox.id`).
//!
//! ```sh
//! cargo test -p plimsoll-fakes -- --ignored openshell
//! ```
//!
//! It serves a fake of its own in the test; to drive a running
//! `plimsoll-fake openshell` instead, point `PLIMSOLL_OPENSHELL_FAKE_ENV` at
//! the `KEY=VALUE` lines it printed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message as _;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::grpc;
use super::proto::*;
use crate::backing::Backing;

type Client = SendRequest<Full<Bytes>>;

/// The settings of the fake to drive: a running one's, or one served here.
async fn fake() -> BTreeMap<String, String> {
    if let Ok(file) = std::env::var("PLIMSOLL_OPENSHELL_FAKE_ENV") {
        let text = std::fs::read_to_string(&file).expect("the fake's settings");
        return text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
    }
    let image = crate::backing::default_image().expect("images/out/sandbox.id");
    let dir = std::env::temp_dir().join(format!("plimsoll-fake-openshell-live-{}", std::process::id()));
    let pki = crate::pki::Pki::generate(&dir, &[super::HOST]).expect("pki");
    let fake: Arc<dyn crate::server::Handler> = Arc::new(super::Fake::new(Arc::new(Backing::new(image)), None));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let settings = fake.settings(port, &pki);
    tokio::spawn(crate::server::serve(listener, pki.mtls_server_config(), fake));
    settings.into_iter().collect()
}

fn port(settings: &BTreeMap<String, String>) -> u16 {
    settings["SANDBOX_OPENSHELL_GATEWAY_URL"].rsplit(':').next().and_then(|p| p.parse().ok()).expect("port")
}

/// An HTTP/2 connection over TLS, presenting the client certificate or not.
async fn connect(settings: &BTreeMap<String, String>, with_cert: bool) -> Result<Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(&settings["SANDBOX_OPENSHELL_CA_FILE"]).map_err(|e| e.to_string())?;
    for c in CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = if with_cert {
        let cert = std::fs::read(&settings["SANDBOX_OPENSHELL_CERT_FILE"]).map_err(|e| e.to_string())?;
        let key = std::fs::read(&settings["SANDBOX_OPENSHELL_KEY_FILE"]).map_err(|e| e.to_string())?;
        let chain: Vec<_> = CertificateDer::pem_slice_iter(&cert).filter_map(Result::ok).collect();
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| e.to_string())?;
        builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
    } else {
        builder.with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port(settings))).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(super::HOST).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

fn request(
    settings: &BTreeMap<String, String>,
    method: &str,
    message: &impl prost::Message,
) -> http::Request<Full<Bytes>> {
    let url = format!("{}/openshell.v1.OpenShell/{method}", settings["SANDBOX_OPENSHELL_GATEWAY_URL"]);
    http::Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(grpc::frame(&message.encode_to_vec())))
        .expect("request")
}

/// A call's status, message and response messages.
async fn call(
    client: &mut Client,
    settings: &BTreeMap<String, String>,
    method: &str,
    message: &impl prost::Message,
) -> Result<(u16, String, Vec<Bytes>), String> {
    client.ready().await.map_err(|e| e.to_string())?;
    let r = client.send_request(request(settings, method, message)).await.map_err(|e| e.to_string())?;
    let header = |h: &http::HeaderMap, k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let head = (header(r.headers(), "grpc-status"), header(r.headers(), "grpc-message"));
    let body = r.into_body().collect().await.map_err(|e| e.to_string())?;
    let trailers = body.trailers().cloned().unwrap_or_default();
    let status = header(&trailers, "grpc-status").or(head.0).and_then(|s| s.parse().ok()).unwrap_or(u16::MAX);
    let message = header(&trailers, "grpc-message").or(head.1).unwrap_or_default();
    Ok((status, message, grpc::unframe(&body.to_bytes()).map_err(|e| e.message)?))
}

async fn unary<M: prost::Message + Default>(
    client: &mut Client,
    settings: &BTreeMap<String, String>,
    method: &str,
    message: &impl prost::Message,
) -> M {
    let (status, text, messages) = call(client, settings, method, message).await.expect("call");
    assert_eq!(status, 0, "{method}: {text}");
    M::decode(messages[0].clone()).expect("decodes")
}

fn s(v: &str) -> Value {
    Value { kind: Some(Kind::StringValue(v.into())) }
}

fn obj(pairs: &[(&str, Value)]) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct {
            fields: pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        })),
    }
}

fn n(v: f64) -> Value {
    Value { kind: Some(Kind::NumberValue(v)) }
}

/// An exec's stdout, stderr, exit codes and final status.
async fn exec(
    client: &mut Client,
    settings: &BTreeMap<String, String>,
    req: &ExecSandboxRequest,
) -> (Vec<u8>, Vec<u8>, Vec<i32>, u16) {
    let (status, text, messages) = call(client, settings, "ExecSandbox", req).await.expect("exec");
    let (mut out, mut err, mut exits) = (Vec::new(), Vec::new(), Vec::new());
    for m in messages {
        match ExecSandboxEvent::decode(m).expect("event").payload {
            Some(ExecPayload::Stdout(o)) => out.extend(o.data),
            Some(ExecPayload::Stderr(e)) => err.extend(e.data),
            Some(ExecPayload::Exit(x)) => exits.push(x.exit_code),
            None => panic!("an empty event"),
        }
    }
    assert!(status == 0 || !text.is_empty(), "status {status} without a message");
    (out, err, exits, status)
}

#[tokio::test]
#[ignore = "needs docker and the sandbox image"]
async fn openshell_fake_serves_a_sandbox_over_mtls() {
    let settings = fake().await;
    assert!(connect(&settings, true).await.is_ok());
    // Without a certificate the handshake fails (under TLS 1.3 the client
    // learns it at its first read).
    let refused = match connect(&settings, false).await {
        Err(e) => Some(e),
        Ok(mut c) => call(&mut c, &settings, "Health", &HealthRequest {}).await.err(),
    };
    eprintln!("without a certificate: {refused:?}");
    assert!(refused.is_some(), "a client without a certificate was served");
    let mut c = connect(&settings, true).await.expect("connects");

    let info: GetGatewayInfoResponse = unary(&mut c, &settings, "GetGatewayInfo", &GetGatewayInfoRequest {}).await;
    eprintln!("gateway info: {info:?}");
    assert_eq!(info.compute_drivers[0].name, "docker");

    let mut policy = SandboxPolicy { version: 1, ..SandboxPolicy::default() };
    policy.filesystem = Some(FilesystemPolicy {
        include_workdir: true,
        read_only: vec!["/usr".into()],
        read_write: vec!["/tmp".into()],
    });
    let mounts = Value {
        kind: Some(Kind::ListValue(ListValue {
            values: vec![obj(&[
                ("type", s("tmpfs")),
                ("target", s("/tmp")),
                ("size_bytes", n(33_554_432.0)),
                ("mode", n(1023.0)),
                (
                    "options",
                    Value {
                        kind: Some(Kind::ListValue(ListValue { values: vec![s("noexec"), s("nosuid"), s("nodev")] })),
                    },
                ),
            ])],
        })),
    };
    let name = format!("live-{}", hex::encode(crate::util::random(3)));
    let create = CreateSandboxRequest {
        spec: Some(SandboxSpec {
            template: Some(SandboxTemplate {
                image: settings["SANDBOX_OPENSHELL_IMAGE"].clone(),
                resources: Some(Struct {
                    fields: [("limits".to_string(), obj(&[("cpu", s("500m")), ("memory", s("256Mi"))]))].into(),
                }),
                driver_config: Some(Struct { fields: [("docker".to_string(), obj(&[("mounts", mounts)]))].into() }),
                ..SandboxTemplate::default()
            }),
            policy: Some(policy.clone()),
            command: vec!["sleep".into(), "infinity".into()],
            ..SandboxSpec::default()
        }),
        name: name.clone(),
        labels: [("plimsoll".to_string(), "live".to_string())].into(),
        ..CreateSandboxRequest::default()
    };
    let created: SandboxResponse = unary(&mut c, &settings, "CreateSandbox", &create).await;
    let sandbox = created.sandbox.expect("sandbox");
    let id = sandbox.metadata.as_ref().map(|m| m.id.clone()).expect("id");
    assert_eq!(sandbox.status.as_ref().map(|s| s.phase), Some(SandboxPhase::Provisioning as i32));
    let (again, text, _) = call(&mut c, &settings, "CreateSandbox", &create).await.expect("call");
    assert_eq!((again, text.as_str()), (6, format!("sandbox '{name}' already exists").as_str()));

    let started = Instant::now();
    let ready = loop {
        let got: SandboxResponse =
            unary(&mut c, &settings, "GetSandbox", &GetSandboxRequest { name: name.clone(), workspace: String::new() })
                .await;
        let s = got.sandbox.expect("sandbox");
        if s.status.as_ref().map(|st| st.phase) == Some(SandboxPhase::Ready as i32) {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "not ready: {s:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("ready after {:?}", started.elapsed());
    assert_eq!(ready.spec.as_ref().and_then(|sp| sp.policy.clone()), Some(policy.clone()));
    let listed: ListSandboxesResponse = unary(
        &mut c,
        &settings,
        "ListSandboxes",
        &ListSandboxesRequest { label_selector: "plimsoll=live".into(), ..ListSandboxesRequest::default() },
    )
    .await;
    assert!(listed.sandboxes.iter().any(|s| s.metadata.as_ref().is_some_and(|m| m.name == name)));

    let run = |command: &str| ExecSandboxRequest {
        sandbox_id: id.clone(),
        command: vec!["sh".into(), "-c".into(), command.into()],
        ..ExecSandboxRequest::default()
    };
    let mut cat = run("cat; echo err >&2; exit 3");
    cat.stdin = b"hello from stdin\n".to_vec();
    let (out, err, exits, status) = exec(&mut c, &settings, &cat).await;
    assert_eq!(
        (out.as_slice(), err.as_slice(), exits.as_slice(), status),
        (&b"hello from stdin\n"[..], &b"err\n"[..], &[3][..], 0)
    );

    let mut env = run("echo $GREETING; id -u; pwd");
    env.environment.insert("GREETING".into(), "hi".into());
    env.workdir = "/tmp".into();
    let (out, _, exits, _) = exec(&mut c, &settings, &env).await;
    assert_eq!((String::from_utf8_lossy(&out).as_ref(), exits.as_slice()), ("hi\n61000\n/tmp\n", &[0][..]));

    // The /tmp asked: 32 MiB, noexec, nosuid, nodev; the memory and CPUs asked.
    let (out, _, _, _) = exec(&mut c, &settings, &run("grep ' /tmp ' /proc/mounts; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")).await;
    let mounts = String::from_utf8_lossy(&out).to_string();
    eprintln!("{mounts}");
    assert!(
        mounts.contains("size=32768k")
            && mounts.contains("noexec")
            && mounts.contains("nosuid")
            && mounts.contains("nodev")
    );
    assert!(mounts.contains(&(256u64 << 20).to_string()), "memory limit");
    let (out, _, _, _) = exec(
        &mut c,
        &settings,
        &run("cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
    )
    .await;
    let quota = String::from_utf8_lossy(&out).to_string();
    assert!(quota.starts_with("50000"), "cpu quota {quota}");

    let mut slow = run("sleep 5");
    slow.timeout_seconds = 1;
    let t = Instant::now();
    let (_, _, exits, status) = exec(&mut c, &settings, &slow).await;
    assert_eq!((exits.as_slice(), status), (&[124][..], 0));
    assert!(t.elapsed() < Duration::from_secs(4));

    // A cancelled exec's process is killed.
    c.ready().await.expect("ready");
    let r =
        c.send_request(request(&settings, "ExecSandbox", &run("echo started; exec sleep 300"))).await.expect("exec");
    let mut body = r.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.data_ref().is_some_and(|d| d.windows(7).any(|w| w == b"started")));
    let listing = run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done");
    let (out, _, _, _) = exec(&mut c, &settings, &listing).await;
    assert!(String::from_utf8_lossy(&out).contains("sleep 300"), "the exec is not running");
    drop(body);
    let t = Instant::now();
    loop {
        let (out, _, _, _) = exec(&mut c, &settings, &listing).await;
        if !String::from_utf8_lossy(&out).contains("sleep 300") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the cancelled exec's process lives on");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let config: GetSandboxConfigResponse =
        unary(&mut c, &settings, "GetSandboxConfig", &GetSandboxConfigRequest { sandbox_id: id.clone() }).await;
    assert_eq!(config.policy.as_ref(), Some(&policy));
    assert_eq!(config.policy_hash, super::policy_hash(&policy));
    assert_eq!((config.version, config.policy_source), (1, PolicySource::Sandbox as i32));

    let deleted: DeleteSandboxResponse = unary(
        &mut c,
        &settings,
        "DeleteSandbox",
        &DeleteSandboxRequest { name: name.clone(), workspace: String::new() },
    )
    .await;
    assert!(deleted.deleted);
    let (gone, text, _) =
        call(&mut c, &settings, "GetSandbox", &GetSandboxRequest { name: name.clone(), workspace: String::new() })
            .await
            .expect("call");
    assert_eq!((gone, text.as_str()), (5, "sandbox not found"));
    let container = format!("plimsoll-fake-{id}");
    let still = tokio::process::Command::new("docker").args(["inspect", &container]).output().await.expect("docker");
    assert!(!still.status.success(), "the container outlived its sandbox");
}
