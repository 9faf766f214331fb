//! The wasm provider's settings.

/// Where the wasm provider's engine runs guests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WasmEngine {
    /// In the daemon's own process (an explicit opt-out).
    InProcess,
    /// In jailed engine worker processes (`plimsoll_runtime::jail`), the default.
    #[default]
    Jailed,
}

impl WasmEngine {
    /// The setting's value, as `Describe` states it.
    pub fn as_str(self) -> &'static str {
        match self {
            WasmEngine::InProcess => "in-process",
            WasmEngine::Jailed => "jailed",
        }
    }
}
