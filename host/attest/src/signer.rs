//! Who signs: a key the harness holds, or anything else that signs a PAE with an
//! Ed25519 key it names (a signer component fronting a KMS). The harness checks
//! every signature against the named key before it writes it.

use plimsoll_keys::{Signature, Signer as _, SigningKey, VerifyingKey};

use crate::AttestError;

/// Signs DSSE pre-authentication encodings.
pub trait Signer {
    /// The public key signatures verify under.
    fn key(&self) -> &VerifyingKey;
    /// Signs `pae`.
    ///
    /// # Errors
    ///
    /// The signer could not sign.
    fn sign(&self, pae: &[u8]) -> Result<Signature, AttestError>;
}

/// A signer holding its Ed25519 key in memory (read from a key file).
pub struct KeySigner {
    key: SigningKey,
    public: VerifyingKey,
}

impl std::fmt::Debug for KeySigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySigner").field("key_id", &plimsoll_keys::key_id(&self.public)).finish_non_exhaustive()
    }
}

impl KeySigner {
    /// A signer for `key`.
    pub fn new(key: SigningKey) -> KeySigner {
        let public = key.verifying_key();
        KeySigner { key, public }
    }

    /// A signer for a PKCS#8 PEM private key.
    ///
    /// # Errors
    ///
    /// Not a PEM Ed25519 private key.
    pub fn from_pem(pem: &str) -> Result<KeySigner, AttestError> {
        Ok(KeySigner::new(plimsoll_keys::private_key(pem)?))
    }
}

impl Signer for KeySigner {
    fn key(&self) -> &VerifyingKey {
        &self.public
    }

    fn sign(&self, pae: &[u8]) -> Result<Signature, AttestError> {
        Ok(self.key.sign(pae))
    }
}
