//! `plimsoll-host run`: one snippet on the embedded default, with the record.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use plimsoll_core::Refusal;
use plimsoll_core::dispatch::{self, Failure, Started};
use plimsoll_core::protocol;
use plimsoll_core::provider::Provider;
use plimsoll_core::validate::{self, Language};
use plimsoll_core::wire::{JavaScriptRun, ProjectFile, ProjectRun, RunRequest, RunResponse};
use plimsoll_runtime::{Engine, EngineConfig, PythonGuest, WasmConfig, WasmProvider};

use crate::{EXIT_MAY_HAVE_RUN, EXIT_REFUSED};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit statuses: the guest's exit code for a result (124 timeout, 134 trap); \
69 refused, nothing ran; 70 failed after the code may have run.\n\
Environment: SANDBOX_MEMORY_MB (memory per run, default 256), PLIMSOLL_CACHE_DIR (precompiled components), \
SANDBOX_WASM_PYTHON (the CPython component for --lang python; default: this checkout's guests/python/python.wasm).")]
pub struct Args {
    /// The provider: `wasm` (QuickJS, and CPython when built, in-process: the process tier).
    #[arg(long, default_value = "wasm", value_parser = ["wasm"])]
    provider: String,
    /// The snippet's language: javascript, or python (run as `python3 main.py`).
    #[arg(long = "lang", default_value = "javascript")]
    language: String,
    /// The weakest tier the run accepts: process, container, kernel or vm. A floor
    /// the provider cannot meet runs nothing.
    #[arg(long = "min-isolation", value_name = "TIER")]
    min_isolation: Option<String>,
    /// The run's budget in milliseconds (default 5000; at most the provider's ceiling).
    #[arg(long = "timeout-ms", value_name = "N")]
    timeout_ms: Option<u64>,
    /// Print the protocol's RunResponse JSON (with its record) instead of lines.
    #[arg(long)]
    json: bool,
    /// Send the run to a daemon at URL instead of running it here; every answer is
    /// checked (request ID, both digests, the record, the tier against the floor).
    /// The token comes from PLIMSOLL_CALLER_TOKEN.
    #[arg(long, value_name = "URL")]
    daemon: Option<String>,
    /// With --daemon: a PEM CA certificate to trust for https.
    #[arg(long = "tls-ca", value_name = "PATH", requires = "daemon")]
    tls_ca: Option<PathBuf>,
    /// The code to run.
    #[arg(short = 'c', value_name = "CODE", conflicts_with = "file")]
    code: Option<String>,
    /// A file holding the code, or `-` for standard input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

/// The code `-c CODE`, a FILE or `-` (standard input) gives, checked as the protocol
/// checks code.
pub(crate) fn read_code(code: &Option<String>, file: &Option<PathBuf>) -> anyhow::Result<Result<String, Refusal>> {
    let bytes = match (code, file) {
        (Some(code), _) => code.clone().into_bytes(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut b = Vec::new();
            std::io::stdin().read_to_end(&mut b).context("reading the code from standard input")?;
            b
        }
        (None, Some(path)) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        (None, None) => anyhow::bail!("give the code with -c CODE, a FILE, or - for standard input"),
    };
    Ok(validate::code_bytes(bytes))
}

/// Reads `SANDBOX_MEMORY_MB`: unset, empty or 0 is the default (256); anything but a
/// whole number from 1 to 4096 is an error naming the variable, never a fallback.
fn parse_memory_mb(value: Option<&str>) -> anyhow::Result<u32> {
    match value {
        None | Some("") | Some("0") => Ok(256),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(n),
            _ => anyhow::bail!("SANDBOX_MEMORY_MB={v:?} is not a whole number of MiB from 1 to 4096"),
        },
    }
}

pub(crate) fn memory_mb() -> anyhow::Result<u32> {
    match std::env::var("SANDBOX_MEMORY_MB") {
        Err(std::env::VarError::NotPresent) => parse_memory_mb(None),
        Err(e) => anyhow::bail!("SANDBOX_MEMORY_MB: {e}"),
        Ok(v) => parse_memory_mb(Some(&v)),
    }
}

pub(crate) fn refused(json: bool, r: &Refusal) -> ExitCode {
    if json {
        let body = serde_json::json!({ "notDispatched": r.reason.as_str(), "message": r.message });
        println!("{body}");
    }
    eprintln!("not dispatched ({}): {}", r.reason, r.message);
    ExitCode::from(EXIT_REFUSED)
}

/// Builds the request the command line describes, refusing bad input before any
/// engine starts.
fn request(
    args: &Args,
    code: String,
    language: Language,
    provider: &WasmProvider,
) -> anyhow::Result<Result<RunRequest, Refusal>> {
    let desc = provider.describe();
    // Python runs as a one-step project (`python3 main.py`); JavaScript as a snippet.
    let kind = match language {
        Language::Python => desc.project.as_ref().filter(|k| k.languages.contains(&Language::Python)),
        _ => desc.snippet.as_ref(),
    };
    let Some(snippet) = kind else {
        return Ok(Err(Refusal::unsupported(format!(
            "the {} provider here runs javascript only: build the CPython component with guests/python/build.sh \
             (or set SANDBOX_WASM_PYTHON) to run python, or use --daemon with a docker provider",
            desc.name
        ))));
    };
    let timeout_ms = match args.timeout_ms.map(|ms| snippet.check_explicit_timeout(ms)) {
        None => 0,
        Some(Ok(d)) => d.as_millis() as i32,
        Some(Err(r)) => return Ok(Err(r)),
    };
    let minimum_isolation = args.min_isolation.clone().unwrap_or_default();
    if args.min_isolation.as_deref() == Some("") {
        return Ok(Err(Refusal::request(
            "invalid request: --min-isolation needs a tier: process, container, kernel or vm",
        )));
    }
    Ok(Ok(payload(
        language,
        code,
        RunRequest { protocol: protocol::NUMBER, minimum_isolation, timeout_ms, ..RunRequest::default() },
    )))
}

/// The script's name when Python runs as a one-step project.
const PYTHON_MAIN: &str = "main.py";

/// `req` carrying `code`: a JavaScript snippet, or a Python project of one step.
pub(crate) fn payload(language: Language, code: String, req: RunRequest) -> RunRequest {
    match language {
        Language::Python => RunRequest {
            project: Some(ProjectRun {
                files: vec![ProjectFile { path: PYTHON_MAIN.into(), content: code }],
                steps: vec![format!("python3 {PYTHON_MAIN}")],
                ..ProjectRun::default()
            }),
            ..req
        },
        _ => RunRequest { javascript: Some(JavaScriptRun { code, grant_profile: String::new() }), ..req },
    }
}

/// What `run` prints of a result: the snippet's, or the last step's of a project.
struct Shown<'a> {
    exit_code: i32,
    timed_out: bool,
    stdout: &'a [u8],
    stderr: &'a [u8],
    stdout_truncated: bool,
    stderr_truncated: bool,
}

fn shown(resp: &RunResponse) -> Option<Shown<'_>> {
    if let Some(js) = resp.javascript.as_ref() {
        return Some(Shown {
            exit_code: js.exit_code,
            timed_out: js.timed_out,
            stdout: &js.stdout,
            stderr: &js.stderr,
            stdout_truncated: js.stdout_truncated,
            stderr_truncated: js.stderr_truncated,
        });
    }
    let step = resp.project.as_ref()?.steps.last()?;
    Some(Shown {
        exit_code: step.exit_code,
        timed_out: step.timed_out,
        stdout: &step.stdout,
        stderr: &step.stderr,
        stdout_truncated: step.stdout_truncated,
        stderr_truncated: step.stderr_truncated,
    })
}

fn print_lines(resp: &RunResponse) -> anyhow::Result<ExitCode> {
    let Some(js) = shown(resp) else {
        anyhow::bail!("the provider answered without a snippet or step result");
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "provider {}", resp.sandbox)?;
    writeln!(out, "isolation {}", resp.isolation)?;
    writeln!(out, "exit code {}", js.exit_code)?;
    writeln!(out, "timed out {}", js.timed_out)?;
    writeln!(out, "truncated stdout={} stderr={}", js.stdout_truncated, js.stderr_truncated)?;
    writeln!(out, "duration {}ms", resp.duration_ms)?;
    for (name, bytes, always) in [("stdout", js.stdout, true), ("stderr", js.stderr, false)] {
        if bytes.is_empty() && !always {
            continue;
        }
        out.write_all(name.as_bytes())?;
        if !bytes.is_empty() {
            out.write_all(b" ")?;
            out.write_all(bytes)?;
        }
        if !bytes.ends_with(b"\n") {
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::from(js.exit_code.clamp(0, 255) as u8))
}

/// Runs `plimsoll-host run`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    // Cheap checks first: bad code, a bad language or floor refuses before any engine starts.
    let checked = read_code(&args.code, &args.file)?.and_then(|code| {
        let language = Language::parse(&args.language)?;
        validate::floor(args.min_isolation.as_deref().unwrap_or(""))?;
        Ok((code, language))
    });
    let (code, language) = match checked {
        Ok(checked) => checked,
        Err(r) => return Ok(refused(args.json, &r)),
    };
    if let Some(url) = args.daemon.clone() {
        return remote(&args, code, language, &url);
    }
    let engine = Engine::new(&EngineConfig::default()).context("starting the wasm engine")?;
    let mut wasm = WasmProvider::new(&engine, WasmConfig { memory_mb: memory_mb()?, ..WasmConfig::default() })
        .context("loading the QuickJS component")?;
    if language == Language::Python {
        let configured = std::env::var_os("SANDBOX_WASM_PYTHON").filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(path) =
            plimsoll_runtime::python::component_path(configured.as_deref()).map_err(anyhow::Error::msg)?
        {
            let guest = PythonGuest::from_file(&engine, &path).context("loading the CPython component")?;
            wasm = wasm.with_python(guest);
        }
    }
    let req = match request(&args, code, language, &wasm)? {
        Ok(r) => r,
        Err(r) => return Ok(refused(args.json, &r)),
    };
    show(args.json, send_embedded(&wasm, req))
}

/// Prints how a run ended, as lines or as the response's JSON.
pub(crate) fn show(json: bool, sent: Sent) -> anyhow::Result<ExitCode> {
    match sent {
        Sent::Answered(resp) if json => {
            println!("{}", serde_json::to_string(&resp)?);
            Ok(ExitCode::from(shown(&resp).map(|j| j.exit_code.clamp(0, 255) as u8).unwrap_or(0)))
        }
        Sent::Answered(resp) => print_lines(&resp),
        Sent::Refused(r) => Ok(refused(json, &r)),
        Sent::MayHaveRun(detail) => {
            eprintln!("failed, may have run: {detail}");
            Ok(ExitCode::from(EXIT_MAY_HAVE_RUN))
        }
    }
}

/// How a request sent to a provider ended.
pub(crate) enum Sent {
    /// Checked and answered.
    Answered(Box<RunResponse>),
    /// Refused; nothing ran.
    Refused(Refusal),
    /// Failed after the code may have run (the detail is for the operator).
    MayHaveRun(String),
}

/// Runs `req` on the embedded provider through the same validation, floor check,
/// dispatch and record as the daemon.
pub(crate) fn send_embedded(wasm: &WasmProvider, req: RunRequest) -> Sent {
    let started = Started::now();
    let prepared = match dispatch::prepare(&wasm.describe(), wasm.tier(), req) {
        Ok(p) => p,
        Err(r) => return Sent::Refused(r),
    };
    match dispatch::execute(wasm, prepared, None, &started) {
        Ok(resp) => Sent::Answered(Box::new(resp)),
        Err(Failure::Refused(r)) => Sent::Refused(r),
        Err(Failure::MayHaveRun(detail)) => Sent::MayHaveRun(detail),
    }
}

/// Sends `req` to the daemon at `url` through the checking client (the token from
/// `PLIMSOLL_CALLER_TOKEN`).
///
/// # Errors
///
/// The client could not be built (a bad URL or CA file).
pub(crate) fn send_remote(url: &str, tls_ca: Option<PathBuf>, req: RunRequest) -> anyhow::Result<Sent> {
    use plimsoll_client::{Client, Settings};
    let token = std::env::var("PLIMSOLL_CALLER_TOKEN").ok().filter(|t| !t.is_empty());
    let settings = Settings { ca_file: tls_ca, ..Settings::default() };
    let client = Client::with_settings(url, token, settings).map_err(|e| anyhow::anyhow!(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(Sent::from_client(rt.block_on(client.run(req))))
}

impl Sent {
    /// How the checking client's call ended.
    pub(crate) fn from_client(result: Result<RunResponse, plimsoll_client::Error>) -> Sent {
        match result {
            Ok(resp) => Sent::Answered(Box::new(resp)),
            Err(e) => match e.not_dispatched() {
                Some(reason) => {
                    let message = match &e {
                        plimsoll_client::Error::NotDispatched { message, .. } => message.clone(),
                        other => other.to_string(),
                    };
                    Sent::Refused(Refusal::new(reason, message))
                }
                None => Sent::MayHaveRun(e.to_string()),
            },
        }
    }
}

/// The request's `timeout_ms` for `--timeout-ms` when a daemon will apply its own
/// ceiling: unset is 0 (the daemon's default); 0 itself allows nothing to run.
pub(crate) fn sent_timeout_ms(ms: Option<u64>) -> Result<i32, Refusal> {
    match ms {
        None => Ok(0),
        Some(0) => Err(Refusal::request("invalid request: a timeout of 0 ms allows nothing to run; use 1 or more")),
        Some(ms) => Ok(i32::try_from(ms).unwrap_or(i32::MAX)),
    }
}

/// `run --daemon URL`: the same run through the checked client.
fn remote(args: &Args, code: String, language: Language, url: &str) -> anyhow::Result<ExitCode> {
    let timeout_ms = match sent_timeout_ms(args.timeout_ms) {
        Ok(ms) => ms,
        Err(r) => return Ok(refused(args.json, &r)),
    };
    let req = payload(
        language,
        code,
        RunRequest {
            protocol: protocol::NUMBER,
            minimum_isolation: args.min_isolation.clone().unwrap_or_default(),
            timeout_ms,
            ..RunRequest::default()
        },
    );
    show(args.json, send_remote(url, args.tls_ca.clone(), req)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_sent_to_a_daemon_is_unset_positive_or_refused() {
        assert_eq!(sent_timeout_ms(None), Ok(0));
        assert_eq!(sent_timeout_ms(Some(1500)), Ok(1500));
        assert_eq!(sent_timeout_ms(Some(u64::MAX)), Ok(i32::MAX));
        let r = sent_timeout_ms(Some(0)).expect_err("0 ms");
        assert_eq!(r.message, "invalid request: a timeout of 0 ms allows nothing to run; use 1 or more");
    }

    #[test]
    fn memory_setting_is_strict() {
        assert_eq!(parse_memory_mb(None).expect("default"), 256);
        assert_eq!(parse_memory_mb(Some("0")).expect("default"), 256);
        assert_eq!(parse_memory_mb(Some("64")).expect("64"), 64);
        for bad in ["0x10", "5000", "-1", "1.5", "64MB"] {
            let e = parse_memory_mb(Some(bad)).expect_err(bad).to_string();
            assert!(e.starts_with("SANDBOX_MEMORY_MB="), "{e}");
        }
    }
}
