//! The runtime's integration suite: the QuickJS component run through the wasm
//! provider exactly as the daemon and the CLI run it.

mod grants;
mod limits;
mod python;
mod sessions;
mod snippets;

use std::sync::OnceLock;
use std::time::Duration;

use plimsoll_core::provider::{Provider, Snippet};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::JavaScriptResult;
use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};

/// One provider for the whole suite (the component compiles once).
fn wasm() -> &'static WasmProvider {
    static P: OnceLock<WasmProvider> = OnceLock::new();
    P.get_or_init(|| {
        let engine = Engine::new(&EngineConfig::default()).expect("engine");
        WasmProvider::new(&engine, WasmConfig::default()).expect("provider")
    })
}

/// Runs `code` with a budget and returns the result.
fn run(code: &str, timeout: Duration) -> JavaScriptResult {
    wasm()
        .run_snippet(&Snippet { language: Language::JavaScript, code, timeout, floor: None, grant: None })
        .expect("a result")
        .result
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
