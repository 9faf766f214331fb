//! What the host reads of a plugin before any engine sees it: the manifest
//! (`plugin.toml`, the capabilities it asks for) and the signature (`plugin.sig`,
//! the key that vouches for the component and the manifest together).
//!
//! Kept apart from the runtime so the parsers can be fuzzed and reused without
//! building wasmtime.

pub mod manifest;
pub mod signature;

pub use manifest::{Capability, Manifest};
