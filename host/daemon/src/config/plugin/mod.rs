//! The provider plugin `SANDBOX_PROVIDER` names: where it is, whom to trust,
//! what the operator approves, and its settings as its own manifest declares
//! them. Nothing here knows a vendor: a plugin this project never saw is read
//! exactly like the ones it ships.

use std::path::PathBuf;

use plimsoll_plugin_trust::manifest::{Capability, Limit, Manifest, PluginKind};

use super::docker::DockerSettings;
use super::env::list;
use super::{ConfigError, DockerConfig, Env, Resources};

pub(super) mod remote;
mod settings;

pub use remote::{EndpointConfig, ExchangeConfig, RemoteConfig, Secret};

/// Where a plugin comes from and what the operator allows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginConfig {
    /// The plugin's directory (`plugin.toml`, the component, `plugin.sig`).
    pub dir: PathBuf,
    /// Public keys (SPKI PEM files) whose signatures are trusted.
    pub trusted_keys: Vec<PathBuf>,
    /// Approved capabilities (`containers`, `http`, `log`).
    pub approve: Vec<String>,
}

/// The provider plugin, its manifest as startup read it, and what it drives.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderPlugin {
    /// Where it is and what the operator allows it.
    pub location: PluginConfig,
    /// Its manifest. Loading checks the signed one is this one.
    pub manifest: Manifest,
    /// The host's container engine, or the remote backend's endpoints.
    pub backend: Backend,
}

impl ProviderPlugin {
    /// The plugin's name (what `SANDBOX_PROVIDER` says).
    pub fn name(&self) -> &str {
        &self.manifest.name
    }
}

/// What a provider plugin drives.
#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    /// The host's container engine (the `containers` capability).
    Containers(DockerConfig),
    /// A remote backend over the host's outbound HTTP (the `http` capability).
    Remote(RemoteConfig),
}

/// The table keys that are the host's, not the plugin's.
const PATH: &str = "path";
const TRUSTED_KEYS: &str = "trusted-keys";
const APPROVE: &str = "approve";
const MAX_TIER: &str = "max-tier";
/// All of them, in the order refusals list them.
const HOST_KEYS: [&str; 4] = [PATH, TRUSTED_KEYS, APPROVE, MAX_TIER];

/// The variables of the plugin named `name` that are the host's: its directory,
/// trusted keys, approvals and tier cap.
pub fn host_variables(name: &str) -> [String; 4] {
    let p = plimsoll_plugin_trust::manifest::variable_prefix(name);
    [format!("{p}_PLUGIN"), format!("{p}_PLUGIN_KEYS"), format!("{p}_PLUGIN_APPROVE"), format!("{p}_MAX_TIER")]
}

/// The name `SANDBOX_PROVIDER` gives, if it is one a plugin may have.
pub(super) fn plugin_name(v: &str) -> Result<String, ConfigError> {
    if !plimsoll_plugin_trust::manifest::valid_name(v) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_PROVIDER={v:?} is not a provider: use wasm, or the name of a provider plugin (lowercase letters, digits and dashes), or leave it unset"
        )));
    }
    Ok(v.to_string())
}

/// Everything startup reads for the provider plugin.
pub(super) struct Inputs<'a> {
    pub(super) env: &'a dyn Env,
    /// `[plugins.NAME]`, as written.
    pub(super) table: toml::Table,
    /// `SANDBOX_PLUGINS_DIR`
    pub(super) plugins_dir: Option<PathBuf>,
    /// The `[docker]` settings, for a plugin that drives the container engine.
    pub(super) docker: DockerSettings,
    /// The per-run envelope.
    pub(super) resources: &'a Resources,
    /// `PLIMSOLL_GUARD_ADDR`
    pub(super) guard_addr: Option<String>,
}

/// Finds, reads and configures the provider plugin `name`.
///
/// # Errors
///
/// [`ConfigError`] naming the plugin, the setting and what to do.
pub(super) fn provider_plugin(name: &str, mut input: Inputs<'_>) -> Result<ProviderPlugin, ConfigError> {
    let location = locate(name, &mut input)?;
    let manifest = read_manifest(name, &location)?;
    let value = |e: String| ConfigError::Value(e);
    if manifest.kind != PluginKind::Provider {
        return Err(value(format!(
            "SANDBOX_PROVIDER={name}: the plugin at {} is a {}, not a provider",
            location.dir.display(),
            manifest.kind
        )));
    }
    let containers = manifest.capabilities.contains(&Capability::Containers);
    let http = manifest.capabilities.contains(&Capability::Http);
    check_envelope(&manifest, input.resources)?;
    let max_tier = max_tier(&manifest, &mut input)?;
    let backend = match (containers, http) {
        (true, false) => {
            if let Some(key) = input.table.keys().next() {
                return Err(unknown_key(&manifest, key, true));
            }
            if input.guard_addr.is_some() {
                return Err(no_guard(&manifest));
            }
            Backend::Containers(input.docker.require(name)?)
        }
        (false, true) => {
            if let Some(var) = input.docker.first_set() {
                return Err(value(format!(
                    "{var} is set, but the {name} plugin does not drive the host's container engine; unset it"
                )));
            }
            let resolved = settings::resolve(&manifest, input.env, &mut input.table)?;
            if let Some(key) = input.table.keys().next() {
                return Err(unknown_key(&manifest, key, true));
            }
            Backend::Remote(remote::remote(&manifest, resolved, max_tier, input.resources, input.guard_addr)?)
        }
        (true, true) => {
            return Err(value(format!(
                "the {name} plugin asks for both the containers and the http capability; a provider drives one backend"
            )));
        }
        (false, false) => {
            return Err(value(format!(
                "the {name} plugin asks for neither the containers nor the http capability, so it has nowhere to run code"
            )));
        }
    };
    Ok(ProviderPlugin { location, manifest, backend })
}

fn no_guard(m: &Manifest) -> ConfigError {
    ConfigError::Value(format!(
        "PLIMSOLL_GUARD_ADDR is set, but the {} plugin's sandboxes reach no guard (its manifest declares no guard-url); unset it",
        m.name
    ))
}

/// The key `[plugins.NAME]` holds that is neither the host's (for a provider,
/// `host_keys`) nor a setting.
fn unknown_key(m: &Manifest, key: &str, host_keys: bool) -> ConfigError {
    let mut keys: Vec<String> = if host_keys { HOST_KEYS.map(String::from).to_vec() } else { Vec::new() };
    keys.extend(settings::table_keys(m));
    let takes = if keys.is_empty() { "no settings".to_string() } else { keys.join(", ") };
    ConfigError::Value(format!(
        "[plugins.{}] {key} is not a setting of the {} plugin; it takes {takes} (plimsoll-host plugin inspect shows them)",
        m.name, m.name,
    ))
}

/// Where the plugin is: `SANDBOX_NAME_PLUGIN`, `[plugins.NAME] path`, or
/// `NAME` in the plugins directory; and the keys and approvals for it.
fn locate(name: &str, input: &mut Inputs<'_>) -> Result<PluginConfig, ConfigError> {
    let [dir_var, keys_var, approve_var, _] = host_variables(name);
    let env = |var: &str| input.env.get(var).filter(|v| !v.is_empty());
    let table_path = take_string(&mut input.table, name, PATH)?;
    let table_keys = take_list(&mut input.table, name, TRUSTED_KEYS)?;
    let table_approve = take_list(&mut input.table, name, APPROVE)?;
    let dir = match env(&dir_var).or(table_path) {
        Some(d) => PathBuf::from(d),
        None => match &input.plugins_dir {
            Some(root) if root.join(name).join(plimsoll_runtime::plugin::MANIFEST_FILE).is_file() => root.join(name),
            Some(root) => {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_PROVIDER={name}: no plugin named {name} in SANDBOX_PLUGINS_DIR ({} has no plugin.toml); \
                     set {dir_var} to its directory",
                    root.join(name).display()
                )));
            }
            None => {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_PROVIDER={name} needs {dir_var} (or path in [plugins.{name}], or SANDBOX_PLUGINS_DIR): \
                     the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)"
                )));
            }
        },
    };
    let trusted_keys: Vec<PathBuf> = match env(&keys_var) {
        Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
        None => table_keys.into_iter().map(PathBuf::from).collect(),
    };
    if trusted_keys.is_empty() {
        return Err(ConfigError::Value(format!(
            "{keys_var} is empty: name the public key(s) whose plugin signatures you trust"
        )));
    }
    let approve = match env(&approve_var) {
        Some(v) => list(v),
        None => table_approve,
    };
    Ok(PluginConfig { dir, trusted_keys, approve })
}

/// Reads and parses the plugin's manifest (loading checks its signature later,
/// and that the signed manifest is this one).
fn read_manifest(name: &str, p: &PluginConfig) -> Result<Manifest, ConfigError> {
    let path = p.dir.join(plimsoll_runtime::plugin::MANIFEST_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    let m = Manifest::parse(&text)
        .map_err(|e| ConfigError::Value(format!("SANDBOX_PROVIDER={name}: plugin {}: {e}", p.dir.display())))?;
    if m.name != name {
        return Err(ConfigError::Value(format!(
            "SANDBOX_PROVIDER={name}: the plugin at {} is named {:?} in its manifest; point {} at the {name} plugin, or set SANDBOX_PROVIDER={}",
            p.dir.display(),
            m.name,
            host_variables(name)[0],
            m.name
        )));
    }
    Ok(m)
}

/// Refuses an envelope limit the plugin does not enforce: a limit nobody
/// enforces must not look set.
fn check_envelope(m: &Manifest, r: &Resources) -> Result<(), ConfigError> {
    for limit in Limit::ALL {
        if r.limit(limit) != 0 && !m.envelope.contains(&limit) {
            let why = match (&m.envelope_note, m.envelope.is_empty()) {
                (Some(note), _) => note.clone(),
                (None, true) => "it enforces none of the envelope".into(),
                (None, false) => {
                    format!("it enforces {}", m.envelope.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(", "))
                }
            };
            return Err(ConfigError::Value(format!(
                "{} is set, but the {} plugin does not enforce it ({why}); unset it",
                limit.variable(),
                m.name
            )));
        }
    }
    Ok(())
}

/// The operator's cap on the tier the host credits the plugin with; the
/// manifest's `max-tier` when unset (the host lowers to both).
fn max_tier(m: &Manifest, input: &mut Inputs<'_>) -> Result<plimsoll_core::Tier, ConfigError> {
    let var = &host_variables(&m.name)[3];
    let v = match input.env.get(var).filter(|v| !v.is_empty()) {
        Some(v) => Some((var.clone(), v)),
        None => take_string(&mut input.table, &m.name, MAX_TIER)?.map(|v| (format!("plugins.{}.max-tier", m.name), v)),
    };
    let default = m.max_tier.unwrap_or(plimsoll_core::Tier::Process);
    match v {
        None => Ok(default),
        Some((source, v)) => remote::tier(&source, Some(v), default),
    }
}

/// Takes a string key out of `[plugins.NAME]`.
fn take_string(t: &mut toml::Table, name: &str, key: &str) -> Result<Option<String>, ConfigError> {
    match t.remove(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(other) => {
            Err(ConfigError::Value(format!("[plugins.{name}] {key} must be a string, not a {}", other.type_str())))
        }
    }
}

/// Takes a list of strings out of `[plugins.NAME]`.
fn take_list(t: &mut toml::Table, name: &str, key: &str) -> Result<Vec<String>, ConfigError> {
    match t.remove(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                toml::Value::String(s) => Ok(s),
                other => Err(ConfigError::Value(format!(
                    "[plugins.{name}] {key} must list strings, not a {}",
                    other.type_str()
                ))),
            })
            .collect(),
        Some(other) => Err(ConfigError::Value(format!(
            "[plugins.{name}] {key} must be a list of strings, not a {}",
            other.type_str()
        ))),
    }
}

/// Refuses a variable under the plugin's prefix that is neither the host's nor
/// one of the plugin's settings (a misspelt setting must not be ignored), and a
/// setting whose variable is one of the daemon's own.
pub(super) fn check_variables(m: &Manifest, env: &dyn Env) -> Result<(), ConfigError> {
    let mut declared: Vec<String> = host_variables(&m.name).to_vec();
    for (name, s) in &m.settings {
        let var = m.variable(name);
        if super::VARIABLES.iter().any(|(v, _, _)| *v == var) {
            return Err(ConfigError::Value(format!(
                "the {} plugin's setting {name} would be read from {var}, which is the daemon's own; the plugin must rename it",
                m.name
            )));
        }
        declared.extend(settings::variables(m, name, s));
    }
    let prefix = format!("{}_", m.variable_prefix());
    let mut unknown: Vec<String> = env
        .names()
        .into_iter()
        .filter(|n| n.starts_with(&prefix) && !declared.contains(n))
        .filter(|n| !super::VARIABLES.iter().any(|(v, _, _)| v == n))
        .collect();
    unknown.sort();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Value(format!(
        "{} {} not a variable of the {} plugin; it reads {} (plimsoll-host plugin inspect shows what each is for)",
        unknown.join(", "),
        if unknown.len() == 1 { "is" } else { "are" },
        m.name,
        declared.join(", ")
    )))
}

/// A broker or signer plugin read as its manifest declares it: the manifest and
/// the endpoints whose URLs are its settings (the rest the operator maps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterPlugin {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest. Loading checks the signed one is this one.
    pub manifest: Manifest,
    /// Endpoint alias to how the host reaches it, for each the manifest gives a URL setting.
    pub endpoints: std::collections::BTreeMap<String, EndpointConfig>,
}

/// The name in the manifest at `dir`, if it reads (refusals come when it is loaded).
pub(super) fn manifest_name(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(plimsoll_runtime::plugin::MANIFEST_FILE)).ok()?;
    Manifest::parse(&text).ok().map(|m| m.name)
}

/// Reads the `kind` plugin at `dir` the way a provider's is read: its manifest,
/// its settings from `SANDBOX_<NAME>_<SETTING>`, the declared aliases and
/// `[plugins.NAME]` of `tables` (taken out), checked by kind, and the endpoints
/// they set.
///
/// # Errors
///
/// [`ConfigError`] naming the plugin, the setting and what to do.
pub fn adapter_plugin(
    dir: &std::path::Path,
    kind: PluginKind,
    env: &dyn Env,
    tables: &mut std::collections::BTreeMap<String, toml::Table>,
) -> Result<AdapterPlugin, ConfigError> {
    let path = dir.join(plimsoll_runtime::plugin::MANIFEST_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    let manifest = Manifest::parse(&text)
        .map_err(|e| ConfigError::Value(format!("the {kind} plugin at {}: {e}", dir.display())))?;
    if manifest.kind != kind {
        return Err(ConfigError::Value(format!(
            "the plugin at {} is a {}, not a {kind}",
            dir.display(),
            manifest.kind
        )));
    }
    let mut table = tables.remove(&manifest.name).unwrap_or_default();
    let resolved = settings::resolve(&manifest, env, &mut table)?;
    if let Some(key) = table.keys().next() {
        return Err(unknown_key(&manifest, key, false));
    }
    check_variables(&manifest, env)?;
    let endpoints = remote::endpoints(&manifest, &resolved)?;
    Ok(AdapterPlugin { dir: dir.to_path_buf(), manifest, endpoints })
}
