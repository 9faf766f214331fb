use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load(None, &env(pairs))
}

#[test]
fn defaults_are_the_originals() {
    let c = load(&[]).expect("defaults");
    assert_eq!(c.addr, ":8746");
    assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:9464"));
    assert_eq!(c.provider, ProviderKind::Disabled);
    assert_eq!(c.admission, Admission { max_concurrent: 8, per_key_concurrent: 4, rate_per_min: 30, rate_burst: 30 });
    assert_eq!(c.auth, AuthSource::Open);
}

#[test]
fn sessions_are_off_by_default_and_read_the_originals_durations() {
    let c = load(&[]).expect("defaults");
    assert_eq!(c.sessions, SessionSettings::default());
    assert_eq!(
        (c.sessions.max, c.sessions.lifetime, c.sessions.idle),
        (0, Duration::from_secs(1800), Duration::from_secs(300))
    );
    let c = load(&[
        ("SANDBOX_MAX_SESSIONS", "16"),
        ("SANDBOX_MAX_SESSIONS_PER_OWNER", "2"),
        ("SANDBOX_SESSION_LIFETIME", "1h30m"),
        ("SANDBOX_SESSION_IDLE", "0"),
        ("SANDBOX_SESSION_DISK_MB", "0"),
    ])
    .expect("sessions");
    assert_eq!((c.sessions.max, c.sessions.per_owner), (16, 2));
    assert_eq!(
        (c.sessions.lifetime, c.sessions.idle, c.sessions.disk_mb),
        (Duration::from_secs(5400), Duration::ZERO, 0)
    );
    assert_eq!(parse_duration("X", "250ms").expect("ms"), Duration::from_millis(250));
    assert_eq!(parse_duration("X", "90").expect("bare seconds"), Duration::from_secs(90));
}

#[test]
fn bad_session_settings_name_the_variable_and_the_fix() {
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("SANDBOX_SESSION_LIFETIME", "soon")],
            "SANDBOX_SESSION_LIFETIME=\"soon\" is not a duration: write it as 90s, 5m, 1h30m or 250ms",
        ),
        (&[("SANDBOX_SESSION_LIFETIME", "13h")], "SANDBOX_SESSION_LIFETIME=46800s is outside 1s..12h"),
        (&[("SANDBOX_SESSION_IDLE", "500ms")], "SANDBOX_SESSION_IDLE=500ms is outside 1s..12h (0 = never suspend)"),
        (&[("SANDBOX_SESSION_DISK_MB", "2000000")], "SANDBOX_SESSION_DISK_MB=2000000 is over 1048576 (1 TiB)"),
        (
            &[("SANDBOX_MAX_SESSIONS_PER_CALLER", "2")],
            "SANDBOX_MAX_SESSIONS_PER_CALLER=2 has no effect: sessions are off; set SANDBOX_MAX_SESSIONS above 0 to turn them on",
        ),
    ];
    for (vars, want) in cases {
        let e = load(vars).expect_err("refused");
        assert_eq!(e.to_string(), want, "{vars:?}");
    }
}

#[test]
fn an_unknown_variable_fails_startup_naming_it() {
    let e = load(&[("SANDBOX_MIN_ISOLATON", "kernel"), ("PLIMSOLL_CALLER_TOKEN", "x")]).expect_err("typo");
    assert_eq!(
        e.to_string(),
        "unknown variable SANDBOX_MIN_ISOLATON: check the spelling (a misspelt safety setting must not be ignored)"
    );
}

#[test]
fn malformed_values_name_the_variable() {
    let cases: [(&[(&str, &str)], &str); 9] = [
        (&[("SANDBOX_MAX_CONCURRENT", "many")], "SANDBOX_MAX_CONCURRENT=\"many\" is not a whole number"),
        (&[("SANDBOX_MAX_CONCURRENT", "0")], "SANDBOX_MAX_CONCURRENT=0 is outside 1..4096"),
        (&[("SANDBOX_MAX_CONCURRENT", "4097")], "SANDBOX_MAX_CONCURRENT=4097 is outside 1..4096"),
        (&[("PLIMSOLL_INSECURE", "yes")], "PLIMSOLL_INSECURE=\"yes\" is not a boolean: use 1/true or 0/false"),
        (
            &[("SANDBOX_MIN_ISOLATION", "none")],
            "SANDBOX_MIN_ISOLATION: minimum isolation \"none\" is not a floor; use process, container, kernel or vm, or leave it empty",
        ),
        (
            &[("SANDBOX_PROVIDER", "dokcer")],
            "SANDBOX_PROVIDER=\"dokcer\" is not a provider; use wasm, docker, e2b, dockercloud, openshell or agentsandbox (or leave it unset)",
        ),
        (
            &[("PLIMSOLL_TOKEN", "short")],
            "PLIMSOLL_TOKEN is shorter than 32 characters; use a long random token (plimsoll-host callers create prints one)",
        ),
        (&[("PLIMSOLL_TLS_CERT", "/c.pem")], "PLIMSOLL_TLS_CERT and PLIMSOLL_TLS_KEY go together: set both or neither"),
        (
            &[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_PIDS", "64")],
            "SANDBOX_PIDS is set, but the wasm provider cannot enforce it (it enforces memory only); unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(pairs).expect_err(want).to_string(), want);
    }
    let e = load(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "inprocess")]).expect_err("a typo");
    assert!(e.to_string().ends_with("SANDBOX_WASM_ENGINE=\"inprocess\": use in-process or jailed"), "{e}");
}

#[test]
fn the_wasm_engine_is_jailed_unless_opted_out() {
    let engine = |v: &[(&str, &str)]| load(v).expect("config").wasm_engine;
    assert_eq!(engine(&[("SANDBOX_PROVIDER", "wasm")]), WasmEngine::Jailed);
    assert_eq!(engine(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "")]), WasmEngine::Jailed);
    assert_eq!(engine(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "in-process")]), WasmEngine::InProcess);
}

#[test]
fn docker_settings_are_required_for_docker_and_refused_elsewhere() {
    let full: [(&str, &str); 4] = [
        ("SANDBOX_PROVIDER", "docker"),
        ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
        ("SANDBOX_DOCKER_PLUGIN", "/opt/plimsoll/docker"),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub, /etc/plimsoll/ci.pub"),
    ];
    let c = load(&full).expect("loads");
    let d = c.docker.expect("docker settings");
    assert_eq!((d.runtime.as_str(), d.guest_uid), ("runc", 61000));
    assert_eq!(d.plugin.trusted_keys.len(), 2);
    let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let with = |pair: (&'static str, &'static str)| {
        let mut v = full.to_vec();
        v.push(pair);
        v
    };
    let cases: [(Vec<(&str, &str)>, &str); 6] = [
        (
            without("SANDBOX_DOCKER_IMAGE"),
            "SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_IMAGE: build the image with images/build.sh and set the ID it prints",
        ),
        (
            without("SANDBOX_DOCKER_PLUGIN"),
            "SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_PLUGIN: the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)",
        ),
        (
            without("SANDBOX_DOCKER_PLUGIN_KEYS"),
            "SANDBOX_DOCKER_PLUGIN_KEYS is empty: name the public key(s) whose plugin signatures you trust",
        ),
        (with(("SANDBOX_DOCKER_RUNTIME", "kata")), "SANDBOX_DOCKER_RUNTIME=\"kata\": use runc or runsc"),
        (with(("SANDBOX_DOCKER_GUEST_UID", "root")), "SANDBOX_DOCKER_GUEST_UID=\"root\" is not a whole number"),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_DOCKER_IMAGE", "sha256:abc")],
            "SANDBOX_DOCKER_IMAGE is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=docker or unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
}

#[test]
fn the_warm_pool_is_off_by_default_bounded_docker_only_and_counted_against_total_memory() {
    let docker: [(&str, &str); 4] = [
        ("SANDBOX_PROVIDER", "docker"),
        ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
        ("SANDBOX_DOCKER_PLUGIN", "/opt/plimsoll/docker"),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| [&docker[..], extra].concat();
    assert_eq!(load(&docker).expect("loads").docker.expect("docker").warm_pool, 0);
    let c = load(&with(&[("SANDBOX_WARM_POOL", "64")])).expect("loads");
    assert_eq!(c.docker.expect("docker").warm_pool, 64);
    let cases: [(Vec<(&str, &str)>, &str); 4] = [
        (with(&[("SANDBOX_WARM_POOL", "65")]), "SANDBOX_WARM_POOL=65 is outside 0..64"),
        (with(&[("SANDBOX_WARM_POOL", "some")]), "SANDBOX_WARM_POOL=\"some\" is not a whole number"),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WARM_POOL", "2")],
            "SANDBOX_WARM_POOL is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=docker or unset it",
        ),
        (
            with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "2048")]),
            "SANDBOX_TOTAL_MEMORY_MB=2048 does not fit one run of 256 MiB beside the warm pool's 8 containers (SANDBOX_WARM_POOL per shape, 4 shapes)",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
    // Each container the pool may hold counts one run's memory.
    let c = load(&with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "4096")])).expect("fits");
    assert_eq!(c.admission.max_concurrent, 8);
    let c = load(&with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "2560")])).expect("fits");
    assert_eq!(c.admission.max_concurrent, 2);
    let toml = std::env::temp_dir().join(format!("plimsoll-pool-{}.toml", std::process::id()));
    std::fs::write(&toml, "[docker]\nwarm-pool = 3\n").expect("write");
    let c = Config::load(Some(&toml), &env(&docker)).expect("loads the file");
    assert_eq!(c.docker.expect("docker").warm_pool, 3);
    let _ = std::fs::remove_file(&toml);
}

#[test]
fn the_file_is_strict_and_the_environment_wins() {
    let dir = std::env::temp_dir().join(format!("plimsoll-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("plimsoll.toml");
    std::fs::write(&path, "[sandbox]\nprovider = \"wasm\"\nmax-concurrent = 16\n").expect("write");
    let c = Config::load(Some(&path), &env(&[("SANDBOX_MAX_CONCURRENT", "4")])).expect("loads");
    assert_eq!((c.provider, c.admission.max_concurrent), (ProviderKind::Wasm, 4));
    std::fs::write(&path, "[sandbox]\nprovidr = \"wasm\"\n").expect("write");
    let e = Config::load(Some(&path), &env(&[])).expect_err("unknown key").to_string();
    assert!(e.contains("unknown field `providr`"), "{e}");
    std::fs::write(&path, "[sandbox]\nmax-concurrent = \"x\"\n").expect("write");
    let e = Config::load(Some(&path), &env(&[])).expect_err("bad type").to_string();
    assert!(e.contains("max-concurrent"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn total_memory_clamps_concurrency() {
    let c = load(&[("SANDBOX_TOTAL_MEMORY_MB", "1024"), ("SANDBOX_MEMORY_MB", "256")]).expect("fits");
    assert_eq!(c.admission.max_concurrent, 4);
    assert!(load(&[("SANDBOX_TOTAL_MEMORY_MB", "100")]).is_err());
}

#[test]
fn a_real_provider_without_callers_needs_an_explicit_opt_in() {
    let c = load(&[("SANDBOX_PROVIDER", "wasm")]).expect("loads");
    assert!(c.check_auth().expect_err("open").to_string().contains("set PLIMSOLL_CLIENTS_FILE"));
    let c = load(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_INSECURE", "1")]).expect("loads");
    assert!(c.check_auth().is_ok());
    assert!(load(&[]).expect("disabled").check_auth().is_ok());
}

#[test]
fn hardened_mode_lists_every_violation_at_once() {
    let c = load(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_INSECURE", "1"), ("SANDBOX_RATE_PER_MIN", "0")])
        .expect("loads");
    let v = c.hardened_violations(plimsoll_core::Tier::Process);
    assert_eq!(v.len(), 7, "{v:#?}");
    assert!(v[0].starts_with("isolation: the wasm provider proved process"));
}

#[test]
fn loopback_addresses() {
    assert!(is_loopback("127.0.0.1:8746"));
    assert!(is_loopback("[::1]:1"));
    assert!(is_loopback("localhost:9"));
    assert!(!is_loopback(":8746"));
    assert!(!is_loopback("0.0.0.0:8746"));
}

#[test]
fn e2b_settings_are_required_for_e2b_checked_and_refused_elsewhere() {
    let full: [(&str, &str); 4] = [
        ("SANDBOX_PROVIDER", "e2b"),
        ("E2B_API_KEY", "e2b_0123456789abcdef"),
        ("SANDBOX_E2B_PLUGIN", "/opt/plimsoll/e2b"),
        ("SANDBOX_E2B_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub"),
    ];
    let c = load(&full).expect("loads");
    let r = c.remote.as_ref().expect("e2b settings");
    assert_eq!((r.provider, r.max_tier), ("e2b", plimsoll_core::Tier::Vm));
    assert_eq!(r.endpoints["api"].url, "https://api.e2b.app");
    assert_eq!(r.endpoints["envd"].url, "https://49983-{target}.e2b.app");
    assert_eq!(r.settings.get("template").map(String::as_str), Some("base"));
    assert!(r.settings["instance"].starts_with("plimsoll@"), "{:?}", r.settings);
    // The key rides only as the api endpoint's header, and no Debug shows it.
    assert_eq!(r.endpoints["api"].headers[0].0, "x-api-key");
    assert_eq!(r.endpoints["api"].headers[0].1.expose(), "e2b_0123456789abcdef");
    assert!(r.endpoints["envd"].headers.is_empty());
    assert!(!format!("{c:?}").contains("e2b_0123456789abcdef"));
    let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let with = |pair: (&'static str, &'static str)| {
        let mut v = full.to_vec();
        v.push(pair);
        v
    };
    let cases: [(Vec<(&str, &str)>, &str); 10] = [
        (
            with(("SANDBOX_E2B_INSTANCE", "two words")),
            "SANDBOX_E2B_INSTANCE=\"two words\" must be 1 to 64 letters, digits and @ . _ -",
        ),
        (
            without("E2B_API_KEY"),
            "SANDBOX_PROVIDER=e2b needs E2B_API_KEY (or e2b.api-key-file): the host holds it; the plugin never sees it",
        ),
        (
            without("SANDBOX_E2B_PLUGIN"),
            "SANDBOX_PROVIDER=e2b needs SANDBOX_E2B_PLUGIN: the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)",
        ),
        (
            with(("SANDBOX_E2B_API_URL", "http://api.e2b.app")),
            "SANDBOX_E2B_API_URL=\"http://api.e2b.app\" must be https (http only to loopback)",
        ),
        (
            with(("SANDBOX_E2B_ENVD_URL", "https://envd.e2b.app")),
            "SANDBOX_E2B_ENVD_URL=\"https://envd.e2b.app\" must name {target} once, where the sandbox's ID goes (as in https://49983-{target}.e2b.app)",
        ),
        (with(("SANDBOX_E2B_CONNECT_TO", "localhost")), "SANDBOX_E2B_CONNECT_TO=\"localhost\" is not an IP address"),
        (
            with(("SANDBOX_E2B_MAX_TIER", "hypervisor")),
            "SANDBOX_E2B_MAX_TIER=\"hypervisor\": use vm, kernel, container or process",
        ),
        (with(("E2B_TEMPLATE", "base;rm")), "E2B_TEMPLATE=\"base;rm\" must be letters, digits, dashes and underscores"),
        (
            with(("SANDBOX_PIDS", "64")),
            "SANDBOX_PIDS is set, but e2b cannot limit processes in its sandboxes; unset it",
        ),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_E2B_API_URL", "https://api.e2b.app")],
            "SANDBOX_E2B_API_URL is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=e2b or unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
    // A local fake over plain HTTP on loopback is allowed; the caps and the CA carry through.
    let c = load(
        &[
            &full[..],
            &[
                ("SANDBOX_E2B_API_URL", "http://127.0.0.1:9000"),
                ("SANDBOX_E2B_ENVD_URL", "https://49983-{target}.e2b.test:9000"),
                ("SANDBOX_E2B_CONNECT_TO", "127.0.0.1"),
                ("SANDBOX_E2B_CA_FILE", "/tmp/ca.pem"),
                ("SANDBOX_E2B_MAX_TIER", "container"),
            ],
        ]
        .concat(),
    )
    .expect("a local fake");
    let r = c.remote.expect("e2b settings");
    assert_eq!(r.max_tier, plimsoll_core::Tier::Container);
    assert_eq!(r.endpoints["envd"].ca_file.as_deref(), Some(std::path::Path::new("/tmp/ca.pem")));
    assert_eq!(r.endpoints["api"].connect_to, Some([127, 0, 0, 1].into()));
}

#[test]
fn dockercloud_settings_are_required_for_dockercloud_checked_and_refused_elsewhere() {
    const IMAGE: &str =
        "docker.io/library/python@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let full: [(&str, &str); 7] = [
        ("SANDBOX_PROVIDER", "dockercloud"),
        ("DOCKER_SBX_USERNAME", "ops"),
        ("DOCKER_SBX_TOKEN", "dckr_pat_0123456789abcdef"),
        ("SANDBOX_DOCKERCLOUD_IMAGE", IMAGE),
        ("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", "https://{target}.sandboxes.example"),
        ("SANDBOX_DOCKERCLOUD_PLUGIN", "/opt/plimsoll/dockercloud"),
        ("SANDBOX_DOCKERCLOUD_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub"),
    ];
    let c = load(&full).expect("loads");
    let r = c.remote.as_ref().expect("dockercloud settings");
    assert_eq!((r.provider, r.max_tier), ("dockercloud", plimsoll_core::Tier::Vm));
    assert_eq!(r.endpoints["api"].url, "https://connect.docker.com/sandboxes");
    assert_eq!(r.endpoints["endpoint"].url, "https://{target}.sandboxes.example");
    // The token is traded by the host at Docker Hub; the endpoint gets no bearer of its.
    let x = r.endpoints["api"].exchange.as_ref().expect("an exchange");
    assert_eq!((x.url.as_str(), x.identifier.as_str()), ("https://hub.docker.com/v2/auth/token", "ops"));
    assert_eq!(x.secret.expose(), "dckr_pat_0123456789abcdef");
    assert!(r.endpoints["endpoint"].exchange.is_none() && r.endpoints["endpoint"].headers.is_empty());
    assert!(!format!("{c:?}").contains("dckr_pat_0123456789abcdef"));
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!((setting("image"), setting("cpus"), setting("memory-mib")), (Some(IMAGE), Some("1"), Some("2048")));
    assert_eq!(setting("endpoint-url"), Some("https://{target}.sandboxes.example"));
    let sized = load(&[&full[..], &[("SANDBOX_CPUS", "4"), ("SANDBOX_MEMORY_MB", "8192")]].concat()).expect("medium");
    let r = sized.remote.expect("settings");
    assert_eq!((r.settings["cpus"].as_str(), r.settings["memory-mib"].as_str()), ("4", "8192"));
    let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let with = |pair: (&'static str, &'static str)| {
        let mut v = full.to_vec();
        v.push(pair);
        v
    };
    assert!(r.guard.is_none(), "no guard unless one is set");
    let guarded = load(
        &[
            &full[..],
            &[
                ("SANDBOX_DOCKERCLOUD_GUARD_URL", "https://guard.example.com"),
                ("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443"),
            ],
        ]
        .concat(),
    )
    .expect("a guard");
    let g = guarded.remote.expect("settings").guard.expect("the guard");
    assert_eq!((g.url.as_str(), g.host.as_str()), ("https://guard.example.com/v1/guard", "guard.example.com"));
    let cases: [(Vec<(&str, &str)>, &str); 13] = [
        (
            with(("SANDBOX_DOCKERCLOUD_GUARD_URL", "https://guard.example.com")),
            "SANDBOX_DOCKERCLOUD_GUARD_URL is set but PLIMSOLL_GUARD_ADDR is not: the daemon serves the guard on that address, behind the TLS terminator the URL names",
        ),
        (
            with(("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443")),
            "PLIMSOLL_GUARD_ADDR is set but SANDBOX_DOCKERCLOUD_GUARD_URL is not: name the https URL sandboxes reach the guard at",
        ),
        (
            vec![("SANDBOX_PROVIDER", "docker"), ("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443")],
            "PLIMSOLL_GUARD_ADDR is set, but SANDBOX_PROVIDER is docker; only e2b and dockercloud sandboxes reach a guard: unset it",
        ),
        (
            without("DOCKER_SBX_TOKEN"),
            "SANDBOX_PROVIDER=dockercloud needs DOCKER_SBX_TOKEN (or dockercloud.token-file): a personal access token the host trades for a short-lived bearer; the plugin never sees either",
        ),
        (
            without("DOCKER_SBX_USERNAME"),
            "SANDBOX_PROVIDER=dockercloud needs DOCKER_SBX_USERNAME: the Docker account whose access token the host exchanges",
        ),
        (
            with(("SANDBOX_DOCKERCLOUD_IMAGE", "python:3.12")),
            "SANDBOX_DOCKERCLOUD_IMAGE=\"python:3.12\" must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what booted",
        ),
        (
            without("SANDBOX_DOCKERCLOUD_ENDPOINT_URL"),
            "SANDBOX_PROVIDER=dockercloud needs SANDBOX_DOCKERCLOUD_ENDPOINT_URL: the URL of a sandbox's endpoint with {target} where its uid goes (as the sandbox's core.endpoint.uri shows it); a sandbox whose endpoint is elsewhere is refused",
        ),
        (
            with(("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", "https://sandboxes.example/{target}")),
            "SANDBOX_DOCKERCLOUD_ENDPOINT_URL=\"https://sandboxes.example/{target}\" must name {target} once, in its host, where the sandbox's uid goes",
        ),
        (
            with(("SANDBOX_DOCKERCLOUD_AUTH_URL", "http://hub.docker.com/v2/auth/token")),
            "SANDBOX_DOCKERCLOUD_AUTH_URL=\"http://hub.docker.com/v2/auth/token\" must be https (http only to loopback)",
        ),
        (
            with(("SANDBOX_MEMORY_MB", "1024")),
            "SANDBOX_CPUS=0 with SANDBOX_MEMORY_MB=1024 is not a size Docker offers; use one of 1 CPU(s) with 2048 MiB, 2 CPU(s) with 4096 MiB, 4 CPU(s) with 8192 MiB, 8 CPU(s) with 16384 MiB, 16 CPU(s) with 32768 MiB",
        ),
        (
            with(("SANDBOX_DISK_MB", "1024")),
            "SANDBOX_DISK_MB is set, but Docker Cloud Sandboxes offer no such limit; unset it",
        ),
        (with(("SANDBOX_PIDS", "64")), "SANDBOX_PIDS is set, but Docker Cloud Sandboxes offer no such limit; unset it"),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_DOCKERCLOUD_IMAGE", IMAGE)],
            "SANDBOX_DOCKERCLOUD_IMAGE is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=dockercloud or unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
}

#[test]
fn openshell_settings_are_required_for_openshell_checked_and_refused_elsewhere() {
    let digest = "b".repeat(64);
    let image = format!("plimsoll-sandbox@sha256:{digest}");
    let full: Vec<(&str, &str)> = vec![
        ("SANDBOX_PROVIDER", "openshell"),
        ("SANDBOX_OPENSHELL_GATEWAY_URL", "https://gateway.openshell.test:17670"),
        ("SANDBOX_OPENSHELL_CERT_FILE", "/etc/plimsoll/openshell/tls.crt"),
        ("SANDBOX_OPENSHELL_KEY_FILE", "/etc/plimsoll/openshell/tls.key"),
        ("SANDBOX_OPENSHELL_IMAGE", &image),
        ("SANDBOX_OPENSHELL_INSTANCE", "plimsoll-ci"),
        ("SANDBOX_OPENSHELL_PLUGIN", "/opt/plimsoll/openshell"),
        ("SANDBOX_OPENSHELL_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub"),
    ];
    let c = load(&full).expect("loads");
    let r = c.remote.as_ref().expect("openshell settings");
    assert_eq!((r.provider, r.max_tier), ("openshell", plimsoll_core::Tier::Container));
    let gw = &r.endpoints["gateway"];
    assert_eq!(gw.url, "https://gateway.openshell.test:17670");
    assert_eq!(
        gw.client_cert.as_ref().map(|(c, k)| (c.display().to_string(), k.display().to_string())),
        Some(("/etc/plimsoll/openshell/tls.crt".into(), "/etc/plimsoll/openshell/tls.key".into()))
    );
    assert!(gw.headers.is_empty(), "the client certificate is the only credential");
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!(
        [setting("image"), setting("instance"), setting("cpus-milli"), setting("memory-mib"), setting("disk-mib")],
        [Some(image.as_str()), Some("plimsoll-ci"), Some("1000"), Some("256"), Some("64")]
    );
    // The default instance's `@` becomes a dot: a gateway label has none.
    let unnamed: Vec<(&str, &str)> = full.iter().copied().filter(|(k, _)| *k != "SANDBOX_OPENSHELL_INSTANCE").collect();
    let c = load(&unnamed).expect("default instance");
    let instance = &c.remote.as_ref().expect("remote").settings["instance"];
    assert!(instance.starts_with("plimsoll.") && !instance.contains('@'), "{instance}");
    let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let with = |pair: (&'static str, &'static str)| {
        let mut v = full.clone();
        v.push(pair);
        v
    };
    let cases: [(Vec<(&str, &str)>, &str); 9] = [
        (
            without("SANDBOX_OPENSHELL_GATEWAY_URL"),
            "SANDBOX_PROVIDER=openshell needs SANDBOX_OPENSHELL_GATEWAY_URL: the gateway's https URL (an OpenShell gateway serves https://127.0.0.1:17670 by default)",
        ),
        (
            with(("SANDBOX_OPENSHELL_GATEWAY_URL", "http://127.0.0.1:17670")),
            "SANDBOX_OPENSHELL_GATEWAY_URL=\"http://127.0.0.1:17670\" must be https: the host proves itself to the gateway with a client certificate",
        ),
        (
            without("SANDBOX_OPENSHELL_KEY_FILE"),
            "SANDBOX_PROVIDER=openshell needs SANDBOX_OPENSHELL_KEY_FILE: the client certificate and key the gateway knows this host by (an OpenShell CLI bundle's mtls/tls.crt and mtls/tls.key); only the host reads them",
        ),
        (
            with(("SANDBOX_OPENSHELL_IMAGE", "plimsoll-sandbox:latest")),
            "SANDBOX_OPENSHELL_IMAGE=\"plimsoll-sandbox:latest\" must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what runs",
        ),
        (
            with(("SANDBOX_OPENSHELL_INSTANCE", "-ci")),
            "SANDBOX_OPENSHELL_INSTANCE=\"-ci\" must be a gateway label value: at most 63 letters, digits, - _ ., a letter or digit at each end",
        ),
        (
            with(("SANDBOX_OPENSHELL_CONNECT_TO", "gateway")),
            "SANDBOX_OPENSHELL_CONNECT_TO=\"gateway\" is not an IP address",
        ),
        (
            with(("SANDBOX_OPENSHELL_MAX_TIER", "hypervisor")),
            "SANDBOX_OPENSHELL_MAX_TIER=\"hypervisor\": use vm, kernel, container or process",
        ),
        (
            with(("SANDBOX_PIDS", "64")),
            "SANDBOX_PIDS is set, but an OpenShell gateway sets its sandboxes' process limit itself (its sandbox_pids_limit); unset it",
        ),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_OPENSHELL_GATEWAY_URL", "https://gw.test")],
            "SANDBOX_OPENSHELL_GATEWAY_URL is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=openshell or unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
}

#[test]
fn agentsandbox_settings_are_required_for_agentsandbox_checked_and_refused_elsewhere() {
    let sandboxd = "0123456789abcdef0123456789abcdef";
    let full: [(&str, &str); 8] = [
        ("SANDBOX_PROVIDER", "agentsandbox"),
        ("SANDBOX_AGENTSANDBOX_API_URL", "https://k8s.example:6443"),
        ("SANDBOX_AGENTSANDBOX_TOKEN", "eyJhbGciOiJSUzI1NiJ9.sa-token"),
        ("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", sandboxd),
        ("SANDBOX_AGENTSANDBOX_NAMESPACE", "plimsoll"),
        ("SANDBOX_AGENTSANDBOX_WARM_POOL", "python"),
        ("SANDBOX_AGENTSANDBOX_PLUGIN", "/opt/plimsoll/agentsandbox"),
        ("SANDBOX_AGENTSANDBOX_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub"),
    ];
    let c = load(&full).expect("loads");
    let r = c.remote.as_ref().expect("agentsandbox settings");
    assert_eq!((r.provider, r.max_tier), ("agentsandbox", plimsoll_core::Tier::Vm));
    // Both endpoints are the API server; the pod proxy also carries sandboxd's token.
    assert_eq!(
        (r.endpoints["api"].url.as_str(), r.endpoints["pods"].url.as_str()),
        ("https://k8s.example:6443", "https://k8s.example:6443")
    );
    let header =
        |e: &str, h: &str| r.endpoints[e].headers.iter().find(|(k, _)| k == h).map(|(_, v)| v.expose().to_string());
    assert_eq!(header("api", "authorization").as_deref(), Some("Bearer eyJhbGciOiJSUzI1NiJ9.sa-token"));
    assert_eq!(header("api", "x-plimsoll-sandboxd-token"), None);
    assert_eq!(header("pods", "x-plimsoll-sandboxd-token").as_deref(), Some(sandboxd));
    assert!(!format!("{c:?}").contains("sa-token") && !format!("{c:?}").contains(sandboxd));
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!(
        (setting("namespace"), setting("warm-pool"), setting("sandboxd-port")),
        (Some("plimsoll"), Some("python"), Some("8787"))
    );
    // `printf %s 0123456789abcdef0123456789abcdef | sha256sum`
    assert_eq!(
        setting("sandboxd-token-sha256"),
        Some("3eb1bd439947eb762998e566ccc2e099c791118b2f40579cc4f7da2b5061b7f9")
    );
    let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
    let with = |pair: (&'static str, &'static str)| {
        let mut v = full.to_vec();
        v.push(pair);
        v
    };
    let cases: [(Vec<(&str, &str)>, &str); 10] = [
        (
            without("SANDBOX_AGENTSANDBOX_API_URL"),
            "SANDBOX_PROVIDER=agentsandbox needs SANDBOX_AGENTSANDBOX_API_URL: the Kubernetes API server's https URL (a kubeconfig's cluster.server)",
        ),
        (
            without("SANDBOX_AGENTSANDBOX_TOKEN"),
            "SANDBOX_PROVIDER=agentsandbox needs SANDBOX_AGENTSANDBOX_TOKEN (or agentsandbox.token-file), or SANDBOX_AGENTSANDBOX_CERT_FILE and _KEY_FILE: the service account's credential the host presents to the API server; the plugin never sees it",
        ),
        (
            with(("SANDBOX_AGENTSANDBOX_CERT_FILE", "/etc/k8s/client.pem")),
            "SANDBOX_AGENTSANDBOX_CERT_FILE and SANDBOX_AGENTSANDBOX_KEY_FILE go together: set both or neither",
        ),
        (
            without("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN"),
            "SANDBOX_PROVIDER=agentsandbox needs SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN (or agentsandbox.sandboxd-token-file): the token sandboxd in each pod answers to; the pod's template carries only its SHA-256 (--token-sha256)",
        ),
        (
            with(("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", "short")),
            "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN must be at least 32 visible ASCII characters (openssl rand -hex 32 makes one)",
        ),
        (
            with(("SANDBOX_AGENTSANDBOX_NAMESPACE", "Plimsoll")),
            "SANDBOX_AGENTSANDBOX_NAMESPACE=\"Plimsoll\" is not a Kubernetes name: 1 to 63 lowercase letters, digits and -, a letter or digit at each end",
        ),
        (
            with(("SANDBOX_AGENTSANDBOX_API_URL", "http://k8s.example:6443")),
            "SANDBOX_AGENTSANDBOX_API_URL=\"http://k8s.example:6443\" must be https (http only to loopback)",
        ),
        (
            with(("SANDBOX_AGENTSANDBOX_SANDBOXD_PORT", "0")),
            "SANDBOX_AGENTSANDBOX_SANDBOXD_PORT=\"0\" is not a port (1 to 65535)",
        ),
        (
            with(("SANDBOX_MEMORY_MB", "1024")),
            "SANDBOX_MEMORY_MB is set, but agentsandbox pods are sized by their template (its container's resources and its emptyDir's sizeLimit), which the read-back holds them to; unset it",
        ),
        (
            vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_AGENTSANDBOX_NAMESPACE", "plimsoll")],
            "SANDBOX_AGENTSANDBOX_NAMESPACE is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=agentsandbox or unset it",
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(load(&pairs).expect_err(want).to_string(), want);
    }
}
