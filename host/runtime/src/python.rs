//! Python at the `process` tier: the CPython guest component (`guests/python`,
//! built by componentize-py) on the same engine, limits and console as QuickJS.
//!
//! A fresh Python run is a project whose steps are each `python3 [-I] FILE
//! [ARG...]`; all steps run in one fresh instance, in order, over an in-memory
//! work directory holding the project's files, and stop at the first that fails.
//! Session cells run in a kept interpreter. The guest gets no preopened directory,
//! no sockets and no environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plimsoll_core::provider::Grant;
use plimsoll_core::wire::{Artifact, CellResult, ProjectOutcome, ProjectResult, ProjectRun, StepResult};
use plimsoll_core::{Reason, Refusal};
use sha2::{Digest, Sha256};
use wasmtime::Store;
use wasmtime::component::{HasSelf, Linker, ResourceAny};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use crate::RuntimeError;
use crate::engine::{Engine, Loaded, Readiness};
use crate::wasm::{Captured, EXIT_TIMEOUT, EXIT_TRAP, RunState, Stopped, WasmConfig};

mod generated {
    wasmtime::component::bindgen!({
        world: "python-engine",
        path: "../../wit/engine",
        with: {
            "plimsoll:engine/console": crate::wasm::console,
            "plimsoll:engine/host-api": crate::wasm::host_api,
        },
    });
}

use generated::{PythonEngine, PythonEnginePre};

/// Where `guests/python/build.sh` writes the component in this checkout.
pub const CHECKOUT_COMPONENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../guests/python/python.wasm");

/// The CPython component to load: `configured` (`SANDBOX_WASM_PYTHON`), which must
/// exist, else this checkout's build output when it exists, else none (the wasm
/// provider then runs JavaScript only).
///
/// # Errors
///
/// A configured path that is not a file, with the command that builds one.
pub fn component_path(configured: Option<&Path>) -> Result<Option<PathBuf>, String> {
    match configured {
        Some(p) if p.is_file() => Ok(Some(p.to_path_buf())),
        Some(p) => Err(format!(
            "SANDBOX_WASM_PYTHON names {}, which is not a file; build the CPython component with guests/python/build.sh",
            p.display()
        )),
        None => Ok(Some(PathBuf::from(CHECKOUT_COMPONENT)).filter(|p| p.is_file())),
    }
}

/// The artifact bytes a wasm Python project may read back in all (the docker
/// runner's default budget).
pub const ARTIFACT_BYTES: usize = 4 << 20;

/// The CPython guest, compiled and linked once.
#[derive(Clone)]
pub struct PythonGuest {
    pre: PythonEnginePre<RunState>,
    identity: Arc<str>,
    digest: [u8; 32],
    loaded: (Readiness, Duration),
}

impl std::fmt::Debug for PythonGuest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonGuest").field("identity", &self.identity).field("loaded", &self.loaded).finish()
    }
}

/// How one call into the guest ended, before it becomes a result.
#[derive(Debug)]
pub(crate) struct Ended {
    pub exit_code: i32,
    pub timed_out: bool,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The instance trapped and cannot be entered again.
    pub trapped: bool,
}

/// A live interpreter: its store, instance and resource.
pub(crate) struct LivePython {
    store: Store<RunState>,
    instance: PythonEngine,
    interpreter: ResourceAny,
    guest_stderr: MemoryOutputPipe,
}

impl PythonGuest {
    /// Compiles (or loads from the cache) the component in `bytes` and links it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError`] when it does not compile or does not link against the
    /// `python-engine` world.
    pub fn new(engine: &Engine, bytes: &[u8]) -> Result<PythonGuest, RuntimeError> {
        PythonGuest::digested(engine, bytes, &Sha256::digest(bytes).into())
    }

    /// As [`PythonGuest::new`], with the SHA-256 of `bytes` already known: hashing
    /// the 38 MB component was most of a jailed engine worker's start, so the
    /// daemon hashes it once for all of them.
    ///
    /// # Errors
    ///
    /// As [`PythonGuest::new`].
    pub fn digested(engine: &Engine, bytes: &[u8], digest: &[u8; 32]) -> Result<PythonGuest, RuntimeError> {
        let Loaded { component, readiness, took } = engine.load_digested("cpython", bytes, digest)?;
        let mut linker = Linker::<RunState>::new(engine.wasmtime());
        let link = |e: wasmtime::Error| RuntimeError::Link(format!("{e:#}"));
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(link)?;
        PythonEngine::add_to_linker::<RunState, HasSelf<RunState>>(&mut linker, |s| s).map_err(link)?;
        let pre = linker.instantiate_pre(&component).map_err(link)?;
        let pre = PythonEnginePre::new(pre).map_err(link)?;
        let identity = format!("cpython-wasm:sha256:{}", hex::encode(digest));
        Ok(PythonGuest { pre, identity: identity.into(), digest: *digest, loaded: (readiness, took) })
    }

    /// The SHA-256 of the component's bytes.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// Reads the component at `path` and loads it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Compile`] naming the path when it cannot be read, else as [`PythonGuest::new`].
    pub fn from_file(engine: &Engine, path: &Path) -> Result<PythonGuest, RuntimeError> {
        let bytes = std::fs::read(path)
            .map_err(|e| RuntimeError::Compile("cpython".into(), format!("reading {}: {e}", path.display())))?;
        PythonGuest::new(engine, &bytes)
    }

    /// `cpython-wasm:sha256:<hex>` of the component's bytes.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether the component came from the cache, and how long loading took.
    pub fn loaded(&self) -> (Readiness, Duration) {
        self.loaded
    }

    /// A fresh instance with one interpreter holding `files`, its deadline
    /// `timeout` from now (instantiation and the writes count against it).
    pub(crate) fn start(
        &self,
        engine: &Engine,
        config: &WasmConfig,
        files: &mut dyn Iterator<Item = (&str, &[u8])>,
        timeout: Duration,
    ) -> Result<LivePython, Refusal> {
        let (mut store, guest_stderr) = RunState::store(engine, config, timeout);
        let instance = self.pre.instantiate(&mut store).map_err(crate::wasm::instantiate_refusal)?;
        let fail =
            |e: wasmtime::Error| Refusal::new(Reason::Environment, format!("starting the Python interpreter: {e:#}"));
        let api = instance.plimsoll_engine_plimsoll_python().interpreter();
        let interpreter = api.call_constructor(&mut store).map_err(fail)?;
        for (path, content) in files {
            api.call_write_file(&mut store, interpreter, path, content).map_err(fail)?;
        }
        Ok(LivePython { store, instance, interpreter, guest_stderr })
    }

    /// Runs a project of `python3 [-I] FILE [ARG...]` steps in one fresh instance.
    /// The steps were checked with [`python_steps`] first.
    ///
    /// # Errors
    ///
    /// Refused (nothing ran) when no instance could be started.
    pub fn run_project(
        &self,
        engine: &Engine,
        config: &WasmConfig,
        project: &ProjectRun,
        steps: &[PythonStep],
        timeout: Duration,
        grant: Option<&Grant>,
    ) -> Result<ProjectResult, Refusal> {
        let mut files = project.files.iter().map(|f| (f.path.as_str(), f.content.as_bytes()));
        self.run_steps(engine, config, &mut files, project, steps, timeout, grant)
    }

    /// Runs `project`'s checked `steps` in one fresh instance whose work directory
    /// holds `files` (a session's, with the project's own among them).
    ///
    /// # Errors
    ///
    /// Refused (nothing ran) when no instance could be started.
    #[expect(clippy::too_many_arguments, reason = "the parts of one run, each from a different owner")]
    pub(crate) fn run_steps(
        &self,
        engine: &Engine,
        config: &WasmConfig,
        files: &mut dyn Iterator<Item = (&str, &[u8])>,
        project: &ProjectRun,
        steps: &[PythonStep],
        timeout: Duration,
        grant: Option<&Grant>,
    ) -> Result<ProjectResult, Refusal> {
        let mut live = self.start(engine, config, files, timeout)?;
        if let Some(g) = grant {
            live.grant(g)?;
        }
        let mut result = ProjectResult { outcome: ProjectOutcome::Completed, ..ProjectResult::default() };
        let mut trapped = false;
        for (step, command) in steps.iter().zip(&project.steps) {
            let step_start = Instant::now();
            let ended = live.run_file(config, &step.file, &step.args, step.isolated);
            result.steps.push(StepResult {
                command: command.clone(),
                stdout: ended.stdout.bytes,
                stderr: ended.stderr.bytes,
                exit_code: ended.exit_code,
                timed_out: ended.timed_out,
                duration_ms: i64::try_from(step_start.elapsed().as_millis()).unwrap_or(i64::MAX),
                stdout_truncated: ended.stdout.truncated,
                stderr_truncated: ended.stderr.truncated,
            });
            if ended.timed_out {
                result.outcome = ProjectOutcome::TimedOut;
                result.outcome_detail = format!("step {} exceeded the run's time budget", result.steps.len());
                return Ok(result);
            }
            if ended.trapped || ended.exit_code != 0 {
                trapped = ended.trapped;
                break;
            }
        }
        // A trapped instance cannot be entered again, so its files cannot be read back.
        if !trapped {
            let (artifacts, truncated) = live.artifacts(&project.artifacts);
            result.artifacts = artifacts;
            result.artifacts_truncated = truncated;
        }
        Ok(result)
    }
}

/// One checked project step: `python3 [-I] FILE [ARG...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonStep {
    /// `-I`: the work directory stays off `sys.path`.
    pub isolated: bool,
    /// The program, a path in the work directory.
    pub file: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Checks every step of a Python project: each must be exactly `python3 [-I] FILE
/// [ARG...]` with no shell syntax, since the wasm provider has no shell.
///
/// # Errors
///
/// An `unsupported` refusal naming the first other step and the docker provider.
pub fn python_steps(steps: &[String]) -> Result<Vec<PythonStep>, Refusal> {
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let refuse = |why: &str| {
                Refusal::unsupported(format!(
                    "step {} ({step:?}) {why}: the wasm provider runs only `python3 [-I] FILE [ARG...]` steps \
                     (or `plimsoll-judge ARGS` steps for a simulation run); the docker provider runs shell steps",
                    i + 1
                ))
            };
            // `=` too: an assignment before or after `python3` is shell, not an argument.
            let words = crate::steps::plain_command(step, "python3", &['=']).map_err(|why| refuse(&why))?;
            let mut rest: Vec<&str> = words.collect();
            let isolated = rest.first() == Some(&"-I");
            if isolated {
                rest.remove(0);
            }
            let Some((file, args)) = rest.split_first() else {
                return Err(refuse("names no file to run"));
            };
            if file.starts_with('-') {
                return Err(refuse("passes an option other than -I"));
            }
            Ok(PythonStep {
                isolated,
                file: (*file).to_string(),
                args: args.iter().map(|a| (*a).to_string()).collect(),
            })
        })
        .collect()
}

impl LivePython {
    /// Arms the run's grant: the host import answers through its broker, and
    /// `plimsoll_host` checks calls against its routes first.
    pub(crate) fn grant(&mut self, grant: &Grant) -> Result<(), Refusal> {
        self.store.data_mut().host_api = Some(grant.api.clone());
        let api = self.instance.plimsoll_engine_plimsoll_python().interpreter();
        api.call_grant(&mut self.store, self.interpreter, Some(&grant.routes))
            .map_err(|e| Refusal::new(Reason::Environment, format!("installing the run's grant: {e:#}")))
    }

    fn finish(&mut self, config: &WasmConfig, outcome: wasmtime::Result<i32>) -> Ended {
        let state = self.store.data_mut();
        let stdout = std::mem::take(&mut state.stdout);
        let mut stderr = std::mem::take(&mut state.stderr);
        let (exit_code, timed_out, trapped) = match outcome {
            Ok(code) => (code, false, false),
            Err(e) => match Stopped::of(&e, state.limiter.denied, config.memory_mb, &self.guest_stderr) {
                Stopped::Deadline => (EXIT_TIMEOUT, true, true),
                // Whatever Python printed comes first; the host adds why the interpreter stopped.
                Stopped::Trap(why) => {
                    stderr.push(config.output_cap, why.as_bytes());
                    (EXIT_TRAP, false, true)
                }
            },
        };
        Ended { exit_code, timed_out, stdout, stderr, trapped }
    }

    /// Runs a program of the work directory; the deadline set at start applies.
    pub(crate) fn run_file(&mut self, config: &WasmConfig, file: &str, args: &[String], isolated: bool) -> Ended {
        let api = self.instance.plimsoll_engine_plimsoll_python().interpreter();
        let outcome = api.call_run_file(&mut self.store, self.interpreter, file, args, isolated);
        self.finish(config, outcome)
    }

    /// Writes one file into the work directory.
    pub(crate) fn write_file(&mut self, path: &str, content: &[u8]) -> Result<(), Refusal> {
        let api = self.instance.plimsoll_engine_plimsoll_python().interpreter();
        api.call_write_file(&mut self.store, self.interpreter, path, content)
            .map_err(|e| Refusal::new(Reason::Environment, format!("writing {path} into the session: {e:#}")))
    }

    /// Runs one cell with a deadline `timeout` from now.
    pub(crate) fn cell(&mut self, config: &WasmConfig, code: &str, number: u32, timeout: Duration) -> Ended {
        self.store.set_epoch_deadline(Engine::deadline_ticks(timeout));
        let api = self.instance.plimsoll_engine_plimsoll_python().interpreter();
        let outcome = api.call_cell(&mut self.store, self.interpreter, code, number);
        self.finish(config, outcome)
    }

    /// The requested artifacts that exist, in order, within [`ARTIFACT_BYTES`].
    fn artifacts(&mut self, paths: &[String]) -> (Vec<Artifact>, bool) {
        let api = self.instance.plimsoll_engine_plimsoll_python().interpreter();
        let (mut got, mut total) = (Vec::new(), 0usize);
        for path in paths {
            let Ok(Some(content)) = api.call_read_file(&mut self.store, self.interpreter, path) else {
                continue;
            };
            if total + content.len() > ARTIFACT_BYTES {
                return (got, true);
            }
            total += content.len();
            got.push(Artifact { path: path.clone(), content });
        }
        (got, false)
    }
}

/// A cell's result from how it ended.
pub(crate) fn cell_result(ended: Ended, started: bool) -> CellResult {
    CellResult {
        stdout: ended.stdout.bytes,
        stderr: ended.stderr.bytes,
        exit_code: ended.exit_code,
        timed_out: ended.timed_out,
        stdout_truncated: ended.stdout.truncated,
        stderr_truncated: ended.stderr.truncated,
        interpreter_started: started,
        interpreter_ended: ended.trapped,
        advice: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_python3_steps_pass() {
        let ok = python_steps(&["python3 main.py".into(), "python3 -I tool.py a b".into()]).expect("plain steps");
        assert_eq!(ok[0], PythonStep { isolated: false, file: "main.py".into(), args: vec![] });
        assert_eq!(ok[1], PythonStep { isolated: true, file: "tool.py".into(), args: vec!["a".into(), "b".into()] });
        for (step, why) in [
            ("ls -l", "is not a python3 command"),
            ("python main.py", "is not a python3 command"),
            ("python3", "names no file to run"),
            ("python3 -I", "names no file to run"),
            ("python3 -c 1", "passes an option other than -I"),
            ("python3 -u main.py", "passes an option other than -I"),
            ("python3 main.py > out.txt", "uses shell syntax"),
            ("python3 main.py; rm -rf /", "uses shell syntax"),
            ("python3 $X", "uses shell syntax"),
            ("PYTHONPATH=x python3 main.py", "uses shell syntax"),
        ] {
            let r = python_steps(&["python3 ok.py".into(), step.into()]).expect_err(step);
            assert_eq!(r.reason, Reason::Unsupported, "{step}");
            assert_eq!(
                r.message,
                format!(
                    "step 2 ({step:?}) {why}: the wasm provider runs only `python3 [-I] FILE [ARG...]` steps \
                     (or `plimsoll-judge ARGS` steps for a simulation run); the docker provider runs shell steps"
                ),
            );
        }
    }
}
