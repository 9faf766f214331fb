//! The host's WebAssembly runtime: one wasmtime engine per process, components
//! precompiled once and cached on disk, and the built-in `wasm` provider that runs
//! the QuickJS guest component.
//!
//! Usage:
//!
//! 1. Build an [`Engine`] from an [`EngineConfig`] (the epoch ticker starts with it).
//! 2. Make a [`WasmProvider`] on it; the QuickJS component is loaded from the cache
//!    or compiled and cached.
//! 3. Call [`plimsoll_core::provider::Provider::run_snippet`]: each run gets a fresh
//!    store, its own memory limit, an epoch deadline and capped output.
//!
//! ```no_run
//! use std::time::Duration;
//! use plimsoll_core::provider::{Provider, Snippet};
//! use plimsoll_core::validate::Language;
//! use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};
//!
//! let engine = Engine::new(&EngineConfig::default())?;
//! let wasm = WasmProvider::new(&engine, WasmConfig::default())?;
//! let ran = wasm.run_snippet(&Snippet {
//!     language: Language::JavaScript,
//!     code: "console.log(6*7)",
//!     timeout: Duration::from_secs(5),
//!     floor: None,
//!     grant: None,
//! }).unwrap();
//! assert_eq!(ran.result.stdout, b"42\n");
//! # Ok::<(), plimsoll_runtime::RuntimeError>(())
//! ```

#![deny(missing_docs)]

pub mod engine;
pub mod jail;
pub mod plugin;
pub mod python;
pub mod sims;
mod steps;
pub mod wasm;

pub use engine::{Engine, EngineConfig, Readiness};
pub use python::PythonGuest;
pub use wasm::{JAILED_INSTANCE, WasmConfig, WasmProvider};

/// Why the runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// wasmtime refused the engine configuration.
    #[error("the wasm engine could not be configured: {0}")]
    Engine(String),
    /// A component did not compile or load.
    #[error("component {0} did not compile: {1}")]
    Compile(String, String),
    /// A component's imports could not be linked.
    #[error("the wasm engine could not link the component: {0}")]
    Link(String),
}
