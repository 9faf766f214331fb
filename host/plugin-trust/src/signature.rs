//! Plugin signatures: Ed25519 over the component's SHA-256 and the manifest's.
//!
//! Keys are PEM files (PKCS#8 private, SPKI public). A key's ID is
//! `sha256:<hex>` of its SPKI DER, so an operator can name the keys they trust
//! without reading them. The signed message binds both artifacts and a domain tag,
//! so a signature over anything else can never verify as a plugin's:
//!
//! ```text
//! plimsoll-plugin-signature-v1\n<hex sha256(component)>\n<hex sha256(manifest)>\n
//! ```
//!
//! The signature file (`plugin.sig`) is two lines of `key = "value"` TOML:
//! `key-id` and `signature` (base64 of the 64-byte signature).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use plimsoll_keys::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

const DOMAIN: &str = "plimsoll-plugin-signature-v1";

/// Why a key or a signature was not accepted.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The key file is not a PEM Ed25519 key of the expected kind.
    #[error("{0}")]
    Key(String),
    /// The signature file is malformed.
    #[error("the signature file is malformed: {0}")]
    Malformed(String),
    /// The signing key is not among the trusted keys.
    #[error("the plugin is signed by key {0}, which is not among the trusted keys")]
    Untrusted(String),
    /// The signature does not match the component and manifest.
    #[error(
        "the signature by key {0} does not match this component and manifest (tampered, or signed for other files)"
    )]
    Mismatch(String),
}

fn key_error(e: plimsoll_keys::KeyError) -> SignatureError {
    SignatureError::Key(e.to_string())
}

/// The ID of a public key: `sha256:<hex>` of its SPKI DER.
///
/// # Errors
///
/// None today; kept fallible for keys of other kinds.
pub fn key_id(key: &VerifyingKey) -> Result<String, SignatureError> {
    Ok(format!("sha256:{}", plimsoll_keys::key_id(key)))
}

/// A new key pair from the OS's randomness, as (private PKCS#8 PEM, public SPKI PEM).
///
/// # Errors
///
/// The OS gave no randomness, or encoding failed.
pub fn generate() -> Result<(String, String), SignatureError> {
    let key = plimsoll_keys::generate().map_err(key_error)?;
    Ok((
        plimsoll_keys::private_pem(&key).map_err(key_error)?,
        plimsoll_keys::public_pem(&key.verifying_key()).map_err(key_error)?,
    ))
}

/// Reads a private key (PKCS#8 PEM).
///
/// # Errors
///
/// Not a PEM Ed25519 private key.
pub fn private_key(pem: &str) -> Result<SigningKey, SignatureError> {
    plimsoll_keys::private_key(pem).map_err(key_error)
}

/// Reads a public key (SPKI PEM).
///
/// # Errors
///
/// Not a PEM Ed25519 public key.
pub fn public_key(pem: &str) -> Result<VerifyingKey, SignatureError> {
    plimsoll_keys::public_key(pem).map_err(key_error)
}

/// The message a plugin signature covers.
pub fn message(component: &[u8], manifest: &[u8]) -> String {
    format!("{DOMAIN}\n{}\n{}\n", hex::encode(Sha256::digest(component)), hex::encode(Sha256::digest(manifest)))
}

/// Signs a component and its manifest; returns the signature file's text.
///
/// # Errors
///
/// Encoding the key ID failed.
pub fn sign(key: &SigningKey, component: &[u8], manifest: &[u8]) -> Result<String, SignatureError> {
    let sig = key.sign(message(component, manifest).as_bytes());
    Ok(format!("key-id = \"{}\"\nsignature = \"{}\"\n", key_id(&key.verifying_key())?, STANDARD.encode(sig.to_bytes())))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SigFile {
    key_id: String,
    signature: String,
}

/// Verifies a signature file against the trusted keys. Returns the signing key's ID.
///
/// # Errors
///
/// Malformed, signed by an untrusted key, or not matching the files.
pub fn verify(
    sig_file: &str,
    trusted: &[VerifyingKey],
    component: &[u8],
    manifest: &[u8],
) -> Result<String, SignatureError> {
    let parsed: SigFile = toml::from_str(sig_file).map_err(|e| SignatureError::Malformed(e.message().to_string()))?;
    let bytes =
        STANDARD.decode(parsed.signature.trim()).map_err(|e| SignatureError::Malformed(format!("signature: {e}")))?;
    let sig =
        Signature::from_slice(&bytes).map_err(|_| SignatureError::Malformed("the signature is not 64 bytes".into()))?;
    let mut key = None;
    for k in trusted {
        if key_id(k)? == parsed.key_id {
            key = Some(k);
        }
    }
    let key = key.ok_or_else(|| SignatureError::Untrusted(parsed.key_id.clone()))?;
    key.verify_strict(message(component, manifest).as_bytes(), &sig)
        .map_err(|_| SignatureError::Mismatch(parsed.key_id.clone()))?;
    Ok(parsed.key_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (SigningKey, VerifyingKey) {
        let (private, public) = generate().expect("keygen");
        (private_key(&private).expect("private"), public_key(&public).expect("public"))
    }

    #[test]
    fn a_signature_verifies_with_its_key_and_names_it() {
        let (sk, pk) = pair();
        let sig = sign(&sk, b"component", b"manifest").expect("sign");
        assert_eq!(verify(&sig, &[pk], b"component", b"manifest"), Ok(key_id(&pk).expect("id")));
    }

    #[test]
    fn a_tampered_component_or_manifest_fails() {
        let (sk, pk) = pair();
        let sig = sign(&sk, b"component", b"manifest").expect("sign");
        let id = key_id(&pk).expect("id");
        assert_eq!(verify(&sig, &[pk], b"componenT", b"manifest"), Err(SignatureError::Mismatch(id.clone())));
        assert_eq!(verify(&sig, &[pk], b"component", b"manifest\n"), Err(SignatureError::Mismatch(id)));
    }

    #[test]
    fn an_untrusted_key_fails_naming_it() {
        let (sk, pk) = pair();
        let (_, other) = pair();
        let sig = sign(&sk, b"c", b"m").expect("sign");
        assert_eq!(verify(&sig, &[other], b"c", b"m"), Err(SignatureError::Untrusted(key_id(&pk).expect("id"))));
    }

    #[test]
    fn malformed_signature_files_are_named() {
        let (_, pk) = pair();
        let err = verify("nonsense", &[pk], b"c", b"m").expect_err("must fail");
        assert!(matches!(err, SignatureError::Malformed(_)), "{err}");
        let err = verify("key-id = \"x\"\nsignature = \"AAAA\"\n", &[pk], b"c", b"m").expect_err("must fail");
        assert_eq!(err, SignatureError::Malformed("the signature is not 64 bytes".into()));
    }

    #[test]
    fn keys_must_be_the_right_kind() {
        let (private, public) = generate().expect("keygen");
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
}
