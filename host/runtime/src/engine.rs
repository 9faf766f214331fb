//! The one wasmtime engine per process: configuration, the epoch ticker, and
//! precompiled components cached on disk.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::RuntimeError;

/// How often the engine's epoch advances: the granularity of every deadline.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The wasmtime version components are compiled with; part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Engine settings.
///
/// Defaults: 1,024 concurrent instances, a 4 GiB ceiling per linear memory (the
/// per-run limit is set per store), and the cache directory from
/// [`EngineConfig::default_cache_dir`].
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Component instances that may be live at once (pooling allocator slots).
    pub max_instances: u32,
    /// Where precompiled components are kept; `None` compiles in memory each start.
    pub cache_dir: Option<PathBuf>,
}

impl EngineConfig {
    /// `$PLIMSOLL_CACHE_DIR`, else `$XDG_CACHE_HOME/plimsoll`, else `$HOME/.cache/plimsoll`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("PLIMSOLL_CACHE_DIR").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir).join("plimsoll"));
        }
        std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".cache/plimsoll"))
    }
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig { max_instances: 1024, cache_dir: EngineConfig::default_cache_dir() }
    }
}

/// How a component was made ready, for the log and the benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Loaded from the on-disk cache.
    Cached,
    /// Compiled now (and written to the cache when there is one).
    Compiled,
}

/// A component made ready to instantiate, with how long that took.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The compiled component.
    pub component: Component,
    /// Whether it came from the cache.
    pub readiness: Readiness,
    /// Time spent compiling or loading.
    pub took: Duration,
}

/// The process's wasmtime engine with its epoch ticker running.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: wasmtime::Engine,
    cache_dir: Option<PathBuf>,
}

impl Engine {
    /// Builds the engine: component model, epoch interruption, the pooling allocator.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Engine`] when wasmtime refuses the configuration (for example
    /// when the pool cannot reserve its address space).
    pub fn new(config: &EngineConfig) -> Result<Engine, RuntimeError> {
        let n = config.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::default();
        // A Rust wasip2 component holds a handful of core instances (its module plus
        // the adapter shims); the per-component caps leave room for larger guests.
        pool.total_component_instances(n)
            .max_core_instances_per_component(16)
            .total_core_instances(n.saturating_mul(8))
            .max_memories_per_component(4)
            .total_memories(n.saturating_mul(2))
            .max_tables_per_component(8)
            .total_tables(n.saturating_mul(4))
            .max_memory_size(4 << 30)
            // A freed slot resets its first 2 MiB by hand instead of decommitting them,
            // so the next instance does not fault in the snapshot's pages again (the
            // pre-initialised QuickJS heap fits). Each slot reused keeps that much
            // resident: 128 MiB for the daemon's default 64 slots at most.
            .linear_memory_keep_resident(2 << 20)
            .table_keep_resident(64 << 10);
        let mut cfg = Config::new();
        cfg.wasm_component_model(true)
            .epoch_interruption(true)
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // Simulation runs promise the same bits on every host.
        plimsoll_sim::standalone::deterministic(&mut cfg);
        let inner = wasmtime::Engine::new(&cfg).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        start_ticker(&inner);
        Ok(Engine { inner, cache_dir: config.cache_dir.clone() })
    }

    /// The wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner
    }

    /// Epoch ticks for a deadline `timeout` from now, rounded up, plus one so a
    /// deadline never fires early.
    pub fn deadline_ticks(timeout: Duration) -> u64 {
        let tick = EPOCH_TICK.as_nanos();
        (timeout.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }

    /// Makes `bytes` ready to instantiate, from the cache when a matching precompiled
    /// file is there, else by compiling (and caching the result).
    ///
    /// The cache key holds the component's SHA-256, the wasmtime version and the
    /// engine's compatibility hash, so a file only ever loads into the engine that
    /// wrote it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Compile`] when the component does not compile. A cache that
    /// cannot be used is logged by the caller's choice and skipped, never an error.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<Loaded, RuntimeError> {
        self.load_digested(name, bytes, &Sha256::digest(bytes).into())
    }

    /// As [`Engine::load`], with the SHA-256 of `bytes` already known (a large
    /// component hashed once by its loader, or by the daemon for its workers).
    ///
    /// # Errors
    ///
    /// As [`Engine::load`].
    pub fn load_digested(&self, name: &str, bytes: &[u8], digest: &[u8; 32]) -> Result<Loaded, RuntimeError> {
        let start = Instant::now();
        let key = self.cache_key(name, digest);
        if let Some(path) = key.as_deref()
            && let Some(component) = self.try_cached(path)
        {
            return Ok(Loaded { component, readiness: Readiness::Cached, took: start.elapsed() });
        }
        let compiled = self
            .inner
            .precompile_component(bytes)
            .map_err(|e| RuntimeError::Compile(name.to_string(), format!("{e:#}")))?;
        if let Some(path) = key.as_deref() {
            // Best effort: a read-only or foreign-owned cache only costs a compile.
            let _ = write_private(path, &compiled);
        }
        // SAFETY: `compiled` was produced by `precompile_component` on this very
        // engine a moment ago, in this process; it is not external input.
        let component = unsafe { Component::deserialize(&self.inner, &compiled) }
            .map_err(|e| RuntimeError::Compile(name.to_string(), format!("{e:#}")))?;
        Ok(Loaded { component, readiness: Readiness::Compiled, took: start.elapsed() })
    }

    fn cache_key(&self, name: &str, digest: &[u8; 32]) -> Option<PathBuf> {
        let dir = self.cache_dir.as_deref()?;
        ensure_private_dir(dir).ok()?;
        let mut h = DefaultHasher::new();
        self.inner.precompile_compatibility_hash().hash(&mut h);
        let digest = hex::encode(digest);
        Some(dir.join(format!("{name}-{digest}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm", h.finish())))
    }

    fn try_cached(&self, path: &Path) -> Option<Component> {
        let meta = fs::symlink_metadata(path).ok()?;
        if !private_file(&meta) {
            return None;
        }
        // SAFETY: deserializing runs machine code from the file, so the file must be
        // one this host wrote: it is a regular file (not a link) owned by this user,
        // writable by nobody else, in a directory with the same properties
        // (`ensure_private_dir`), named by the component digest, wasmtime version and
        // engine settings. wasmtime also checks the header's version and settings.
        match unsafe { Component::deserialize_file(&self.inner, path) } {
            Ok(c) => Some(c),
            Err(_) => {
                // Truncated or from another build: recompile and replace it.
                let _ = fs::remove_file(path);
                None
            }
        }
    }
}

fn start_ticker(engine: &wasmtime::Engine) {
    let weak = engine.weak();
    // The thread ends once the last handle to the engine is gone.
    let _ = thread::Builder::new().name("plimsoll-epoch".into()).spawn(move || {
        loop {
            thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(e) => e.increment_epoch(),
                None => return,
            }
        }
    });
}

fn euid() -> u32 {
    static UID: OnceLock<u32> = OnceLock::new();
    *UID.get_or_init(|| fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX))
}

fn private_file(meta: &fs::Metadata) -> bool {
    meta.file_type().is_file() && meta.uid() == euid() && meta.mode() & 0o022 == 0
}

/// Creates `dir` (mode 0700) if needed, and accepts it only if it is a real
/// directory owned by this user that nobody else may write to: whoever can write
/// there can plant machine code this process would load.
///
/// # Errors
///
/// The first property `dir` lacks, named, or the error creating or reading it.
fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    let meta = fs::symlink_metadata(dir)?;
    let refused = |why: String| std::io::Error::other(format!("cache directory {} is not used: {why}", dir.display()));
    if !meta.file_type().is_dir() {
        return Err(refused("it is not a directory (a link or a file)".into()));
    }
    if meta.uid() != euid() {
        return Err(refused(format!("it is owned by uid {}, not this user (uid {})", meta.uid(), euid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refused(format!("its mode {:o} lets group or others write to it", meta.mode() & 0o7777)));
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically, mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all()).and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_never_fire_early() {
        assert_eq!(Engine::deadline_ticks(Duration::ZERO), 1);
        assert_eq!(Engine::deadline_ticks(Duration::from_millis(5)), 2);
        assert_eq!(Engine::deadline_ticks(Duration::from_millis(6)), 3);
        assert_eq!(Engine::deadline_ticks(Duration::from_secs(1)), 201);
    }

    #[test]
    fn a_shared_cache_directory_is_not_used() {
        let dir = std::env::temp_dir().join(format!("plimsoll-cache-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        let engine = Engine::new(&EngineConfig { max_instances: 1, cache_dir: Some(dir.clone()) }).expect("engine");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = ensure_private_dir(&dir).expect_err("a world-writable directory");
        assert_eq!(err.kind(), std::io::ErrorKind::Other);
        assert_eq!(
            err.to_string(),
            format!("cache directory {} is not used: its mode 777 lets group or others write to it", dir.display())
        );
        // Not used: no cache path is offered, so nothing is read from or written there.
        assert_eq!(engine.cache_key("c", &[7; 32]), None);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o720)).expect("chmod");
        let err = ensure_private_dir(&dir).expect_err("a group-writable directory");
        assert_eq!(
            err.to_string(),
            format!("cache directory {} is not used: its mode 720 lets group or others write to it", dir.display())
        );
        // A link to a private directory is not one either.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        let link = dir.with_extension("link");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        let err = ensure_private_dir(&link).expect_err("a link");
        assert_eq!(
            err.to_string(),
            format!("cache directory {} is not used: it is not a directory (a link or a file)", link.display())
        );
        ensure_private_dir(&dir).expect("a private directory is used");
        assert!(engine.cache_key("c", &[7; 32]).is_some_and(|p| p.starts_with(&dir)));
        let _ = fs::remove_file(&link);
        let _ = fs::remove_dir_all(&dir);
    }
}
