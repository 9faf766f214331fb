//! What every remote backend's settings resolve to: its plugin, the endpoints the
//! host reaches for it (with the credentials and TLS files only the host reads),
//! the plugin's own non-secret settings, and the operator's cap on its tier.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use plimsoll_core::Tier;

use super::plugins::PluginConfig;
use super::{ConfigError, Env};

/// A credential; its `Debug` never shows it, so no log or error can print it.
pub use plimsoll_grants::token::Secret;

/// How the host reaches one endpoint alias of a remote plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Its base URL (`{target}` once in the host for a host per sandbox).
    pub url: String,
    /// A CA file trusted for it instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and key (PEM files) for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Where every connection goes, whatever the host resolves to.
    pub connect_to: Option<IpAddr>,
    /// Headers the host attaches (the credential).
    pub headers: Vec<(String, Secret)>,
    /// A long-lived credential the host trades for a short-lived bearer.
    pub exchange: Option<ExchangeConfig>,
}

/// Where and with what the host trades for a short-lived bearer (Docker Hub's
/// personal access token exchange).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeConfig {
    /// The exchange's URL.
    pub url: String,
    /// The account.
    pub identifier: String,
    /// The long-lived secret.
    pub secret: Secret,
}

/// A remote backend's resolved settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteConfig {
    /// The provider's name (`e2b`).
    pub provider: &'static str,
    /// The signed plugin.
    pub plugin: PluginConfig,
    /// Endpoint alias to how the host reaches it.
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// What the plugin reads through `plimsoll:host/config` (never a secret).
    pub settings: BTreeMap<String, String>,
    /// The strongest tier the operator lets the host credit it with.
    pub max_tier: Tier,
    /// The guard its granted runs reach the broker through, when one is set.
    pub guard: Option<super::GuardConfig>,
}

/// Reads a tier cap: `vm`, `kernel`, `container` or `process`.
pub(super) fn tier(var: &str, v: Option<String>, default: Tier) -> Result<Tier, ConfigError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("vm") => Ok(Tier::Vm),
        Some("kernel") => Ok(Tier::Kernel),
        Some("container") => Ok(Tier::Container),
        Some("process") => Ok(Tier::Process),
        Some(other) => Err(ConfigError::Value(format!("{var}={other:?}: use vm, kernel, container or process"))),
    }
}

/// Whether `image` names its content: `<name>@sha256:<64 lowercase hex>`.
pub(super) fn pinned(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(name, digest)| {
        !name.is_empty()
            && !name.contains(char::is_whitespace)
            && digest.len() == 64
            && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Reads a fixed connect address.
pub(super) fn address(var: &str, v: Option<String>) -> Result<Option<IpAddr>, ConfigError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(a) => a.parse().map(Some).map_err(|_| ConfigError::Value(format!("{var}={a:?} is not an IP address"))),
    }
}

/// Checks a base URL is absolute https (or http to loopback, for a local fake or
/// a tunnel the operator runs), so a credential never crosses a network in clear.
pub(super) fn url(var: &str, v: &str, connect_to: Option<IpAddr>) -> Result<(), ConfigError> {
    let bad = |why: &str| ConfigError::Value(format!("{var}={v:?} {why}"));
    let (scheme, rest) = v.split_once("://").ok_or_else(|| bad("is not an absolute URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    match scheme {
        "https" => Ok(()),
        "http" if connect_to.is_some_and(|a| a.is_loopback()) || host == "127.0.0.1" || host == "localhost" => Ok(()),
        _ => Err(bad("must be https (http only to loopback)")),
    }
}

/// A secret from the environment variable `var`, or else trimmed from `file`.
pub(super) fn secret(env: &dyn Env, var: &str, file: Option<PathBuf>) -> Result<Option<String>, ConfigError> {
    if let Some(v) = env.get(var).filter(|v| !v.is_empty()) {
        return Ok(Some(v));
    }
    let Some(p) = file else { return Ok(None) };
    let text =
        std::fs::read_to_string(&p).map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?;
    Ok(Some(text.trim().to_string()))
}

/// This machine's name, as the instance stamp of a daemon that names none.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).collect();
    format!("plimsoll@{}", if host.is_empty() { "localhost" } else { &host })
}

/// This daemon's stamp on its remote sandboxes: `v`, or `plimsoll@<hostname>`.
pub(super) fn instance(var: &str, v: Option<String>) -> Result<String, ConfigError> {
    let instance = v.filter(|i| !i.is_empty()).unwrap_or_else(default_instance);
    let plain = instance.len() <= 64 && instance.bytes().all(|b| b.is_ascii_alphanumeric() || b"@._-".contains(&b));
    if !plain {
        return Err(ConfigError::Value(format!("{var}={instance:?} must be 1 to 64 letters, digits and @ . _ -")));
    }
    Ok(instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_must_be_pinned() {
        let digest = "a".repeat(64);
        assert!(pinned(&format!("docker.io/library/python@sha256:{digest}")));
        assert!(!pinned("docker.io/library/python:3.12"));
        assert!(!pinned(&format!("@sha256:{digest}")));
        assert!(!pinned(&format!("python@sha256:{}", "A".repeat(64))));
        assert!(!pinned("python@sha256:abc"));
    }
}
