//! Ed25519 keys as plimsoll keeps them: PKCS#8 PEM private keys (mode 0600, never
//! overwritten), SPKI PEM public keys, and a key's ID, the lowercase hex SHA-256 of
//! its SPKI DER (44 bytes for Ed25519), so anyone can name a key without reading it.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _};
pub use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest as _, Sha256};

/// Why a key could not be made, read or written.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The OS gave no randomness.
    #[error("the OS gave no randomness: {0}")]
    Randomness(String),
    /// The text is not a PEM key of the expected kind.
    #[error("{0}")]
    Format(String),
    /// A key file could not be written (it exists, or the OS refused).
    #[error("{0}")]
    Write(String),
}

/// The ID of a public key: lowercase hex SHA-256 of its SPKI DER.
pub fn key_id(key: &VerifyingKey) -> String {
    hex::encode(Sha256::digest(public_der(key)))
}

/// A new key from the OS's randomness.
///
/// # Errors
///
/// [`KeyError::Randomness`].
pub fn generate() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::Randomness(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// A private key as PKCS#8 PEM.
///
/// # Errors
///
/// [`KeyError::Format`] when encoding fails.
pub fn private_pem(key: &SigningKey) -> Result<String, KeyError> {
    Ok(key.to_pkcs8_pem(LineEnding::LF).map_err(|e| KeyError::Format(format!("encoding: {e}")))?.to_string())
}

/// A public key as SPKI PEM.
///
/// # Errors
///
/// [`KeyError::Format`] when encoding fails.
pub fn public_pem(key: &VerifyingKey) -> Result<String, KeyError> {
    key.to_public_key_pem(LineEnding::LF).map_err(|e| KeyError::Format(format!("encoding: {e}")))
}

/// Reads a private key (PKCS#8 PEM).
///
/// # Errors
///
/// [`KeyError::Format`]: not a PEM Ed25519 private key.
pub fn private_key(pem: &str) -> Result<SigningKey, KeyError> {
    SigningKey::from_pkcs8_pem(pem)
        .map_err(|e| KeyError::Format(format!("not an Ed25519 private key in PKCS#8 PEM: {e}")))
}

/// Reads a public key (SPKI PEM).
///
/// # Errors
///
/// [`KeyError::Format`]: not a PEM Ed25519 public key.
pub fn public_key(pem: &str) -> Result<VerifyingKey, KeyError> {
    VerifyingKey::from_public_key_pem(pem)
        .map_err(|e| KeyError::Format(format!("not an Ed25519 public key in SPKI PEM: {e}")))
}

/// A public key's SPKI DER (44 bytes).
pub fn public_der(key: &VerifyingKey) -> Vec<u8> {
    // Encoding a valid Ed25519 key into its fixed SPKI cannot fail.
    key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default()
}

/// Reads a public key from its SPKI DER.
///
/// # Errors
///
/// [`KeyError::Format`]: not an Ed25519 SPKI DER.
pub fn public_key_der(der: &[u8]) -> Result<VerifyingKey, KeyError> {
    VerifyingKey::from_public_key_der(der)
        .map_err(|e| KeyError::Format(format!("not an Ed25519 public key in SPKI DER: {e}")))
}

/// Generates a key pair and writes `PREFIX.key` (mode 0600, created new) and
/// `PREFIX.pub`. Returns both paths and the public key.
///
/// # Errors
///
/// [`KeyError::Write`] when either file exists or cannot be written; nothing is
/// overwritten.
pub fn write_pair(prefix: &Path) -> Result<(PathBuf, PathBuf, VerifyingKey), KeyError> {
    let (private_path, public_path) = (prefix.with_extension("key"), prefix.with_extension("pub"));
    let public = write_pair_at(&private_path, &public_path)?;
    Ok((private_path, public_path, public))
}

/// Generates a key pair and writes the private key to `private_path` (mode 0600,
/// created new) and the public key to `public_path`. Returns the public key.
///
/// # Errors
///
/// [`KeyError::Write`] when either file exists or cannot be written; nothing is
/// overwritten.
pub fn write_pair_at(private_path: &Path, public_path: &Path) -> Result<VerifyingKey, KeyError> {
    if private_path.exists() || public_path.exists() {
        return Err(KeyError::Write(format!(
            "{} or {} exists; keys are never overwritten",
            private_path.display(),
            public_path.display()
        )));
    }
    let key = generate()?;
    let public = key.verifying_key();
    let write_err = |p: &Path, e: std::io::Error| KeyError::Write(format!("writing {}: {e}", p.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(private_path)
        .map_err(|e| write_err(private_path, e))?;
    f.write_all(private_pem(&key)?.as_bytes()).map_err(|e| write_err(private_path, e))?;
    std::fs::write(public_path, public_pem(&public)?).map_err(|e| write_err(public_path, e))?;
    Ok(public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_id_is_the_hex_sha256_of_the_spki_der() {
        // The vector of the original's attest tests: base64 SPKI DER to key ID.
        let pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAk81UqfxHycnofXBARJpj9f6LDzmzMah+kWQl5oAtANk=\n-----END PUBLIC KEY-----\n";
        let key = public_key(pem).expect("the vector's key");
        assert_eq!(key_id(&key), "84338813b9ce78aa6c11cf59c1b5ef11f73971080b04c256a226fdded0afac50");
    }

    #[test]
    fn keys_round_trip_and_must_be_the_right_kind() {
        let key = generate().expect("key");
        let private = private_pem(&key).expect("pem");
        let public = public_pem(&key.verifying_key()).expect("pem");
        assert_eq!(private_key(&private).expect("private").to_bytes(), key.to_bytes());
        assert_eq!(public_key(&public).expect("public"), key.verifying_key());
        assert_eq!(
            public_key(&private).expect_err("a private key").to_string(),
            "not an Ed25519 public key in SPKI PEM: ASN.1 error: PEM error: unexpected PEM type label: expecting \"PUBLIC KEY\""
        );
        assert_eq!(
            private_key(&public).expect_err("a public key").to_string(),
            "not an Ed25519 private key in PKCS#8 PEM: PKCS#8 ASN.1 error: PEM error: unexpected PEM type label: expecting \"PRIVATE KEY\""
        );
        let truncated = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
        assert_eq!(
            public_key(truncated).expect_err("no key").to_string(),
            "not an Ed25519 public key in SPKI PEM: ASN.1 error: unknown/unsupported ASN.1 DER tag: 0x00"
        );
    }

    #[test]
    fn a_pair_is_written_private_0600_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("plimsoll-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let (private, public, key) = write_pair(&dir.join("k")).expect("write");
        let mode = std::fs::metadata(&private).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let read = public_key(&std::fs::read_to_string(&public).expect("read")).expect("public");
        assert_eq!(read, key);
        let again = write_pair(&dir.join("k")).expect_err("exists");
        assert!(again.to_string().contains("keys are never overwritten"), "{again}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
