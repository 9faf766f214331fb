//! DSSE envelopes: `{payloadType, payload, signatures[{keyid, sig}]}`, signed over
//! the pre-authentication encoding `DSSEv1 <len> <type> <len> <payload>`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use plimsoll_keys::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::AttestError;
use crate::signer::Signer;

/// The payload type of every envelope the harness writes.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The bytes a DSSE signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// One signature: the signer's key ID and the base64 of the 64-byte Ed25519 signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sig {
    /// Hex SHA-256 of the signer's SPKI DER.
    pub keyid: String,
    /// Standard, padded base64.
    pub sig: String,
}

/// A DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Envelope {
    /// Always [`PAYLOAD_TYPE`] here.
    pub payload_type: String,
    /// Standard, padded base64 of the statement's bytes.
    pub payload: String,
    /// Exactly one when the harness signs.
    pub signatures: Vec<Sig>,
}

impl Envelope {
    /// Signs `payload` with `signer`, and checks the signature before returning it.
    ///
    /// # Errors
    ///
    /// The signer failed, or its signature does not verify under its own key.
    pub fn seal(signer: &dyn Signer, payload: &[u8]) -> Result<Envelope, AttestError> {
        let message = pae(PAYLOAD_TYPE, payload);
        let sig = signer.sign(&message)?;
        let key = signer.key();
        key.verify_strict(&message, &sig).map_err(|_| {
            AttestError::Signature(
                "the signer's signature does not verify under its own key; nothing was signed".into(),
            )
        })?;
        Ok(Envelope {
            payload_type: PAYLOAD_TYPE.into(),
            payload: STANDARD.encode(payload),
            signatures: vec![Sig { keyid: plimsoll_keys::key_id(key), sig: STANDARD.encode(sig.to_bytes()) }],
        })
    }

    /// The payload, once a signature verifies under `key`. `strict`: exactly one
    /// signature, naming this key (links); otherwise any signature whose key ID is
    /// empty or this key's may be the one.
    ///
    /// # Errors
    ///
    /// [`AttestError::Statement`] for another payload type or bad base64;
    /// [`AttestError::Signature`] when no signature verifies.
    pub fn open(&self, key: &VerifyingKey, strict: bool) -> Result<Vec<u8>, AttestError> {
        if self.payload_type != PAYLOAD_TYPE {
            return Err(AttestError::Statement(format!("payload type {:?}, not {PAYLOAD_TYPE}", self.payload_type)));
        }
        let payload = STANDARD
            .decode(&self.payload)
            .map_err(|e| AttestError::Statement(format!("the payload is not base64: {e}")))?;
        let id = plimsoll_keys::key_id(key);
        if strict && (self.signatures.len() != 1 || self.signatures[0].keyid != id) {
            return Err(AttestError::Signature(format!("a link must carry exactly one signature, by key {id}")));
        }
        let message = pae(&self.payload_type, &payload);
        let verifies = self.signatures.iter().filter(|s| s.keyid.is_empty() || s.keyid == id).any(|s| {
            STANDARD
                .decode(&s.sig)
                .ok()
                .and_then(|b| Signature::from_slice(&b).ok())
                .is_some_and(|sig| key.verify_strict(&message, &sig).is_ok())
        });
        if !verifies {
            return Err(AttestError::Signature(format!("no signature verifies under key {id}")));
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signer::KeySigner;

    #[test]
    fn pae_matches_the_dsse_example() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }

    #[test]
    fn an_envelope_opens_under_its_key_only_and_not_when_edited() {
        let signer = KeySigner::new(plimsoll_keys::generate().expect("key"));
        let other = plimsoll_keys::generate().expect("key").verifying_key();
        let env = Envelope::seal(&signer, b"{\"a\":1}").expect("seal");
        assert_eq!(env.open(signer.key(), true).expect("open"), b"{\"a\":1}");
        assert!(matches!(env.open(&other, false), Err(AttestError::Signature(_))));
        let mut edited = env.clone();
        edited.payload = STANDARD.encode(b"{\"a\":2}");
        assert!(matches!(edited.open(signer.key(), false), Err(AttestError::Signature(_))));
        let mut typed = env;
        typed.payload_type = "text/plain".into();
        assert!(matches!(typed.open(signer.key(), false), Err(AttestError::Statement(_))));
    }
}
