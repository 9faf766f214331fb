//! A process that runs simulations by itself (the `plimsoll-judge` program inside a
//! sandbox image): its own engine and epoch ticker, and components precompiled into
//! a directory of the image when it is built.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use crate::catalogue::{ModelName, PlantName};
use crate::library::{Load, model_bytes, model_load_name, plant_bytes, plant_load_name};

/// How often the standalone engine's epoch advances.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The engine settings every simulation engine shares beyond the component model
/// and epochs: NaNs canonicalised and relaxed SIMD deterministic, so no result
/// depends on the host's CPU.
pub fn deterministic(cfg: &mut Config) -> &mut Config {
    cfg.cranelift_nan_canonicalization(true).relaxed_simd_deterministic(true)
}

/// An engine with the component model, epoch interruption (its ticker running) and
/// serial compilation (a sandbox's process limit is small).
///
/// # Errors
///
/// wasmtime's reason when it refuses the configuration.
pub fn engine() -> Result<Engine, String> {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true).epoch_interruption(true).parallel_compilation(false);
    deterministic(&mut cfg);
    portable_isa(&mut cfg)?;
    let engine = Engine::new(&cfg).map_err(|e| format!("the wasm engine could not be configured: {e:#}"))?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("plimsoll-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(e) => e.increment_epoch(),
                    None => return,
                }
            }
        })
        .map_err(|e| format!("the epoch ticker could not start: {e}"))?;
    Ok(engine)
}

/// The x86-64 features the judge's code may use, each only where the CPU has it.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn features() -> [(&'static str, bool); 11] {
    [
        ("has_sse3", std::arch::is_x86_feature_detected!("sse3")),
        ("has_ssse3", std::arch::is_x86_feature_detected!("ssse3")),
        ("has_sse41", std::arch::is_x86_feature_detected!("sse4.1")),
        ("has_sse42", std::arch::is_x86_feature_detected!("sse4.2")),
        ("has_popcnt", std::arch::is_x86_feature_detected!("popcnt")),
        ("has_avx", std::arch::is_x86_feature_detected!("avx")),
        ("has_avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("has_fma", std::arch::is_x86_feature_detected!("fma")),
        ("has_bmi1", std::arch::is_x86_feature_detected!("bmi1")),
        ("has_bmi2", std::arch::is_x86_feature_detected!("bmi2")),
        ("has_lzcnt", std::arch::is_x86_feature_detected!("lzcnt")),
    ]
}

/// Compiles for a fixed list of CPU features instead of all the host reports.
///
/// Components are precompiled into the image on the build machine and loaded inside
/// sandboxes whose CPUs report fewer features: gVisor hides some (AVX-VNNI, for one)
/// that wasmtime would otherwise infer, and a different feature set is a different
/// compatibility hash, so under runsc every run compiled QuickJS again (about 4 s).
/// The list holds what x86-64 machines of the last decade share; none changes a
/// result (NaNs are canonical and relaxed SIMD deterministic either way).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn portable_isa(cfg: &mut Config) -> Result<(), String> {
    cfg.target("x86_64-unknown-linux-gnu").map_err(|e| format!("the wasm engine's target: {e:#}"))?;
    for (flag, present) in features() {
        if present {
            // SAFETY: the flag is enabled only when this CPU reports the feature, so
            // the generated code uses only instructions it has; wasmtime checks a
            // precompiled component's flags against the CPU again when it loads one.
            unsafe {
                cfg.cranelift_flag_enable(flag);
            }
        }
    }
    Ok(())
}

/// Elsewhere wasmtime's own detection stands.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn portable_isa(_: &mut Config) -> Result<(), String> {
    Ok(())
}

/// The file a component precompiled for `engine` is kept in under `dir`: named by
/// its name, its SHA-256 and the engine's compatibility hash.
fn cached(engine: &Engine, dir: &Path, name: &str, sha256: &[u8; 32]) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!("{name}-{}-{:016x}.cwasm", hex::encode(sha256), h.finish()))
}

/// The SHA-256 of a component the caller hashed ahead (when it was built), by the
/// component's name; `None` has the loader hash the bytes.
pub type Known = fn(&str) -> Option<[u8; 32]>;

/// Loads from `dir` what [`precompile`] put there, and compiles anything else now.
/// `known` names the digests of the components the caller embeds; they must be the
/// digests of the very bytes it loads, as the file name pins them.
pub fn loader(engine: &Engine, dir: Option<PathBuf>, known: Known) -> Arc<Load> {
    let engine = engine.clone();
    Arc::new(move |name: &str, bytes: &[u8]| {
        if let Some(dir) = &dir {
            let sha256 = known(name).unwrap_or_else(|| Sha256::digest(bytes).into());
            let path = cached(&engine, dir, name, &sha256);
            if path.is_file() {
                // SAFETY: the file holds machine code, so it must come from a trusted
                // build: `dir` is the image's read-only directory, written only by
                // `precompile` with this binary when the image was built, and the name
                // pins the component's SHA-256 (hashed by `precompile` from the same
                // bytes, or by the binary's build) and this engine's settings; wasmtime
                // checks the header's version and settings again.
                if let Ok(c) = unsafe { Component::deserialize_file(&engine, &path) } {
                    return Ok(c);
                }
            }
        }
        if let Some(dir) = &dir {
            // Visible in the step's stderr: a miss costs seconds (QuickJS), and the
            // suite checks it never happens in the image.
            eprintln!("plimsoll-judge: {name} was not precompiled in {} for this CPU; compiling it now", dir.display());
        }
        Component::new(&engine, bytes).map_err(|e| format!("component {name} does not compile: {e:#}"))
    })
}

/// Compiles every plant, every model and `quickjs` for `engine` into `dir`.
///
/// # Errors
///
/// The first component that does not compile, or a file that cannot be written.
pub fn precompile(engine: &Engine, dir: &Path, quickjs: &[u8]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut all: Vec<(String, &[u8])> = vec![("quickjs".to_string(), quickjs)];
    let mut plants: Vec<_> = PlantName::ALL.iter().map(|p| p.component()).collect();
    plants.dedup();
    for p in plants {
        all.push((plant_load_name(p), plant_bytes(p)));
    }
    for m in ModelName::ALL {
        all.push((model_load_name(m), model_bytes(m)));
    }
    let mut written = Vec::new();
    for (name, bytes) in all {
        let compiled =
            engine.precompile_component(bytes).map_err(|e| format!("component {name} does not compile: {e:#}"))?;
        let path = cached(engine, dir, &name, &Sha256::digest(bytes).into());
        std::fs::write(&path, compiled).map_err(|e| format!("writing {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
