//! The {{name}} signer plugin, as `plimsoll-host plugin new` wrote it: the key
//! lives in a signing service reached only through the host's HTTP capability
//! at the endpoint alias `sign`, which the operator maps to a URL and a
//! credential this plugin never sees. The service's API, kept minimal:
//!
//! - `GET /v1/key`: the public key's SPKI DER (an Ed25519 key);
//! - `POST /v1/sign` with the bytes to sign: the 64-byte Ed25519 signature.

wit_bindgen::generate!({
    world: "plimsoll:signer/signer-plugin",
    path: ["wit/host", "wit/signer"],
    generate_all,
});

use exports::plimsoll::signer::signer::{Guest, KeyInfo};
use plimsoll::host::http::{Request, send};
use sha2::{Digest as _, Sha256};

/// The endpoint alias the manifest names.
const ENDPOINT: &str = "sign";
/// The budget of one request to the service.
const TIMEOUT_MS: u32 = 10_000;

struct Plugin;

fn call(method: &str, path: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    let r = send(&Request {
        endpoint: ENDPOINT.into(),
        target: None,
        method: method.into(),
        path: path.into(),
        headers: vec![("content-type".into(), "application/octet-stream".into())],
        body,
        timeout_ms: TIMEOUT_MS,
    })?;
    if r.status != 200 {
        let text: String = String::from_utf8_lossy(&r.body).chars().take(200).collect();
        return Err(format!("the signing service answered {} to {method} {path}: {text}", r.status));
    }
    Ok(r.body)
}

impl Guest for Plugin {
    fn key() -> Result<KeyInfo, String> {
        let der = call("GET", "/v1/key", Vec::new())?;
        Ok(KeyInfo { key_id: hex::encode(Sha256::digest(&der)), algorithm: "ed25519".into(), public_key: der })
    }

    fn sign(pae: Vec<u8>) -> Result<Vec<u8>, String> {
        let sig = call("POST", "/v1/sign", pae)?;
        if sig.len() != 64 {
            return Err(format!("the signing service returned {} bytes, not a 64-byte Ed25519 signature", sig.len()));
        }
        Ok(sig)
    }
}

export!(Plugin);
