//! The plugin manifest and signature parsers: a `plugin.toml`, then (after a NUL
//! byte) a `plugin.sig`, checked against one trusted key over a fixed component.
//! Parsing never panics; an accepted manifest names a plain `.wasm` file beside it
//! and a well-formed name, and loads only with its capabilities approved; and a
//! signature file verifies only if it carries the one signature that key makes over
//! this component and this manifest (the fuzzer holds no private key, and strict
//! Ed25519 verification admits no second form of a signature).
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use plimsoll_keys::{Signer as _, SigningKey};
use plimsoll_plugin_trust::{Capability, Manifest, signature};

/// The component every signature in the corpus covers.
pub const COMPONENT: &[u8] = b"\0asm fuzz component";

fuzz_target!(|data: &[u8]| {
    let (manifest, sig) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(text) = std::str::from_utf8(manifest)
        && let Ok(m) = Manifest::parse(text)
    {
        assert!(m.component.ends_with(".wasm") && !m.component.contains(['/', '\\']), "{:?}", m.component);
        assert!(m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'), "{:?}", m.name);
        assert_eq!(
            m.check_approved(&[]).is_ok(),
            m.capabilities.is_empty(),
            "nothing approved loads only a plugin that asks for nothing"
        );
        let all = [Capability::Containers, Capability::Http, Capability::Log];
        assert!(m.check_approved(&all).is_ok());
    }
    let Ok(sig_text) = std::str::from_utf8(sig) else { return };
    let key = SigningKey::from_bytes(&[7u8; 32]);
    let trusted = [key.verifying_key()];
    if let Ok(id) = signature::verify(sig_text, &trusted, COMPONENT, manifest) {
        assert_eq!(Ok(id), signature::key_id(&trusted[0]));
        let only = key.sign(signature::message(COMPONENT, manifest).as_bytes());
        assert!(sig_text.contains(&STANDARD.encode(only.to_bytes())), "a second signature verified");
    }
    let _ = signature::public_key(sig_text);
    let _ = signature::private_key(sig_text);
});
