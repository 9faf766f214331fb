//! The manifest beside a plugin component (`plugin.toml`): what the plugin is,
//! which host capabilities it needs, and everything the host must know to run it
//! without naming it in its own code: the settings it takes, where its endpoints
//! are and which secrets the host attaches to them, what the host keeps out of
//! its answers, and how a create books a sandbox.
//!
//! The operator approves capabilities; a plugin that asks for one not approved
//! does not load. Every table refuses unknown fields, and an omitted grant grants
//! nothing. `docs/plugins.md` is the reference.

use std::collections::BTreeMap;
use std::fmt;

use plimsoll_core::Tier;
use serde::Deserialize;

mod endpoints;
mod settings;

pub use endpoints::{Booking, Endpoint, Exchange, HeaderSecret, HeldSecret};
pub use settings::{Breach, Format, Group, GroupRule, Setting, SettingKind, TargetRule};

/// The manifest schema this host reads.
pub const SCHEMA: u32 = 1;

/// Setting names the host keeps for itself in a plugin's table and variables
/// (`[plugins.NAME] path`, `SANDBOX_NAME_PLUGIN_KEYS`, `SANDBOX_NAME_MAX_TIER`).
pub const RESERVED_SETTINGS: [&str; 6] = ["path", "trusted-keys", "approve", "plugin", "plugin-keys", "max-tier"];

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

/// What a plugin is to the host: which WIT world its component exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// Runs code: exports `plimsoll:provider` (`SANDBOX_PROVIDER` names it).
    Provider,
    /// Mints short-lived credentials for grants: exports `plimsoll:broker`.
    Broker,
    /// Signs run records: exports `plimsoll:signer`.
    Signer,
}

impl PluginKind {
    /// The name used in manifests and `plugin new --kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Provider => "provider",
            PluginKind::Broker => "broker",
            PluginKind::Signer => "signer",
        }
    }

    /// Parses `provider`, `broker` or `signer`.
    ///
    /// # Errors
    ///
    /// Any other word, with the three named.
    pub fn parse(s: &str) -> Result<PluginKind, String> {
        match s {
            "provider" => Ok(PluginKind::Provider),
            "broker" => Ok(PluginKind::Broker),
            "signer" => Ok(PluginKind::Signer),
            other => Err(format!("{other:?} is not a plugin kind; use provider, broker or signer")),
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One limit of the operator's per-run envelope (`SANDBOX_MEMORY_MB` and its
/// siblings) a provider plugin enforces. Setting one the plugin does not list
/// refuses startup: a limit nobody enforces must not look set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// `SANDBOX_MEMORY_MB`
    MemoryMb,
    /// `SANDBOX_CPUS`
    Cpus,
    /// `SANDBOX_PIDS`
    Pids,
    /// `SANDBOX_DISK_MB`
    DiskMb,
}

impl Limit {
    /// Every limit, in the order the host reads them.
    pub const ALL: [Limit; 4] = [Limit::MemoryMb, Limit::Cpus, Limit::Pids, Limit::DiskMb];

    /// The name in manifests (`memory-mb`).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::MemoryMb => "memory-mb",
            Limit::Cpus => "cpus",
            Limit::Pids => "pids",
            Limit::DiskMb => "disk-mb",
        }
    }

    /// The operator's variable (`SANDBOX_MEMORY_MB`).
    pub fn variable(self) -> &'static str {
        match self {
            Limit::MemoryMb => "SANDBOX_MEMORY_MB",
            Limit::Cpus => "SANDBOX_CPUS",
            Limit::Pids => "SANDBOX_PIDS",
            Limit::DiskMb => "SANDBOX_DISK_MB",
        }
    }
}

/// A plugin's manifest.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// The manifest schema ([`SCHEMA`]).
    pub schema: u32,
    /// The plugin's name (`docker`): what `SANDBOX_PROVIDER` and `[plugins.NAME]` say.
    pub name: String,
    /// What it is.
    pub kind: PluginKind,
    /// The plugin's version.
    pub version: String,
    /// The component file, beside the manifest.
    pub component: String,
    /// A provider's strongest tier it may ever be credited with; the host lowers
    /// every run's tier to it. Required of providers, meaningless for the others.
    #[serde(default, deserialize_with = "tier")]
    pub max_tier: Option<Tier>,
    /// Capabilities the plugin imports.
    pub capabilities: Vec<Capability>,
    /// The HTTP endpoints, by alias, the plugin calls, and how the host reaches
    /// each: which settings hold its URL, CA, address and client certificate,
    /// and which secrets it attaches. Example: `[endpoints.api] url = "api-url"`.
    #[serde(default)]
    pub endpoints: BTreeMap<String, Endpoint>,
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
    /// The settings the plugin takes, by name (lowercase, `-`). The operator
    /// writes them in `[plugins.NAME]` or as `SANDBOX_NAME_SETTING`; the plugin
    /// reads every one but the secrets through `plimsoll:host/config`.
    #[serde(default)]
    pub settings: BTreeMap<String, Setting>,
    /// Rules over several settings (set together, exactly one of).
    #[serde(default)]
    pub groups: Vec<Group>,
    /// The per-run envelope limits the plugin enforces; the rest refuse startup.
    #[serde(default)]
    pub envelope: Vec<Limit>,
    /// Why the plugin takes no more of the envelope, said with the refusal.
    #[serde(default)]
    pub envelope_note: Option<String>,
    /// The setting (kind `url`) naming where the plugin's sandboxes reach the
    /// host's guard; unset, the plugin has no guard.
    #[serde(default)]
    pub guard_url: Option<String>,
    /// Per-sandbox secrets the host takes out of answers and attaches itself.
    #[serde(default)]
    pub held_secrets: Vec<HeldSecret>,
    /// How a create's answer books a sandbox, when no held secret does.
    #[serde(default)]
    pub booking: Option<Booking>,
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

/// Whether `s` may name a plugin: 1 to 40 lowercase letters, digits and
/// dashes, a letter first, no dash last (what `SANDBOX_PROVIDER` may say).
pub fn valid_name(s: &str) -> bool {
    plain_name(s) && s.len() <= 40
}

/// Whether `s` is a manifest name: lowercase letters, digits and dashes, a letter first.
pub(crate) fn plain_name(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.ends_with('-')
}

impl Manifest {
    /// Parses a manifest and checks it is whole: every name it refers to is
    /// declared, of the right kind, and nothing is declared twice or for nothing.
    ///
    /// # Errors
    ///
    /// The TOML error or the first inconsistency, prefixed `plugin.toml: `.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = toml::from_str(text).map_err(|e| format!("plugin.toml: {}", e.message()))?;
        m.check().map_err(|e| format!("plugin.toml: {e}"))?;
        Ok(m)
    }

    fn check(&self) -> Result<(), String> {
        if self.schema != SCHEMA {
            return Err(format!(
                "schema {} is not one this host reads (it reads schema {SCHEMA}); rebuild the plugin with a matching kit",
                self.schema
            ));
        }
        let plain = !self.component.is_empty()
            && !self.component.contains('/')
            && !self.component.contains('\\')
            && self.component != ".."
            && self.component.ends_with(".wasm");
        if !plain {
            return Err(format!("component {:?} must be a .wasm file name beside the manifest", self.component));
        }
        if !valid_name(&self.name) {
            return Err(format!(
                "name {:?} must be 1 to 40 lowercase letters, digits and dashes, a letter first",
                self.name
            ));
        }
        match (self.kind, self.max_tier) {
            (PluginKind::Provider, None) => {
                return Err("a provider must state its max-tier (process, container, kernel or vm)".into());
            }
            (PluginKind::Broker | PluginKind::Signer, Some(_)) => {
                return Err(format!("max-tier is for providers; a {} runs no code", self.kind));
            }
            _ => {}
        }
        let http = self.capabilities.contains(&Capability::Http);
        if self.endpoints.is_empty() == http {
            return Err(if http {
                "the http capability needs at least one endpoint".into()
            } else {
                "endpoints need the http capability".into()
            });
        }
        if self.capabilities.contains(&Capability::Containers) && self.kind != PluginKind::Provider {
            return Err(format!("a {} may not ask for the containers capability", self.kind));
        }
        if let Some(unknown) = self.runs_code_at.iter().flatten().find(|e| !self.endpoints.contains_key(*e)) {
            return Err(format!("runs-code-at names {unknown:?}, which is not among its endpoints"));
        }
        for h in &self.headers {
            let token = !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !token {
                return Err(format!("header {h:?} must be a lowercase header name"));
            }
        }
        for (name, s) in &self.settings {
            if !plain_name(name) {
                return Err(format!("setting {name:?} must be lowercase letters, digits and dashes, a letter first"));
            }
            if RESERVED_SETTINGS.contains(&name.as_str()) {
                return Err(format!(
                    "setting {name:?} is the host's (reserved: {}); rename it",
                    RESERVED_SETTINGS.join(", ")
                ));
            }
            s.check_declaration(name)?;
            if let Some(digest) = &s.sha256_as
                && self.settings.contains_key(digest)
            {
                return Err(format!("setting {name:?} gives its digest as {digest:?}, which is also a setting"));
            }
        }
        let mut aliases = BTreeMap::new();
        for (name, s) in &self.settings {
            for a in &s.aliases {
                if let Some(other) = aliases.insert(a.as_str(), name.as_str()) {
                    return Err(format!("alias {a} is given to both {other:?} and {name:?}"));
                }
            }
        }
        for g in &self.groups {
            g.check(&self.settings)?;
        }
        let mut used = Vec::new();
        for (alias, e) in &self.endpoints {
            if !plain_name(alias) {
                return Err(format!("endpoint {alias:?} must be lowercase letters, digits and dashes"));
            }
            if self.kind == PluginKind::Provider && e.url.is_none() {
                return Err(format!(
                    "endpoint {alias:?} names no url setting; a provider's endpoints are its settings"
                ));
            }
            used.extend(e.check(alias, &self.settings, &self.headers)?);
        }
        if let Some(g) = &self.guard_url {
            settings::expect_kind(&self.settings, "guard-url", g, SettingKind::Url)?;
            if !http || self.kind != PluginKind::Provider {
                return Err("guard-url is for providers that reach their sandboxes over http".into());
            }
        }
        for (name, s) in &self.settings {
            if s.kind == SettingKind::Secret && !used.contains(&name.as_str()) {
                return Err(format!(
                    "secret {name:?} goes to no endpoint; name it in an endpoint's headers or exchange (a secret the host holds for nothing is a mistake)"
                ));
            }
        }
        for h in &self.held_secrets {
            h.check(&self.endpoints)?;
        }
        if let Some(b) = &self.booking {
            b.check(&self.endpoints)?;
        }
        let remote_provider = self.kind == PluginKind::Provider && http;
        if !remote_provider && (!self.held_secrets.is_empty() || self.booking.is_some()) {
            return Err("held-secrets and booking are for providers that reach their sandboxes over http".into());
        }
        if self.kind != PluginKind::Provider && (!self.envelope.is_empty() || self.envelope_note.is_some()) {
            return Err(format!("envelope is for providers; a {} runs no code", self.kind));
        }
        Ok(())
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
                    "plugin {} requests the {c} capability, which the operator has not approved (add {c:?} to approve in [plugins.{}] of plimsoll.toml, or {}_PLUGIN_APPROVE)",
                    self.name,
                    self.name,
                    self.variable_prefix(),
                    c = c.as_str()
                ));
            }
        }
        Ok(())
    }

    /// The prefix of the plugin's variables: `SANDBOX_` and its name in upper
    /// case with `-` as `_` (`SANDBOX_ACME_CLOUD`).
    pub fn variable_prefix(&self) -> String {
        variable_prefix(&self.name)
    }

    /// The variable a setting is read from (`SANDBOX_E2B_API_URL`).
    pub fn variable(&self, setting: &str) -> String {
        format!("{}_{}", self.variable_prefix(), setting.to_ascii_uppercase().replace('-', "_"))
    }
}

/// The prefix of a plugin's variables, from its name: `SANDBOX_` and the name in
/// upper case with `-` as `_`.
pub fn variable_prefix(name: &str) -> String {
    format!("SANDBOX_{}", name.to_ascii_uppercase().replace('-', "_"))
}

#[cfg(test)]
mod tests;
