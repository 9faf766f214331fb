//! The host's container engine's settings, for a provider plugin with the
//! `containers` capability (the docker plugin).

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use super::env::Pick;

/// The `[docker]` table: the container engine's image, runtime and guest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct DockerTable {
    image: Option<String>,
    runtime: Option<String>,
    guest_uid: Option<u32>,
    seccomp: Option<PathBuf>,
    warm_pool: Option<u32>,
}

/// The container engine's settings.
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
}

/// The `[docker]` settings as read, before the provider plugin says whether it
/// drives the host's container engine.
#[derive(Debug, Default)]
pub(super) struct DockerSettings {
    image: Option<String>,
    runtime: Option<String>,
    guest_uid: Option<u32>,
    seccomp: Option<String>,
    warm_pool: Option<u32>,
}

impl DockerSettings {
    /// Reads them: the environment over `[docker]`.
    pub(super) fn read(pick: &mut Pick<'_>, t: DockerTable) -> Result<DockerSettings, ConfigError> {
        Ok(DockerSettings {
            image: pick.string("SANDBOX_DOCKER_IMAGE", t.image),
            runtime: pick.string("SANDBOX_DOCKER_RUNTIME", t.runtime),
            guest_uid: pick.u32("SANDBOX_DOCKER_GUEST_UID", t.guest_uid)?,
            seccomp: pick.string("SANDBOX_DOCKER_SECCOMP", t.seccomp.map(|p| p.display().to_string())),
            warm_pool: pick.u32("SANDBOX_WARM_POOL", t.warm_pool)?,
        })
    }

    /// The first setting the operator set, if any (refused where no plugin drives the engine).
    pub(super) fn first_set(&self) -> Option<&'static str> {
        let set = [
            ("SANDBOX_DOCKER_IMAGE", self.image.is_some()),
            ("SANDBOX_DOCKER_RUNTIME", self.runtime.is_some()),
            ("SANDBOX_DOCKER_GUEST_UID", self.guest_uid.is_some()),
            ("SANDBOX_DOCKER_SECCOMP", self.seccomp.is_some()),
            ("SANDBOX_WARM_POOL", self.warm_pool.is_some()),
        ];
        set.iter().find(|(_, s)| *s).map(|(name, _)| *name)
    }

    /// The engine's settings for the provider plugin `provider`, which drives it.
    ///
    /// # Errors
    ///
    /// No image, or a malformed value, named with what to set.
    pub(super) fn require(self, provider: &str) -> Result<DockerConfig, ConfigError> {
        let image = self.image.filter(|i| !i.trim().is_empty()).ok_or_else(|| {
            ConfigError::Value(format!(
                "SANDBOX_PROVIDER={provider} needs SANDBOX_DOCKER_IMAGE: build the image with images/build.sh and set the ID it prints"
            ))
        })?;
        if image.starts_with('-') || image.trim() != image {
            return Err(ConfigError::Value(format!("SANDBOX_DOCKER_IMAGE={image:?} is not an image reference")));
        }
        let runtime = self.runtime.unwrap_or_else(|| "runc".into());
        if !matches!(runtime.as_str(), "runc" | "runsc") {
            return Err(ConfigError::Value(format!("SANDBOX_DOCKER_RUNTIME={runtime:?}: use runc or runsc")));
        }
        let warm_pool = self.warm_pool.unwrap_or(0);
        if warm_pool > plimsoll_containers::pool::MAX_SIZE {
            return Err(ConfigError::Value(format!(
                "SANDBOX_WARM_POOL={warm_pool} is outside 0..{}",
                plimsoll_containers::pool::MAX_SIZE
            )));
        }
        Ok(DockerConfig {
            image,
            runtime,
            guest_uid: self.guest_uid.unwrap_or(plimsoll_containers::uid::DEFAULT_GUEST_UID),
            seccomp: self.seccomp.filter(|s| !s.is_empty()).map(PathBuf::from),
            warm_pool,
        })
    }
}
