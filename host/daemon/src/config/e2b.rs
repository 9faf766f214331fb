//! The e2b provider's settings. The API key, the CA and the fixed address are the
//! host's; the plugin reads only the template's name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use plimsoll_core::Tier;
use serde::Deserialize;

use super::env::Pick;
use super::plugins::{PluginSettings, PluginTable, PluginVars};
use super::remote::{self, EndpointConfig, RemoteConfig, Secret};
use super::{ConfigError, Env, ProviderKind};

const E2B_PLUGIN: PluginVars = PluginVars {
    provider: "e2b",
    dir: "SANDBOX_E2B_PLUGIN",
    keys: "SANDBOX_E2B_PLUGIN_KEYS",
    approve: "SANDBOX_E2B_PLUGIN_APPROVE",
};

/// E2B's control plane.
pub const DEFAULT_API_URL: &str = "https://api.e2b.app";
/// A sandbox's envd, one host per sandbox.
pub const DEFAULT_ENVD_URL: &str = "https://49983-{target}.e2b.app";

/// The `[e2b]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct E2bTable {
    template: Option<String>,
    api_url: Option<String>,
    envd_url: Option<String>,
    ca_file: Option<PathBuf>,
    connect_to: Option<String>,
    max_tier: Option<String>,
    api_key_file: Option<PathBuf>,
    instance: Option<String>,
    guard_url: Option<String>,
}

/// Reads the e2b settings: required when e2b is the provider, refused when it is not.
pub(super) fn e2b_config(
    pick: &mut Pick<'_>,
    env: &dyn Env,
    provider: ProviderKind,
    t: E2bTable,
    plugin: Option<PluginTable>,
    guard_addr: Option<String>,
) -> Result<Option<RemoteConfig>, ConfigError> {
    let plugin = PluginSettings::read(pick, E2B_PLUGIN, plugin);
    let template = pick.string("E2B_TEMPLATE", t.template);
    let api_url = pick.string("SANDBOX_E2B_API_URL", t.api_url);
    let envd_url = pick.string("SANDBOX_E2B_ENVD_URL", t.envd_url);
    let ca_file = pick.string("SANDBOX_E2B_CA_FILE", t.ca_file.map(|p| p.display().to_string()));
    let connect_to = pick.string("SANDBOX_E2B_CONNECT_TO", t.connect_to);
    let max_tier = pick.string("SANDBOX_E2B_MAX_TIER", t.max_tier);
    let instance = pick.string("SANDBOX_E2B_INSTANCE", t.instance);
    let guard_url = pick.string("E2B_GUARD_URL", t.guard_url);
    let key = remote::secret(env, "E2B_API_KEY", t.api_key_file)?;
    if provider != ProviderKind::E2b {
        let set = [
            ("SANDBOX_E2B_PLUGIN", plugin.dir.is_some()),
            ("SANDBOX_E2B_API_URL", api_url.is_some()),
            ("SANDBOX_E2B_ENVD_URL", envd_url.is_some()),
            ("SANDBOX_E2B_CA_FILE", ca_file.is_some()),
            ("SANDBOX_E2B_CONNECT_TO", connect_to.is_some()),
            ("SANDBOX_E2B_MAX_TIER", max_tier.is_some()),
            ("SANDBOX_E2B_INSTANCE", instance.is_some()),
            ("E2B_GUARD_URL", guard_url.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=e2b or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let key = key.ok_or_else(|| {
        ConfigError::Value(
            "SANDBOX_PROVIDER=e2b needs E2B_API_KEY (or e2b.api-key-file): the host holds it; the plugin never sees it"
                .into(),
        )
    })?;
    if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ConfigError::Value("E2B_API_KEY must be visible ASCII with no spaces".into()));
    }
    let connect_to = remote::address("SANDBOX_E2B_CONNECT_TO", connect_to)?;
    let api_url = api_url.filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_API_URL.into());
    let envd_url = envd_url.filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_ENVD_URL.into());
    remote::url("SANDBOX_E2B_API_URL", &api_url, connect_to)?;
    remote::url("SANDBOX_E2B_ENVD_URL", &envd_url, connect_to)?;
    if envd_url.matches("{target}").count() != 1 {
        return Err(ConfigError::Value(format!(
            "SANDBOX_E2B_ENVD_URL={envd_url:?} must name {{target}} once, where the sandbox's ID goes (as in {DEFAULT_ENVD_URL})"
        )));
    }
    let template = template.filter(|t| !t.is_empty()).unwrap_or_else(|| "base".into());
    if !template.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(ConfigError::Value(format!(
            "E2B_TEMPLATE={template:?} must be letters, digits, dashes and underscores"
        )));
    }
    let instance = remote::instance("SANDBOX_E2B_INSTANCE", instance)?;
    let ca_file = ca_file.filter(|c| !c.is_empty()).map(PathBuf::from);
    let endpoint = |url: String, headers: Vec<(String, Secret)>| EndpointConfig {
        url,
        ca_file: ca_file.clone(),
        client_cert: None,
        connect_to,
        headers,
        exchange: None,
    };
    let endpoints = BTreeMap::from([
        ("api".to_string(), endpoint(api_url, vec![("x-api-key".into(), Secret::new(key))])),
        ("envd".to_string(), endpoint(envd_url, vec![])),
    ]);
    Ok(Some(RemoteConfig {
        provider: "e2b",
        plugin: plugin.require()?,
        endpoints,
        settings: BTreeMap::from([("template".to_string(), template), ("instance".to_string(), instance)]),
        max_tier: remote::tier("SANDBOX_E2B_MAX_TIER", max_tier, Tier::Vm)?,
        guard: super::guard::guard("E2B_GUARD_URL", guard_url, guard_addr)?,
    }))
}
