//! The guard's settings: the public URL a remote backend's sandboxes reach it at
//! (the only host their network rules allow a granted run), and the address the
//! daemon serves it on, behind the operator's TLS terminator for that URL.

use std::net::SocketAddr;

use super::ConfigError;

/// The path the guard answers at when the URL names none.
pub const DEFAULT_PATH: &str = "/v1/guard";

/// Where the guard is served and reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// The address the daemon listens on for it (`PLIMSOLL_GUARD_ADDR`).
    pub addr: SocketAddr,
    /// Its URL as sandboxes reach it.
    pub url: String,
    /// That URL's host name, the one name a granted sandbox's rules allow.
    pub host: String,
    /// The path it answers at.
    pub path: String,
}

/// Reads the guard's settings: both or neither of `url_var` and `PLIMSOLL_GUARD_ADDR`.
pub(super) fn guard(
    url_var: &str,
    url: Option<String>,
    addr: Option<String>,
) -> Result<Option<GuardConfig>, ConfigError> {
    let url = url.filter(|u| !u.is_empty());
    let addr = addr.filter(|a| !a.is_empty());
    let (url, addr) = match (url, addr) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(ConfigError::Value(format!(
                "{url_var} is set but PLIMSOLL_GUARD_ADDR is not: the daemon serves the guard on that address, behind the TLS terminator the URL names"
            )));
        }
        (None, Some(_)) => {
            return Err(ConfigError::Value(format!(
                "PLIMSOLL_GUARD_ADDR is set but {url_var} is not: name the https URL sandboxes reach the guard at"
            )));
        }
        (Some(u), Some(a)) => (u, a),
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| ConfigError::Value(format!("PLIMSOLL_GUARD_ADDR={addr:?} must be an IP address and port")))?;
    let (host, path) = parse(&url).map_err(|why| ConfigError::Value(format!("{url_var}={url:?} {why}")))?;
    let url = format!("https://{host}{path}");
    Ok(Some(GuardConfig { addr, url, host, path }))
}

/// The host name and path of a guard URL: `https`, no user, query or fragment,
/// port 443 if any, a host name (not an address, not loopback), a canonical path.
fn parse(url: &str) -> Result<(String, String), &'static str> {
    let rest = url.strip_prefix("https://").ok_or("must be an https URL")?;
    if rest.contains(['?', '#']) {
        return Err("must carry no query or fragment");
    }
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if authority.contains('@') {
        return Err("must carry no user name or password");
    }
    let host = match authority.rsplit_once(':') {
        Some((h, "443")) => h,
        Some((_, _)) => return Err("must use port 443 (a sandbox's rules allow HTTPS's port only)"),
        None => authority,
    };
    let host = host.to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() || !host.split('.').all(label_ok) {
        return Err("must name a host");
    }
    if host.parse::<std::net::IpAddr>().is_ok() || host.split('.').all(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return Err("must name its host by name, not by address (a sandbox's rules allow names)");
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Err("must not be loopback: sandboxes reach it from elsewhere");
    }
    let path = if path.is_empty() || path == "/" { DEFAULT_PATH.to_string() } else { path.to_string() };
    let canonical = path.len() > 1
        && !path.ends_with('/')
        && path[1..].split('/').all(|s| !s.is_empty() && s != "." && s != "..")
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b));
    if !canonical {
        return Err("must have a canonical path (segments of letters, digits, - . _ ~; no empty, . or .. segment)");
    }
    Ok((host, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(url: &str, addr: &str) -> Result<Option<GuardConfig>, String> {
        guard("E2B_GUARD_URL", Some(url.into()), Some(addr.into())).map_err(|e| e.to_string())
    }

    #[test]
    fn a_guard_url_names_an_https_host_on_443_with_a_canonical_path() {
        let g = read("https://Guard.Example.com", "127.0.0.1:9443").expect("ok").expect("some");
        assert_eq!(
            (g.url.as_str(), g.host.as_str(), g.path.as_str(), g.addr.to_string().as_str()),
            ("https://guard.example.com/v1/guard", "guard.example.com", "/v1/guard", "127.0.0.1:9443")
        );
        let g = read("https://guard.example.com:443/v1/e2b/guard", "0.0.0.0:8443").expect("ok").expect("some");
        assert_eq!(g.path, "/v1/e2b/guard");
        assert_eq!(guard("E2B_GUARD_URL", None, None).expect("neither"), None);
    }

    #[test]
    fn every_bad_guard_setting_is_refused_by_name() {
        let cases = [
            ("http://guard.example.com/g", "must be an https URL"),
            ("https://guard.example.com:8443/g", "must use port 443"),
            ("https://1.2.3.4/g", "must name its host by name, not by address"),
            ("https://localhost/g", "must not be loopback"),
            ("https://u:p@guard.example.com/g", "must carry no user name or password"),
            ("https://guard.example.com/g?x=1", "must carry no query or fragment"),
            ("https://guard.example.com/a/../b", "must have a canonical path"),
            ("https://guard.example.com/a//b", "must have a canonical path"),
            ("https://guard.example.com/a%2fb", "must have a canonical path"),
        ];
        for (url, why) in cases {
            let e = read(url, "127.0.0.1:1").expect_err(url);
            assert!(e.contains(why), "{url}: {e}");
        }
        let e = read("https://guard.example.com/g", "nowhere").expect_err("addr");
        assert!(e.contains("PLIMSOLL_GUARD_ADDR=\"nowhere\" must be an IP address and port"), "{e}");
        let e = guard("E2B_GUARD_URL", Some("https://g.example.com".into()), None).expect_err("no addr").to_string();
        assert!(e.starts_with("E2B_GUARD_URL is set but PLIMSOLL_GUARD_ADDR is not"), "{e}");
        let e = guard("E2B_GUARD_URL", None, Some("127.0.0.1:1".into())).expect_err("no url").to_string();
        assert!(e.starts_with("PLIMSOLL_GUARD_ADDR is set but E2B_GUARD_URL is not"), "{e}");
    }
}
