//! Durations as operators write them in settings: `90` (seconds), `90s`, `5m`,
//! `1h30m`, `250ms`. Shared by the daemon's settings and the MCP server's, so the
//! same text means the same time everywhere.

use std::time::Duration;

/// Parses a duration; `None` when the text is not one (the caller names the setting).
pub fn parse(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if v.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return None,
        };
        total = total.saturating_add(part);
        rest = &rest[unit..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_operators_write_parse_and_others_do_not() {
        assert_eq!(parse("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse(" 1h30m "), Some(Duration::from_secs(5400)));
        assert_eq!(parse("5m"), Some(Duration::from_secs(300)));
        for bad in ["", "m", "5 m", "5d", "-5s", "1.5h", "5m3"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
