//! `plimsoll-host plugin`: a plugin author's kit (a new project, its manifest
//! read back, the conformance suite against it) and the keys and signatures
//! that vouch for plugins.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use plimsoll_runtime::plugin::{self, MANIFEST_FILE, Manifest, SIGNATURE_FILE, signature};

mod check;
mod new;

/// `plugin` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create an Ed25519 key pair: PREFIX.key (private, mode 0600) and PREFIX.pub.
    Keygen {
        /// Path prefix of the two files.
        prefix: PathBuf,
    },
    /// Sign a plugin directory (its manifest and component) into DIR/plugin.sig.
    Sign {
        /// The private key (PKCS#8 PEM).
        #[arg(long)]
        key: PathBuf,
        /// The plugin directory.
        dir: PathBuf,
    },
    /// Check a plugin as the daemon would: signature, trusted key, approvals.
    Verify {
        /// A trusted public key (SPKI PEM); repeat for several.
        #[arg(long = "trusted-key", required = true)]
        trusted_keys: Vec<PathBuf>,
        /// Approved capabilities, comma-separated (containers, http, log).
        #[arg(long, value_delimiter = ',')]
        approve: Vec<String>,
        /// The plugin directory.
        dir: PathBuf,
    },
    /// Print a plugin's manifest: its settings and how to set them, endpoints,
    /// envelope, capabilities and tier, its component's digest and signing key.
    Inspect {
        /// The plugin directory.
        dir: PathBuf,
    },
    /// Write a new plugin project that builds for wasm32-wasip2 as it is: its
    /// manifest, this host's WIT packages and a skeleton of its kind.
    New {
        /// The plugin's name (lowercase letters, digits and dashes).
        name: String,
        /// What it is: provider, broker or signer.
        #[arg(long, value_parser = parse_kind)]
        kind: plugin::manifest::PluginKind,
        /// The plugins/ directory of a plimsoll checkout, whose shared libraries
        /// the skeleton builds on (default: this build's).
        #[arg(long)]
        kit: Option<PathBuf>,
        /// Where to write it (default: ./NAME); it must not exist or be empty.
        dir: Option<PathBuf>,
    },
    /// Load a provider plugin as the daemon would (settings, signature,
    /// approvals, WIT packages, smoke test) and run the shared conformance suite
    /// against it: one line per check, exit 1 on any failure.
    Check {
        /// A plimsoll.toml with the plugin's settings ([plugins.NAME]) and the
        /// engine's ([docker]); the environment wins over it, as for serve.
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
        /// A trusted public key (SPKI PEM); repeat for several (else the settings').
        #[arg(long = "trusted-key")]
        trusted_keys: Vec<PathBuf>,
        /// Capabilities approved, comma-separated (default: what the manifest asks).
        #[arg(long, value_delimiter = ',')]
        approve: Vec<String>,
        /// The plugin directory (plugin.toml, the component, plugin.sig).
        dir: PathBuf,
    },
}

fn parse_kind(s: &str) -> Result<plugin::manifest::PluginKind, String> {
    plugin::manifest::PluginKind::parse(s)
}

/// Runs a `plugin` subcommand.
///
/// # Errors
///
/// What failed; verification failures name the check.
pub fn main(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::New { name, kind, kit, dir } => new::new(&name, kind, dir, kit),
        Command::Check { settings, trusted_keys, approve, dir } => {
            check::check(&dir, settings.as_deref(), &trusted_keys, &approve)
        }
        Command::Keygen { prefix } => keygen(&prefix),
        Command::Sign { key, dir } => {
            let pem = std::fs::read_to_string(&key).with_context(|| format!("reading {}", key.display()))?;
            let key = signature::private_key(&pem)?;
            let (manifest, component) = files(&dir)?;
            let sig = signature::sign(&key, &component, &manifest)?;
            std::fs::write(dir.join(SIGNATURE_FILE), sig).with_context(|| format!("writing {}", dir.display()))?;
            println!("signed {} with key {}", dir.display(), signature::key_id(&key.verifying_key())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { trusted_keys, approve, dir } => {
            let mut keys = Vec::new();
            for p in &trusted_keys {
                let pem = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
                keys.push(signature::public_key(&pem).with_context(|| p.display().to_string())?);
            }
            let approved = approve.iter().map(|c| plugin::Capability::parse(c)).collect::<Result<Vec<_>, _>>();
            let approved = approved.map_err(anyhow::Error::msg)?;
            let v = plugin::verify(&dir, &keys, &approved)?;
            println!("ok: {} {} ({}) signed by {}", v.manifest.name, v.manifest.version, v.digest, v.key_id);
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { dir } => {
            let (manifest_bytes, component) = files(&dir)?;
            let m = Manifest::parse(std::str::from_utf8(&manifest_bytes).context("plugin.toml is not UTF-8")?)
                .map_err(anyhow::Error::msg)?;
            println!("name          {}", m.name);
            println!("kind          {}", m.kind);
            println!("version       {}", m.version);
            println!("component     {} ({} bytes)", m.component, component.len());
            println!("sha256        {}", hex_sha256(&component));
            match m.max_tier {
                Some(t) => println!("max tier      {t}"),
                None => println!("max tier      none stated (not a provider)"),
            }
            let caps: Vec<&str> = m.capabilities.iter().map(|c| c.as_str()).collect();
            println!("capabilities  {}", caps.join(", "));
            print_settings(&m);
            match std::fs::read_to_string(dir.join(SIGNATURE_FILE)) {
                Ok(s) => {
                    let id = s.lines().find_map(|l| l.strip_prefix("key-id = ")).unwrap_or("?").trim_matches('"');
                    println!("signed by     {id} (not verified; use `plugin verify`)");
                }
                Err(_) => println!("signed by     nobody (no {SIGNATURE_FILE})"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The settings, endpoints, envelope and guard a manifest declares, as an
/// operator sets them.
fn print_settings(m: &Manifest) {
    if m.kind == plugin::manifest::PluginKind::Provider {
        let limits: Vec<&str> = m.envelope.iter().map(|l| l.as_str()).collect();
        let limits = if limits.is_empty() { "none".to_string() } else { limits.join(", ") };
        println!("envelope      {limits}");
        if let Some(note) = &m.envelope_note {
            println!("              ({note})");
        }
    }
    for (alias, e) in &m.endpoints {
        let mut parts = Vec::new();
        if let Some(u) = &e.url {
            parts.push(format!("url from {u}"));
        }
        for (h, s) in &e.headers {
            parts.push(format!("{h} from secret {}", s.secret));
        }
        if let Some(x) = &e.exchange {
            parts.push(format!("bearer traded for secret {} at {}", x.secret, x.url));
        }
        if e.client_cert.is_some() {
            parts.push("client certificate".into());
        }
        println!(
            "endpoint      {alias}: {}",
            if parts.is_empty() { "mapped by the operator".into() } else { parts.join("; ") }
        );
    }
    if let Some(g) = &m.guard_url {
        println!("guard         url from {g}");
    }
    for (name, s) in &m.settings {
        let need = match (&s.default, s.required) {
            (Some(d), _) => format!("default {d}"),
            (None, true) => "required".into(),
            (None, false) => "optional".into(),
        };
        let mut vars = vec![m.variable(name)];
        vars.extend(s.aliases.iter().cloned());
        println!("setting       {name} ({}, {need}): {}", s.kind.as_str(), s.help);
        println!("                set by {}", vars.join(" or "));
    }
}

fn hex_sha256(b: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

/// The manifest's and the component's bytes.
fn files(dir: &Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let manifest = std::fs::read(dir.join(MANIFEST_FILE))
        .with_context(|| format!("reading {}", dir.join(MANIFEST_FILE).display()))?;
    let m = Manifest::parse(std::str::from_utf8(&manifest).context("plugin.toml is not UTF-8")?)
        .map_err(anyhow::Error::msg)?;
    let component = std::fs::read(dir.join(&m.component))
        .with_context(|| format!("reading {}", dir.join(&m.component).display()))?;
    Ok((manifest, component))
}

fn keygen(prefix: &Path) -> anyhow::Result<ExitCode> {
    let (private_path, public_path, public) = plimsoll_keys::write_pair(prefix)?;
    println!("private key  {} (keep it secret)", private_path.display());
    println!("public key   {}", public_path.display());
    println!("key ID       {}", signature::key_id(&public)?);
    Ok(ExitCode::SUCCESS)
}
