//! Provider plugins: wasm components exporting `plimsoll:provider`, loaded only
//! after their signature verifies against keys the operator trusts and their
//! capabilities are approved, and run with nothing but those capabilities.
//!
//! The plugin is an adapter. The host decides the tier (from the runtimes the
//! containers it created ran under, lowered to the manifest's `max-tier`), checks
//! every container spec against the lockdown ([`plimsoll_containers::Lockdown`]),
//! and removes every container a call created when the call ends.

pub use plimsoll_plugin_trust::{manifest, signature};

mod book;
pub mod broker;
pub mod guard;
mod host;
pub mod http;
mod provider;
mod session;
pub mod signer;
pub mod socket;
pub mod versions;

use std::path::{Path, PathBuf};

pub use host::Wall;
pub use manifest::{Capability, Manifest};
pub use provider::{GuardAccess, PluginLimits, PluginProvider};
use sha2::{Digest as _, Sha256};

/// The file names inside a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.toml";
/// The signature file's name.
pub const SIGNATURE_FILE: &str = "plugin.sig";

/// Why a plugin did not load. Each names the check that failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// A file of the plugin could not be read.
    #[error("plugin {dir}: cannot read {file}: {error}")]
    Read {
        /// The plugin directory.
        dir: PathBuf,
        /// The file.
        file: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The plugin has no signature file.
    #[error("plugin {0}: unsigned (no {SIGNATURE_FILE}); sign it with `plimsoll-host plugin sign`")]
    Unsigned(PathBuf),
    /// The manifest is malformed.
    #[error("plugin {dir}: {error}")]
    Manifest {
        /// The plugin directory.
        dir: PathBuf,
        /// What is wrong.
        error: String,
    },
    /// The signature did not verify.
    #[error("plugin {dir}: signature check failed: {error}")]
    Signature {
        /// The plugin directory.
        dir: PathBuf,
        /// Which check failed.
        error: signature::SignatureError,
    },
    /// The operator did not approve a requested capability.
    #[error("plugin {dir}: {error}")]
    Unapproved {
        /// The plugin directory.
        dir: PathBuf,
        /// The capability and where to approve it.
        error: String,
    },
    /// No trusted key was configured.
    #[error("plugin {0}: no trusted keys are configured, so no signature can verify")]
    NoTrustedKeys(PathBuf),
    /// The component did not compile, link or instantiate, or broke the contract.
    #[error("plugin {name}: {error}")]
    Component {
        /// The plugin's name.
        name: String,
        /// What failed.
        error: String,
    },
}

/// Checks a compiled plugin is the `kind` the host loads it as, by its manifest
/// and by the WIT packages and versions its component names.
///
/// # Errors
///
/// [`PluginError::Component`] naming what does not fit.
pub(crate) fn check_contract(
    verified: &Verified,
    kind: manifest::PluginKind,
    component: &wasmtime::component::Component,
    engine: &crate::Engine,
) -> Result<(), PluginError> {
    let name = &verified.manifest.name;
    let err = |error: String| PluginError::Component { name: name.clone(), error };
    if verified.manifest.kind != kind {
        return Err(err(format!("its manifest says {}, so it does not load as a {kind}", verified.manifest.kind)));
    }
    versions::check(kind, component, engine.wasmtime()).map_err(err)
}

/// A plugin whose signature and approvals checked out: safe to compile.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The manifest.
    pub manifest: Manifest,
    /// The component's bytes.
    pub component: Vec<u8>,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// The key that signed it.
    pub key_id: String,
}

fn read(dir: &Path, file: &str) -> Result<Vec<u8>, PluginError> {
    std::fs::read(dir.join(file)).map_err(|error| PluginError::Read {
        dir: dir.to_path_buf(),
        file: file.into(),
        error,
    })
}

/// Reads a plugin directory and checks, in order: the manifest parses, a signature
/// exists, it was made by a trusted key over exactly this component and manifest,
/// and every capability the manifest asks for is approved.
///
/// # Errors
///
/// The first check that failed, naming it.
pub fn verify(
    dir: &Path,
    trusted: &[plimsoll_keys::VerifyingKey],
    approved: &[Capability],
) -> Result<Verified, PluginError> {
    let manifest_bytes = read(dir, MANIFEST_FILE)?;
    let text = String::from_utf8(manifest_bytes.clone())
        .map_err(|_| PluginError::Manifest { dir: dir.into(), error: "plugin.toml is not UTF-8".into() })?;
    let manifest = Manifest::parse(&text).map_err(|error| PluginError::Manifest { dir: dir.into(), error })?;
    let component = read(dir, &manifest.component)?;
    let sig = match std::fs::read_to_string(dir.join(SIGNATURE_FILE)) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(PluginError::Unsigned(dir.into())),
        Err(error) => return Err(PluginError::Read { dir: dir.into(), file: SIGNATURE_FILE.into(), error }),
    };
    if trusted.is_empty() {
        return Err(PluginError::NoTrustedKeys(dir.into()));
    }
    let key_id = signature::verify(&sig, trusted, &component, &manifest_bytes)
        .map_err(|error| PluginError::Signature { dir: dir.into(), error })?;
    manifest.check_approved(approved).map_err(|error| PluginError::Unapproved { dir: dir.into(), error })?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&component)));
    Ok(Verified { manifest, component, digest, key_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MANIFEST: &str = "schema = 1\nname = \"docker\"\nkind = \"provider\"\nversion = \"0.1.0\"\ncomponent = \"docker.wasm\"\nmax-tier = \"kernel\"\ncapabilities = [\"containers\", \"log\"]\n";

    /// A signed plugin directory (the component need not be valid wasm to test
    /// verification) and the public key that verifies it.
    fn signed(tag: &str) -> (Dir, plimsoll_keys::VerifyingKey) {
        let dir = std::env::temp_dir().join(format!("plimsoll-plugin-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (private, public) = signature::generate().expect("keygen");
        let key = signature::private_key(&private).expect("key");
        std::fs::write(dir.join("docker.wasm"), b"\0asm component").expect("write");
        std::fs::write(dir.join(MANIFEST_FILE), MANIFEST).expect("write");
        let sig = signature::sign(&key, b"\0asm component", MANIFEST.as_bytes()).expect("sign");
        std::fs::write(dir.join(SIGNATURE_FILE), sig).expect("write");
        (Dir(dir), signature::public_key(&public).expect("public"))
    }

    const ALL: [Capability; 2] = [Capability::Containers, Capability::Log];

    #[test]
    fn a_signed_approved_plugin_verifies() {
        let (dir, key) = signed("ok");
        let v = verify(&dir.0, &[key], &ALL).expect("verifies");
        assert_eq!(v.manifest.name, "docker");
        assert_eq!(v.key_id, signature::key_id(&key).expect("id"));
    }

    #[test]
    fn an_unsigned_plugin_does_not_load() {
        let (dir, key) = signed("unsigned");
        std::fs::remove_file(dir.0.join(SIGNATURE_FILE)).expect("rm");
        let err = verify(&dir.0, &[key], &ALL).expect_err("must fail");
        assert!(matches!(err, PluginError::Unsigned(_)), "{err}");
        assert!(err.to_string().ends_with("unsigned (no plugin.sig); sign it with `plimsoll-host plugin sign`"));
    }

    #[test]
    fn a_tampered_component_or_manifest_does_not_load() {
        let (dir, key) = signed("tampered");
        std::fs::write(dir.0.join("docker.wasm"), b"\0asm component!").expect("write");
        let err = verify(&dir.0, &[key], &ALL).expect_err("must fail");
        assert!(matches!(err, PluginError::Signature { error: signature::SignatureError::Mismatch(_), .. }), "{err}");
        let (dir, key) = signed("tampered-manifest");
        std::fs::write(dir.0.join(MANIFEST_FILE), MANIFEST.replace("kernel", "vm")).expect("write");
        let err = verify(&dir.0, &[key], &ALL).expect_err("must fail");
        assert!(err.to_string().contains("does not match this component and manifest"), "{err}");
    }

    #[test]
    fn an_untrusted_signer_does_not_load() {
        let (dir, _) = signed("untrusted");
        let (_, other) = signed("untrusted-other");
        let err = verify(&dir.0, &[other], &ALL).expect_err("must fail");
        assert!(matches!(err, PluginError::Signature { error: signature::SignatureError::Untrusted(_), .. }), "{err}");
        let err = verify(&dir.0, &[], &ALL).expect_err("must fail");
        assert!(matches!(err, PluginError::NoTrustedKeys(_)), "{err}");
    }

    #[test]
    fn an_unapproved_plugin_does_not_load() {
        let (dir, key) = signed("unapproved");
        let err = verify(&dir.0, &[key], &[Capability::Log]).expect_err("must fail");
        assert!(matches!(err, PluginError::Unapproved { .. }), "{err}");
        assert!(err.to_string().contains("requests the containers capability"), "{err}");
    }
}
