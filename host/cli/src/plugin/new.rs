//! `plimsoll-host plugin new`: a plugin project that builds for wasm32-wasip2 as
//! it is, with its manifest, this host's WIT packages and a skeleton of its kind.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use plimsoll_runtime::plugin::manifest::{Manifest, PluginKind};

/// This checkout's plugins directory: the shared libraries a skeleton builds on.
const KIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins");

/// This host's WIT packages, written into every project (the versions the host accepts).
const WIT: [(&str, &str); 5] = [
    ("types/types.wit", include_str!("../../../../wit/types/types.wit")),
    ("host/host.wit", include_str!("../../../../wit/host/host.wit")),
    ("provider/provider.wit", include_str!("../../../../wit/provider/provider.wit")),
    ("broker/broker.wit", include_str!("../../../../wit/broker/broker.wit")),
    ("signer/signer.wit", include_str!("../../../../wit/signer/signer.wit")),
];

const CARGO: &str = include_str!("../../templates/Cargo.toml");
const BUILD: &str = include_str!("../../templates/build.sh");

/// The skeleton and manifest of a kind, with the name they hold in place of the
/// new plugin's: the provider's template, and for a broker or signer this
/// repository's example of that kind (it builds and is tested as it is).
fn skeleton(kind: PluginKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        PluginKind::Provider => (
            include_str!("../../templates/provider/lib.rs"),
            include_str!("../../templates/provider/plugin.toml"),
            "{{name}}",
        ),
        PluginKind::Broker => (
            include_str!("../../../../plugins/inventory-broker/src/lib.rs"),
            include_str!("../../../../plugins/inventory-broker/plugin.toml"),
            "inventory-broker",
        ),
        PluginKind::Signer => (
            include_str!("../../../../plugins/kms-signer/src/lib.rs"),
            include_str!("../../../../plugins/kms-signer/plugin.toml"),
            "kms-signer",
        ),
    }
}

/// Writes the project for plugin `name` of `kind` into `dir` (default `./NAME`),
/// building on the plugins directory `kit` (default this checkout's).
///
/// # Errors
///
/// A name no manifest may hold, a directory that is not empty, a kit without
/// the shared remote library, or a file that could not be written.
pub fn new(name: &str, kind: PluginKind, dir: Option<PathBuf>, kit: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let (lib, manifest, example) = skeleton(kind);
    let fill = |t: &str| {
        t.replace(example, name)
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("\"../../wit/", "\"wit/")
    };
    let manifest = fill(manifest);
    Manifest::parse(&manifest).map_err(|e| anyhow::anyhow!("{name:?} cannot name a plugin: {e}"))?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        bail!("{} is not empty; name a new directory", dir.display());
    }
    let kit = kit.unwrap_or_else(|| PathBuf::from(KIT));
    let kit = kit.canonicalize().with_context(|| {
        format!(
            "the plugin kit {} is missing: pass --kit, the plugins/ directory of a plimsoll checkout",
            kit.display()
        )
    })?;
    let dependencies = match kind {
        PluginKind::Provider => {
            let remote = kit.join("remote");
            if !remote.join("Cargo.toml").is_file() {
                bail!(
                    "{} has no remote/ library: pass --kit, the plugins/ directory of a plimsoll checkout",
                    kit.display()
                );
            }
            format!("plimsoll-plugin-remote = {{ path = {:?} }}", remote.display().to_string())
        }
        PluginKind::Signer => "hex = \"0.4\"\nsha2 = \"0.10\"".to_string(),
        PluginKind::Broker => "serde_json = \"1\"".to_string(),
    };
    let write = |path: &Path, text: &str| -> anyhow::Result<()> {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(Path::new("Cargo.toml"), &fill(CARGO).replace("{{dependencies}}", &dependencies))?;
    write(Path::new("plugin.toml"), &manifest)?;
    write(Path::new("src/lib.rs"), &fill(lib))?;
    write(Path::new("build.sh"), &fill(BUILD))?;
    write(Path::new(".gitignore"), "/target\n*.wasm\nplugin.sig\n")?;
    for (path, text) in WIT {
        write(&Path::new("wit").join(path), text)?;
    }
    // The kit's lock, so the project builds with the versions the kit's plugins do.
    if let Ok(lock) = std::fs::read_to_string(kit.join("Cargo.lock")) {
        write(Path::new("Cargo.lock"), &lock)?;
    }
    set_executable(&dir.join("build.sh"))?;
    println!("wrote the {kind} plugin {name} in {}", dir.display());
    println!("next:");
    println!("  {}/build.sh                                  # builds {name}.wasm", dir.display());
    println!("  plimsoll-host plugin keygen KEY && plimsoll-host plugin sign --key KEY.key {}", dir.display());
    if kind == PluginKind::Provider {
        println!("  plimsoll-host plugin check {} --trusted-key KEY.pub   # the conformance suite", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn set_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}
