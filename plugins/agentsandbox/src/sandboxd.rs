//! sandboxd in a claimed pod, through the host's `pods` endpoint: the API
//! server's pod proxy, to which the host attaches the bearer and sandboxd's
//! token (the pod knows only its SHA-256). Commands run as the guest, each
//! wrapped with a kill timeout and per-stream caps (the remote crate's
//! [`wrapper`]); files go in and out as commands with their bytes on stdin
//! and stdout.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::plimsoll::host::http::{self, Request};
pub use plimsoll_plugin_remote::Ran;
use plimsoll_plugin_remote::wrapper;

/// How long a file transfer may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an exec answered 429 is sent in all.
const THROTTLED_TRIES: u32 = 5;
/// What sandboxd keeps of each stream: a download's whole file fits.
const SANDBOXD_CAP: usize = 16 << 20;

/// One pod's sandboxd.
pub struct Pod<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub port: u16,
}

/// What sandboxd answered an exec.
pub struct Exec {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// sandboxd dropped output past its own cap.
    pub truncated: bool,
    /// sandboxd killed it at its timeout.
    pub timed_out: bool,
}

impl Pod<'_> {
    /// Runs `argv` as the guest in `/`, with `stdin`, killed by sandboxd at
    /// `timeout` should the guest's own timeout not end it first.
    pub fn exec(&self, argv: &[String], stdin: Option<&[u8]>, timeout: Duration) -> Result<Exec, String> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).clamp(1, 86_400_000);
        let mut body = json!({"argv": argv, "cwd": "/", "timeoutMs": timeout_ms});
        if let Some(bytes) = stdin {
            body["stdin"] = Value::from(STANDARD.encode(bytes));
        }
        let request = Request {
            endpoint: "pods".into(),
            target: None,
            method: "POST".into(),
            path: format!("/api/v1/namespaces/{}/pods/{}:{}/proxy/v1/exec", self.namespace, self.name, self.port),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            // The host's own limit, a little past sandboxd's.
            timeout_ms: timeout_ms.saturating_add(15_000),
        };
        // A 429 (the API server's throttle, or sandboxd's own "busy") ran
        // nothing, so it is sent again; a 5xx may have come after the command
        // ran, so it is not.
        let mut r = http::send(&request)?;
        for _ in 1..THROTTLED_TRIES {
            if r.status != 429 {
                break;
            }
            std::thread::sleep(crate::kube::retry_after(&r.headers).unwrap_or(Duration::from_millis(500)));
            r = http::send(&request)?;
        }
        if r.status != 200 {
            return Err(crate::kube::refusal("sandboxd's exec", r.status, &r.body));
        }
        let v: Value = serde_json::from_slice(&r.body).map_err(|_| "sandboxd's exec answer is not JSON".to_string())?;
        let decode = |name: &str| {
            let text = v.get(name).and_then(Value::as_str).unwrap_or_default();
            STANDARD.decode(text).map_err(|_| format!("sandboxd's exec {name} is not base64"))
        };
        let flag = |name: &str| v.get(name).and_then(Value::as_bool) == Some(true);
        let exit_code = match (v.get("exitCode").and_then(Value::as_i64), v.get("signal").and_then(Value::as_i64)) {
            (Some(code), _) => code as i32,
            (None, Some(signal)) => 128 + signal as i32,
            (None, None) => return Err("sandboxd's exec answer has neither an exit code nor a signal".into()),
        };
        Ok(Exec {
            exit_code,
            stdout: decode("stdout")?,
            stderr: decode("stderr")?,
            truncated: flag("stdoutTruncated") || flag("stderrTruncated"),
            timed_out: flag("timedOut"),
        })
    }

    /// Runs `script` with `sh -c` in `cwd` until it ends or `deadline` passes
    /// (then the guest's `timeout` kills it and the result says timed out). Each
    /// output stream keeps `max_output` bytes.
    pub fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<Ran, String> {
        let wrapped = wrapper::wrap(script, cwd, deadline, max_output);
        let left = deadline.saturating_duration_since(Instant::now());
        let e = self.exec(&wrapped.argv, None, left + Duration::from_secs(5))?;
        Ok(wrapped.result(e.exit_code, e.stdout, e.stderr, e.truncated))
    }

    /// Writes `bytes` to `path` as the guest, making its directories.
    pub fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let argv = ["sh", "-c", r#"mkdir -p "$(dirname "$1")" && cat > "$1""#, "sh", path].map(String::from);
        let e = self.exec(&argv, Some(bytes), FILE_TIMEOUT)?;
        if e.exit_code != 0 {
            return Err(format!(
                "writing {path} exited {}: {}",
                e.exit_code,
                String::from_utf8_lossy(&e.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Reads the file at `path` as the guest; None when there is no file to read.
    pub fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let argv =
            ["sh", "-c", r#"[ -f "$1" ] && [ -r "$1" ] || exit 3; exec cat -- "$1""#, "sh", path].map(String::from);
        let e = self.exec(&argv, None, FILE_TIMEOUT)?;
        match e.exit_code {
            0 if e.truncated || e.stdout.len() > SANDBOXD_CAP => {
                Err(format!("{path} is larger than sandboxd passes back"))
            }
            0 => Ok(Some(e.stdout)),
            3 => Ok(None),
            c => Err(format!("reading {path} exited {c}: {}", String::from_utf8_lossy(&e.stderr).trim())),
        }
    }
}
