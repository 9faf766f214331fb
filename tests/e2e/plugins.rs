//! An open plugin host: a provider plugin this project never named loads
//! through the same path as the ones it ships. A built remote plugin copied
//! under a new name (`e2b` to `acme`), signed and approved, serves the
//! conformance suite against the e2b fake with the same settings under
//! `SANDBOX_ACME_*`; a plugin built against another major version of the WIT
//! packages is refused by name before it runs; and the author's kit works end
//! to end: `plugin new` writes a project that builds, and `plugin check` passes
//! it on the local engine and a shipped plugin against its fake.

use super::fakes::{Fake, copy_built, pairs, settle, sign};
use super::{Daemon, refused_start, scratch};

const TOKEN: &str = "plugins-suite-token-plugins-suite-token-0123";

/// The e2b fake's settings, renamed for a plugin called `acme`: its own
/// variables under `SANDBOX_ACME_`, and the original system's names (which the
/// manifest also accepts) moved there too, so nothing says e2b but the backend.
fn as_acme(fake: &Fake) -> Vec<(String, String)> {
    fake.settings
        .iter()
        .map(|(k, v)| {
            let k = match k.as_str() {
                "SANDBOX_PROVIDER" => return (k.clone(), "acme".to_string()),
                "E2B_API_KEY" => "SANDBOX_ACME_API_KEY".to_string(),
                "E2B_TEMPLATE" => "SANDBOX_ACME_TEMPLATE".to_string(),
                other => other.replace("SANDBOX_E2B_", "SANDBOX_ACME_"),
            };
            (k, v.clone())
        })
        .collect()
}

/// The built e2b plugin copied to `dir/acme` with `name = "acme"` in its
/// manifest and `edit` applied to its component, signed; its directory and key.
fn acme(dir: &std::path::Path, edit: impl Fn(Vec<u8>) -> Vec<u8>) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let plugin = copy_built("e2b", &dir.join("acme"))?;
    let manifest = std::fs::read_to_string(plugin.join("plugin.toml")).expect("manifest");
    assert!(manifest.contains("name = \"e2b\"\n"), "{manifest}");
    std::fs::write(plugin.join("plugin.toml"), manifest.replace("name = \"e2b\"\n", "name = \"acme\"\n"))
        .expect("write");
    let component = std::fs::read(plugin.join("e2b.wasm")).expect("component");
    std::fs::write(plugin.join("e2b.wasm"), edit(component)).expect("write");
    let key = sign(&plugin, dir);
    Some((plugin, key))
}

fn serving(env: Vec<(String, String)>, plugin: &std::path::Path, key: &std::path::Path) -> Vec<(String, String)> {
    let mut env = env;
    env.extend(
        [
            ("SANDBOX_ACME_PLUGIN", plugin.display().to_string()),
            ("SANDBOX_ACME_PLUGIN_KEYS", key.display().to_string()),
            ("SANDBOX_ACME_PLUGIN_APPROVE", "http,log".into()),
            ("SANDBOX_RATE_PER_MIN", "0".into()),
            ("SANDBOX_MAX_CONCURRENT", "4".into()),
            ("PLIMSOLL_TOKEN", TOKEN.into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    env
}

#[test]
fn a_remote_plugin_copied_under_a_new_name_serves_the_conformance_suite_as_itself() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("plugins-acme");
    let Some((plugin, key)) = acme(&dir, |c| c) else { return };
    let env = serving(as_acme(&fake), &plugin, &key);
    assert!(env.iter().all(|(k, _)| !k.contains("E2B")), "{env:?}");
    let d = Daemon::start(&pairs(&env));
    let backend = super::conformance::Backend {
        provider: "acme",
        tier: "vm",
        environment: "e2b-template:base",
        above: None,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
    assert_eq!(settle(&fake, 0), 0, "sandboxes left behind");
    let log = d.log();
    let key = fake.get("E2B_API_KEY");
    assert!(log.iter().all(|l| !l.contains(key)), "the API key was logged");
    assert!(
        log.iter().any(|l| l.contains(r#""msg":"plugin http call""#) && l.contains(r#""plugin":"acme""#)),
        "the plugin's calls are logged under its new name"
    );
}

#[test]
fn a_plugin_built_against_another_major_version_of_the_host_packages_is_refused_by_name() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("plugins-version");
    // The same bytes with every name of the log interface moved to 9.1.1: the
    // component stays well formed, and says it was built against another host.
    let bump = |c: Vec<u8>| {
        let (from, to) = (b"plimsoll:host/log@0.1.1".as_slice(), b"plimsoll:host/log@9.1.1".as_slice());
        let mut out = Vec::with_capacity(c.len());
        let mut i = 0;
        while i < c.len() {
            if c[i..].starts_with(from) {
                out.extend_from_slice(to);
                i += from.len();
            } else {
                out.push(c[i]);
                i += 1;
            }
        }
        assert!(out != c, "the component names plimsoll:host/log@0.1.1");
        out
    };
    let Some((plugin, key)) = acme(&dir, bump) else { return };
    let env = serving(as_acme(&fake), &plugin, &key);
    let (code, stderr) = refused_start(&pairs(&env));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "plugin acme: it was built against plimsoll:host@9.1.1, and this host accepts plimsoll:host 0.1.0 to 0.1.1 only; rebuild it against this host's wit/ packages"
        ),
        "{stderr}"
    );
    assert_eq!(fake.sandboxes(), 0, "nothing was made");
}

/// `plimsoll-host plugin check DIR` with `env` and `args`: its exit code and its
/// report (one line per check on stdout; the daemon's log goes to stderr).
fn plugin_check(
    dir: &std::path::Path,
    key: &std::path::Path,
    env: &[(String, String)],
    args: &[&str],
) -> (Option<i32>, String) {
    let mut cmd = super::host();
    cmd.args(["plugin", "check"]).arg(dir).arg("--trusted-key").arg(key).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("plugin check");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Every line of a report that is not `ok`.
fn failures(report: &str) -> Vec<&str> {
    report.lines().filter(|l| !l.starts_with("ok   ")).collect()
}

/// The kit end to end on this machine: `plugin new demo --kind provider` writes a
/// project that builds for wasm32-wasip2 as it is; signed, it loads on the local
/// docker engine and passes every check of `plugin check`.
#[test]
fn a_new_provider_plugin_builds_signs_and_passes_plugin_check_on_the_local_engine() {
    let Some(fx) = super::docker::fixture("runc") else { return };
    let dir = scratch("plugins-new");
    let project = dir.join("demo");
    let o = super::host().args(["plugin", "new", "demo", "--kind", "provider"]).arg(&project).output().expect("new");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("wrote the provider plugin demo in "));
    // A second `new` into the same directory is refused, so nothing is overwritten.
    let again =
        super::host().args(["plugin", "new", "demo", "--kind", "provider"]).arg(&project).output().expect("new");
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty; name a new directory"), "{again:?}");
    // A name no manifest may hold is refused; a broker and a signer start from
    // this repository's examples of their kinds, renamed.
    let bad =
        super::host().args(["plugin", "new", "Demo", "--kind", "provider"]).arg(dir.join("bad")).output().expect("new");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("\"Demo\" cannot name a plugin"), "{bad:?}");
    for kind in ["broker", "signer"] {
        let at = dir.join(kind);
        let o = super::host()
            .args(["plugin", "new", &format!("my-{kind}"), "--kind", kind])
            .arg(&at)
            .output()
            .expect("new");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let manifest = std::fs::read_to_string(at.join("plugin.toml")).expect("manifest");
        assert!(
            manifest.contains(&format!("name = \"my-{kind}\"")) && manifest.contains(&format!("kind = \"{kind}\""))
        );
        let lib = std::fs::read_to_string(at.join("src/lib.rs")).expect("lib.rs");
        assert!(lib.contains("\"wit/host\"") && !lib.contains("../../wit"), "{lib}");
    }
    // Its own build script, with a target directory kept between runs of the suite.
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-kit-target");
    let built = std::process::Command::new(project.join("build.sh"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("build.sh");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    assert!(project.join("demo.wasm").is_file());
    let key = sign(&project, &dir);
    let env = [("SANDBOX_DOCKER_IMAGE".to_string(), fx.image().to_string())];
    let (code, report) = plugin_check(&project, &key, &env, &[]);
    assert_eq!((code, failures(&report)), (Some(0), vec![]), "{report}");
    for check in
        ["load", "tier", "snippet", "project with a binary artifact", "floor above the tier", "session cell", "sweep"]
    {
        assert!(report.contains(&format!("ok   {check}: ")), "{check}: {report}");
    }
    assert!(report.contains("ok   tier: demo states container; its manifest allows at most kernel"), "{report}");
    // Signed again by a key the check does not trust, it does not load.
    let stranger = scratch("plugins-new-stranger");
    let stranger_key = sign(&project, &stranger);
    let (code, report) = plugin_check(&project, &key, &env, &[]);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("FAIL load: ") && report.contains("signature check failed"), "{report}");
    let (code, report) = plugin_check(&project, &stranger_key, &env, &[]);
    assert_eq!((code, failures(&report)), (Some(0), vec![]), "{report}");
}

/// `plugin check` against a remote plugin and its vendor's fake, with the
/// settings the fake prints: the suite passes and a fresh start's sweep finds
/// nothing of the instance left; a bad setting fails the check by name first.
#[test]
fn plugin_check_passes_a_remote_plugin_against_its_fake_and_names_a_bad_setting() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("plugins-check-e2b");
    let Some(plugin) = copy_built("e2b", &dir.join("e2b")) else { return };
    let key = sign(&plugin, &dir);
    let env: Vec<(String, String)> = fake.settings.iter().filter(|(k, _)| k != "SANDBOX_PROVIDER").cloned().collect();
    let (code, report) = plugin_check(&plugin, &key, &env, &[]);
    assert_eq!((code, failures(&report)), (Some(0), vec![]), "{report}");
    assert!(report.contains("ok   tier: e2b states vm; its manifest allows at most vm"), "{report}");
    assert!(
        report
            .contains("ok   sweep: a fresh start's sweep listed this instance's sandboxes and found none left behind"),
        "{report}"
    );
    assert_eq!(settle(&fake, 0), 0, "sandboxes left behind");
    let mut bad = env.clone();
    bad.push(("E2B_TEMPLATE".into(), "base;rm".into()));
    let (code, report) = plugin_check(&plugin, &key, &bad, &[]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(
        report.trim(),
        "FAIL settings: E2B_TEMPLATE=\"base;rm\" must be letters, digits, dashes and underscores"
    );
}
