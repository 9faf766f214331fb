//! Where a provider plugin comes from and what the operator allows it.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use super::env::{Pick, list};

/// A `[plugins.<name>]` table: where the plugin is, whom to trust, what it may use.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct PluginTable {
    pub(super) path: Option<PathBuf>,
    pub(super) trusted_keys: Option<Vec<PathBuf>>,
    pub(super) approve: Option<Vec<String>>,
}

/// Where a provider plugin comes from and what the operator allows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginConfig {
    /// The plugin's directory (`plugin.toml`, the component, `plugin.sig`).
    pub dir: PathBuf,
    /// Public keys (SPKI PEM files) whose signatures are trusted.
    pub trusted_keys: Vec<PathBuf>,
    /// Approved capabilities (`containers`, `http`, `log`).
    pub approve: Vec<String>,
}

/// A provider plugin's three variables: `SANDBOX_<VENDOR>_PLUGIN`, `_KEYS`, `_APPROVE`.
#[derive(Clone, Copy, Debug)]
pub(super) struct PluginVars {
    /// The provider's name (`docker`, `e2b`).
    pub(super) provider: &'static str,
    pub(super) dir: &'static str,
    pub(super) keys: &'static str,
    pub(super) approve: &'static str,
}

/// A provider plugin's settings as read, before the provider that uses them checks them.
#[derive(Debug)]
pub(super) struct PluginSettings {
    vars: PluginVars,
    /// The directory, if set.
    pub(super) dir: Option<String>,
    keys: Vec<PathBuf>,
    approve: Vec<String>,
}

impl PluginSettings {
    /// Reads them: the environment over `[plugins.<name>]`.
    pub(super) fn read(pick: &mut Pick<'_>, vars: PluginVars, t: Option<PluginTable>) -> PluginSettings {
        let t = t.unwrap_or_default();
        let dir = pick.string(vars.dir, t.path.map(|p| p.display().to_string()));
        let keys = match pick.string(vars.keys, None) {
            Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
            None => t.trusted_keys.unwrap_or_default(),
        };
        let approve = match pick.string(vars.approve, None) {
            Some(v) => list(v),
            None => t.approve.unwrap_or_default(),
        };
        PluginSettings { vars, dir, keys, approve }
    }

    /// The plugin's configuration, for the provider that runs it.
    ///
    /// # Errors
    ///
    /// No directory, or no trusted key, named with what to set.
    pub(super) fn require(self) -> Result<PluginConfig, ConfigError> {
        let PluginVars { provider, dir: dir_var, keys: keys_var, .. } = self.vars;
        let dir = self.dir.filter(|d| !d.is_empty()).ok_or_else(|| {
            ConfigError::Value(format!(
                "SANDBOX_PROVIDER={provider} needs {dir_var}: the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)"
            ))
        })?;
        if self.keys.is_empty() {
            return Err(ConfigError::Value(format!(
                "{keys_var} is empty: name the public key(s) whose plugin signatures you trust"
            )));
        }
        Ok(PluginConfig { dir: PathBuf::from(dir), trusted_keys: self.keys, approve: self.approve })
    }
}
