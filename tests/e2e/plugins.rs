//! An open plugin host: a provider plugin this project never named loads
//! through the same path as the ones it ships. A built remote plugin copied
//! under a new name (`e2b` to `acme`), signed and approved, serves the
//! conformance suite against the e2b fake with the same settings under
//! `SANDBOX_ACME_*`; a plugin built against another major version of the WIT
//! packages is refused by name before it runs.

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
    // The same bytes with every name of the log interface moved to 9.1.0: the
    // component stays well formed, and says it was built against another host.
    let bump = |c: Vec<u8>| {
        let (from, to) = (b"plimsoll:host/log@0.1.0".as_slice(), b"plimsoll:host/log@9.1.0".as_slice());
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
        assert_ne!(out, c, "the component names plimsoll:host/log@0.1.0");
        out
    };
    let Some((plugin, key)) = acme(&dir, bump) else { return };
    let env = serving(as_acme(&fake), &plugin, &key);
    let (code, stderr) = refused_start(&pairs(&env));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "plugin acme: it was built against plimsoll:host@9.1.0, and this host accepts plimsoll:host 0.1.x only; rebuild it against this host's wit/ packages"
        ),
        "{stderr}"
    );
    assert_eq!(fake.sandboxes(), 0, "nothing was made");
}
