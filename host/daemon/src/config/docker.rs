//! The docker provider's settings.

use std::path::PathBuf;

use serde::Deserialize;

use super::env::Pick;
use super::plugins::{PluginConfig, PluginSettings, PluginTable, PluginVars};

const DOCKER_PLUGIN: PluginVars = PluginVars {
    provider: "docker",
    dir: "SANDBOX_DOCKER_PLUGIN",
    keys: "SANDBOX_DOCKER_PLUGIN_KEYS",
    approve: "SANDBOX_DOCKER_PLUGIN_APPROVE",
};
use super::{ConfigError, ProviderKind};

/// The `[docker]` table: the docker provider's image, runtime and guest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct DockerTable {
    image: Option<String>,
    runtime: Option<String>,
    guest_uid: Option<u32>,
    seccomp: Option<PathBuf>,
    warm_pool: Option<u32>,
}

/// The docker provider's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerConfig {
    /// The sandbox image, by content ID (or a name resolved to its ID once at startup).
    pub image: String,
    /// `runc` (the container tier) or `runsc` (gVisor, the kernel tier).
    pub runtime: String,
    /// The guest uid and gid.
    pub guest_uid: u32,
    /// A seccomp profile replacing the built-in one under runc.
    pub seccomp: Option<PathBuf>,
    /// Started containers kept per shape for fresh runs (`SANDBOX_WARM_POOL`, 0 = off).
    pub warm_pool: u32,
    /// The plugin.
    pub plugin: PluginConfig,
}

/// Reads the docker settings: required when docker is the provider, refused when
/// it is not (a docker setting on another provider would be silently ignored).
pub(super) fn docker_config(
    pick: &mut Pick<'_>,
    provider: ProviderKind,
    t: DockerTable,
    plugin: Option<PluginTable>,
) -> Result<Option<DockerConfig>, ConfigError> {
    let image = pick.string("SANDBOX_DOCKER_IMAGE", t.image);
    let runtime = pick.string("SANDBOX_DOCKER_RUNTIME", t.runtime);
    let guest_uid = pick.u32("SANDBOX_DOCKER_GUEST_UID", t.guest_uid)?;
    let seccomp = pick.string("SANDBOX_DOCKER_SECCOMP", t.seccomp.map(|p| p.display().to_string()));
    let warm_pool = pick.u32("SANDBOX_WARM_POOL", t.warm_pool)?;
    let plugin = PluginSettings::read(pick, DOCKER_PLUGIN, plugin);
    if provider != ProviderKind::Docker {
        let set = [
            ("SANDBOX_DOCKER_IMAGE", image.is_some()),
            ("SANDBOX_DOCKER_RUNTIME", runtime.is_some()),
            ("SANDBOX_DOCKER_GUEST_UID", guest_uid.is_some()),
            ("SANDBOX_DOCKER_SECCOMP", seccomp.is_some()),
            ("SANDBOX_WARM_POOL", warm_pool.is_some()),
            ("SANDBOX_DOCKER_PLUGIN", plugin.dir.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=docker or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let image = image.filter(|i| !i.trim().is_empty()).ok_or_else(|| {
        ConfigError::Value("SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_IMAGE: build the image with images/build.sh and set the ID it prints".into())
    })?;
    if image.starts_with('-') || image.trim() != image {
        return Err(ConfigError::Value(format!("SANDBOX_DOCKER_IMAGE={image:?} is not an image reference")));
    }
    let runtime = runtime.unwrap_or_else(|| "runc".into());
    if !matches!(runtime.as_str(), "runc" | "runsc") {
        return Err(ConfigError::Value(format!("SANDBOX_DOCKER_RUNTIME={runtime:?}: use runc or runsc")));
    }
    let plugin = plugin.require()?;
    let warm_pool = warm_pool.unwrap_or(0);
    if warm_pool > plimsoll_containers::pool::MAX_SIZE {
        return Err(ConfigError::Value(format!(
            "SANDBOX_WARM_POOL={warm_pool} is outside 0..{}",
            plimsoll_containers::pool::MAX_SIZE
        )));
    }
    Ok(Some(DockerConfig {
        image,
        runtime,
        guest_uid: guest_uid.unwrap_or(plimsoll_containers::uid::DEFAULT_GUEST_UID),
        seccomp: seccomp.filter(|s| !s.is_empty()).map(PathBuf::from),
        warm_pool,
        plugin,
    }))
}
