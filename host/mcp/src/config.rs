//! The server's configuration, from its environment (an AI application starts it
//! with the environment its configuration file names).

use std::time::Duration;

use plimsoll_core::Floor;

/// Why the server would not start; each names the variable.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// What the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The daemon's base URL (`PLIMSOLL_URL`).
    pub url: String,
    /// The caller's token (`PLIMSOLL_CALLER_TOKEN`, or the file `PLIMSOLL_TOKEN_FILE` names).
    pub token: Option<String>,
    /// The floor sent on every request and checked on every answer (`PLIMSOLL_MIN_ISOLATION`).
    pub floor: Floor,
    /// Sandboxes open at once (`PLIMSOLL_MAX_SANDBOXES`).
    pub max_sandboxes: usize,
    /// A sandbox's lifetime (`PLIMSOLL_SANDBOX_LIFETIME`, seconds or `30m`).
    pub lifetime: Duration,
    /// A run's budget when the call states none (`PLIMSOLL_RUN_TIMEOUT_MS`).
    pub run_timeout_ms: u32,
    /// The software every record must name (`PLIMSOLL_SOFTWARE_IDENTITY`: one
    /// identity, or a comma-separated approved set), sent on every request.
    pub software_rule: Option<plimsoll_core::wire::SoftwareRule>,
    /// Receipts: the signing key file and the directory of the receipts bundle
    /// (`PLIMSOLL_SIGNING_KEY_FILE` and `PLIMSOLL_RECEIPTS_DIR`, both or neither).
    pub receipts: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Values people paste from examples; refused so they never reach a daemon.
const PLACEHOLDERS: [&str; 4] = ["changeme", "change-me", "your-token", "xxx"];

fn placeholder(v: &str) -> bool {
    let v = v.trim().to_ascii_lowercase();
    PLACEHOLDERS.iter().any(|p| v == *p || v.contains("changeme"))
}

impl Config {
    /// Reads the configuration from `get` (the environment, in production).
    ///
    /// # Errors
    ///
    /// A missing or malformed value, or a placeholder, naming the variable.
    pub fn from(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let bad = |k: &str, why: String| ConfigError(format!("{k}: {why}"));
        let url = var("PLIMSOLL_URL").ok_or_else(|| bad("PLIMSOLL_URL", "the daemon's URL is required".into()))?;
        let token = match (var("PLIMSOLL_CALLER_TOKEN"), var("PLIMSOLL_TOKEN_FILE")) {
            (Some(t), _) => Some(t),
            (None, Some(path)) => Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| bad("PLIMSOLL_TOKEN_FILE", format!("reading {path}: {e}")))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        for (k, v) in [("PLIMSOLL_URL", Some(url.clone())), ("PLIMSOLL_CALLER_TOKEN", token.clone())] {
            if v.as_deref().is_some_and(placeholder) {
                return Err(bad(k, "is a placeholder; set the real value".into()));
            }
        }
        let floor = match var("PLIMSOLL_MIN_ISOLATION") {
            None => Floor::Kernel,
            Some(f) => f
                .parse::<Floor>()
                .map_err(|_| bad("PLIMSOLL_MIN_ISOLATION", format!("{f:?} is not process, container, kernel or vm")))?,
        };
        let number = |k: &str, default: u64, range: std::ops::RangeInclusive<u64>| -> Result<u64, ConfigError> {
            match var(k) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if range.contains(&n) => Ok(n),
                    _ => Err(bad(k, format!("{v:?} is not a number from {} to {}", range.start(), range.end()))),
                },
            }
        };
        let lifetime = match var("PLIMSOLL_SANDBOX_LIFETIME") {
            None => Duration::from_secs(30 * 60),
            Some(v) => match plimsoll_core::duration::parse(&v) {
                Some(d) if (Duration::from_secs(1)..=Duration::from_secs(12 * 3600)).contains(&d) => d,
                Some(_) => return Err(bad("PLIMSOLL_SANDBOX_LIFETIME", format!("{v:?} is not from 1s to 12h"))),
                None => {
                    return Err(bad(
                        "PLIMSOLL_SANDBOX_LIFETIME",
                        format!("{v:?} is not a duration like 90s, 30m or 1h30m"),
                    ));
                }
            },
        };
        let receipts = match (var("PLIMSOLL_SIGNING_KEY_FILE"), var("PLIMSOLL_RECEIPTS_DIR")) {
            (Some(k), Some(d)) => Some((k.into(), d.into())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad("PLIMSOLL_RECEIPTS_DIR", "is required with PLIMSOLL_SIGNING_KEY_FILE".into()));
            }
            (None, Some(_)) => {
                return Err(bad("PLIMSOLL_SIGNING_KEY_FILE", "is required with PLIMSOLL_RECEIPTS_DIR".into()));
            }
        };
        let software_rule = match var("PLIMSOLL_SOFTWARE_IDENTITY") {
            None => None,
            Some(v) => {
                let identities: Vec<String> = v.split(',').map(|i| i.trim().to_string()).collect();
                let mode = if identities.len() == 1 { "exact" } else { "approved" };
                let rule = plimsoll_core::wire::SoftwareRule { mode: mode.into(), identities };
                plimsoll_core::validate::software_rule(&rule)
                    .map_err(|r| bad("PLIMSOLL_SOFTWARE_IDENTITY", r.message))?;
                Some(rule)
            }
        };
        Ok(Config {
            software_rule,
            receipts,
            url,
            token,
            floor,
            max_sandboxes: number("PLIMSOLL_MAX_SANDBOXES", 3, 1..=64)? as usize,
            lifetime,
            run_timeout_ms: number("PLIMSOLL_RUN_TIMEOUT_MS", 50_000, 100..=600_000)? as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_and_bad_values_name_the_variable() {
        let c = Config::from(env(&[("PLIMSOLL_URL", "http://127.0.0.1:8746")])).expect("config");
        assert_eq!(
            (c.floor, c.max_sandboxes, c.lifetime, c.run_timeout_ms),
            (Floor::Kernel, 3, Duration::from_secs(1800), 50_000)
        );
        let e = Config::from(env(&[])).expect_err("no url");
        assert_eq!(e.0, "PLIMSOLL_URL: the daemon's URL is required");
        let e = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_CALLER_TOKEN", "changeme")]))
            .expect_err("placeholder");
        assert_eq!(e.0, "PLIMSOLL_CALLER_TOKEN: is a placeholder; set the real value");
        let e = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_MIN_ISOLATION", "strong")]))
            .expect_err("floor");
        assert_eq!(e.0, "PLIMSOLL_MIN_ISOLATION: \"strong\" is not process, container, kernel or vm");
        let e = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_MAX_SANDBOXES", "0")])).expect_err("max");
        assert_eq!(e.0, "PLIMSOLL_MAX_SANDBOXES: \"0\" is not a number from 1 to 64");
        let e =
            Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SIGNING_KEY_FILE", "k")])).expect_err("half");
        assert_eq!(e.0, "PLIMSOLL_RECEIPTS_DIR: is required with PLIMSOLL_SIGNING_KEY_FILE");
        let id = format!("sha256:{}", "ab".repeat(32));
        let c = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SOFTWARE_IDENTITY", &id)])).expect("rule");
        assert_eq!(c.software_rule.map(|r| (r.mode, r.identities)), Some(("exact".into(), vec![id.clone()])));
        let two = format!("{id}, sha256:{}", "cd".repeat(32));
        let c = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SOFTWARE_IDENTITY", &two)])).expect("rule");
        assert_eq!(c.software_rule.map(|r| r.mode), Some("approved".into()));
        let c = Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SANDBOX_LIFETIME", "1h30m")]))
            .expect("lifetime");
        assert_eq!(c.lifetime, Duration::from_secs(5400));
        let e =
            Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SANDBOX_LIFETIME", "13h")])).expect_err("long");
        assert_eq!(e.0, "PLIMSOLL_SANDBOX_LIFETIME: \"13h\" is not from 1s to 12h");
        let e =
            Config::from(env(&[("PLIMSOLL_URL", "http://x"), ("PLIMSOLL_SANDBOX_LIFETIME", "soon")])).expect_err("bad");
        assert_eq!(e.0, "PLIMSOLL_SANDBOX_LIFETIME: \"soon\" is not a duration like 90s, 30m or 1h30m");
    }
}
