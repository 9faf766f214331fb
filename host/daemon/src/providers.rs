//! The providers a daemon can run, built from configuration.

use std::sync::Arc;

use plimsoll_core::provider::{Description, Provider, Ran, RunError, Snippet};
use plimsoll_core::wire::JavaScriptResult;
use plimsoll_core::{Refusal, Tier};
use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};

use crate::config::{Config, ProviderKind};

/// The text every run on a daemon without a provider gets.
pub const DISABLED: &str = "code execution sandbox is not configured";

/// The default provider: runs nothing, at tier `none`.
#[derive(Clone, Copy, Debug)]
pub struct Disabled;

impl Provider for Disabled {
    fn describe(&self) -> Description {
        Description {
            name: "disabled".into(),
            snippet: None,
            project: None,
            module: None,
            memory_mb: 0,
            policy: String::new(),
        }
    }

    fn tier(&self) -> Tier {
        Tier::None
    }

    fn preflight(&self) -> Result<(), Refusal> {
        Ok(())
    }

    fn run_snippet(&self, _: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
        Err(Refusal::unsupported(DISABLED).into())
    }
}

/// Why the provider could not be built.
#[derive(Debug, thiserror::Error)]
#[error("building the {provider} provider: {message}")]
pub struct BuildError {
    /// The provider.
    pub provider: &'static str,
    /// What failed.
    pub message: String,
}

/// Builds the configured provider.
///
/// # Errors
///
/// [`BuildError`] when its engine or component cannot be made ready.
pub fn build(config: &Config) -> Result<Arc<dyn Provider>, BuildError> {
    match config.provider {
        ProviderKind::Disabled => Ok(Arc::new(Disabled)),
        ProviderKind::Wasm => {
            let err = |e: plimsoll_runtime::RuntimeError| BuildError { provider: "wasm", message: e.to_string() };
            let cache_dir = config.cache_dir.clone().or_else(EngineConfig::default_cache_dir);
            let max_instances = (config.admission.max_concurrent * 2).max(64);
            let engine = Engine::new(&EngineConfig { max_instances, cache_dir }).map_err(err)?;
            let mut wasm = WasmConfig::default();
            if config.resources.memory_mb > 0 {
                wasm.memory_mb = config.resources.memory_mb;
            }
            Ok(Arc::new(WasmProvider::new(&engine, wasm).map_err(err)?))
        }
    }
}
