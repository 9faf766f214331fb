use super::*;

const GOOD: &str = r#"
schema = 1
name = "docker"
kind = "provider"
version = "0.1.0"
component = "docker.wasm"
max-tier = "kernel"
capabilities = ["containers", "log"]
"#;

/// A remote provider with one endpoint, a secret for it and a URL setting.
const REMOTE: &str = r#"
schema = 1
name = "acme"
kind = "provider"
version = "0.1.0"
component = "acme.wasm"
max-tier = "vm"
capabilities = ["http", "log"]
headers = ["content-type"]

[settings.api-url]
kind = "url"
default = "https://api.acme.test"
help = "the control plane"

[settings.api-key]
kind = "secret"
required = true
aliases = ["ACME_API_KEY"]
help = "the key"

[endpoints.api]
url = "api-url"
headers = { x-api-key = { secret = "api-key" } }
"#;

fn err(text: &str) -> String {
    Manifest::parse(text).expect_err("must be refused")
}

#[test]
fn a_manifest_parses() {
    let m = Manifest::parse(GOOD).expect("parses");
    assert_eq!((m.kind, m.max_tier), (PluginKind::Provider, Some(Tier::Kernel)));
    assert_eq!(m.capabilities, vec![Capability::Containers, Capability::Log]);
    let m = Manifest::parse(REMOTE).expect("parses");
    assert_eq!(m.variable("api-key"), "SANDBOX_ACME_API_KEY");
    assert_eq!(m.endpoints["api"].headers["x-api-key"].secret, "api-key");
}

#[test]
fn every_plugin_in_this_repository_has_a_whole_manifest() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("plugins/") {
        let path = entry.expect("entry").path().join("plugin.toml");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let m = Manifest::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(Some(m.name.as_str()), path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()));
        seen += 1;
    }
    assert!(seen >= 7, "found {seen} plugin manifests under {}", dir.display());
}

#[test]
fn a_signer_manifest_names_its_endpoints_and_no_tier() {
    let m = Manifest::parse(
        "schema = 1\nname = \"kms-signer\"\nkind = \"signer\"\nversion = \"0.1.0\"\ncomponent = \"kms-signer.wasm\"\ncapabilities = [\"http\"]\n[endpoints.kms]\n",
    )
    .expect("parses");
    assert_eq!((m.max_tier, m.endpoints.keys().map(String::as_str).collect::<Vec<_>>()), (None, vec!["kms"]));
    let e = err(&GOOD.replace("kind = \"provider\"", "kind = \"signer\""));
    assert_eq!(e, "plugin.toml: max-tier is for providers; a signer runs no code");
    let e = err(&GOOD.replace("max-tier = \"kernel\"\n", ""));
    assert_eq!(e, "plugin.toml: a provider must state its max-tier (process, container, kernel or vm)");
}

#[test]
fn the_schema_is_one_this_host_reads() {
    let e = err(&GOOD.replace("schema = 1", "schema = 2"));
    assert_eq!(
        e,
        "plugin.toml: schema 2 is not one this host reads (it reads schema 1); rebuild the plugin with a matching kit"
    );
    let e = err(&GOOD.replace("schema = 1\n", ""));
    assert!(e.contains("missing field `schema`"), "{e}");
}

#[test]
fn code_runs_only_at_declared_endpoints() {
    let m = Manifest::parse(&format!("{REMOTE}\n")).expect("parses");
    assert_eq!(m.runs_code_at, None);
    let with =
        REMOTE.replace("headers = [\"content-type\"]\n", "headers = [\"content-type\"]\nruns-code-at = [\"exec\"]\n");
    assert_eq!(err(&with), "plugin.toml: runs-code-at names \"exec\", which is not among its endpoints");
}

#[test]
fn declared_headers_are_lowercase_names_and_the_hosts_are_not_the_plugins() {
    for bad in ["Content-Type", "x token", ""] {
        let e = err(&GOOD.replace("capabilities", &format!("headers = [{bad:?}]\ncapabilities")));
        assert_eq!(e, format!("plugin.toml: header {bad:?} must be a lowercase header name"));
    }
    let e = err(&REMOTE.replace("[\"content-type\"]", "[\"content-type\", \"x-api-key\"]"));
    assert_eq!(
        e,
        "plugin.toml: endpoint \"api\" header \"x-api-key\" is the host's to attach, so the plugin may not set it too"
    );
}

#[test]
fn unknown_fields_and_escaping_paths_are_refused() {
    assert!(err(&format!("{GOOD}extra = 1\n")).contains("unknown field `extra`"));
    let e = err(&REMOTE.replace("help = \"the key\"", "help = \"the key\"\nsecret-value = \"x\""));
    assert!(e.contains("unknown field `secret-value`"), "{e}");
    let e = err(&GOOD.replace("docker.wasm", "../x.wasm"));
    assert_eq!(e, "plugin.toml: component \"../x.wasm\" must be a .wasm file name beside the manifest");
    assert!(err(&GOOD.replace("\"kernel\"", "\"none\"")).contains("max-tier \"none\" is not"));
    let e = err(&GOOD.replace("\"docker\"", "\"Docker\""));
    assert!(e.starts_with("plugin.toml: name \"Docker\" must be 1 to 40 lowercase letters"), "{e}");
}

#[test]
fn every_setting_an_endpoint_names_exists_with_its_kind() {
    let e = err(&REMOTE.replace("url = \"api-url\"", "url = \"base-url\""));
    assert_eq!(e, "plugin.toml: endpoint \"api\" url names \"base-url\", which is not a setting");
    let e = err(&REMOTE.replace("secret = \"api-key\"", "secret = \"api-url\""));
    assert_eq!(e, "plugin.toml: endpoint \"api\" header \"x-api-key\" names \"api-url\", a url; it must be a secret");
    let e = err(&REMOTE.replace("headers = { x-api-key = { secret = \"api-key\" } }", ""));
    assert!(e.starts_with("plugin.toml: secret \"api-key\" goes to no endpoint"), "{e}");
    let e = err(&REMOTE.replace("url = \"api-url\"\n", ""));
    assert_eq!(e, "plugin.toml: endpoint \"api\" names no url setting; a provider's endpoints are its settings");
    let e = err(&REMOTE.replace("[endpoints.api]", "[endpoints.api]\nclient-cert = \"api-url\""));
    assert_eq!(e, "plugin.toml: endpoint \"api\" client-cert names \"api-url\", a url; it must be a file");
}

#[test]
fn settings_are_declared_whole() {
    let e = err(&REMOTE.replace("kind = \"url\"", "kind = \"url\"\nrequired = true"));
    assert_eq!(e, "plugin.toml: setting \"api-url\": required and default exclude each other");
    let e = err(&REMOTE.replace("help = \"the control plane\"", "help = \"\""));
    assert_eq!(e, "plugin.toml: setting \"api-url\": help must say what it is for");
    let e = err(&REMOTE.replace("\"https://api.acme.test\"", "\"ftp://api.acme.test\""));
    assert_eq!(
        e,
        "plugin.toml: setting \"api-url\": its default \"ftp://api.acme.test\" must be https (http only to loopback)"
    );
    let e = err(&REMOTE.replace("[settings.api-url]", "[settings.max-tier]"));
    assert!(e.starts_with("plugin.toml: setting \"max-tier\" is the host's (reserved: path,"), "{e}");
    let e = err(&REMOTE.replace("[\"ACME_API_KEY\"]", "[\"PLIMSOLL_TOKEN\"]"));
    assert_eq!(e, "plugin.toml: setting \"api-key\": alias \"PLIMSOLL_TOKEN\" is in the daemon's own PLIMSOLL_ names");
    let e = err(&REMOTE.replace("required = true", "default = \"k\""));
    assert_eq!(e, "plugin.toml: setting \"api-key\": a secret has no default; the operator sets it");
    let e = err(&REMOTE.replace("kind = \"url\"", "kind = \"url\"\nmin = 1"));
    assert_eq!(e, "plugin.toml: setting \"api-url\": min and max are for numbers");
}

#[test]
fn setting_values_are_checked_by_kind() {
    let s = |kind: &str, extra: &str| -> Setting {
        toml::from_str(&format!("kind = \"{kind}\"\nhelp = \"h\"\n{extra}")).expect("setting")
    };
    let port = s("number", "min = 1\nmax = 65535");
    assert_eq!(port.check("8787"), Ok("8787".into()));
    assert_eq!(port.check("0"), Err("is outside 1..65535".into()));
    assert_eq!(port.check("http"), Err("is not a whole number".into()));
    assert_eq!(s("duration", "").check("1m30s"), Ok("90000".into()));
    assert_eq!(s("address", "").check("localhost"), Err("is not an IP address".into()));
    let key = s("secret", "min-length = 32");
    assert_eq!(key.check("short"), Err("must be at least 32 characters".into()));
    assert_eq!(key.check("two words"), Err("must be visible ASCII with no spaces".into()));
    let word = s("string", "format = \"word\"");
    assert_eq!(word.check("base;rm"), Err("must be letters, digits, dashes and underscores".into()));
    let image = s("string", "format = \"pinned-image\"");
    assert!(image.check(&format!("python@sha256:{}", "a".repeat(64))).is_ok());
    for bad in ["python:3.12", "python@sha256:abc", &format!("python@sha256:{}", "A".repeat(64))] {
        assert!(image.check(bad).is_err(), "{bad}");
    }
    let label = s("string", "format = \"label-value\"");
    assert!(label.check("plimsoll.ci-1").is_ok());
    let value = "must be a label value: at most 63 letters, digits, - _ ., a letter or digit at each end";
    for bad in ["plimsoll@ci".to_string(), "-x".to_string(), "a".repeat(64)] {
        assert_eq!(label.check(&bad), Err(value.into()), "{bad}");
    }
    let dns = s("string", "format = \"dns-label\"");
    assert!(dns.check("a-1").is_ok());
    let label = "must be a DNS label: 1 to 63 lowercase letters, digits and -, a letter or digit at each end";
    for bad in ["Plimsoll", ""] {
        assert_eq!(dns.check(bad), Err(label.into()), "{bad:?}");
    }
    let envd = s("url", "target = \"anywhere\"\ndefault = \"https://49983-{target}.e2b.app\"");
    assert_eq!(
        envd.check("https://envd.e2b.app"),
        Err("must name {target} once, where the sandbox's ID goes (as in https://49983-{target}.e2b.app)".into())
    );
    let endpoint = s("url", "target = \"in-host\"");
    assert!(endpoint.check("https://{target}.sbx.test:8443").is_ok());
    assert_eq!(
        endpoint.check("https://sbx.test/{target}"),
        Err("must name {target} once, in its host, where the sandbox's ID goes".into())
    );
    assert_eq!(s("url", "https = true").check("http://127.0.0.1:1"), Err("must be https".into()));
    assert_eq!(s("url", "").check("api.acme.test"), Err("is not an absolute URL".into()));
}

#[test]
fn groups_name_settings_that_may_be_unset() {
    let text = format!(
        "{REMOTE}\n[settings.cert-file]\nkind = \"file\"\nhelp = \"c\"\n[[groups]]\nrule = \"exactly-one\"\nsettings = [\"api-key\", \"cert-file\"]\n"
    );
    assert_eq!(err(&text), "plugin.toml: a group names \"api-key\", which is always set (required or defaulted)");
    let g = Group { rule: GroupRule::ExactlyOne, settings: vec!["a".into(), "b".into()] };
    assert_eq!(g.breach(&|_| false), Some(Breach::Missing));
    assert_eq!(g.breach(&|_| true), Some(Breach::Several));
    assert_eq!(g.breach(&|s| s == "a"), None);
    let g = Group { rule: GroupRule::AllOrNone, settings: vec!["a".into(), "b".into()] };
    assert_eq!(g.breach(&|s| s == "a"), Some(Breach::Partial));
    assert_eq!(g.breach(&|_| false), None);
}

#[test]
fn held_secrets_and_bookings_name_declared_endpoints() {
    let held = "\n[[held-secrets]]\nfrom = \"api\"\nfield = \"token\"\ntarget-field = \"id\"\nto = \"exec\"\nheader = \"x-token\"\n";
    let e = err(&format!("{REMOTE}{held}"));
    assert_eq!(e, "plugin.toml: held secret \"token\" names endpoint \"exec\", which it does not declare");
    let m = Manifest::parse(&format!("{REMOTE}{}", held.replace("\"exec\"", "\"api\""))).expect("parses");
    assert_eq!(m.held_secrets[0].target_prefix, "");
    let booking = "\n[booking]\nkind = \"grpc\"\nendpoint = \"api\"\ncreate = \"/a.B/Create\"\nmade-at = [1]\ndelete = \"/a.B/Delete\"\ndeleted-at = [1]\n";
    let m = Manifest::parse(&format!("{REMOTE}{booking}")).expect("parses");
    assert_eq!(m.booking.as_ref().map(Booking::endpoint), Some("api"));
    let e = err(&format!("{REMOTE}{}", booking.replace("grpc", "sql")));
    assert!(e.contains("unknown variant `sql`"), "{e}");
    let e = err(&format!("{GOOD}{booking}"));
    assert!(e.contains("booking names endpoint \"api\""), "{e}");
}

#[test]
fn an_unapproved_capability_is_named() {
    let m = Manifest::parse(GOOD).expect("parses");
    assert_eq!(m.check_approved(&[Capability::Containers, Capability::Log]), Ok(()));
    let err = m.check_approved(&[Capability::Log]).expect_err("must fail");
    assert_eq!(
        err,
        "plugin docker requests the containers capability, which the operator has not approved (add \"containers\" to approve in [plugins.docker] of plimsoll.toml, or SANDBOX_DOCKER_PLUGIN_APPROVE)"
    );
}
