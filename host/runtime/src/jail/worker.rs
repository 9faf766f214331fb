//! The worker's side: `plimsoll-host engine-worker`, run only by the daemon's
//! [`super::Jail`] with the socket as its stdin.

use std::os::fd::FromRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use super::confine;
use super::frame::{self, Answer, FrameError, Hello, Ready, Run};
use crate::{Engine, EngineConfig, WasmConfig, WasmProvider};

/// Serves runs until the daemon closes the socket. Returns the exit status: 0 when
/// the daemon hung up, 1 when setup or the socket failed (said on stderr).
pub fn serve() -> i32 {
    // SAFETY: the daemon starts the worker with its end of a socket pair as fd 0,
    // and nothing else in this process uses fd 0.
    let mut sock = unsafe { UnixStream::from_raw_fd(0) };
    match setup_and_serve(&mut sock) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("plimsoll engine worker: {e}");
            1
        }
    }
}

fn setup_and_serve(sock: &mut UnixStream) -> Result<(), String> {
    let hello: Hello = frame::read(sock).map_err(|e| format!("reading the daemon's hello: {e}"))?;
    let mut walls = vec!["an empty environment, no new privileges".to_string()];
    walls.extend(confine::namespaces_seen());
    let cache = hello.cache_dir.as_ref().map(PathBuf::from);
    if confine::landlock(cache.as_deref())? {
        walls.push("landlock: no file system but the component cache, read-only".into());
    }
    let engine = Engine::new(&EngineConfig { max_instances: 4, cache_dir: cache }).map_err(|e| e.to_string())?;
    let config = WasmConfig {
        memory_mb: hello.memory_mb,
        output_cap: usize::try_from(hello.output_cap).unwrap_or(usize::MAX),
        ..WasmConfig::default()
    };
    let provider = WasmProvider::new(&engine, config).map_err(|e| e.to_string())?;
    // One run before the filter, so every lazy first-use path (thread-locals, the
    // signal handlers' stacks) has happened when the filter is drawn.
    provider.run_javascript_with("0", Duration::from_secs(5), None).map_err(|r| r.message)?;
    confine::seccomp()?;
    walls.push("seccomp: any system call but the engine's own kills it".into());
    let identity = provider.identity().to_string();
    frame::write(sock, &Ready { identity, walls }).map_err(|e| format!("saying ready: {e}"))?;
    loop {
        let run: Run = match frame::read(sock) {
            Ok(r) => r,
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a run: {e}")),
        };
        let answer = match provider.run_javascript_with(&run.code, Duration::from_millis(run.timeout_ms), None) {
            Ok(result) => Answer::Ran(result),
            Err(r) => Answer::Refused { reason: r.reason.as_str().to_string(), message: r.message },
        };
        frame::write(sock, &answer).map_err(|e| format!("answering: {e}"))?;
    }
}
