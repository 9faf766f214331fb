use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load(None, &env(pairs))
}

/// A plugin of this repository, whose manifest startup reads.
fn plugin_dir(name: &str) -> String {
    format!("{}/../../plugins/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A file that exists, for settings of kind `file`.
fn a_file(tag: &str) -> String {
    let p = std::env::temp_dir().join(format!("plimsoll-config-{tag}-{}", std::process::id()));
    std::fs::write(&p, "-----BEGIN CERTIFICATE-----\n").expect("write");
    p.display().to_string()
}

/// `full` with `name` left out, and with `pair` added (or replacing its name).
fn without(full: &[(&'static str, String)], name: &str) -> Vec<(&'static str, String)> {
    full.iter().filter(|(k, _)| *k != name).cloned().collect()
}
fn with(full: &[(&'static str, String)], pair: (&'static str, &str)) -> Vec<(&'static str, String)> {
    let mut v = without(full, pair.0);
    v.push((pair.0, pair.1.to_string()));
    v
}
fn load_owned(pairs: &[(&'static str, String)]) -> Result<Config, ConfigError> {
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    load(&pairs)
}
fn refusals(cases: Vec<(Vec<(&'static str, String)>, String)>) {
    for (pairs, want) in cases {
        let got = load_owned(&pairs).map(|_| ()).expect_err(&want).to_string();
        assert_eq!(got, want);
    }
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
        "unknown variable SANDBOX_MIN_ISOLATON: check the spelling (a misspelt safety setting must not be ignored; a plugin's settings are read only when SANDBOX_PROVIDER names it)"
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
            &[("SANDBOX_PROVIDER", "dock er")],
            "SANDBOX_PROVIDER=\"dock er\" is not a provider: use wasm, or the name of a provider plugin (lowercase letters, digits and dashes), or leave it unset",
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
    let dir = plugin_dir("docker");
    let full: [(&str, &str); 4] = [
        ("SANDBOX_PROVIDER", "docker"),
        ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
        ("SANDBOX_DOCKER_PLUGIN", &dir),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub, /etc/plimsoll/ci.pub"),
    ];
    let c = load(&full).expect("loads");
    let d = c.docker().expect("docker settings");
    assert_eq!((d.runtime.as_str(), d.guest_uid), ("runc", 61000));
    assert_eq!(c.plugin.as_ref().expect("plugin").location.trusted_keys.len(), 2);
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
            "SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_PLUGIN (or path in [plugins.docker], or SANDBOX_PLUGINS_DIR): the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)",
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
    let dir = plugin_dir("docker");
    let docker: [(&str, &str); 4] = [
        ("SANDBOX_PROVIDER", "docker"),
        ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
        ("SANDBOX_DOCKER_PLUGIN", &dir),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| [&docker[..], extra].concat();
    assert_eq!(load(&docker).expect("loads").docker().expect("docker").warm_pool, 0);
    let c = load(&with(&[("SANDBOX_WARM_POOL", "64")])).expect("loads");
    assert_eq!(c.docker().expect("docker").warm_pool, 64);
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
    assert_eq!(c.docker().expect("docker").warm_pool, 3);
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
    let err = load(&[("SANDBOX_TOTAL_MEMORY_MB", "100")]).expect_err("too small");
    assert_eq!(err.to_string(), "SANDBOX_TOTAL_MEMORY_MB=100 does not fit one run of 256 MiB");
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

// The four remote plugins this repository ships, read through their own
// manifests: the daemon's code names none of them.

#[test]
fn e2b_settings_come_from_its_manifest_checked_by_kind() {
    let full: Vec<(&str, String)> = vec![
        ("SANDBOX_PROVIDER", "e2b".into()),
        ("E2B_API_KEY", "e2b_0123456789abcdef".into()),
        ("SANDBOX_E2B_PLUGIN", plugin_dir("e2b")),
        ("SANDBOX_E2B_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
    ];
    let c = load_owned(&full).expect("loads");
    let r = c.remote().expect("remote settings");
    assert_eq!((c.provider.as_str(), r.max_tier), ("e2b", plimsoll_core::Tier::Vm));
    assert_eq!(r.endpoints["api"].url, "https://api.e2b.app");
    assert_eq!(r.endpoints["envd"].url, "https://49983-{target}.e2b.app");
    assert_eq!(r.settings.get("template").map(String::as_str), Some("base"));
    assert!(r.settings["instance"].starts_with("plimsoll@"), "{:?}", r.settings);
    // The envelope it enforces reaches it; the key rides only as the api endpoint's header.
    assert_eq!(r.settings.get("envelope.memory-mb").map(String::as_str), Some("0"));
    assert!(!r.settings.contains_key("api-key") && !r.settings.contains_key("envelope.pids"));
    assert_eq!(r.endpoints["api"].headers[0].0, "x-api-key");
    assert_eq!(r.endpoints["api"].headers[0].1.expose(), "e2b_0123456789abcdef");
    assert!(r.endpoints["envd"].headers.is_empty());
    assert!(!format!("{c:?}").contains("e2b_0123456789abcdef"));
    assert_eq!(r.guard_variable.as_deref(), Some("E2B_GUARD_URL"));
    let ca = a_file("e2b-ca");
    let c = load_owned(
        &[
            &full[..],
            &[
                ("SANDBOX_E2B_API_URL", "http://127.0.0.1:9000".into()),
                ("SANDBOX_E2B_ENVD_URL", "https://49983-{target}.e2b.test:9000".into()),
                ("SANDBOX_E2B_CONNECT_TO", "127.0.0.1".into()),
                ("SANDBOX_E2B_CA_FILE", ca.clone()),
                ("SANDBOX_E2B_MAX_TIER", "container".into()),
                ("SANDBOX_E2B_TEMPLATE", "code-interpreter".into()),
            ],
        ]
        .concat(),
    )
    .expect("a local fake over plain HTTP on loopback");
    let r = c.remote().expect("remote");
    assert_eq!(r.max_tier, plimsoll_core::Tier::Container);
    assert_eq!(r.endpoints["envd"].ca_file.as_deref(), Some(std::path::Path::new(&ca)));
    assert_eq!(r.endpoints["api"].connect_to, Some([127, 0, 0, 1].into()));
    assert_eq!(r.settings["template"], "code-interpreter");
    refusals(vec![
        (
            with(&full, ("SANDBOX_E2B_INSTANCE", "two words")),
            "SANDBOX_E2B_INSTANCE=\"two words\" must be 1 to 64 letters, digits and @ . _ -".into(),
        ),
        (
            without(&full, "E2B_API_KEY"),
            "SANDBOX_PROVIDER=e2b needs SANDBOX_E2B_API_KEY (or E2B_API_KEY, or api-key-file in [plugins.e2b]): the team's API key; the host attaches it, the plugin never sees it".into(),
        ),
        (
            without(&full, "SANDBOX_E2B_PLUGIN"),
            "SANDBOX_PROVIDER=e2b needs SANDBOX_E2B_PLUGIN (or path in [plugins.e2b], or SANDBOX_PLUGINS_DIR): the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_API_URL", "http://api.e2b.app")),
            "SANDBOX_E2B_API_URL=\"http://api.e2b.app\" must be https (http only to loopback)".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_ENVD_URL", "https://envd.e2b.app")),
            "SANDBOX_E2B_ENVD_URL=\"https://envd.e2b.app\" must name {target} once, where the sandbox's ID goes (as in https://49983-{target}.e2b.app)".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_CONNECT_TO", "localhost")),
            "SANDBOX_E2B_CONNECT_TO=\"localhost\" is not an IP address".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_MAX_TIER", "hypervisor")),
            "SANDBOX_E2B_MAX_TIER=\"hypervisor\": use vm, kernel, container or process".into(),
        ),
        (
            with(&full, ("E2B_TEMPLATE", "base;rm")),
            "E2B_TEMPLATE=\"base;rm\" must be letters, digits, dashes and underscores".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_CA_FILE", "/nonexistent/ca.pem")),
            "SANDBOX_E2B_CA_FILE=\"/nonexistent/ca.pem\" is not a file this daemon can read (a CA trusted for both endpoints instead of the system's (a proxy, a fake))".into(),
        ),
        (
            with(&full, ("SANDBOX_PIDS", "64")),
            "SANDBOX_PIDS is set, but the e2b plugin does not enforce it (e2b cannot limit processes in its sandboxes); unset it".into(),
        ),
        (
            with(&full, ("SANDBOX_E2B_TEMPLTE", "base")),
            "SANDBOX_E2B_TEMPLTE is not a variable of the e2b plugin; it reads SANDBOX_E2B_PLUGIN, SANDBOX_E2B_PLUGIN_KEYS, SANDBOX_E2B_PLUGIN_APPROVE, SANDBOX_E2B_MAX_TIER, SANDBOX_E2B_API_KEY, E2B_API_KEY, SANDBOX_E2B_API_URL, SANDBOX_E2B_CA_FILE, SANDBOX_E2B_CONNECT_TO, SANDBOX_E2B_ENVD_URL, SANDBOX_E2B_GUARD_URL, E2B_GUARD_URL, SANDBOX_E2B_INSTANCE, SANDBOX_E2B_TEMPLATE, E2B_TEMPLATE (plimsoll-host plugin inspect shows what each is for)".into(),
        ),
        (
            vec![("SANDBOX_PROVIDER", "wasm".into()), ("SANDBOX_E2B_API_URL", "https://api.e2b.app".into())],
            "unknown variable SANDBOX_E2B_API_URL: check the spelling (a misspelt safety setting must not be ignored; a plugin's settings are read only when SANDBOX_PROVIDER names it)".into(),
        ),
    ]);
}

#[test]
fn dockercloud_settings_come_from_its_manifest_with_an_exchange_a_guard_and_its_envelope() {
    const IMAGE: &str =
        "docker.io/library/python@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let full: Vec<(&str, String)> = vec![
        ("SANDBOX_PROVIDER", "dockercloud".into()),
        ("DOCKER_SBX_USERNAME", "ops".into()),
        ("DOCKER_SBX_TOKEN", "dckr_pat_0123456789abcdef".into()),
        ("SANDBOX_DOCKERCLOUD_IMAGE", IMAGE.into()),
        ("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", "https://{target}.sandboxes.example".into()),
        ("SANDBOX_DOCKERCLOUD_PLUGIN", plugin_dir("dockercloud")),
        ("SANDBOX_DOCKERCLOUD_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
    ];
    let c = load_owned(&full).expect("loads");
    let r = c.remote().expect("remote settings");
    assert_eq!(r.endpoints["api"].url, "https://connect.docker.com/sandboxes");
    assert_eq!(r.endpoints["endpoint"].url, "https://{target}.sandboxes.example");
    // The token is traded by the host at Docker Hub; the endpoint gets no bearer of its.
    let x = r.endpoints["api"].exchange.as_ref().expect("an exchange");
    assert_eq!((x.url.as_str(), x.identifier.as_str()), ("https://hub.docker.com/v2/auth/token", "ops"));
    assert_eq!(x.secret.expose(), "dckr_pat_0123456789abcdef");
    assert!(r.endpoints["endpoint"].exchange.is_none() && r.endpoints["endpoint"].headers.is_empty());
    assert!(!format!("{c:?}").contains("dckr_pat_0123456789abcdef"));
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!((setting("image"), setting("endpoint-url")), (Some(IMAGE), Some("https://{target}.sandboxes.example")));
    assert_eq!((setting("envelope.cpus-milli"), setting("envelope.memory-mb")), (Some("0"), Some("0")));
    assert!(r.guard.is_none(), "no guard unless one is set");
    let sized = load_owned(&with(&with(&full, ("SANDBOX_CPUS", "4")), ("SANDBOX_MEMORY_MB", "8192"))).expect("medium");
    let r = sized.remote().expect("settings");
    assert_eq!(
        (r.settings["envelope.cpus-milli"].as_str(), r.settings["envelope.memory-mb"].as_str()),
        ("4000", "8192")
    );
    let guarded = with(
        &with(&full, ("SANDBOX_DOCKERCLOUD_GUARD_URL", "https://guard.example.com")),
        ("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443"),
    );
    let g = load_owned(&guarded).expect("a guard").remote().expect("settings").guard.clone().expect("the guard");
    assert_eq!((g.url.as_str(), g.host.as_str()), ("https://guard.example.com/v1/guard", "guard.example.com"));
    refusals(vec![
        (
            with(&full, ("SANDBOX_DOCKERCLOUD_GUARD_URL", "https://guard.example.com")),
            "SANDBOX_DOCKERCLOUD_GUARD_URL is set but PLIMSOLL_GUARD_ADDR is not: the daemon serves the guard on that address, behind the TLS terminator the URL names".into(),
        ),
        (
            with(&full, ("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443")),
            "PLIMSOLL_GUARD_ADDR is set but SANDBOX_DOCKERCLOUD_GUARD_URL is not: name the https URL sandboxes reach the guard at".into(),
        ),
        (
            without(&full, "DOCKER_SBX_TOKEN"),
            "SANDBOX_PROVIDER=dockercloud needs SANDBOX_DOCKERCLOUD_TOKEN (or DOCKER_SBX_TOKEN, or token-file in [plugins.dockercloud]): a personal access token the host trades for a short-lived bearer; the plugin never sees either".into(),
        ),
        (
            with(&full, ("SANDBOX_DOCKERCLOUD_IMAGE", "python:3.12")),
            "SANDBOX_DOCKERCLOUD_IMAGE=\"python:3.12\" must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what runs".into(),
        ),
        (
            with(&full, ("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", "https://sandboxes.example/{target}")),
            "SANDBOX_DOCKERCLOUD_ENDPOINT_URL=\"https://sandboxes.example/{target}\" must name {target} once, in its host, where the sandbox's ID goes".into(),
        ),
        (
            with(&full, ("SANDBOX_DOCKERCLOUD_AUTH_URL", "http://hub.docker.com/v2/auth/token")),
            "SANDBOX_DOCKERCLOUD_AUTH_URL=\"http://hub.docker.com/v2/auth/token\" must be https (http only to loopback)".into(),
        ),
        (
            with(&full, ("SANDBOX_DISK_MB", "1024")),
            "SANDBOX_DISK_MB is set, but the dockercloud plugin does not enforce it (Docker Cloud Sandboxes come in Docker's sizes of CPUs and memory and offer no other limit); unset it".into(),
        ),
    ]);
}

#[test]
fn openshell_settings_come_from_its_manifest_with_a_client_certificate_and_a_label_instance() {
    let image = format!("plimsoll-sandbox@sha256:{}", "b".repeat(64));
    let (cert, key) = (a_file("openshell-crt"), a_file("openshell-key"));
    let full: Vec<(&str, String)> = vec![
        ("SANDBOX_PROVIDER", "openshell".into()),
        ("SANDBOX_OPENSHELL_GATEWAY_URL", "https://gateway.openshell.test:17670".into()),
        ("SANDBOX_OPENSHELL_CERT_FILE", cert.clone()),
        ("SANDBOX_OPENSHELL_KEY_FILE", key.clone()),
        ("SANDBOX_OPENSHELL_IMAGE", image.clone()),
        ("SANDBOX_OPENSHELL_INSTANCE", "plimsoll-ci".into()),
        ("SANDBOX_OPENSHELL_PLUGIN", plugin_dir("openshell")),
        ("SANDBOX_OPENSHELL_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
    ];
    let c = load_owned(&full).expect("loads");
    let r = c.remote().expect("remote settings");
    assert_eq!(r.max_tier, plimsoll_core::Tier::Container, "the manifest's max-tier is the default cap");
    let gw = &r.endpoints["gateway"];
    assert_eq!(gw.url, "https://gateway.openshell.test:17670");
    assert_eq!(gw.client_cert, Some((cert.into(), key.into())));
    assert!(gw.headers.is_empty(), "the client certificate is the only credential");
    assert_eq!((r.settings["image"].as_str(), r.settings["instance"].as_str()), (image.as_str(), "plimsoll-ci"));
    assert_eq!(r.guard_variable, None);
    let c = load_owned(&without(&full, "SANDBOX_OPENSHELL_INSTANCE")).expect("default instance");
    let instance = &c.remote().expect("remote").settings["instance"];
    assert!(instance.starts_with("plimsoll.") && !instance.contains('@'), "{instance}");
    refusals(vec![
        (
            without(&full, "SANDBOX_OPENSHELL_GATEWAY_URL"),
            "SANDBOX_PROVIDER=openshell needs SANDBOX_OPENSHELL_GATEWAY_URL (or gateway-url in [plugins.openshell]): the gateway's https URL (https://127.0.0.1:17670 for a local gateway); the host proves itself with a client certificate".into(),
        ),
        (
            with(&full, ("SANDBOX_OPENSHELL_GATEWAY_URL", "http://127.0.0.1:17670")),
            "SANDBOX_OPENSHELL_GATEWAY_URL=\"http://127.0.0.1:17670\" must be https".into(),
        ),
        (
            with(&full, ("SANDBOX_OPENSHELL_INSTANCE", "plimsoll@ci")),
            "SANDBOX_OPENSHELL_INSTANCE=\"plimsoll@ci\" must be a label value: at most 63 letters, digits, - _ ., a letter or digit at each end".into(),
        ),
        (
            with(&full, ("SANDBOX_PIDS", "64")),
            "SANDBOX_PIDS is set, but the openshell plugin does not enforce it (an OpenShell gateway sets its sandboxes' process limit itself (its sandbox_pids_limit)); unset it".into(),
        ),
        (
            with(&full, ("PLIMSOLL_GUARD_ADDR", "127.0.0.1:9443")),
            "PLIMSOLL_GUARD_ADDR is set, but the openshell plugin's sandboxes reach no guard (its manifest declares no guard-url); unset it".into(),
        ),
    ]);
}

#[test]
fn agentsandbox_settings_come_from_its_manifest_with_groups_and_a_secrets_digest() {
    let sandboxd = "0123456789abcdef0123456789abcdef";
    let full: Vec<(&str, String)> = vec![
        ("SANDBOX_PROVIDER", "agentsandbox".into()),
        ("SANDBOX_AGENTSANDBOX_API_URL", "https://k8s.example:6443".into()),
        ("SANDBOX_AGENTSANDBOX_TOKEN", "eyJhbGciOiJSUzI1NiJ9.sa-token".into()),
        ("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", sandboxd.into()),
        ("SANDBOX_AGENTSANDBOX_NAMESPACE", "plimsoll".into()),
        ("SANDBOX_AGENTSANDBOX_WARM_POOL", "python".into()),
        ("SANDBOX_AGENTSANDBOX_PLUGIN", plugin_dir("agentsandbox")),
        ("SANDBOX_AGENTSANDBOX_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
    ];
    let c = load_owned(&full).expect("loads");
    let r = c.remote().expect("remote settings");
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
    assert!(!r.settings.keys().any(|k| k.starts_with("envelope.")), "{:?}", r.settings);
    let (cert, key) = (a_file("k8s-crt"), a_file("k8s-key"));
    let by_cert = with(
        &with(&without(&full, "SANDBOX_AGENTSANDBOX_TOKEN"), ("SANDBOX_AGENTSANDBOX_CERT_FILE", &cert)),
        ("SANDBOX_AGENTSANDBOX_KEY_FILE", &key),
    );
    let c = load_owned(&by_cert).expect("a client certificate instead of a token");
    assert!(c.remote().expect("remote").endpoints["api"].headers.is_empty());
    refusals(vec![
        (
            without(&full, "SANDBOX_AGENTSANDBOX_TOKEN"),
            "SANDBOX_PROVIDER=agentsandbox needs one of SANDBOX_AGENTSANDBOX_TOKEN (or token-file in [plugins.agentsandbox]) (the service account's bearer token; the host attaches it, the plugin never sees it) or SANDBOX_AGENTSANDBOX_CERT_FILE (or cert-file in [plugins.agentsandbox]) (a client certificate (PEM) the host presents instead of a token)".into(),
        ),
        (
            with(&full, ("SANDBOX_AGENTSANDBOX_CERT_FILE", &cert)),
            "SANDBOX_AGENTSANDBOX_TOKEN and SANDBOX_AGENTSANDBOX_CERT_FILE exclude each other: set one".into(),
        ),
        (
            with(&without(&full, "SANDBOX_AGENTSANDBOX_TOKEN"), ("SANDBOX_AGENTSANDBOX_CERT_FILE", &cert)),
            "SANDBOX_AGENTSANDBOX_CERT_FILE and SANDBOX_AGENTSANDBOX_KEY_FILE go together: set all of them or none".into(),
        ),
        (
            with(&full, ("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", "short")),
            "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN must be at least 32 characters".into(),
        ),
        (
            with(&full, ("SANDBOX_AGENTSANDBOX_NAMESPACE", "Plimsoll")),
            "SANDBOX_AGENTSANDBOX_NAMESPACE=\"Plimsoll\" must be a DNS label: 1 to 63 lowercase letters, digits and -, a letter or digit at each end".into(),
        ),
        (
            with(&full, ("SANDBOX_AGENTSANDBOX_SANDBOXD_PORT", "0")),
            "SANDBOX_AGENTSANDBOX_SANDBOXD_PORT=\"0\" is outside 1..65535".into(),
        ),
        (
            with(&full, ("SANDBOX_MEMORY_MB", "1024")),
            "SANDBOX_MEMORY_MB is set, but the agentsandbox plugin does not enforce it (agentsandbox pods are sized by their template (its container's resources and its emptyDir's sizeLimit), which the read-back holds them to); unset it".into(),
        ),
    ]);
}

// A plugin this project never saw, in a plugins directory, set from the file.

/// A scratch directory that goes when the test ends.
struct Scratch(std::path::PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ACME: &str = r#"
schema = 1
name = "acme-cloud"
kind = "provider"
version = "0.1.0"
component = "acme-cloud.wasm"
max-tier = "vm"
capabilities = ["http", "log"]
envelope = ["memory-mb"]

[settings.api-url]
kind = "url"
required = true
help = "the control plane"

[settings.api-key]
kind = "secret"
required = true
help = "the key"

[settings.region]
kind = "string"
choices = ["eu", "us"]
default = "eu"
help = "where sandboxes run"

[settings.boot-within]
kind = "duration"
default = "30s"
help = "how long a sandbox may take to boot"

[endpoints.api]
url = "api-url"
headers = { authorization = { secret = "api-key", prefix = "Token " } }
"#;

fn acme(tag: &str, manifest: &str) -> Scratch {
    let root = std::env::temp_dir().join(format!("plimsoll-acme-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("acme-cloud")).expect("mkdir");
    std::fs::write(root.join("acme-cloud/plugin.toml"), manifest).expect("write");
    Scratch(root)
}

#[test]
fn a_plugin_nobody_named_loads_from_the_plugins_directory_and_its_table() {
    let dir = acme("table", ACME);
    let key_file = dir.0.join("api.key");
    std::fs::write(&key_file, "acme-secret-1\n").expect("write");
    let toml = dir.0.join("plimsoll.toml");
    let file = |extra: &str| {
        let text = format!(
            "[sandbox]\nprovider = \"acme-cloud\"\nplugins-dir = {:?}\n[plugins.acme-cloud]\ntrusted-keys = [\"/k.pub\"]\napprove = [\"http\", \"log\"]\napi-url = \"https://api.acme.test\"\napi-key-file = {:?}\n{extra}",
            dir.0.display().to_string(),
            key_file.display().to_string()
        );
        std::fs::write(&toml, text).expect("write");
    };
    file("region = \"us\"\nmax-tier = \"kernel\"\n");
    let c = Config::load(Some(&toml), &env(&[("SANDBOX_MEMORY_MB", "512")])).expect("loads");
    let p = c.plugin.as_ref().expect("the plugin");
    assert_eq!((p.name(), p.location.dir.clone()), ("acme-cloud", dir.0.join("acme-cloud")));
    assert_eq!(p.location.approve, ["http", "log"]);
    let r = c.remote().expect("remote");
    assert_eq!(r.max_tier, plimsoll_core::Tier::Kernel);
    assert_eq!(r.endpoints["api"].headers[0].1.expose(), "Token acme-secret-1");
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!(
        (setting("region"), setting("boot-within"), setting("envelope.memory-mb")),
        (Some("us"), Some("30000"), Some("512"))
    );
    // The environment wins over the table, by the generic name.
    let c = Config::load(Some(&toml), &env(&[("SANDBOX_ACME_CLOUD_REGION", "eu")])).expect("loads");
    assert_eq!(c.remote().expect("remote").settings["region"], "eu");
    let cases = [
        (
            "regoin = \"us\"\n",
            "[plugins.acme-cloud] regoin is not a setting of the acme-cloud plugin; it takes path, trusted-keys, approve, max-tier, api-key-file, api-url, boot-within, region (plimsoll-host plugin inspect shows them)",
        ),
        ("region = \"asia\"\n", "plugins.acme-cloud.region=\"asia\" is not one of eu, us"),
        (
            "boot-within = \"soon\"\n",
            "plugins.acme-cloud.boot-within=\"soon\" is not a duration: write it as 90s, 5m, 1h30m or 250ms",
        ),
        ("region = [\"eu\"]\n", "[plugins.acme-cloud] region must be a string or a number, not a array"),
        (
            "api-key = \"in-the-file\"\n",
            "[plugins.acme-cloud] api-key would hold a secret in the file: write api-key-file = PATH (a file only the daemon reads), or set SANDBOX_ACME_CLOUD_API_KEY",
        ),
    ];
    for (extra, want) in cases {
        file(extra);
        let got = Config::load(Some(&toml), &env(&[])).map(|_| ()).expect_err(want).to_string();
        assert_eq!(got, want);
    }
    file("");
    let got = Config::load(Some(&toml), &env(&[("SANDBOX_PIDS", "10")])).map(|_| ()).expect_err("pids").to_string();
    assert_eq!(
        got,
        "SANDBOX_PIDS is set, but the acme-cloud plugin does not enforce it (it enforces memory-mb); unset it"
    );
}

#[test]
fn a_plugin_is_refused_by_name_when_it_is_missing_misnamed_or_not_a_provider() {
    let dir = acme("refusals", ACME);
    let base = |extra: &[(&'static str, String)]| {
        let mut v: Vec<(&'static str, String)> = vec![
            ("SANDBOX_PROVIDER", "acme-cloud".into()),
            ("SANDBOX_PLUGINS_DIR", dir.0.display().to_string()),
            ("SANDBOX_ACME_CLOUD_PLUGIN_KEYS", "/k.pub".into()),
            ("SANDBOX_ACME_CLOUD_API_URL", "https://api.acme.test".into()),
            ("SANDBOX_ACME_CLOUD_API_KEY", "k".into()),
        ];
        v.extend(extra.iter().cloned());
        v
    };
    load_owned(&base(&[])).expect("loads");
    let other = acme("other", &ACME.replace("\"acme-cloud\"", "\"acme-other\""));
    let kind = acme(
        "kind",
        &ACME
            .replace("kind = \"provider\"", "kind = \"broker\"")
            .replace("max-tier = \"vm\"\n", "")
            .replace("envelope = [\"memory-mb\"]\n", ""),
    );
    let (other_dir, kind_dir) = (other.0.join("acme-cloud"), kind.0.join("acme-cloud"));
    refusals(vec![
        (
            base(&[("SANDBOX_PROVIDER", "acme-clod".into())]).into_iter().filter(|(k, _)| !k.starts_with("SANDBOX_ACME")).collect(),
            format!("SANDBOX_PROVIDER=acme-clod: no plugin named acme-clod in SANDBOX_PLUGINS_DIR ({}/acme-clod has no plugin.toml); set SANDBOX_ACME_CLOD_PLUGIN to its directory", dir.0.display()),
        ),
        (
            base(&[("SANDBOX_ACME_CLOUD_PLUGIN", other_dir.display().to_string())]),
            format!("SANDBOX_PROVIDER=acme-cloud: the plugin at {} is named \"acme-other\" in its manifest; point SANDBOX_ACME_CLOUD_PLUGIN at the acme-cloud plugin, or set SANDBOX_PROVIDER=acme-other", other_dir.display()),
        ),
        (
            base(&[("SANDBOX_ACME_CLOUD_PLUGIN", kind_dir.display().to_string())]),
            format!("SANDBOX_PROVIDER=acme-cloud: the plugin at {} is a broker, not a provider", kind_dir.display()),
        ),
        (
            base(&[("SANDBOX_DOCKER_IMAGE", "sha256:abc".into())]),
            "SANDBOX_DOCKER_IMAGE is set, but the acme-cloud plugin does not drive the host's container engine; unset it".into(),
        ),
    ]);
    let toml = dir.0.join("plimsoll.toml");
    std::fs::write(&toml, "[plugins.acme-cloud]\napi-url = \"https://api.acme.test\"\n").expect("write");
    let got = Config::load(Some(&toml), &env(&[("SANDBOX_PROVIDER", "wasm")])).map(|_| ()).expect_err("a stray table");
    assert_eq!(
        got.to_string(),
        "[plugins.acme-cloud] is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=acme-cloud or remove the table"
    );
}

#[test]
fn a_broker_plugin_reads_its_endpoints_from_its_settings_through_the_same_path() {
    let root = std::env::temp_dir().join(format!("plimsoll-broker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("acme-broker");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let _scratch = Scratch(root);
    std::fs::write(
        dir.join("plugin.toml"),
        r#"
schema = 1
name = "acme-broker"
kind = "broker"
version = "0.1.0"
component = "acme-broker.wasm"
capabilities = ["http", "log"]

[settings.token-url]
kind = "url"
required = true
help = "the API's token endpoint"

[settings.client-secret]
kind = "secret"
required = true
aliases = ["ACME_CLIENT_SECRET"]
help = "the long-lived client secret the host trades for each run's token"

[endpoints.token]
url = "token-url"
headers = { authorization = { secret = "client-secret", prefix = "Basic " } }
"#,
    )
    .expect("write");
    let dir_s = dir.display().to_string();
    let full: Vec<(&str, String)> = vec![
        ("PLIMSOLL_BROKER_PLUGINS", dir_s.clone()),
        ("PLIMSOLL_BROKER_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
        ("SANDBOX_ACME_BROKER_TOKEN_URL", "https://auth.acme.test/oauth/token".into()),
        ("ACME_CLIENT_SECRET", "cs-0123456789".into()),
    ];
    let c = load_owned(&full).expect("loads");
    let read = &c.broker_plugins.read;
    assert_eq!(read.len(), 1);
    let token = &read[0].endpoints["token"];
    assert_eq!(token.url, "https://auth.acme.test/oauth/token");
    assert_eq!((token.headers[0].0.as_str(), token.headers[0].1.expose()), ("authorization", "Basic cs-0123456789"));
    assert!(!format!("{c:?}").contains("cs-0123456789"));
    refusals(vec![
        (
            with(&full, ("SANDBOX_ACME_BROKER_TOKEN_UR", "https://auth.acme.test")),
            "SANDBOX_ACME_BROKER_TOKEN_UR is not a variable of the acme-broker plugin; it reads SANDBOX_ACME_BROKER_PLUGIN, SANDBOX_ACME_BROKER_PLUGIN_KEYS, SANDBOX_ACME_BROKER_PLUGIN_APPROVE, SANDBOX_ACME_BROKER_MAX_TIER, SANDBOX_ACME_BROKER_CLIENT_SECRET, ACME_CLIENT_SECRET, SANDBOX_ACME_BROKER_TOKEN_URL (plimsoll-host plugin inspect shows what each is for)".into(),
        ),
        (
            without(&full, "ACME_CLIENT_SECRET"),
            "the broker plugin acme-broker needs SANDBOX_ACME_BROKER_CLIENT_SECRET (or ACME_CLIENT_SECRET, or client-secret-file in [plugins.acme-broker]): the long-lived client secret the host trades for each run's token".into(),
        ),
        (
            vec![
                ("PLIMSOLL_BROKER_PLUGINS", plugin_dir("docker")),
                ("PLIMSOLL_BROKER_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub".into()),
            ],
            format!("the plugin at {} is a provider, not a broker", plugin_dir("docker")),
        ),
    ]);
    // A broker whose manifest leaves its endpoints to the operator reads no settings.
    let c = load(&[
        ("PLIMSOLL_BROKER_PLUGINS", &plugin_dir("inventory-broker")),
        ("PLIMSOLL_BROKER_PLUGIN_KEYS", "/etc/plimsoll/vendor.pub"),
        ("PLIMSOLL_BROKER_ENDPOINTS", "inventory-broker.token=http://127.0.0.1:1/oauth/token"),
    ])
    .expect("loads");
    assert!(c.broker_plugins.read[0].endpoints.is_empty());
}

/// deploy/kubernetes/plimsoll.toml, as the daemon in the cluster reads it: every
/// key known, the agentsandbox settings its manifest declares. Each file it
/// names is put in a scratch directory, as the Deployment mounts them there.
#[test]
fn the_kubernetes_deployments_configuration_loads() {
    let deploy = format!("{}/../../deploy/kubernetes/plimsoll.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&deploy).expect("deploy/kubernetes/plimsoll.toml");
    let root = std::env::temp_dir().join(format!("plimsoll-config-deploy-{}", std::process::id()));
    let mut text = text.replace("\"/opt/plimsoll/plugins/agentsandbox\"", &format!("{:?}", plugin_dir("agentsandbox")));
    for path in ["/etc/plimsoll/", "/var/run/secrets/plimsoll/", "/var/cache/plimsoll", "/opt/plimsoll/plugins/keys/"] {
        text = text.replace(&format!("\"{path}"), &format!("\"{}{path}", root.display()));
    }
    for file in ["etc/plimsoll/callers/token", "etc/plimsoll/sandboxd/token", "var/run/secrets/plimsoll/api/token"] {
        let p = root.join(file);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(&p, "0123456789abcdef0123456789abcdef\n").expect("write");
    }
    for file in ["etc/plimsoll/tls/tls.crt", "etc/plimsoll/tls/tls.key", "var/run/secrets/plimsoll/api/ca.crt"] {
        let p = root.join(file);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(&p, "-----BEGIN CERTIFICATE-----\n").expect("write");
    }
    let config = root.join("plimsoll.toml");
    std::fs::write(&config, text).expect("write");
    let c = Config::load(Some(&config), &env(&[])).expect("the deployment's configuration loads");
    assert_eq!(c.provider, ProviderKind::Plugin("agentsandbox".into()));
    let r = c.remote().expect("remote settings");
    assert_eq!(r.endpoints["api"].url.as_str(), "https://kubernetes.default.svc");
    let setting = |k: &str| r.settings.get(k).map(String::as_str);
    assert_eq!(
        (setting("namespace"), setting("warm-pool"), setting("instance")),
        (Some("plimsoll"), Some("plimsoll-runsc"), Some("plimsoll-daemon"))
    );
    let _ = std::fs::remove_dir_all(&root);
}
