//! The dockercloud provider's settings (Docker Cloud Sandboxes over its REST API).
//! The Docker account's personal access token, the CA and the fixed address are
//! the host's; the plugin reads the image, the sandbox size and the instance.

use std::collections::BTreeMap;
use std::path::PathBuf;

use plimsoll_core::Tier;
use serde::Deserialize;

use super::env::Pick;
use super::plugins::{PluginSettings, PluginTable, PluginVars};
use super::remote::{self, EndpointConfig, ExchangeConfig, RemoteConfig};
use super::{ConfigError, Env, ProviderKind};

const DOCKERCLOUD_PLUGIN: PluginVars = PluginVars {
    provider: "dockercloud",
    dir: "SANDBOX_DOCKERCLOUD_PLUGIN",
    keys: "SANDBOX_DOCKERCLOUD_PLUGIN_KEYS",
    approve: "SANDBOX_DOCKERCLOUD_PLUGIN_APPROVE",
};

/// The Sandboxes API's management base (its `/sandboxes` prefix kept).
pub const DEFAULT_API_URL: &str = "https://connect.docker.com/sandboxes";
/// Docker Hub's exchange of a personal access token for a short-lived bearer.
pub const DEFAULT_AUTH_URL: &str = "https://hub.docker.com/v2/auth/token";
/// The sizes Docker offers: (CPUs, MiB of memory), micro to xl.
pub const SIZES: [(u32, u32); 5] = [(1, 2048), (2, 4096), (4, 8192), (8, 16384), (16, 32768)];

/// The `[dockercloud]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct DockerCloudTable {
    username: Option<String>,
    token_file: Option<PathBuf>,
    image: Option<String>,
    api_url: Option<String>,
    auth_url: Option<String>,
    endpoint_url: Option<String>,
    ca_file: Option<PathBuf>,
    connect_to: Option<String>,
    max_tier: Option<String>,
    instance: Option<String>,
    guard_url: Option<String>,
}

/// The size for the operator's `SANDBOX_CPUS` and `SANDBOX_MEMORY_MB` (0: unset):
/// one of Docker's pairs, micro when neither is set.
pub(super) fn size(cpus: f64, memory_mb: u32) -> Result<(u32, u32), ConfigError> {
    if cpus.fract() != 0.0 {
        return Err(ConfigError::Value(format!(
            "SANDBOX_CPUS={cpus}: dockercloud sandboxes have whole CPUs, in Docker's sizes {}",
            sizes()
        )));
    }
    let cpus = cpus as u32;
    let fit = SIZES.iter().find(|(c, m)| (cpus == 0 || *c == cpus) && (memory_mb == 0 || *m == memory_mb));
    match (cpus, memory_mb, fit) {
        (0, 0, _) => Ok(SIZES[0]),
        (_, _, Some(&pair)) => Ok(pair),
        _ => Err(ConfigError::Value(format!(
            "SANDBOX_CPUS={cpus} with SANDBOX_MEMORY_MB={memory_mb} is not a size Docker offers; use one of {}",
            sizes()
        ))),
    }
}

fn sizes() -> String {
    SIZES.iter().map(|(c, m)| format!("{c} CPU(s) with {m} MiB")).collect::<Vec<_>>().join(", ")
}

/// Reads the dockercloud settings: required when it is the provider, refused when
/// it is not.
pub(super) fn dockercloud_config(
    pick: &mut Pick<'_>,
    env: &dyn Env,
    provider: ProviderKind,
    t: DockerCloudTable,
    plugin: Option<PluginTable>,
    guard_addr: Option<String>,
) -> Result<Option<RemoteConfig>, ConfigError> {
    let plugin = PluginSettings::read(pick, DOCKERCLOUD_PLUGIN, plugin);
    let username = pick.string("DOCKER_SBX_USERNAME", t.username);
    let image = pick.string("SANDBOX_DOCKERCLOUD_IMAGE", t.image);
    let api_url = pick.string("SANDBOX_DOCKERCLOUD_API_URL", t.api_url);
    let auth_url = pick.string("SANDBOX_DOCKERCLOUD_AUTH_URL", t.auth_url);
    let endpoint_url = pick.string("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", t.endpoint_url);
    let ca_file = pick.string("SANDBOX_DOCKERCLOUD_CA_FILE", t.ca_file.map(|p| p.display().to_string()));
    let connect_to = pick.string("SANDBOX_DOCKERCLOUD_CONNECT_TO", t.connect_to);
    let max_tier = pick.string("SANDBOX_DOCKERCLOUD_MAX_TIER", t.max_tier);
    let instance = pick.string("SANDBOX_DOCKERCLOUD_INSTANCE", t.instance);
    let guard_url = pick.string("SANDBOX_DOCKERCLOUD_GUARD_URL", t.guard_url);
    let token = remote::secret(env, "DOCKER_SBX_TOKEN", t.token_file)?;
    if provider != ProviderKind::DockerCloud {
        let set = [
            ("SANDBOX_DOCKERCLOUD_PLUGIN", plugin.dir.is_some()),
            ("SANDBOX_DOCKERCLOUD_IMAGE", image.is_some()),
            ("SANDBOX_DOCKERCLOUD_API_URL", api_url.is_some()),
            ("SANDBOX_DOCKERCLOUD_AUTH_URL", auth_url.is_some()),
            ("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", endpoint_url.is_some()),
            ("SANDBOX_DOCKERCLOUD_CA_FILE", ca_file.is_some()),
            ("SANDBOX_DOCKERCLOUD_CONNECT_TO", connect_to.is_some()),
            ("SANDBOX_DOCKERCLOUD_MAX_TIER", max_tier.is_some()),
            ("SANDBOX_DOCKERCLOUD_INSTANCE", instance.is_some()),
            ("SANDBOX_DOCKERCLOUD_GUARD_URL", guard_url.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=dockercloud or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let need = |what: &str, why: &str| ConfigError::Value(format!("SANDBOX_PROVIDER=dockercloud needs {what}: {why}"));
    let username = username
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| need("DOCKER_SBX_USERNAME", "the Docker account whose access token the host exchanges"))?;
    let token = token.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        need(
            "DOCKER_SBX_TOKEN (or dockercloud.token-file)",
            "a personal access token the host trades for a short-lived bearer; the plugin never sees either",
        )
    })?;
    if !token.trim().bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ConfigError::Value("DOCKER_SBX_TOKEN must be visible ASCII with no spaces".into()));
    }
    let image = image.filter(|i| !i.is_empty()).ok_or_else(|| {
        need("SANDBOX_DOCKERCLOUD_IMAGE", "the image every sandbox boots, pinned as <name>@sha256:<digest>")
    })?;
    if !remote::pinned(&image) {
        return Err(ConfigError::Value(format!(
            "SANDBOX_DOCKERCLOUD_IMAGE={image:?} must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what booted"
        )));
    }
    let endpoint_url = endpoint_url.filter(|u| !u.is_empty()).ok_or_else(|| {
        need(
            "SANDBOX_DOCKERCLOUD_ENDPOINT_URL",
            "the URL of a sandbox's endpoint with {target} where its uid goes (as the sandbox's core.endpoint.uri shows it); \
             a sandbox whose endpoint is elsewhere is refused",
        )
    })?;
    let connect_to = remote::address("SANDBOX_DOCKERCLOUD_CONNECT_TO", connect_to)?;
    let api_url = api_url.filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_API_URL.into());
    let auth_url = auth_url.filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_AUTH_URL.into());
    remote::url("SANDBOX_DOCKERCLOUD_API_URL", &api_url, connect_to)?;
    remote::url("SANDBOX_DOCKERCLOUD_AUTH_URL", &auth_url, connect_to)?;
    remote::url("SANDBOX_DOCKERCLOUD_ENDPOINT_URL", &endpoint_url, connect_to)?;
    let authority = endpoint_url.split_once("://").map_or("", |(_, r)| r.split(['/', '?', '#']).next().unwrap_or(""));
    if endpoint_url.matches("{target}").count() != 1 || !authority.contains("{target}") {
        return Err(ConfigError::Value(format!(
            "SANDBOX_DOCKERCLOUD_ENDPOINT_URL={endpoint_url:?} must name {{target}} once, in its host, where the sandbox's uid goes"
        )));
    }
    let instance = remote::instance("SANDBOX_DOCKERCLOUD_INSTANCE", instance)?;
    let ca_file = ca_file.filter(|c| !c.is_empty()).map(PathBuf::from);
    let endpoint = |url: String, exchange: Option<ExchangeConfig>| EndpointConfig {
        url,
        ca_file: ca_file.clone(),
        client_cert: None,
        connect_to,
        headers: Vec::new(),
        exchange,
    };
    let exchange = ExchangeConfig {
        url: auth_url,
        identifier: username.trim().to_string(),
        secret: remote::Secret::new(token.trim().to_string()),
    };
    let endpoints = BTreeMap::from([
        ("api".to_string(), endpoint(api_url, Some(exchange))),
        ("endpoint".to_string(), endpoint(endpoint_url.clone(), None)),
    ]);
    Ok(Some(RemoteConfig {
        provider: "dockercloud",
        plugin: plugin.require()?,
        endpoints,
        settings: BTreeMap::from([
            ("image".to_string(), image),
            ("instance".to_string(), instance),
            ("endpoint-url".to_string(), endpoint_url),
        ]),
        max_tier: remote::tier("SANDBOX_DOCKERCLOUD_MAX_TIER", max_tier, Tier::Vm)?,
        guard: super::guard::guard("SANDBOX_DOCKERCLOUD_GUARD_URL", guard_url, guard_addr)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_dockers_pairs_micro_when_unset() {
        assert_eq!(size(0.0, 0).expect("micro"), (1, 2048));
        assert_eq!(size(2.0, 0).expect("small"), (2, 4096));
        assert_eq!(size(0.0, 8192).expect("medium"), (4, 8192));
        assert_eq!(size(8.0, 16384).expect("large"), (8, 16384));
        let e = size(1.0, 1024).expect_err("no such pair").to_string();
        assert!(e.starts_with("SANDBOX_CPUS=1 with SANDBOX_MEMORY_MB=1024 is not a size Docker offers; use one of 1 CPU(s) with 2048 MiB"), "{e}");
        let e = size(1.5, 0).expect_err("fraction").to_string();
        assert!(e.starts_with("SANDBOX_CPUS=1.5: dockercloud sandboxes have whole CPUs"), "{e}");
    }
}
