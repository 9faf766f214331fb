//! What the fakes share: time, randomness and multipart bodies.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in unix seconds.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// RFC 3339 of a unix time, UTC.
pub fn rfc3339(t: u64) -> String {
    let (days, secs) = (t / 86_400, t % 86_400);
    let (y, m, d) = plimsoll_core::date::civil(i64::try_from(days).unwrap_or(i64::MAX));
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// `n` random bytes.
pub fn random(n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    let _ = getrandom::fill(&mut b);
    b
}

/// One part of a multipart body.
pub struct Part {
    /// The `name` of its Content-Disposition.
    pub name: String,
    /// Its `filename`, if any.
    pub filename: Option<String>,
    /// Its headers, as sent.
    pub head: String,
    /// Its body.
    pub content: Vec<u8>,
}

/// The parts of a multipart body delimited by `boundary`.
pub fn multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let d = delimiter.as_bytes();
    let mut parts = Vec::new();
    let mut starts = Vec::new();
    let mut i = 0;
    while i + d.len() <= body.len() {
        if &body[i..i + d.len()] == d {
            starts.push(i);
            i += d.len();
        } else {
            i += 1;
        }
    }
    for w in starts.windows(2) {
        let chunk = &body[w[0] + d.len()..w[1]];
        let chunk = chunk.strip_prefix(b"\r\n").unwrap_or(chunk);
        let chunk = chunk.strip_suffix(b"\r\n").unwrap_or(chunk);
        let Some(split) = chunk.windows(4).position(|x| x == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&chunk[..split]).into_owned();
        let content = chunk[split + 4..].to_vec();
        let disposition =
            head.split("\r\n").find(|l| l.to_ascii_lowercase().starts_with("content-disposition:")).unwrap_or_default();
        let field = |key: &str| {
            disposition
                .split(';')
                .filter_map(|p| p.trim().strip_prefix(&format!("{key}=")).map(|v| v.trim_matches('"').to_string()))
                .next()
        };
        parts.push(Part {
            name: field("name").unwrap_or_default(),
            filename: field("filename"),
            head: head.clone(),
            content,
        });
    }
    parts
}

/// The sandbox image for a test that needs docker; `None` (the test skips,
/// saying so) unless required mode is on (`CI=true` or
/// `PLIMSOLL_DOCKER_TESTS=required`), where a missing engine or image fails it.
#[cfg(test)]
pub fn sandbox_image_or_skip(test: &str) -> Option<String> {
    let required = std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("PLIMSOLL_DOCKER_TESTS").is_ok_and(|v| v == "required");
    let engine = std::process::Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    let why = match crate::backing::default_image() {
        _ if !engine => "no docker engine answers",
        None => "no images/out/sandbox.id (run images/build.sh)",
        Some(image) => return Some(image),
    };
    assert!(!required, "{test}: {why}, and docker tests are required here");
    // Written to the stream itself: the test harness captures `eprintln!`, and
    // shows it only for a failing test, so a skip would pass unseen.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr().lock(),
        "\nSKIPPED {test}: {why} (set PLIMSOLL_DOCKER_TESTS=required to fail instead)"
    );
    None
}

/// Removes sandbox `.0`'s backing container when a test ends, passed or failed.
#[cfg(test)]
pub struct Removed(pub String);

#[cfg(test)]
impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rm", "-f", &format!("plimsoll-fake-{}", self.0)]).output();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_506_078), "2026-12-05T21:27:58Z");
    }

    #[test]
    fn a_multipart_body_gives_its_parts() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/x/y.txt\"\r\n\r\nhi\r\nthere\r\n--b\r\nContent-Type: application/json\r\nContent-Disposition: attachment; name=metadata\r\n\r\n{}\r\n--b--\r\n";
        let parts = multipart(body, "b");
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[1].name.as_str(), parts[1].filename.as_deref()), ("metadata", None));
        assert_eq!((parts[0].name.as_str(), parts[0].filename.as_deref()), ("file", Some("/x/y.txt")));
        assert_eq!(parts[0].content, b"hi\r\nthere");
    }
}
