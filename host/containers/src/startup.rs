//! What the host proves before the first run: the engine is local, the configured
//! runtime is registered, the image exists by content ID with no volume and no
//! loader variable, the guest uid is safe, the resolver file is ours, stale
//! containers are gone, and the probe confirms every promise from inside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::engine::Engine;
use crate::lockdown::{Ceilings, Lockdown};
use crate::smoke::{self, RESOLV_CONF};
use crate::uid::check_guest_uid;

/// The operator's docker settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `DOCKER_HOST`, when set.
    pub docker_host: Option<String>,
    /// The sandbox image, by content ID or name (resolved to its ID once).
    pub image: String,
    /// `runc` or `runsc`.
    pub runtime: String,
    /// The guest uid.
    pub guest_uid: u32,
    /// The seccomp profile (JSON text) applied under runc.
    pub seccomp: Option<String>,
    /// Where the host writes its resolver file.
    pub resolv_path: PathBuf,
    /// The per-container ceilings.
    pub ceilings: Ceilings,
    /// This daemon's owner label value.
    pub owner: String,
}

/// A proven engine and lockdown.
#[derive(Debug)]
pub struct Proven {
    /// The engine connection.
    pub engine: Engine,
    /// The lockdown every create is checked against.
    pub lockdown: Lockdown,
    /// Containers of earlier daemons the sweep removed.
    pub swept: Vec<String>,
}

/// Proves the settings, in the order above.
///
/// # Errors
///
/// The first check that failed, in words that name the fix.
pub async fn prove(s: &Settings, now_unix: u64) -> Result<Proven, String> {
    let engine = Engine::connect(s.docker_host.as_deref(), &s.owner).await.map_err(|e| e.to_string())?;
    let runtimes = engine.runtimes().await.map_err(|e| format!("docker info: {e} (is dockerd running?)"))?;
    if !matches!(s.runtime.as_str(), "runc" | "runsc") {
        return Err(format!("SANDBOX_DOCKER_RUNTIME={:?}: use runc or runsc", s.runtime));
    }
    if !runtimes.contains(&s.runtime) {
        return Err(format!(
            "docker does not list runtime {:?} (it lists {runtimes:?}); for runsc run images/install-runtimes.sh",
            s.runtime
        ));
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    check_guest_uid(s.guest_uid, &passwd, &group)?;
    let facts = engine.image(&s.image).await.map_err(|e| {
        format!("SANDBOX_DOCKER_IMAGE={:?}: {e} (build it with images/build.sh and use the ID it prints)", s.image)
    })?;
    smoke::check_image(&s.image, &facts)?;
    write_resolv(&s.resolv_path)?;
    let lockdown = Lockdown {
        guest_uid: s.guest_uid,
        runtimes: BTreeSet::from([s.runtime.clone()]),
        images: BTreeMap::from([(facts.id.clone(), s.image.clone())]),
        resolv_conf: s.resolv_path.clone(),
        seccomp: s.seccomp.clone(),
        ceilings: s.ceilings,
    };
    let swept = engine.sweep(now_unix).await.map_err(|e| format!("sweeping old containers: {e}"))?;
    smoke::prove(&engine, &lockdown, &facts.id, &s.runtime, now_unix).await?;
    Ok(Proven { engine, lockdown, swept })
}

/// Writes the resolver file (0644, replaced atomically) so no earlier content or
/// link at that path survives.
fn write_resolv(path: &std::path::Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("writing the resolver file {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, RESOLV_CONF).map_err(fail)?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).map_err(fail)?;
    }
    std::fs::rename(&tmp, path).map_err(fail)
}
