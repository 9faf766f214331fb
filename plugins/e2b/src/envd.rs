//! A sandbox's envd, through the host's `envd` endpoint (one host per sandbox;
//! the host attaches that sandbox's access token): files in and out, a process
//! run over envd's streamed `Start` call, and a serving process (a session's
//! agent) started with its input open, spoken to with `SendInput` and heard on a
//! `Connect` stream attached to it.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::api::vendor_error;
use crate::connect::{self, Frame, Frames};
use crate::plimsoll::host::http::{self, Request};
pub use plimsoll_plugin_remote::Ran;
use plimsoll_plugin_remote::{Output, percent, random_hex};

/// How long a file transfer may take.
const FILE_TIMEOUT_MS: u32 = 60_000;
/// Exit code of a process its deadline ended.
pub const EXIT_TIMEOUT: i32 = 124;

/// Writes `bytes` to `path` (parents made, an existing file replaced).
pub fn upload(id: &str, path: &str, bytes: &[u8]) -> Result<(), String> {
    let boundary = format!("plimsoll{}", random_hex(16));
    let mut body = Vec::with_capacity(bytes.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: application/octet-stream\r\n\r\n",
            path.replace(['"', '\r', '\n'], "_")
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = http::send(&Request {
        endpoint: "envd".into(),
        target: Some(id.into()),
        method: "POST".into(),
        path: format!("/files?path={}", percent(path, b"/")),
        headers: vec![("content-type".into(), format!("multipart/form-data; boundary={boundary}"))],
        body,
        timeout_ms: FILE_TIMEOUT_MS,
    })?;
    if r.status != 200 {
        return Err(vendor_error(&format!("the upload of {path}"), r.status, &r.body));
    }
    Ok(())
}

/// Reads the file at `path`; `None` when it does not exist.
pub fn download(id: &str, path: &str) -> Result<Option<Vec<u8>>, String> {
    let r = http::send(&Request {
        endpoint: "envd".into(),
        target: Some(id.into()),
        method: "GET".into(),
        path: format!("/files?path={}", percent(path, b"/")),
        headers: vec![],
        body: vec![],
        timeout_ms: FILE_TIMEOUT_MS,
    })?;
    match r.status {
        200 => Ok(Some(r.body)),
        404 => Ok(None),
        // A directory, or a path the guest made unreadable: not an artifact.
        400 => Ok(None),
        s => Err(vendor_error(&format!("the download of {path}"), s, &r.body)),
    }
}

/// One stream's bytes, kept up to `cap`.
struct Kept {
    bytes: Vec<u8>,
    truncated: bool,
    cap: usize,
}

impl Kept {
    fn new(cap: usize) -> Kept {
        Kept { bytes: Vec::new(), truncated: false, cap }
    }

    fn add(&mut self, more: &[u8]) {
        let room = self.cap.saturating_sub(self.bytes.len());
        if more.len() > room {
            self.truncated = true;
        }
        self.bytes.extend_from_slice(&more[..more.len().min(room)]);
    }

    fn output(self) -> Output {
        Output { bytes: self.bytes, truncated: self.truncated }
    }
}

/// How a process ended, from envd's `end` event.
fn exit_code(end: &Value) -> i32 {
    if end.get("exited").and_then(Value::as_bool) == Some(true) {
        return end.get("exitCode").and_then(Value::as_i64).map_or(0, |c| c as i32);
    }
    match end.get("status").and_then(Value::as_str).unwrap_or_default() {
        "signal: killed" => 137,
        "signal: terminated" => 143,
        _ => -1,
    }
}

fn elapsed(started: Instant) -> u32 {
    u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX)
}

/// What a process its deadline ended printed.
fn timed_out(out: Kept, err: Kept, started: Instant) -> Ran {
    Ran {
        exit_code: EXIT_TIMEOUT,
        timed_out: true,
        stdout: out.output(),
        stderr: err.output(),
        duration_ms: elapsed(started),
    }
}

/// Runs `script` with `sh -c` in `cwd` with `env` added, until it ends or
/// `deadline` passes (then the stream is dropped, which cancels the call, and the
/// result says timed out). Each output stream keeps `max_output` bytes.
///
/// # Errors
///
/// The call was refused or broke off: whether the process ran is unknown.
pub fn run(
    id: &str,
    script: &str,
    (cwd, env): (&str, &[(String, String)]),
    deadline: Instant,
    max_output: usize,
) -> Result<Ran, String> {
    let started = Instant::now();
    let left = deadline.saturating_duration_since(started);
    let envs: serde_json::Map<String, serde_json::Value> =
        env.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    let request = json!({
        "process": {"cmd": "/bin/sh", "args": ["-c", script], "cwd": cwd, "envs": envs},
        "stdin": false,
    });
    // envd kills the process at its own deadline too, a little after ours.
    let envd_deadline = left + Duration::from_secs(2);
    let timeout = vec![("connect-timeout-ms".into(), envd_deadline.as_millis().to_string())];
    let mut events = Events::open(id, "Start", &request, timeout, envd_deadline + Duration::from_secs(5))?;
    started_pid(&mut events, deadline)?;
    let (mut out, mut err) = (Kept::new(max_output), Kept::new(max_output));
    let mut ended: Option<i32> = None;
    while let Some(event) = events.next(deadline)? {
        if let Some(data) = event.get("data") {
            data_into(data, &mut out, &mut err)?;
        } else if let Some(end) = event.get("end") {
            ended = Some(exit_code(end));
        } else if event.get("start").is_some() {
            return Err("envd sent a second start event".into());
        } else {
            return Err(format!("an envd process event plimsoll does not know: {event}"));
        }
    }
    let Some(end_error) = events.ended.take() else {
        // The deadline passed first: dropping the stream resets it.
        return Ok(timed_out(out, err, started));
    };
    if let Some(e) = end_error {
        if e.starts_with("deadline_exceeded") && ended.is_none() {
            return Ok(timed_out(out, err, started));
        }
        if ended.is_none() {
            return Err(format!("envd ended the process call: {e}"));
        }
    }
    let exit_code = ended.ok_or("envd's process stream ended without the process's end")?;
    Ok(Ran { exit_code, timed_out: false, stdout: out.output(), stderr: err.output(), duration_ms: elapsed(started) })
}

/// A data event's bytes, into the stream each belongs to.
fn data_into(data: &Value, out: &mut Kept, err: &mut Kept) -> Result<(), String> {
    for (name, kept) in [("stdout", out), ("stderr", err)] {
        if let Some(b64) = data.get(name).and_then(Value::as_str) {
            kept.add(&STANDARD.decode(b64).map_err(|_| format!("envd's {name} data is not base64"))?);
        }
    }
    Ok(())
}

/// Events of an envd process stream (`Start` or `Connect`), as they arrive.
struct Events {
    stream: http::Incoming,
    frames: Frames,
    pending: std::collections::VecDeque<Value>,
    /// The stream's end-of-stream error, once it has ended.
    ended: Option<Option<String>>,
}

impl Events {
    /// Opens `call` (`Start`, `Connect`) with `message`, for at most `timeout`.
    fn open(
        id: &str,
        call: &str,
        message: &Value,
        extra: Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<Events, String> {
        let mut headers = vec![
            ("content-type".into(), "application/connect+json".into()),
            ("connect-protocol-version".into(), "1".into()),
            ("keepalive-ping-interval".into(), "30".into()),
        ];
        headers.extend(extra);
        let stream = http::open(&Request {
            endpoint: "envd".into(),
            target: Some(id.into()),
            method: "POST".into(),
            path: format!("/process.Process/{call}"),
            headers,
            body: connect::envelope(message.to_string().as_bytes()),
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
        })?;
        if stream.status() != 200 {
            let mut body = Vec::new();
            while let Ok(Some(piece)) = stream.read(1000) {
                if piece.is_empty() || body.len() > 4096 {
                    break;
                }
                body.extend(piece);
            }
            return Err(vendor_error(&format!("the process {call}"), stream.status(), &body));
        }
        Ok(Events { stream, frames: Frames::default(), pending: Default::default(), ended: None })
    }

    /// The next event (keepalives skipped), waiting until `deadline`: `Ok(None)`
    /// once the stream has ended (its error in `ended`) or the time is up.
    fn next(&mut self, deadline: Instant) -> Result<Option<Value>, String> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                if e.get("keepalive").is_some() {
                    continue;
                }
                return Ok(Some(e));
            }
            if self.ended.is_some() {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let wait = u32::try_from(left.as_millis().min(1000)).unwrap_or(1000).max(1);
            let Some(piece) = self.stream.read(wait)? else {
                return Err(if self.frames.pending() {
                    "envd's process stream broke off mid-message".into()
                } else {
                    "envd's process stream ended without its end-of-stream message".into()
                });
            };
            self.frames.push(&piece);
            while let Some(frame) = self.frames.next()? {
                match frame {
                    Frame::Message(m) => {
                        let v: Value =
                            serde_json::from_slice(&m).map_err(|_| "an envd process event is not JSON".to_string())?;
                        let event = v.get("event").cloned().ok_or("an envd process message has no event")?;
                        self.pending.push_back(event);
                    }
                    Frame::End(end) => {
                        // The body ends right after its end-of-stream message: read to
                        // its end, so the call ends whole rather than cancelled.
                        for _ in 0..5 {
                            match self.stream.read(200) {
                                Ok(Some(p)) if p.is_empty() => continue,
                                _ => break,
                            }
                        }
                        self.ended = Some(connect::end_error(&end)?);
                    }
                }
            }
        }
    }
}

/// The pid a stream's first event, its start event, names.
fn started_pid(events: &mut Events, deadline: Instant) -> Result<u32, String> {
    let first = events.next(deadline)?.ok_or("envd's process stream gave no start event in time")?;
    first
        .get("start")
        .and_then(|s| s.get("pid"))
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| "envd's process stream did not begin with its start event".to_string())
}

/// Starts `argv` with its input open, detached from this call (envd keeps it
/// until it ends: no `Connect-Timeout-Ms`), and waits until its stdout ends with
/// `ready`; returns its pid. A process that ends first is named with its stderr.
pub fn start_serving(
    id: &str,
    argv: &[&str],
    (cwd, env): (&str, &[(String, String)]),
    ready: &str,
    within: Duration,
) -> Result<u32, String> {
    let deadline = Instant::now() + within;
    let (cmd, args) = argv.split_first().ok_or("no command")?;
    let envs: serde_json::Map<String, serde_json::Value> =
        env.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    let message = json!({"process": {"cmd": cmd, "args": args, "cwd": cwd, "envs": envs}, "stdin": true});
    let mut events = Events::open(id, "Start", &message, Vec::new(), within + Duration::from_secs(5))?;
    let pid = started_pid(&mut events, deadline)?;
    let (mut out, mut err) = (Kept::new(4096), Kept::new(4096));
    while let Some(e) = events.next(deadline)? {
        if let Some(data) = e.get("data") {
            data_into(data, &mut out, &mut err)?;
            if out.bytes.ends_with(ready.as_bytes()) {
                // Dropping the stream leaves the process running, as envd does.
                return Ok(pid);
            }
        } else if let Some(end) = e.get("end") {
            return Err(format!(
                "it ended (exit {}) before it was ready: {}",
                exit_code(end),
                String::from_utf8_lossy(&err.bytes).trim()
            ));
        }
    }
    Err(format!("it did not say it was ready within {} s", within.as_secs()))
}

/// Writes `bytes` to process `pid`'s input.
pub fn send_input(id: &str, pid: u32, bytes: &[u8]) -> Result<(), String> {
    let body = json!({"process": {"pid": pid}, "input": {"stdin": STANDARD.encode(bytes)}});
    let r = http::send(&Request {
        endpoint: "envd".into(),
        target: Some(id.into()),
        method: "POST".into(),
        path: "/process.Process/SendInput".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("connect-protocol-version".into(), "1".into()),
        ],
        body: body.to_string().into_bytes(),
        timeout_ms: FILE_TIMEOUT_MS,
    })?;
    if r.status != 200 {
        return Err(vendor_error("the process input", r.status, &r.body));
    }
    Ok(())
}

/// How one exchange with a serving process ended.
pub enum Said {
    /// Both streams ended with the end marker (taken off).
    Whole,
    TimedOut,
    /// The process ended first.
    Ended,
}

/// Attaches to process `pid`, writes `request` to its input, and gathers its
/// stdout and stderr until both end with `end`, for at most `timeout`, keeping
/// at most `cap` bytes of each (more is an error: the exchange is not whole).
pub fn converse(
    id: &str,
    pid: u32,
    request: &[u8],
    end: &[u8],
    timeout: Duration,
    cap: usize,
) -> Result<(Said, Vec<u8>, Vec<u8>), String> {
    let deadline = Instant::now() + timeout;
    let message = json!({"process": {"pid": pid}});
    let mut events = Events::open(id, "Connect", &message, Vec::new(), timeout + Duration::from_secs(5))?;
    // Attached before the request goes in: none of the answer is missed.
    let attached = started_pid(&mut events, deadline)?;
    if attached != pid {
        return Err(format!("envd attached to process {attached}, not {pid}"));
    }
    send_input(id, pid, request)?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        let Some(e) = events.next(deadline)? else {
            return Ok((if events.ended.is_some() { Said::Ended } else { Said::TimedOut }, out, err));
        };
        if let Some(data) = e.get("data") {
            for (name, kept) in [("stdout", &mut out), ("stderr", &mut err)] {
                if let Some(b64) = data.get(name).and_then(Value::as_str) {
                    kept.extend(STANDARD.decode(b64).map_err(|_| format!("envd's {name} data is not base64"))?);
                    if kept.len() > cap.saturating_add(end.len()) {
                        return Err(format!("the answer's {name} is over {cap} bytes"));
                    }
                }
            }
            if out.ends_with(end) && err.ends_with(end) {
                out.truncate(out.len() - end.len());
                err.truncate(err.len() - end.len());
                return Ok((Said::Whole, out, err));
            }
        } else if e.get("end").is_some() {
            return Ok((Said::Ended, out, err));
        } else if e.get("start").is_some() {
            return Err("envd sent a second start event".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_events_give_the_exit_code() {
        assert_eq!(exit_code(&json!({"exited": true, "status": "exit status 0"})), 0);
        assert_eq!(exit_code(&json!({"exitCode": 3, "exited": true})), 3);
        assert_eq!(exit_code(&json!({"exitCode": -1, "status": "signal: killed"})), 137);
        assert_eq!(exit_code(&json!({"status": "signal: hangup"})), -1);
    }

    #[test]
    fn output_is_kept_to_its_cap_and_flagged() {
        let mut k = Kept::new(4);
        k.add(b"abc");
        k.add(b"def");
        let o = k.output();
        assert_eq!((o.bytes, o.truncated), (b"abcd".to_vec(), true));
    }
}
