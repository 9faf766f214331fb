//! Broker plugins: a vendor's wasm component exporting `plimsoll:broker`, loaded only
//! after its signature verifies against a vendor key the operator trusts and its
//! capabilities are approved. It declares its API's routes, mints each run's
//! credential through the vendor's token endpoint (the host attaches the
//! operator's long-lived secret to that request, so the plugin never reads it),
//! and may shape calls. The host stays the broker of record: it matches routes,
//! checks every shaped call again, enforces budgets and sends every request.

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
        world: "plimsoll:broker/broker-plugin",
        path: ["../../wit/types", "../../wit/host", "../../wit/broker"],
        with: {
            "plimsoll:host/http": super::super::host::bindings::plimsoll::host::http,
            "plimsoll:host/log": super::super::host::bindings::plimsoll::host::log,
            "plimsoll:types/types": super::super::host::bindings::plimsoll::types::types,
        },
    });
}

use bindings::exports::plimsoll::broker::broker as wit;
use bindings::{BrokerPlugin as World, BrokerPluginPre};

/// How long one call of a broker plugin may take (its token request included).
const CALL_BUDGET: Duration = Duration::from_secs(30);
/// Memory for the plugin's own store.
const PLUGIN_MEMORY: usize = 64 << 20;

/// What a broker plugin serves, as it declared it at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    /// Its name.
    pub name: String,
    /// The API, for documentation.
    pub api: String,
    /// "METHOD /path" lines.
    pub routes: Vec<String>,
    /// Batch routes and the per-item routes each stands for.
    pub batch_of: Vec<(String, Vec<String>)>,
    /// Request body schemas (JSON text) by route line.
    pub schemas: Vec<(String, String)>,
}

/// A minted credential: the `Authorization` value and its expiry (Unix ms).
#[derive(Clone, PartialEq, Eq)]
pub struct Minted {
    /// The header value.
    pub authorization: String,
    /// When it expires.
    pub expires_unix_ms: u64,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted").field("expires_unix_ms", &self.expires_unix_ms).finish_non_exhaustive()
    }
}

/// A call as the plugin shaped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapedCall {
    /// The path.
    pub path: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Option<Vec<u8>>,
}

/// A loaded, verified broker plugin.
pub struct BrokerPlugin {
    name: String,
    digest: String,
    engine: Engine,
    pre: BrokerPluginPre<PluginState>,
    approved: Vec<Capability>,
    http: Option<Arc<HttpGate>>,
    allowed: super::http::Allowed,
}

impl std::fmt::Debug for BrokerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerPlugin").field("name", &self.name).field("digest", &self.digest).finish_non_exhaustive()
    }
}

fn route(line: &wit::Route) -> String {
    format!("{} {}", line.method, line.path)
}

impl BrokerPlugin {
    /// Compiles a verified broker plugin and links the capabilities the operator
    /// approved; `http` serves the endpoints its manifest names.
    ///
    /// # Errors
    ///
    /// The component does not compile or link as a broker.
    pub fn new(
        engine: &Engine,
        verified: Verified,
        approved: Vec<Capability>,
        http: Option<Arc<HttpGate>>,
    ) -> Result<BrokerPlugin, PluginError> {
        let name = verified.manifest.name.clone();
        let err = |e: String| PluginError::Component { name: name.clone(), error: e };
        let loaded = engine.load(&name, &verified.component).map_err(|e| err(e.to_string()))?;
        super::check_contract(&verified, super::manifest::PluginKind::Broker, &loaded.component, engine)?;
        let mut linker: Linker<PluginState> = Linker::new(engine.wasmtime());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| err(e.to_string()))?;
        World::add_to_linker::<PluginState, wasmtime::component::HasSelf<PluginState>>(&mut linker, |s| s)
            .map_err(|e| err(e.to_string()))?;
        let pre = linker.instantiate_pre(&loaded.component).map_err(|e| err(format!("{e:#}")))?;
        let pre = BrokerPluginPre::new(pre).map_err(|e| err(format!("not a broker plugin: {e:#}")))?;
        Ok(BrokerPlugin {
            name: name.clone(),
            digest: verified.digest,
            engine: engine.clone(),
            pre,
            approved,
            http,
            allowed: super::http::Allowed::of(&verified.manifest),
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the component.
    pub fn digest(&self) -> &str {
        &self.digest
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
            .map_err(|e| format!("broker plugin {} failed: {e:#}", self.name))
    }

    /// What the plugin serves.
    ///
    /// # Errors
    ///
    /// The plugin failed.
    pub fn describe(&self) -> Result<Declared, String> {
        let d = self.call(|store, p| p.plimsoll_broker_broker().call_describe(store))?;
        Ok(Declared {
            name: d.name,
            api: d.api,
            routes: d.routes.iter().map(route).collect(),
            batch_of: d.batch_of.iter().map(|(b, items)| (route(b), items.iter().map(route).collect())).collect(),
            schemas: d.schemas.iter().map(|s| (route(&s.route), s.request.clone())).collect(),
        })
    }

    /// Mints one run's credential for `subject`, valid at most `ttl`.
    ///
    /// # Errors
    ///
    /// The plugin failed or refused, in its words.
    pub fn mint(&self, subject: &str, ttl: Duration, scopes: &[String]) -> Result<Minted, String> {
        let req = wit::MintRequest {
            subject: subject.into(),
            ttl_ms: u32::try_from(ttl.as_millis()).unwrap_or(u32::MAX),
            scopes: scopes.to_vec(),
        };
        let c = self.call(|store, p| p.plimsoll_broker_broker().call_mint(store, &req))?.map_err(|r| r.message)?;
        Ok(Minted { authorization: c.authorization, expires_unix_ms: c.expires_unix_ms })
    }

    /// Shapes one call that matched `method route`.
    ///
    /// # Errors
    ///
    /// The plugin failed or refused the call.
    pub fn shape(&self, method: &str, route: &str, path: &str, body: Option<&[u8]>) -> Result<ShapedCall, String> {
        let call = wit::Call {
            method: method.into(),
            route: wit::Route { method: method.into(), path: route.into() },
            path: path.into(),
            body: body.map(<[u8]>::to_vec),
        };
        let s = self.call(|store, p| p.plimsoll_broker_broker().call_shape(store, &call))?.map_err(|r| r.message)?;
        Ok(ShapedCall { path: s.path, headers: s.headers, body: s.body })
    }
}
