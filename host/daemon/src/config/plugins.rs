//! Where a provider plugin comes from and what the operator allows it.

use std::path::PathBuf;

use serde::Deserialize;

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
