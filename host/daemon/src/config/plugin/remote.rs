//! What a remote backend's settings resolve to: the endpoints the host reaches
//! for it (with the credentials and TLS files only the host reads), the
//! plugin's own non-secret settings, the operator's cap on its tier, and its
//! guard, all as its manifest declares them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use plimsoll_core::Tier;
use plimsoll_plugin_trust::manifest::{Limit, Manifest, SettingKind};
use sha2::{Digest as _, Sha256};

use super::super::{ConfigError, GuardConfig, Resources};
use super::settings::{Value, known_as};

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
    /// Endpoint alias to how the host reaches it.
    pub endpoints: BTreeMap<String, EndpointConfig>,
    /// What the plugin reads through `plimsoll:host/config` (never a secret):
    /// its settings, the SHA-256 of secrets its manifest asks for, and the
    /// envelope limits it enforces (`envelope.memory-mb`, `envelope.cpus-milli`,
    /// `envelope.pids`, `envelope.disk-mb`; `0` when the operator set none).
    pub settings: BTreeMap<String, String>,
    /// The strongest tier the operator lets the host credit it with.
    pub max_tier: Tier,
    /// The guard its granted runs reach the broker through, when one is set.
    pub guard: Option<GuardConfig>,
    /// The variable the guard's URL is set with, when the plugin has a guard.
    pub guard_variable: Option<String>,
}

/// Builds a remote backend's configuration from its manifest and its resolved settings.
///
/// # Errors
///
/// An endpoint without its URL, a URL in clear off loopback, or a bad guard.
pub(super) fn remote(
    m: &Manifest,
    mut resolved: BTreeMap<String, Value>,
    max_tier: Tier,
    resources: &Resources,
    guard_addr: Option<String>,
) -> Result<RemoteConfig, ConfigError> {
    let endpoints = endpoints(m, &resolved)?;
    let guard = match (&m.guard_url, guard_addr) {
        (Some(setting), addr) => {
            let url = resolved.get(setting).map(|v| v.value.clone());
            super::super::guard::guard(&known_as(m, setting), url, addr)?
        }
        (None, Some(_)) => return Err(super::no_guard(m)),
        (None, None) => None,
    };
    let mut settings = BTreeMap::new();
    for (name, s) in &m.settings {
        let Some(v) = resolved.remove(name) else { continue };
        match (&s.kind, &s.sha256_as) {
            (SettingKind::Secret, Some(digest)) => {
                settings.insert(digest.clone(), hex::encode(Sha256::digest(v.value.as_bytes())));
            }
            (SettingKind::Secret, None) => {}
            _ => {
                settings.insert(name.clone(), v.value);
            }
        }
    }
    for &limit in &m.envelope {
        let key = match limit {
            Limit::MemoryMb => "envelope.memory-mb",
            Limit::Cpus => "envelope.cpus-milli",
            Limit::Pids => "envelope.pids",
            Limit::DiskMb => "envelope.disk-mb",
        };
        settings.insert(key.to_string(), resources.limit(limit).to_string());
    }
    Ok(RemoteConfig {
        endpoints,
        settings,
        max_tier,
        guard,
        guard_variable: m.guard_url.as_deref().map(|g| known_as(m, g)),
    })
}

/// How the host reaches each endpoint of `m` whose URL is a setting, from the
/// resolved settings: its URL, CA, client certificate, fixed address, and the
/// secrets it attaches. An endpoint the manifest gives no URL setting (a
/// broker's or signer's the operator maps) is left out.
///
/// # Errors
///
/// A URL setting left unset, a URL in clear off loopback, or an exchange short
/// of a part.
pub(super) fn endpoints(
    m: &Manifest,
    resolved: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, EndpointConfig>, ConfigError> {
    let get = |name: &Option<String>| name.as_ref().and_then(|n| resolved.get(n));
    let mut endpoints = BTreeMap::new();
    for (alias, e) in m.endpoints.iter().filter(|(_, e)| e.url.is_some()) {
        let connect_to = match get(&e.connect_to) {
            Some(v) => Some(
                v.value
                    .parse::<IpAddr>()
                    .map_err(|_| ConfigError::Value(format!("{}={:?} is not an IP address", v.source, v.value)))?,
            ),
            None => None,
        };
        let url = get(&e.url).ok_or_else(|| {
            ConfigError::Value(format!(
                "the {} plugin's endpoint {alias} has no URL: set {}",
                m.name,
                e.url.as_deref().map_or_else(|| "its url setting".into(), |n| known_as(m, n))
            ))
        })?;
        self::url(&url.source, &url.value, connect_to)?;
        let file = |name: &Option<String>| get(name).map(|v| PathBuf::from(&v.value));
        let client_cert = file(&e.client_cert).zip(file(&e.client_key));
        let headers = e
            .headers
            .iter()
            .filter_map(|(h, s)| {
                resolved.get(&s.secret).map(|v| (h.clone(), Secret::new(format!("{}{}", s.prefix, v.value))))
            })
            .collect();
        let exchange = match &e.exchange {
            None => None,
            Some(x) => {
                let part = |n: &String| {
                    resolved.get(n).ok_or_else(|| {
                        ConfigError::Value(format!(
                            "the {} plugin's endpoint {alias} trades a credential: set {}",
                            m.name,
                            known_as(m, n)
                        ))
                    })
                };
                let (u, id, secret) = (part(&x.url)?, part(&x.identifier)?, part(&x.secret)?);
                self::url(&u.source, &u.value, connect_to)?;
                Some(ExchangeConfig {
                    url: u.value.clone(),
                    identifier: id.value.trim().to_string(),
                    secret: Secret::new(secret.value.clone()),
                })
            }
        };
        let endpoint = EndpointConfig {
            url: url.value.clone(),
            ca_file: file(&e.ca_file),
            client_cert,
            connect_to,
            headers,
            exchange,
        };
        endpoints.insert(alias.clone(), endpoint);
    }
    Ok(endpoints)
}

/// Reads a tier cap: `vm`, `kernel`, `container` or `process`.
pub(in crate::config) fn tier(var: &str, v: Option<String>, default: Tier) -> Result<Tier, ConfigError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("vm") => Ok(Tier::Vm),
        Some("kernel") => Ok(Tier::Kernel),
        Some("container") => Ok(Tier::Container),
        Some("process") => Ok(Tier::Process),
        Some(other) => Err(ConfigError::Value(format!("{var}={other:?}: use vm, kernel, container or process"))),
    }
}

/// Checks a base URL is absolute https (or http to loopback, for a local fake or
/// a tunnel the operator runs), so a credential never crosses a network in clear.
pub(in crate::config) fn url(var: &str, v: &str, connect_to: Option<IpAddr>) -> Result<(), ConfigError> {
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
