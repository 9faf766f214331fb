//! The grant profiles' file and the vendor broker plugins.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use super::env::{Pick, list};

/// The `[grants]` table: where the grant profiles are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct GrantsTable {
    pub(super) file: Option<PathBuf>,
    broker_plugins: Option<Vec<PathBuf>>,
    broker_plugin_keys: Option<Vec<PathBuf>>,
    broker_endpoints: Option<Vec<String>>,
}

/// Where broker plugins come from and where their endpoints point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerPlugins {
    /// Plugin directories (`plugin.toml`, the component, `plugin.sig`).
    pub dirs: Vec<PathBuf>,
    /// Vendor keys the operator trusts (PEM files).
    pub trusted_keys: Vec<PathBuf>,
    /// `(plugin, alias, url)` for each endpoint a plugin calls that its manifest
    /// gives no URL setting.
    pub endpoints: Vec<(String, String, String)>,
    /// Each plugin as its manifest declares it, with the endpoints its settings set.
    pub read: Vec<super::plugin::AdapterPlugin>,
}

impl GrantsTable {
    /// The broker plugin directories: `PLIMSOLL_BROKER_PLUGINS`, else the table's.
    pub(super) fn dirs(&self, env: &dyn super::Env) -> Vec<PathBuf> {
        match env.get("PLIMSOLL_BROKER_PLUGINS") {
            Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
            None => self.broker_plugins.clone().unwrap_or_default(),
        }
    }
}

/// Reads the broker plugin settings: environment first, then `[grants]`.
pub(super) fn broker_plugins(pick: &mut Pick<'_>, t: GrantsTable) -> Result<BrokerPlugins, ConfigError> {
    let paths = |v: Option<String>, file: Option<Vec<PathBuf>>| match v {
        Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
        None => file.unwrap_or_default(),
    };
    let dirs = paths(pick.string("PLIMSOLL_BROKER_PLUGINS", None), t.broker_plugins);
    let trusted_keys = paths(pick.string("PLIMSOLL_BROKER_PLUGIN_KEYS", None), t.broker_plugin_keys);
    let endpoints = match pick.string("PLIMSOLL_BROKER_ENDPOINTS", None) {
        Some(v) => list(v),
        None => t.broker_endpoints.unwrap_or_default(),
    };
    let mut parsed = Vec::new();
    for e in endpoints {
        let bad = || ConfigError::Value(format!("PLIMSOLL_BROKER_ENDPOINTS: {e:?} must be PLUGIN.ALIAS=URL"));
        let (key, url) = e.split_once('=').ok_or_else(bad)?;
        let (plugin, alias) = key.split_once('.').ok_or_else(bad)?;
        if plugin.is_empty() || alias.is_empty() || url.is_empty() {
            return Err(bad());
        }
        parsed.push((plugin.to_string(), alias.to_string(), url.to_string()));
    }
    if !dirs.is_empty() && trusted_keys.is_empty() {
        return Err(ConfigError::Value(
            "PLIMSOLL_BROKER_PLUGINS is set but PLIMSOLL_BROKER_PLUGIN_KEYS names no vendor key; a broker plugin loads only when a key the operator trusts signed it".into(),
        ));
    }
    Ok(BrokerPlugins { dirs, trusted_keys, endpoints: parsed, read: Vec::new() })
}
