//! The jailed engine worker: the wasm provider's engine in a separate process, so
//! an engine escape (a wasmtime or QuickJS bug) lands in a process that holds
//! nothing worth taking and can do almost nothing.
//!
//! The daemon starts each worker as `plimsoll-host engine-worker` with an empty
//! environment, no descriptor but one end of a socket pair (its stdin), no new
//! privileges, and its own user, mount, network, IPC and UTS namespaces where the
//! machine allows them (its user maps to the daemon's, with no capability outside).
//! The worker loads its engine, denies itself the whole file system (Landlock),
//! installs a seccomp filter that fails any system call the engine does not make
//! while running with `EPERM` and kills it on exec, ptrace, mount, namespaces or a
//! new process, says it is ready, and then serves snippet runs over the
//! socket in length-prefixed JSON frames ([`frame`]). The daemon keeps a small pool
//! ([`Jail`]): a worker that crashes, hangs past the run's budget, or answers
//! garbage is killed and replaced, and its run is reported "may have run".

mod confine;
pub mod frame;
mod pool;
pub mod worker;

pub use confine::Confinement;
pub use pool::{Jail, JailConfig, JailedSession, SessionLost};

/// A lock that a panic elsewhere does not poison for good: the pool and the worker
/// keep serving with the state as the panicking thread left it.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
