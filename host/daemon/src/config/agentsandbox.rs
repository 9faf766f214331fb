//! The agentsandbox provider's settings (pods claimed from a Kubernetes
//! agent-sandbox warm pool). The service account's token or client certificate,
//! the cluster's CA and sandboxd's token are the host's; the plugin reads the
//! namespace, the warm pool, the instance, the port sandboxd listens on and the
//! SHA-256 of its token (what the pod must start sandboxd with).

use std::collections::BTreeMap;
use std::path::PathBuf;

use plimsoll_core::Tier;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::env::Pick;
use super::openshell::label_value;
use super::plugins::{PluginSettings, PluginTable, PluginVars};
use super::remote::{self, EndpointConfig, RemoteConfig, Secret};
use super::{ConfigError, Env, ProviderKind};

const AGENTSANDBOX_PLUGIN: PluginVars = PluginVars {
    provider: "agentsandbox",
    dir: "SANDBOX_AGENTSANDBOX_PLUGIN",
    keys: "SANDBOX_AGENTSANDBOX_PLUGIN_KEYS",
    approve: "SANDBOX_AGENTSANDBOX_PLUGIN_APPROVE",
};

/// The port sandboxd listens on in a pod when the operator names none.
pub const DEFAULT_SANDBOXD_PORT: u16 = 8787;
/// The shortest sandboxd token taken: a guessable one would open every pod's sandboxd.
const MIN_SANDBOXD_TOKEN: usize = 32;
/// The header the host attaches sandboxd's token in.
pub const SANDBOXD_TOKEN_HEADER: &str = "x-plimsoll-sandboxd-token";

/// The `[agentsandbox]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct AgentSandboxTable {
    api_url: Option<String>,
    ca_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    sandboxd_token_file: Option<PathBuf>,
    sandboxd_port: Option<u16>,
    namespace: Option<String>,
    warm_pool: Option<String>,
    connect_to: Option<String>,
    max_tier: Option<String>,
    instance: Option<String>,
}

/// Whether `v` is a Kubernetes object name of the DNS-label kind (namespaces,
/// and the names this provider reads): 1 to 63 lowercase letters, digits and
/// `-`, a letter or digit at each end.
fn dns_label(v: &str) -> bool {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=63).contains(&v.len())
        && ends(v.chars().next())
        && ends(v.chars().last())
        && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Reads the agentsandbox settings: required when it is the provider, refused
/// when it is not.
pub(super) fn agentsandbox_config(
    pick: &mut Pick<'_>,
    env: &dyn Env,
    provider: ProviderKind,
    t: AgentSandboxTable,
    plugin: Option<PluginTable>,
) -> Result<Option<RemoteConfig>, ConfigError> {
    let plugin = PluginSettings::read(pick, AGENTSANDBOX_PLUGIN, plugin);
    let path = |p: Option<PathBuf>| p.map(|p| p.display().to_string());
    let api_url = pick.string("SANDBOX_AGENTSANDBOX_API_URL", t.api_url);
    let ca_file = pick.string("SANDBOX_AGENTSANDBOX_CA_FILE", path(t.ca_file));
    let cert_file = pick.string("SANDBOX_AGENTSANDBOX_CERT_FILE", path(t.cert_file));
    let key_file = pick.string("SANDBOX_AGENTSANDBOX_KEY_FILE", path(t.key_file));
    let port = pick.string("SANDBOX_AGENTSANDBOX_SANDBOXD_PORT", t.sandboxd_port.map(|p| p.to_string()));
    let namespace = pick.string("SANDBOX_AGENTSANDBOX_NAMESPACE", t.namespace);
    let pool = pick.string("SANDBOX_AGENTSANDBOX_WARM_POOL", t.warm_pool);
    let connect_to = pick.string("SANDBOX_AGENTSANDBOX_CONNECT_TO", t.connect_to);
    let max_tier = pick.string("SANDBOX_AGENTSANDBOX_MAX_TIER", t.max_tier);
    let instance = pick.string("SANDBOX_AGENTSANDBOX_INSTANCE", t.instance);
    let token = remote::secret(env, "SANDBOX_AGENTSANDBOX_TOKEN", t.token_file)?;
    let sandboxd_token = remote::secret(env, "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", t.sandboxd_token_file)?;
    if provider != ProviderKind::AgentSandbox {
        let set = [
            ("SANDBOX_AGENTSANDBOX_PLUGIN", plugin.dir.is_some()),
            ("SANDBOX_AGENTSANDBOX_API_URL", api_url.is_some()),
            ("SANDBOX_AGENTSANDBOX_CA_FILE", ca_file.is_some()),
            ("SANDBOX_AGENTSANDBOX_CERT_FILE", cert_file.is_some()),
            ("SANDBOX_AGENTSANDBOX_KEY_FILE", key_file.is_some()),
            ("SANDBOX_AGENTSANDBOX_SANDBOXD_PORT", port.is_some()),
            ("SANDBOX_AGENTSANDBOX_NAMESPACE", namespace.is_some()),
            ("SANDBOX_AGENTSANDBOX_WARM_POOL", pool.is_some()),
            ("SANDBOX_AGENTSANDBOX_CONNECT_TO", connect_to.is_some()),
            ("SANDBOX_AGENTSANDBOX_MAX_TIER", max_tier.is_some()),
            ("SANDBOX_AGENTSANDBOX_INSTANCE", instance.is_some()),
            ("SANDBOX_AGENTSANDBOX_TOKEN", token.is_some()),
            ("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN", sandboxd_token.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=agentsandbox or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let need = |what: &str, why: &str| ConfigError::Value(format!("SANDBOX_PROVIDER=agentsandbox needs {what}: {why}"));
    let api_url = api_url.filter(|u| !u.is_empty()).ok_or_else(|| {
        need("SANDBOX_AGENTSANDBOX_API_URL", "the Kubernetes API server's https URL (a kubeconfig's cluster.server)")
    })?;
    let connect_to = remote::address("SANDBOX_AGENTSANDBOX_CONNECT_TO", connect_to)?;
    remote::url("SANDBOX_AGENTSANDBOX_API_URL", &api_url, connect_to)?;
    let file = |v: Option<String>| v.filter(|p| !p.is_empty()).map(PathBuf::from);
    let client_cert = match (file(cert_file), file(key_file)) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(ConfigError::Value(
                "SANDBOX_AGENTSANDBOX_CERT_FILE and SANDBOX_AGENTSANDBOX_KEY_FILE go together: set both or neither"
                    .into(),
            ));
        }
    };
    let token = token.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    let bearer = match (&token, &client_cert) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Value(
                "SANDBOX_AGENTSANDBOX_TOKEN and SANDBOX_AGENTSANDBOX_CERT_FILE both name a credential: set one".into(),
            ));
        }
        (None, None) => {
            return Err(need(
                "SANDBOX_AGENTSANDBOX_TOKEN (or agentsandbox.token-file), or SANDBOX_AGENTSANDBOX_CERT_FILE and _KEY_FILE",
                "the service account's credential the host presents to the API server; the plugin never sees it",
            ));
        }
        (Some(t), None) => {
            if !t.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                return Err(ConfigError::Value(
                    "SANDBOX_AGENTSANDBOX_TOKEN must be visible ASCII with no spaces".into(),
                ));
            }
            Some(Secret::new(format!("Bearer {t}")))
        }
        (None, Some(_)) => None,
    };
    let sandboxd_token = sandboxd_token.map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).ok_or_else(|| {
        need(
            "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN (or agentsandbox.sandboxd-token-file)",
            "the token sandboxd in each pod answers to; the pod's template carries only its SHA-256 (--token-sha256)",
        )
    })?;
    if sandboxd_token.len() < MIN_SANDBOXD_TOKEN || !sandboxd_token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN must be at least {MIN_SANDBOXD_TOKEN} visible ASCII characters \
             (openssl rand -hex 32 makes one)"
        )));
    }
    let token_sha256 = hex::encode(Sha256::digest(sandboxd_token.as_bytes()));
    let port = match port.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_SANDBOXD_PORT,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            ConfigError::Value(format!("SANDBOX_AGENTSANDBOX_SANDBOXD_PORT={p:?} is not a port (1 to 65535)"))
        })?,
    };
    let namespace = namespace.filter(|n| !n.is_empty()).ok_or_else(|| {
        need("SANDBOX_AGENTSANDBOX_NAMESPACE", "the namespace of the warm pool, its template and the claims")
    })?;
    let pool = pool
        .filter(|p| !p.is_empty())
        .ok_or_else(|| need("SANDBOX_AGENTSANDBOX_WARM_POOL", "the SandboxWarmPool every run claims a pod from"))?;
    for (var, v) in [("SANDBOX_AGENTSANDBOX_NAMESPACE", &namespace), ("SANDBOX_AGENTSANDBOX_WARM_POOL", &pool)] {
        if !dns_label(v) {
            return Err(ConfigError::Value(format!(
                "{var}={v:?} is not a Kubernetes name: 1 to 63 lowercase letters, digits and -, a letter or digit at each end"
            )));
        }
    }
    let instance = remote::instance("SANDBOX_AGENTSANDBOX_INSTANCE", instance)?.replace('@', ".");
    if !label_value(&instance) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_AGENTSANDBOX_INSTANCE={instance:?} must be a label value: at most 63 letters, digits, - _ ., \
             a letter or digit at each end"
        )));
    }
    let endpoint = |headers: Vec<(String, Secret)>| EndpointConfig {
        url: api_url.clone(),
        ca_file: file(ca_file.clone()),
        client_cert: client_cert.clone(),
        connect_to,
        headers,
        exchange: None,
    };
    let authorization: Vec<(String, Secret)> = bearer.into_iter().map(|b| ("authorization".to_string(), b)).collect();
    let mut to_pods = authorization.clone();
    to_pods.push((SANDBOXD_TOKEN_HEADER.to_string(), Secret::new(sandboxd_token)));
    Ok(Some(RemoteConfig {
        provider: "agentsandbox",
        plugin: plugin.require()?,
        endpoints: BTreeMap::from([
            ("api".to_string(), endpoint(authorization)),
            ("pods".to_string(), endpoint(to_pods)),
        ]),
        settings: BTreeMap::from([
            ("namespace".to_string(), namespace),
            ("warm-pool".to_string(), pool),
            ("instance".to_string(), instance),
            ("sandboxd-port".to_string(), port.to_string()),
            ("sandboxd-token-sha256".to_string(), token_sha256),
        ]),
        max_tier: remote::tier("SANDBOX_AGENTSANDBOX_MAX_TIER", max_tier, Tier::Vm)?,
        guard: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        assert!(dns_label("plimsoll") && dns_label("a-1"));
        assert!(!dns_label("Plimsoll") && !dns_label("-a") && !dns_label("") && !dns_label(&"a".repeat(64)));
    }
}
