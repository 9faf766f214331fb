//! A sandbox's endpoint, through the host's `endpoint` endpoint (one host per
//! sandbox; the host attaches that sandbox's scoped credential): commands, each
//! wrapped with a kill timeout and per-stream caps (the remote crate's
//! [`wrapper`]), and files in and out.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::api::vendor_error;
use crate::plimsoll::host::http::{self, Request};
pub use plimsoll_plugin_remote::Ran;
use plimsoll_plugin_remote::{percent, random_hex, wrapper};

/// How long a file transfer may take.
const FILE_TIMEOUT_MS: u32 = 60_000;

/// Why an endpoint call was turned away at the door: its credential expired (the
/// command never ran).
pub fn credential_expired(status: u16, body: &[u8]) -> bool {
    status == 401 && String::from_utf8_lossy(body).contains("endpoint_credential_expired")
}

/// An endpoint call's failure: refused at the door (`Door`, nothing ran) or not.
#[derive(Debug)]
pub enum Failed {
    /// The credential expired before the call was let in.
    Door(String),
    /// Anything else: the command may have run.
    Other(String),
}

/// Runs `script` with `sh -c` in `cwd` until it ends or `deadline` passes (then
/// `timeout` kills it and the result says timed out). Each output stream keeps
/// `max_output` bytes.
pub fn run(uid: &str, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<Ran, Failed> {
    let started = Instant::now();
    let left = deadline.saturating_duration_since(started);
    let wrapped = wrapper::wrap(script, cwd, deadline, max_output);
    let body = json!({"cmd": wrapped.argv, "workingDir": "/"});
    let r = http::send(&Request {
        endpoint: "endpoint".into(),
        target: Some(uid.into()),
        method: "POST".into(),
        path: "/v1/processes/exec".into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
        // The host's own limit, a little past the command's.
        timeout_ms: u32::try_from((left + Duration::from_secs(10)).as_millis()).unwrap_or(u32::MAX),
    })
    .map_err(Failed::Other)?;
    if credential_expired(r.status, &r.body) && started.elapsed() < Duration::from_secs(5) {
        return Err(Failed::Door(vendor_error("the exec", r.status, &r.body)));
    }
    if r.status != 200 {
        return Err(Failed::Other(vendor_error("the exec", r.status, &r.body)));
    }
    let v: Value =
        serde_json::from_slice(&r.body).map_err(|_| Failed::Other("Docker's exec answer is not JSON".into()))?;
    let decode = |name: &str| {
        let text = v.get(name).and_then(Value::as_str).unwrap_or_default();
        STANDARD.decode(text).map_err(|_| Failed::Other(format!("Docker's exec {name} is not base64")))
    };
    let (stdout, stderr) = (decode("stdout")?, decode("stderr")?);
    let exit_code = v.get("exitCode").and_then(Value::as_i64).map_or(0, |c| c as i32);
    let incomplete = v.get("incomplete").and_then(Value::as_bool) == Some(true);
    Ok(wrapped.result(exit_code, stdout, stderr, incomplete))
}

/// Writes `bytes` to `path` (parents made, an existing file replaced).
pub fn upload(uid: &str, path: &str, bytes: &[u8]) -> Result<(), Failed> {
    let boundary = format!("plimsoll{}", random_hex(16));
    let mut body = Vec::with_capacity(bytes.len() + 512);
    let header = json!({"path": path, "mode": 420}).to_string();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"\r\nContent-Type: application/json\r\n\r\n{header}\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"content\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = http::send(&Request {
        endpoint: "endpoint".into(),
        target: Some(uid.into()),
        method: "POST".into(),
        path: "/v1/files/upload".into(),
        headers: vec![("content-type".into(), format!("multipart/form-data; boundary={boundary}"))],
        body,
        timeout_ms: FILE_TIMEOUT_MS,
    })
    .map_err(Failed::Other)?;
    if credential_expired(r.status, &r.body) {
        return Err(Failed::Door(vendor_error(&format!("the upload of {path}"), r.status, &r.body)));
    }
    if r.status != 200 {
        return Err(Failed::Other(vendor_error(&format!("the upload of {path}"), r.status, &r.body)));
    }
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    if v.get("filesWritten").and_then(Value::as_u64) != Some(1) {
        return Err(Failed::Other(format!("Docker's upload of {path} did not say it wrote the file")));
    }
    Ok(())
}

/// Reads the file at `path`: None when Docker reports it absent, a link out of
/// its jail, or no regular file.
pub fn download(uid: &str, path: &str) -> Result<Option<Vec<u8>>, String> {
    let r = http::send(&Request {
        endpoint: "endpoint".into(),
        target: Some(uid.into()),
        method: "GET".into(),
        path: format!("/v1/files/download?paths={}", percent(path, b"/")),
        headers: vec![],
        body: vec![],
        timeout_ms: FILE_TIMEOUT_MS,
    })?;
    if r.status != 200 {
        return Err(vendor_error(&format!("the download of {path}"), r.status, &r.body));
    }
    let content_type = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.as_str());
    let boundary = content_type
        .filter(|t| t.to_ascii_lowercase().starts_with("multipart/mixed"))
        .and_then(|t| t.split(';').find_map(|p| p.trim().strip_prefix("boundary=")))
        .map(|b| b.trim_matches('"').to_string())
        .ok_or_else(|| format!("Docker's download of {path} is not multipart/mixed"))?;
    let parts = mixed(&r.body, &boundary).ok_or_else(|| format!("Docker's download of {path} broke off"))?;
    let mut content = None;
    for (name, bytes) in parts {
        match name.as_str() {
            "metadata" => {}
            "content" => content = Some(bytes),
            "error" => return Ok(None),
            "stream-error" => {
                return Err(format!(
                    "Docker's download of {path} failed: {}",
                    String::from_utf8_lossy(&bytes).chars().take(512).collect::<String>()
                ));
            }
            other => return Err(format!("Docker's download of {path} has a part plimsoll does not know ({other:?})")),
        }
    }
    Ok(content)
}

/// The parts of a `multipart/mixed` body as (name, bytes); None without its
/// closing delimiter (the answer was cut).
fn mixed(body: &[u8], boundary: &str) -> Option<Vec<(String, Vec<u8>)>> {
    let delimiter = format!("--{boundary}");
    let d = delimiter.as_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i + d.len() <= body.len() {
        if &body[i..i + d.len()] == d && (i == 0 || body[..i].ends_with(b"\n")) {
            starts.push(i);
            i += d.len();
        } else {
            i += 1;
        }
    }
    let last = *starts.last()?;
    if !body[last + d.len()..].starts_with(b"--") {
        return None;
    }
    let mut parts = Vec::new();
    for w in starts.windows(2) {
        let chunk = &body[w[0] + d.len()..w[1]];
        let chunk = chunk.strip_prefix(b"\r\n").unwrap_or(chunk);
        let chunk = chunk.strip_suffix(b"\r\n").unwrap_or(chunk);
        let split = chunk.windows(4).position(|x| x == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&chunk[..split]).into_owned();
        let name = head
            .split("\r\n")
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .and_then(|l| l.split(';').find_map(|p| p.trim().strip_prefix("name=")))
            .map(|n| n.trim_matches('"').to_string())
            .unwrap_or_default();
        parts.push((name, chunk[split + 4..].to_vec()));
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mixed_body_needs_its_closing_delimiter() {
        let body = b"--b\r\nContent-Disposition: attachment; name=metadata\r\nContent-Type: application/json\r\n\r\n{}\r\n--b\r\nContent-Disposition: attachment; name=content\r\n\r\nhi\r\n--b--\r\n";
        let parts = mixed(body, "b").expect("whole");
        assert_eq!(parts, vec![("metadata".to_string(), b"{}".to_vec()), ("content".to_string(), b"hi".to_vec())]);
        assert_eq!(mixed(&body[..body.len() - 8], "b"), None);
    }

    #[test]
    fn only_an_expired_credential_is_a_door_refusal() {
        let expired = br#"{"code":"unauthenticated","message":"endpoint_credential_expired"}"#;
        assert!(credential_expired(401, expired));
        assert!(!credential_expired(401, br#"{"code":"unauthenticated","message":"invalid endpoint credential"}"#));
        assert!(!credential_expired(500, expired));
    }
}
