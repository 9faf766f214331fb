//! A plugin's settings, read where its manifest says the operator may write
//! them (`SANDBOX_NAME_SETTING`, the declared aliases, `[plugins.NAME]`),
//! defaulted, and checked by kind before the plugin runs.

use std::collections::BTreeMap;

use plimsoll_plugin_trust::manifest::{Breach, Manifest, Setting, SettingKind};

use super::super::{ConfigError, Env};

/// One setting's value and where it came from (a variable, a table key, or
/// `default`), for refusals that name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Value {
    pub(super) value: String,
    pub(super) source: String,
}

/// The table keys `[plugins.NAME]` takes for the plugin's settings (a secret
/// as `<name>-file`, the path of a file holding it).
pub(super) fn table_keys(m: &Manifest) -> Vec<String> {
    m.settings.iter().map(|(n, s)| table_key(n, s)).collect()
}

fn table_key(name: &str, s: &Setting) -> String {
    if s.kind == SettingKind::Secret { format!("{name}-file") } else { name.to_string() }
}

/// The variables a setting is read from, in order: `SANDBOX_NAME_SETTING`, then its aliases.
pub(super) fn variables(m: &Manifest, name: &str, s: &Setting) -> Vec<String> {
    let mut v = vec![m.variable(name)];
    v.extend(s.aliases.iter().cloned());
    v
}

/// The name an operator knows a setting by: its first alias (the original
/// system's), else `SANDBOX_NAME_SETTING`.
pub(super) fn known_as(m: &Manifest, name: &str) -> String {
    m.settings.get(name).and_then(|s| s.aliases.first().cloned()).unwrap_or_else(|| m.variable(name))
}

/// Every way to set `name`, for a refusal: `SANDBOX_E2B_API_KEY (or E2B_API_KEY,
/// or api-key-file in [plugins.e2b])`.
fn ways(m: &Manifest, name: &str, s: &Setting) -> String {
    let mut vars = variables(m, name, s);
    let first = vars.remove(0);
    let mut others: Vec<String> = vars;
    others.push(format!("{} in [plugins.{}]", table_key(name, s), m.name));
    format!("{first} (or {})", others.join(", or "))
}

/// Who needs a setting, for a refusal: `SANDBOX_PROVIDER=e2b`, or `the broker plugin acme`.
fn who(m: &Manifest) -> String {
    match m.kind {
        plimsoll_plugin_trust::manifest::PluginKind::Provider => format!("SANDBOX_PROVIDER={}", m.name),
        kind => format!("the {kind} plugin {}", m.name),
    }
}

/// This machine's name, as `{hostname}` in a default: letters, digits and `. _ -` only.
fn hostname() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).collect();
    if host.is_empty() { "localhost".into() } else { host }
}

/// Reads every declared setting; takes the keys it read out of `table`, so
/// what is left there is no setting of the plugin.
///
/// # Errors
///
/// The first missing required setting, malformed value, or broken group, named.
pub(super) fn resolve(
    m: &Manifest,
    env: &dyn Env,
    table: &mut toml::Table,
) -> Result<BTreeMap<String, Value>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, s) in &m.settings {
        let from_env =
            variables(m, name, s).into_iter().find_map(|var| env.get(&var).filter(|v| !v.is_empty()).map(|v| (v, var)));
        // The table's value is taken out either way, so it is never left as unknown.
        let from_table = from_table(m, name, s, table)?;
        let raw = match from_env {
            Some((value, source)) => Some(Value { value, source }),
            None => from_table,
        };
        let raw = match raw {
            Some(v) => v,
            None => match &s.default {
                Some(d) if d.contains("{hostname}") => {
                    Value { value: d.replace("{hostname}", &hostname()), source: m.variable(name) }
                }
                Some(d) => Value { value: d.clone(), source: m.variable(name) },
                None if s.required => {
                    return Err(ConfigError::Value(format!("{} needs {}: {}", who(m), ways(m, name, s), s.help)));
                }
                None => continue,
            },
        };
        let value = s.check(&raw.value).map_err(|why| {
            ConfigError::Value(if s.kind == SettingKind::Secret {
                format!("{} {why}", raw.source)
            } else {
                format!("{}={:?} {why}", raw.source, raw.value)
            })
        })?;
        if s.kind == SettingKind::File && !std::path::Path::new(&value).is_file() {
            return Err(ConfigError::Value(format!(
                "{}={value:?} is not a file this daemon can read ({})",
                raw.source, s.help
            )));
        }
        out.insert(name.clone(), Value { value, source: raw.source });
    }
    for g in &m.groups {
        let set = |n: &str| out.contains_key(n);
        let sources: Vec<String> =
            g.settings.iter().map(|n| out.get(n).map_or_else(|| known_as(m, n), |v| v.source.clone())).collect();
        let listed = |names: &[String], last: &str| match names.split_last() {
            Some((l, rest)) if !rest.is_empty() => format!("{} {last} {l}", rest.join(", ")),
            _ => names.join(""),
        };
        match g.breach(&set) {
            None => {}
            Some(Breach::Partial) => {
                return Err(ConfigError::Value(format!(
                    "{} go together: set all of them or none",
                    listed(&sources, "and")
                )));
            }
            Some(Breach::Several) => {
                let set: Vec<String> = g.settings.iter().filter_map(|n| out.get(n)).map(|v| v.source.clone()).collect();
                return Err(ConfigError::Value(format!("{} exclude each other: set one", listed(&set, "and"))));
            }
            Some(Breach::Missing) => {
                let each: Vec<String> = g
                    .settings
                    .iter()
                    .filter_map(|n| m.settings.get(n).map(|s| format!("{} ({})", ways(m, n, s), s.help)))
                    .collect();
                return Err(ConfigError::Value(format!("{} needs one of {}", who(m), listed(&each, "or"))));
            }
        }
    }
    Ok(out)
}

/// A setting's value from `[plugins.NAME]`: a secret from the file its
/// `<name>-file` key names (never the secret itself in the file).
fn from_table(m: &Manifest, name: &str, s: &Setting, table: &mut toml::Table) -> Result<Option<Value>, ConfigError> {
    let source = |key: &str| format!("plugins.{}.{key}", m.name);
    if s.kind == SettingKind::Secret {
        if table.contains_key(name) {
            return Err(ConfigError::Value(format!(
                "[plugins.{}] {name} would hold a secret in the file: write {name}-file = PATH (a file only the daemon reads), or set {}",
                m.name,
                m.variable(name)
            )));
        }
        let key = table_key(name, s);
        let Some(path) = table.remove(&key) else { return Ok(None) };
        let toml::Value::String(path) = path else {
            return Err(ConfigError::Value(format!("[plugins.{}] {key} must be a path", m.name)));
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        return Ok(Some(Value { value: text.trim().to_string(), source: source(&key) }));
    }
    let Some(v) = table.remove(name) else { return Ok(None) };
    let value = match v {
        toml::Value::String(s) => s,
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => {
            return Err(ConfigError::Value(format!(
                "[plugins.{}] {name} must be a string or a number, not a {}",
                m.name,
                other.type_str()
            )));
        }
    };
    Ok(Some(Value { value, source: source(name) }))
}
