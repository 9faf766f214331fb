//! The fake's calls answered in process, without docker: each misbehaviour,
//! each check, and what a read-back shows.

use super::*;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use proto::{ExecSandboxRequest, SandboxSpec};

const IMAGE: &str = "sha256:137a80d96f6735131358f0085267fae58a5af6f8a66c5d9ee50f874c018c6430";

fn fake(mode: Option<Mode>) -> Arc<Fake> {
    let f = Fake::new(Arc::new(Backing::new(IMAGE.into())), mode);
    let _ = f.driver_version.set("20.10.24".into());
    Arc::new(f)
}

fn call(method: &str, message: &impl prost::Message) -> Request {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    Request {
        stream: None,
        upgrade: None,
        method: "POST".into(),
        host: HOST.into(),
        path: format!("{SERVICE}{method}"),
        query: String::new(),
        headers,
        body: grpc::frame(&message.encode_to_vec()),
    }
}

/// The answer's status and its message bytes.
async fn answer(r: http::Response<Body>) -> (String, Vec<Bytes>) {
    let head = r.headers().get("grpc-status").map(|v| v.to_str().unwrap_or_default().to_string());
    let body = r.into_body().collect().await.expect("body");
    let status = body
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .or(head)
        .unwrap_or_default();
    (status, grpc::unframe(&body.to_bytes()).expect("frames"))
}

/// A sandbox stored as a create would, its container `backend`.
fn stored(f: &Fake, name: &str, labels: &[(&str, &str)], backend: Backend) -> String {
    let spec = SandboxSpec {
        template: Some(proto::SandboxTemplate { image: f.image(), ..Default::default() }),
        policy: Some(SandboxPolicy { version: 1, ..SandboxPolicy::default() }),
        ..SandboxSpec::default()
    };
    let req = CreateSandboxRequest {
        spec: Some(spec),
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    let (sandbox, _) = f.plan(req).expect("valid");
    let id = sandbox.metadata.as_ref().map(|m| m.id.clone()).unwrap_or_default();
    lock(&f.sandboxes).insert(id.clone(), Record { sandbox, backend, config_reads: 0 });
    id
}

async fn get(f: &Arc<Fake>, name: &str) -> (String, Vec<Bytes>) {
    let req = GetSandboxRequest { name: name.into(), workspace: String::new() };
    answer(Arc::clone(f).handle(call("GetSandbox", &req)).await).await
}

fn sandbox_of(message: &Bytes) -> Sandbox {
    SandboxResponse::decode(message.clone()).expect("decodes").sandbox.expect("sandbox")
}

#[test]
fn every_mode_parses_and_ids_are_uuid4() {
    for (m, _) in MODES {
        assert!(Mode::parse(m).is_some(), "{m}");
    }
    assert_eq!(Mode::parse("nope"), None);
    let id = uuid4();
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "4");
    assert!("89ab".contains(&id[19..20]));
    assert!(petname().len() <= 19 && validate::name(&petname()).is_ok());
}

#[test]
fn only_the_backing_image_pinned_by_id_runs() {
    let f = fake(None);
    assert!(f.runs(&f.image()));
    assert!(f.runs(&format!("ghcr.io/x/y@{IMAGE}")));
    assert!(!f.runs("plimsoll-sandbox:latest"));
    assert!(!f.runs(&format!("@{IMAGE}")));
    assert!(!f.runs(&format!("x@sha256:{}", "0".repeat(64))));
}

#[test]
fn create_normalises_as_the_gateway_does() {
    let f = fake(None);
    let req = CreateSandboxRequest { spec: Some(SandboxSpec::default()), ..Default::default() };
    let (s, shape) = f.plan(req).expect("valid");
    let spec = s.spec.expect("spec");
    assert_eq!(spec.command, vec!["/bin/bash", "-l"]);
    assert!(spec.tty);
    assert_eq!(spec.template.map(|t| t.image), Some(f.image()));
    let m = s.metadata.expect("metadata");
    assert!(validate::name(&m.name).is_ok() && !m.name.is_empty());
    assert_eq!((m.resource_version, m.workspace.as_str()), (1, "default"));
    assert_eq!((shape.memory_bytes, shape.cpus), (MAX_MEMORY, None));
    assert!(shape.tmpfs.is_empty());
}

#[test]
fn create_refuses_as_the_gateway_does() {
    let f = fake(None);
    let no_spec = CreateSandboxRequest::default();
    assert_eq!(f.plan(no_spec).expect_err("refused"), Status::invalid_argument("spec is required"));
    let spec = SandboxSpec { providers: vec!["github".into()], ..Default::default() };
    let with_provider = CreateSandboxRequest { spec: Some(spec), ..Default::default() };
    assert_eq!(f.plan(with_provider).expect_err("refused"), Status::failed_precondition("provider 'github' not found"));
    let bad_label = CreateSandboxRequest {
        spec: Some(SandboxSpec::default()),
        labels: [("app".to_string(), "-x".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(f.plan(bad_label).expect_err("refused").code, Code::InvalidArgument);
    let other =
        CreateSandboxRequest { spec: Some(SandboxSpec::default()), workspace: "team".into(), ..Default::default() };
    assert_eq!(f.plan(other).expect_err("refused"), Status::not_found("workspace 'team' not found"));
}

#[tokio::test]
async fn a_taken_name_or_a_foreign_image_is_refused_before_any_container() {
    let f = fake(None);
    stored(&f, "box", &[], Backend::Running);
    let again = CreateSandboxRequest { spec: Some(SandboxSpec::default()), name: "box".into(), ..Default::default() };
    let (status, _) = answer(Arc::clone(&f).handle(call("CreateSandbox", &again)).await).await;
    assert_eq!(status, "6");
    let spec = SandboxSpec {
        template: Some(proto::SandboxTemplate { image: "ubuntu:24.04".into(), ..Default::default() }),
        ..Default::default()
    };
    let foreign = CreateSandboxRequest { spec: Some(spec), ..Default::default() };
    let (status, _) = answer(Arc::clone(&f).handle(call("CreateSandbox", &foreign)).await).await;
    assert_eq!(status, "9");
    assert_eq!(lock(&f.sandboxes).len(), 1);
}

#[tokio::test]
async fn sandboxes_read_back_by_name_with_their_phase() {
    let f = fake(None);
    stored(&f, "starting", &[], Backend::Starting);
    stored(&f, "running", &[], Backend::Running);
    let s = sandbox_of(&get(&f, "starting").await.1[0]);
    let status = s.status.expect("status");
    assert_eq!(status.phase, SandboxPhase::Provisioning as i32);
    assert_eq!((status.conditions[0].status.as_str(), status.conditions[0].reason.as_str()), ("False", "Starting"));
    let s = sandbox_of(&get(&f, "running").await.1[0]);
    let status = s.status.expect("status");
    assert_eq!(status.phase, SandboxPhase::Ready as i32);
    assert_eq!(status.conditions[0].reason, "BackendReady");
    assert_eq!(get(&f, "absent").await.0, "5");
    assert_eq!(get(&f, "").await.0, "3");
}

#[tokio::test]
async fn never_ready_keeps_a_running_sandbox_provisioning() {
    let f = fake(Some(Mode::NeverReady));
    let id = stored(&f, "box", &[], Backend::Running);
    let status = sandbox_of(&get(&f, "box").await.1[0]).status.expect("status");
    assert_eq!(status.phase, SandboxPhase::Provisioning as i32);
    assert_eq!(status.conditions[0].reason, "SupervisorNotConnected");
    let exec = ExecSandboxRequest { sandbox_id: id, command: vec!["true".into()], ..Default::default() };
    let (status, _) = answer(Arc::clone(&f).handle(call("ExecSandbox", &exec)).await).await;
    assert_eq!(status, "9");
}

#[tokio::test]
async fn list_honours_the_selector_limit_and_offset() {
    let f = fake(None);
    stored(&f, "a", &[("app", "web"), ("tier", "1")], Backend::Running);
    stored(&f, "b", &[("app", "web")], Backend::Running);
    stored(&f, "c", &[("app", "db")], Backend::Running);
    let names = |messages: Vec<Bytes>| -> Vec<String> {
        let list = ListSandboxesResponse::decode(messages[0].clone()).expect("list");
        list.sandboxes.into_iter().filter_map(|s| s.metadata.map(|m| m.name)).collect()
    };
    let list = |selector: &str, limit: u32, offset: u32| ListSandboxesRequest {
        label_selector: selector.into(),
        limit,
        offset,
        ..Default::default()
    };
    let (_, m) = answer(Arc::clone(&f).handle(call("ListSandboxes", &list("app=web", 0, 0))).await).await;
    assert_eq!(names(m), vec!["a", "b"]);
    let (_, m) = answer(Arc::clone(&f).handle(call("ListSandboxes", &list("app=web,tier=1", 0, 0))).await).await;
    assert_eq!(names(m), vec!["a"]);
    let (_, m) = answer(Arc::clone(&f).handle(call("ListSandboxes", &list("", 1, 1))).await).await;
    assert_eq!(names(m), vec!["b"]);
    let (status, _) = answer(Arc::clone(&f).handle(call("ListSandboxes", &list("app in (web)", 0, 0))).await).await;
    assert_eq!(status, "3");
}

#[tokio::test]
async fn weaker_reads_back_more_than_was_asked() {
    let f = fake(Some(Mode::Weaker));
    stored(&f, "box", &[], Backend::Running);
    let spec = sandbox_of(&get(&f, "box").await.1[0]).spec.expect("spec");
    let limits = spec.template.and_then(|t| t.resources).and_then(|r| r.fields.get("limits").cloned());
    let Some(prost_types::Value { kind: Some(prost_types::value::Kind::StructValue(limits)) }) = limits else {
        panic!("no limits read back");
    };
    assert_eq!(limits.fields.get("memory"), Some(&string_value("16Gi")));
    let policy = spec.policy.expect("policy");
    assert_eq!(policy.network_policies["egress"].endpoints[0].host, "*");
    // What was stored is untouched.
    let stored_policy = lock(&f.sandboxes).values().next().and_then(|r| r.sandbox.spec.clone()?.policy);
    assert!(stored_policy.expect("stored").network_policies.is_empty());
}

#[tokio::test]
async fn unknown_field_puts_field_99_in_the_template() {
    let f = fake(Some(Mode::UnknownField));
    stored(&f, "box", &[], Backend::Running);
    let message = &get(&f, "box").await.1[0];
    let s = sandbox_of(message);
    let template = s.spec.as_ref().and_then(|sp| sp.template.clone()).expect("template");
    let mut bytes = template.encode_to_vec();
    bytes.extend_from_slice(&UNKNOWN_FIELD);
    assert!(message.windows(bytes.len()).any(|w| w == bytes.as_slice()), "field 99 missing");
    let plain = fake(None);
    stored(&plain, "box", &[], Backend::Running);
    assert!(!get(&plain, "box").await.1[0].windows(3).any(|w| w == UNKNOWN_FIELD));
}

#[tokio::test]
async fn malformed_answers_bytes_that_do_not_decode() {
    let f = fake(Some(Mode::Malformed));
    stored(&f, "box", &[], Backend::Running);
    let (status, messages) = get(&f, "box").await;
    assert_eq!(status, "0");
    assert!(SandboxResponse::decode(messages[0].clone()).is_err());
    assert_eq!(get(&f, "absent").await.0, "5");
}

#[tokio::test]
async fn gateway_info_names_the_driver() {
    for (mode, driver) in [(None, "docker"), (Some(Mode::ForeignDriver), "kubernetes")] {
        let f = fake(mode);
        let (_, m) =
            answer(Arc::clone(&f).handle(call("GetGatewayInfo", &proto::GetGatewayInfoRequest {})).await).await;
        let info = proto::GetGatewayInfoResponse::decode(m[0].clone()).expect("info");
        assert_eq!(info.status, proto::ServiceStatus::Healthy as i32);
        let d = &info.compute_drivers[0];
        assert_eq!((d.name.as_str(), d.capabilities.as_ref().map(|c| c.driver_name.as_str())), (driver, Some(driver)));
    }
}

#[tokio::test]
async fn gateway_config_reports_proposals_only_when_misbehaving() {
    for (mode, enabled) in [(None, false), (Some(Mode::Proposals), true)] {
        let f = fake(mode);
        let req = proto::GetGatewayConfigRequest {};
        let (_, m) = answer(Arc::clone(&f).handle(call("GetGatewayConfig", &req)).await).await;
        let config = proto::GetGatewayConfigResponse::decode(m[0].clone()).expect("config");
        let proposals = &config.settings["agent_policy_proposals_enabled"];
        assert_eq!(proposals.value, Some(Setting::BoolValue(enabled)));
        assert_eq!(config.settings["proposal_approval_mode"].value, Some(Setting::StringValue("manual".into())));
    }
}

#[tokio::test]
async fn sandbox_config_hashes_the_submitted_policy_unless_it_drifted() {
    for (mode, source) in [(None, PolicySource::Sandbox), (Some(Mode::PolicyDrift), PolicySource::Global)] {
        let f = fake(mode);
        let id = stored(&f, "box", &[], Backend::Running);
        let req = proto::GetSandboxConfigRequest { sandbox_id: id };
        let (_, m) = answer(Arc::clone(&f).handle(call("GetSandboxConfig", &req)).await).await;
        let config = proto::GetSandboxConfigResponse::decode(m[0].clone()).expect("config");
        let policy = config.policy.expect("policy");
        assert_eq!(config.policy_hash, policy_hash(&policy));
        assert_eq!(config.policy_source, source as i32);
        assert_eq!((config.version, config.config_revision), (1, 1));
        let submitted = SandboxPolicy { version: 1, ..SandboxPolicy::default() };
        assert_eq!(policy == submitted, mode.is_none());
    }
    let f = fake(None);
    let req = proto::GetSandboxConfigRequest { sandbox_id: "nope".into() };
    assert_eq!(answer(Arc::clone(&f).handle(call("GetSandboxConfig", &req)).await).await.0, "5");
}

#[tokio::test]
async fn a_late_drift_shows_only_from_a_sandboxs_third_config_read() {
    let f = fake(Some(Mode::LateDrift));
    let id = stored(&f, "box", &[], Backend::Running);
    let mut sources = Vec::new();
    for _ in 0..4 {
        let req = proto::GetSandboxConfigRequest { sandbox_id: id.clone() };
        let (_, m) = answer(Arc::clone(&f).handle(call("GetSandboxConfig", &req)).await).await;
        sources.push(proto::GetSandboxConfigResponse::decode(m[0].clone()).expect("config").policy_source);
    }
    let (own, global) = (PolicySource::Sandbox as i32, PolicySource::Global as i32);
    assert_eq!(sources, vec![own, own, global, global]);
}

#[test]
fn a_policy_hash_is_lower_hex_sha256_of_the_encoding() {
    let mut p = SandboxPolicy { version: 1, ..SandboxPolicy::default() };
    p.network_policies.insert("b".into(), rule("b", "b.example.com"));
    p.network_policies.insert("a".into(), rule("a", "a.example.com"));
    let h = policy_hash(&p);
    assert_eq!(h, hex::encode(Sha256::digest(p.encode_to_vec())));
    assert!(h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_eq!(policy_hash(&p.clone()), h);
}

#[tokio::test]
async fn undeletable_answers_internal_and_keeps_the_sandbox() {
    let f = fake(Some(Mode::Undeletable));
    stored(&f, "box", &[], Backend::Running);
    let req = DeleteSandboxRequest { name: "box".into(), workspace: String::new() };
    let r = Arc::clone(&f).handle(call("DeleteSandbox", &req)).await;
    let message = r.headers().get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert_eq!(answer(r).await.0, "13");
    assert!(message.starts_with("delete sandbox failed: "), "{message}");
    assert_eq!(get(&f, "box").await.0, "0");
    let absent = DeleteSandboxRequest { name: "absent".into(), workspace: String::new() };
    let f = fake(None);
    assert_eq!(answer(Arc::clone(&f).handle(call("DeleteSandbox", &absent)).await).await.0, "5");
}

#[tokio::test]
async fn redirect_answers_307_without_grpc() {
    let r = fake(Some(Mode::Redirect)).handle(call("Health", &proto::HealthRequest {})).await;
    assert_eq!(r.status(), 307);
    assert_eq!(r.headers()[http::header::LOCATION], "https://elsewhere.openshell.test/");
    assert!(r.headers().get("grpc-status").is_none());
}

#[tokio::test]
async fn slow_answers_after_35_seconds() {
    let health = || call("Health", &proto::HealthRequest {});
    let quick = tokio::time::timeout(Duration::from_millis(500), fake(None).handle(health())).await;
    assert!(quick.is_ok());
    let slow = tokio::time::timeout(Duration::from_millis(500), fake(Some(Mode::Slow)).handle(health())).await;
    assert!(slow.is_err(), "a slow fake answered at once");
}

#[tokio::test]
async fn unknown_methods_and_bad_requests_are_refused_as_tonic_does() {
    let f = fake(None);
    let (status, _) = answer(Arc::clone(&f).handle(call("StopSandbox", &GetSandboxRequest::default())).await).await;
    assert_eq!(status, "12");
    let mut other = call("Health", &proto::HealthRequest {});
    other.path = "/grpc.health.v1.Health/Check".into();
    assert_eq!(answer(Arc::clone(&f).handle(other).await).await.0, "12");
    let mut json = call("Health", &proto::HealthRequest {});
    json.headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    assert_eq!(Arc::clone(&f).handle(json).await.status(), 415);
    let mut garbage = call("GetSandbox", &proto::HealthRequest {});
    garbage.body = grpc::frame(&[0xff, 0xff]);
    assert_eq!(answer(Arc::clone(&f).handle(garbage).await).await.0, "13");
    let mut huge = call("GetSandbox", &proto::HealthRequest {});
    huge.body = Bytes::from([&[0u8, 0, 0x10, 0, 1][..], &vec![0u8; (1 << 20) + 1]].concat());
    assert_eq!(answer(Arc::clone(&f).handle(huge).await).await.0, "11");
}

#[tokio::test]
async fn exec_checks_come_before_the_stream() {
    let f = fake(None);
    let starting = stored(&f, "box", &[], Backend::Starting);
    let exec = |id: &str, command: &[&str]| ExecSandboxRequest {
        sandbox_id: id.into(),
        command: command.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    let status = |r: http::Response<Body>| {
        r.headers().get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
    };
    let r = Arc::clone(&f).handle(call("ExecSandbox", &exec("nope", &["true"]))).await;
    assert_eq!(status(r), "5");
    let r = Arc::clone(&f).handle(call("ExecSandbox", &exec(&starting, &["true"]))).await;
    assert_eq!(status(r), "9");
    let r = Arc::clone(&f).handle(call("ExecSandbox", &exec(&starting, &[]))).await;
    assert_eq!(status(r), "3");
}

mod forward {
    use super::*;
    use proto::{
        CreateSshSessionRequest, CreateSshSessionResponse, ForwardPayload, ForwardTarget, RevokeSshSessionRequest,
        RevokeSshSessionResponse, TcpForwardFrame, TcpForwardInit, TcpRelayTarget,
    };

    fn init(sandbox: &str, host: &str, port: u32, token: &str) -> TcpForwardFrame {
        let target = Some(ForwardTarget::Tcp(TcpRelayTarget { host: host.into(), port }));
        let init = TcpForwardInit {
            sandbox_id: sandbox.into(),
            service_id: String::new(),
            target,
            authorization_token: token.into(),
        };
        TcpForwardFrame { payload: Some(ForwardPayload::Init(init)) }
    }

    fn data(bytes: &[u8]) -> TcpForwardFrame {
        TcpForwardFrame { payload: Some(ForwardPayload::Data(bytes.to_vec())) }
    }

    /// A ForwardTcp call whose frames the returned sender streams.
    fn forward_call() -> (Request, tokio::sync::mpsc::Sender<Bytes>) {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut req = call("ForwardTcp", &data(b""));
        req.body = Bytes::new();
        req.stream = Some(rx);
        (req, tx)
    }

    async fn send(tx: &tokio::sync::mpsc::Sender<Bytes>, frame: &TcpForwardFrame) {
        tx.send(grpc::frame(&frame.encode_to_vec())).await.expect("the fake reads the stream");
    }

    /// A refusal's code and message (a trailers-only answer).
    fn refusal(r: &http::Response<Body>) -> (String, String) {
        let h = |k: &str| r.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        (h("grpc-status"), h("grpc-message").replace("%20", " "))
    }

    /// The answer to one ForwardTcp whose whole stream is `frames`.
    async fn refused(f: &Arc<Fake>, frames: &[TcpForwardFrame]) -> (String, String) {
        let (req, tx) = forward_call();
        for frame in frames {
            send(&tx, frame).await;
        }
        drop(tx);
        refusal(&Arc::clone(f).handle(req).await)
    }

    async fn session(f: &Arc<Fake>, sandbox: &str) -> (String, String) {
        let (status, messages) = answer(
            Arc::clone(f)
                .handle(call("CreateSshSession", &CreateSshSessionRequest { sandbox_id: sandbox.into() }))
                .await,
        )
        .await;
        let token = messages
            .first()
            .map(|m| CreateSshSessionResponse::decode(m.clone()).expect("decodes").token)
            .unwrap_or_default();
        (status, token)
    }

    #[tokio::test]
    async fn sessions_and_forwards_are_checked_as_the_gateway_checks_them() {
        let f = fake(None);
        let id = stored(&f, "box", &[], Backend::Running);
        let other = stored(&f, "other", &[], Backend::Running);
        let starting = stored(&f, "starting", &[], Backend::Starting);
        assert_eq!(session(&f, "").await.0, "3");
        assert_eq!(session(&f, "nope").await.0, "5");
        assert_eq!(session(&f, &starting).await.0, "9");
        let (status, token) = session(&f, &id).await;
        assert_eq!((status.as_str(), token.len()), ("0", 36));
        let (_, foreign) = session(&f, &other).await;
        let cases: Vec<(Vec<TcpForwardFrame>, (&str, &str))> = vec![
            (vec![], ("3", "empty ForwardTcp stream")),
            (vec![data(b"x")], ("3", "first TcpForwardFrame must be init")),
            (vec![init("", "127.0.0.1", 80, &token)], ("3", "sandbox_id is required")),
            (
                vec![TcpForwardFrame {
                    payload: Some(ForwardPayload::Init(TcpForwardInit {
                        sandbox_id: id.clone(),
                        ..Default::default()
                    })),
                }],
                ("3", "tcp forward target is required"),
            ),
            (vec![init(&id, "127.0.0.1", 0, &token)], ("3", "tcp target port must be between 1 and 65535")),
            (vec![init(&id, "", 80, &token)], ("3", "tcp target host is required")),
            (vec![init(&id, "10.0.0.1", 80, &token)], ("3", "tcp target host must be loopback")),
            (vec![init(&id, "example.com", 80, &token)], ("3", "tcp target host must be loopback")),
            (vec![init("nope", "127.0.0.1", 80, &token)], ("5", "sandbox not found")),
            (vec![init(&starting, "127.0.0.1", 80, &token)], ("9", "sandbox is not ready")),
            (vec![init(&id, "127.0.0.1", 80, "")], ("16", "authorization_token is required for ForwardTcp")),
            (vec![init(&id, "127.0.0.1", 80, "made-up")], ("16", "SSH session token not found")),
            (vec![init(&id, "127.0.0.1", 80, &foreign)], ("16", "SSH session token is not valid")),
        ];
        for (frames, (code, message)) in cases {
            assert_eq!(refused(&f, &frames).await, (code.to_string(), message.to_string()), "{frames:?}");
        }
        let revoke = |token: &str| RevokeSshSessionRequest { token: token.into() };
        let (status, m) = answer(Arc::clone(&f).handle(call("RevokeSshSession", &revoke(&token))).await).await;
        assert_eq!(
            (status.as_str(), RevokeSshSessionResponse::decode(m[0].clone()).expect("decodes").revoked),
            ("0", true)
        );
        let (_, m) = answer(Arc::clone(&f).handle(call("RevokeSshSession", &revoke("made-up"))).await).await;
        assert!(!RevokeSshSessionResponse::decode(m[0].clone()).expect("decodes").revoked);
        assert_eq!(
            refused(&f, &[init(&id, "127.0.0.1", 80, &token)]).await,
            ("16".to_string(), "SSH session token is not valid".to_string()),
            "a revoked token"
        );
    }

    #[tokio::test]
    async fn in_mode_forward_refused_every_admitted_forward_is_unavailable() {
        let f = fake(Some(Mode::ForwardRefused));
        let id = stored(&f, "box", &[], Backend::Running);
        let (_, token) = session(&f, &id).await;
        assert_eq!(
            refused(&f, &[init(&id, "127.0.0.1", 80, &token)]).await,
            ("14".to_string(), "supervisor relay failed: connection refused".to_string())
        );
        assert_eq!(refused(&f, &[init(&id, "127.0.0.1", 80, "made-up")]).await.0, "16", "checks come first");
    }

    /// The data frames of a forward's answer until `want` bytes came, then the
    /// rest of the stream and its status.
    async fn echoed(body: &mut Body, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut pending = Vec::new();
        while got.len() < want {
            let frame = tokio::time::timeout(std::time::Duration::from_secs(20), body.frame())
                .await
                .expect("an answer in time")
                .expect("a frame")
                .expect("no error");
            if let Ok(d) = frame.into_data() {
                pending.extend_from_slice(&d);
                for m in grpc::take_messages(&mut pending).expect("frames") {
                    if let Some(ForwardPayload::Data(d)) = TcpForwardFrame::decode(m).expect("decodes").payload {
                        got.extend(d);
                    }
                }
            }
        }
        got
    }

    /// On a real container: a forward reaches a loopback port inside the
    /// sandbox and carries bytes both ways; a token carries three forwards at
    /// once; a port nothing listens on ends the call UNAVAILABLE.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_forward_reaches_a_loopback_port_inside_the_sandbox() {
        let Some(image) = crate::util::sandbox_image_or_skip("openshell::forward") else { return };
        let f = Arc::new(Fake::new(Arc::new(Backing::new(image)), None));
        let id = stored(&f, "echo", &[], Backend::Running);
        f.backing.create(&id, &crate::backing::Shape::plain(256, 1, 64)).await.expect("a container");
        let container = format!("plimsoll-fake-{id}");
        let _removed = crate::util::Removed(id.clone());
        let echo = "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 7000))\ns.listen(8)\nwhile True:\n    c, _ = s.accept()\n    import threading\n    def serve(c):\n        while True:\n            b = c.recv(65536)\n            if not b:\n                break\n            c.sendall(b)\n        c.close()\n    threading.Thread(target=serve, args=(c,)).start()";
        let started = std::process::Command::new("docker")
            .args(["exec", "-d", &container, "python3", "-c", echo])
            .status()
            .expect("docker exec");
        assert!(started.success());
        let listening = || {
            let tcp = std::process::Command::new("docker").args(["exec", &container, "cat", "/proc/net/tcp"]).output();
            tcp.is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).lines().any(|l| l.contains(" 0100007F:1B58 ") && l.contains(" 0A "))
            })
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !listening() {
            assert!(std::time::Instant::now() < until, "the echo server did not listen");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let (_, token) = session(&f, &id).await;
        let mut open = Vec::new();
        for i in 0..3 {
            let (req, tx) = forward_call();
            send(&tx, &init(&id, "localhost", 7000, &token)).await;
            let r = Arc::clone(&f).handle(req).await;
            assert_eq!(r.headers().get("grpc-status"), None, "forward {i} refused: {:?}", refusal(&r));
            let mut body = r.into_body();
            let msg = format!("hello {i}\n");
            send(&tx, &data(msg.as_bytes())).await;
            assert_eq!(echoed(&mut body, msg.len()).await, msg.as_bytes());
            open.push((tx, body));
        }
        let (status, message) = refused(&f, &[init(&id, "127.0.0.1", 7000, &token)]).await;
        assert_eq!((status.as_str(), message.as_str()), ("8", "SSH session connection limit reached"));
        // The client ends its side: the target's connection ends, then the call, OK.
        let (tx, mut body) = open.pop().expect("a forward");
        drop(tx);
        let mut status = None;
        while let Some(frame) = body.frame().await {
            if let Ok(t) = frame.expect("no error").into_trailers() {
                status = t.get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_string);
            }
        }
        assert_eq!(status.as_deref(), Some("0"));
        let (req, tx) = forward_call();
        send(&tx, &init(&id, "127.0.0.1", 7001, &token)).await;
        let r = Arc::clone(&f).handle(req).await;
        // The ended forward's slot is free before its status reached us, so
        // this call is not refused at once.
        assert_eq!(r.headers().get("grpc-status"), None, "refused: {:?}", refusal(&r));
        let mut body = r.into_body();
        let mut status = None;
        while let Some(frame) = body.frame().await {
            if let Ok(t) = frame.expect("no error").into_trailers() {
                status = t.get("grpc-status").and_then(|v| v.to_str().ok()).map(str::to_string);
            }
        }
        assert_eq!(status.as_deref(), Some("14"), "a port nothing listens on");
    }
}
