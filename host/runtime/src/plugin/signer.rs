//! Signer plugins: wasm components exporting `plimsoll:signer`, loaded only after
//! their signature verifies and their capabilities are approved, like any plugin.
//! One fronts a KMS or HSM over the host's HTTP capability, so the signing key
//! never sits on the harness's machine; the harness checks every signature it
//! returns against the key it names.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::Linker;

use super::host::{HttpOnly, PluginState};
use super::http::HttpGate;
use super::{Capability, PluginError, Verified};
use crate::engine::Engine;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "plimsoll:signer/signer-plugin",
        path: ["../../wit/host", "../../wit/signer"],
        with: {
            "plimsoll:host/http": super::super::host::bindings::plimsoll::host::http,
            "plimsoll:host/log": super::super::host::bindings::plimsoll::host::log,
        },
    });
}

use bindings::{SignerPlugin as World, SignerPluginPre};

/// How long one call of a signer plugin may take (its HTTP requests included).
const CALL_BUDGET: Duration = Duration::from_secs(60);
/// Memory for the plugin's own store.
const PLUGIN_MEMORY: usize = 64 << 20;

/// The key a signer plugin signs with, as it states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// Hex SHA-256 of the public key's SPKI DER, as the plugin states it.
    pub key_id: String,
    /// `ed25519`.
    pub algorithm: String,
    /// The SPKI DER.
    pub public_key: Vec<u8>,
}

/// A loaded, verified signer plugin.
pub struct SignerPlugin {
    name: String,
    engine: Engine,
    pre: SignerPluginPre<PluginState>,
    approved: Vec<Capability>,
    http: Option<Arc<HttpGate>>,
    allowed: super::http::Allowed,
}

impl std::fmt::Debug for SignerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignerPlugin").field("name", &self.name).finish_non_exhaustive()
    }
}

impl SignerPlugin {
    /// Compiles a verified signer plugin and links the capabilities the operator
    /// approved; `http` serves the endpoints its manifest names.
    ///
    /// # Errors
    ///
    /// The component does not compile or link as a signer.
    pub fn new(
        engine: &Engine,
        verified: Verified,
        approved: Vec<Capability>,
        http: Option<Arc<HttpGate>>,
    ) -> Result<SignerPlugin, PluginError> {
        let name = verified.manifest.name.clone();
        let err = |e: String| PluginError::Component { name: name.clone(), error: e };
        let loaded = engine.load(&name, &verified.component).map_err(|e| err(e.to_string()))?;
        super::check_contract(&verified, super::manifest::PluginKind::Signer, &loaded.component, engine)?;
        let mut linker: Linker<PluginState> = Linker::new(engine.wasmtime());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| err(e.to_string()))?;
        World::add_to_linker::<PluginState, wasmtime::component::HasSelf<PluginState>>(&mut linker, |s| s)
            .map_err(|e| err(e.to_string()))?;
        let pre = linker.instantiate_pre(&loaded.component).map_err(|e| err(format!("{e:#}")))?;
        let pre = SignerPluginPre::new(pre).map_err(|e| err(format!("not a signer plugin: {e:#}")))?;
        Ok(SignerPlugin {
            name: name.clone(),
            engine: engine.clone(),
            pre,
            approved,
            http,
            allowed: super::http::Allowed::of(&verified.manifest),
        })
    }

    fn call<T>(&self, f: impl FnOnce(&mut Store<PluginState>, &World) -> wasmtime::Result<T>) -> Result<T, String> {
        let mut store = HttpOnly {
            name: &self.name,
            approved: &self.approved,
            http: self.http.clone(),
            allowed: &self.allowed,
            budget: CALL_BUDGET,
            memory: PLUGIN_MEMORY,
        }
        .store(&self.engine);
        self.pre
            .instantiate(&mut store)
            .and_then(|plugin| f(&mut store, &plugin))
            .map_err(|e| format!("signer plugin {} failed: {e:#}", self.name))
    }

    /// The key the plugin signs with.
    ///
    /// # Errors
    ///
    /// The plugin failed or said why not.
    pub fn key(&self) -> Result<KeyInfo, String> {
        let k = self.call(|store, p| p.plimsoll_signer_signer().call_key(store))??;
        Ok(KeyInfo { key_id: k.key_id, algorithm: k.algorithm, public_key: k.public_key })
    }

    /// Signs a DSSE pre-authentication encoding; returns the raw signature.
    ///
    /// # Errors
    ///
    /// The plugin failed or said why not.
    pub fn sign(&self, pae: &[u8]) -> Result<Vec<u8>, String> {
        self.call(|store, p| p.plimsoll_signer_signer().call_sign(store, pae))?
    }
}
