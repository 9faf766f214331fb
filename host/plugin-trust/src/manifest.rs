//! The manifest beside a plugin component (`plugin.toml`): what the plugin is and
//! which host capabilities it needs. The operator approves capabilities; a plugin
//! that asks for one not approved does not load.

use std::fmt;

use plimsoll_core::Tier;
use serde::Deserialize;

/// A host capability a plugin may import (`wit/host/host.wit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// The host-validated container engine.
    Containers,
    /// Outbound HTTP to named endpoints.
    Http,
    /// The host's log.
    Log,
}

impl Capability {
    /// The name used in manifests and approvals.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Containers => "containers",
            Capability::Http => "http",
            Capability::Log => "log",
        }
    }

    /// Parses an approval entry.
    ///
    /// # Errors
    ///
    /// The name of no capability.
    pub fn parse(s: &str) -> Result<Capability, String> {
        match s.trim() {
            "containers" => Ok(Capability::Containers),
            "http" => Ok(Capability::Http),
            "log" => Ok(Capability::Log),
            other => Err(format!("{other:?} is not a capability; use containers, http or log")),
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin's manifest.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// The provider's name (`docker`).
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The component file, beside the manifest.
    pub component: String,
    /// A provider's strongest tier it may ever be credited with; the host lowers
    /// every run's tier to it. Required of providers, meaningless for signers.
    #[serde(default, deserialize_with = "tier")]
    pub max_tier: Option<Tier>,
    /// Capabilities the plugin imports.
    pub capabilities: Vec<Capability>,
    /// The HTTP endpoints, by alias, the plugin calls; the operator maps each alias
    /// to a URL (and a credential the plugin never sees).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// The request headers (lowercase names) the plugin sets on its HTTP requests;
    /// the host refuses any other, so a plugin cannot smuggle one the manifest's
    /// reviewer never saw.
    #[serde(default)]
    pub headers: Vec<String>,
    /// The endpoints where a request may start code (a remote backend's process
    /// API); unset, every endpoint may. A refusal after a write to one of them is
    /// "may have run"; writes elsewhere (creating, deleting a sandbox) are not.
    #[serde(default)]
    pub runs_code_at: Option<Vec<String>>,
}

fn tier<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Tier>, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "process" => Ok(Some(Tier::Process)),
        "container" => Ok(Some(Tier::Container)),
        "kernel" => Ok(Some(Tier::Kernel)),
        "vm" => Ok(Some(Tier::Vm)),
        other => Err(serde::de::Error::custom(format!("max-tier {other:?} is not process, container, kernel or vm"))),
    }
}

impl Manifest {
    /// Parses a manifest.
    ///
    /// # Errors
    ///
    /// The TOML error, or a component path that leaves the plugin's directory.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = toml::from_str(text).map_err(|e| format!("plugin.toml: {}", e.message()))?;
        let plain = !m.component.is_empty()
            && !m.component.contains('/')
            && !m.component.contains('\\')
            && m.component != ".."
            && m.component.ends_with(".wasm");
        if !plain {
            return Err(format!(
                "plugin.toml: component {:?} must be a .wasm file name beside the manifest",
                m.component
            ));
        }
        if m.name.is_empty() || !m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(format!("plugin.toml: name {:?} must be lowercase letters, digits and dashes", m.name));
        }
        if let Some(unknown) = m.runs_code_at.iter().flatten().find(|e| !m.endpoints.contains(e)) {
            return Err(format!("plugin.toml: runs-code-at names {unknown:?}, which is not among its endpoints"));
        }
        for h in &m.headers {
            let token = !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !token {
                return Err(format!("plugin.toml: header {h:?} must be a lowercase header name"));
            }
        }
        Ok(m)
    }

    /// Checks every requested capability against the operator's approval.
    ///
    /// # Errors
    ///
    /// The first capability not approved, with where to approve it.
    pub fn check_approved(&self, approved: &[Capability]) -> Result<(), String> {
        for c in &self.capabilities {
            if !approved.contains(c) {
                return Err(format!(
                    "plugin {} requests the {c} capability, which the operator has not approved (add {c:?} to approve in [plugins.{}] of plimsoll.toml, or SANDBOX_{}_PLUGIN_APPROVE)",
                    self.name,
                    self.name,
                    self.name.to_ascii_uppercase().replace('-', "_"),
                    c = c.as_str()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "docker"
version = "0.1.0"
component = "docker.wasm"
max-tier = "kernel"
capabilities = ["containers", "log"]
"#;

    #[test]
    fn a_manifest_parses() {
        let m = Manifest::parse(GOOD).expect("parses");
        assert_eq!(m.max_tier, Some(Tier::Kernel));
        assert_eq!(m.capabilities, vec![Capability::Containers, Capability::Log]);
    }

    #[test]
    fn a_signer_manifest_names_its_endpoints_and_no_tier() {
        let m = Manifest::parse(
            "name = \"kms-signer\"\nversion = \"0.1.0\"\ncomponent = \"kms-signer.wasm\"\ncapabilities = [\"http\"]\nendpoints = [\"kms\"]\n",
        )
        .expect("parses");
        assert_eq!((m.max_tier, m.endpoints), (None, vec!["kms".to_string()]));
        assert!(m.headers.is_empty());
    }

    #[test]
    fn code_runs_only_at_declared_endpoints() {
        let base = format!("{GOOD}endpoints = [\"api\", \"envd\"]\n");
        let m = Manifest::parse(&format!("{base}runs-code-at = [\"envd\"]\n")).expect("parses");
        assert_eq!(m.runs_code_at, Some(vec!["envd".to_string()]));
        assert_eq!(Manifest::parse(&base).expect("parses").runs_code_at, None);
        let err = Manifest::parse(&format!("{base}runs-code-at = [\"exec\"]\n")).expect_err("undeclared");
        assert_eq!(err, "plugin.toml: runs-code-at names \"exec\", which is not among its endpoints");
    }

    #[test]
    fn declared_headers_are_lowercase_names() {
        let m = Manifest::parse(&format!("{GOOD}headers = [\"content-type\", \"x-access-token\"]\n")).expect("parses");
        assert_eq!(m.headers, ["content-type", "x-access-token"]);
        for bad in ["Content-Type", "x token", ""] {
            let err = Manifest::parse(&format!("{GOOD}headers = [{bad:?}]\n")).expect_err(bad);
            assert_eq!(err, format!("plugin.toml: header {bad:?} must be a lowercase header name"));
        }
    }

    #[test]
    fn unknown_fields_and_escaping_paths_are_refused() {
        let err = Manifest::parse(&format!("{GOOD}extra = 1\n")).expect_err("must fail");
        assert!(err.contains("unknown field `extra`"), "{err}");
        let err = Manifest::parse(&GOOD.replace("docker.wasm", "../x.wasm")).expect_err("must fail");
        assert_eq!(err, "plugin.toml: component \"../x.wasm\" must be a .wasm file name beside the manifest");
        let err = Manifest::parse(&GOOD.replace("\"kernel\"", "\"none\"")).expect_err("must fail");
        assert!(err.contains("max-tier \"none\" is not"), "{err}");
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
}
