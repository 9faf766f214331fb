//! The daemon's log: one line per event on stderr, JSON (default) or text.
//!
//! Audit lines never carry code, tokens, session IDs or guest output: callers of
//! [`Log::event`] pass metadata only, as typed fields.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::config::LogFormat;

/// Where log lines go.
#[derive(Clone, Copy, Debug)]
pub struct Log {
    format: LogFormat,
}

/// A log level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Normal operation.
    Info,
    /// Something an operator should look at.
    Warn,
    /// A fault.
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// Cuts a detail for the log to 4096 bytes.
pub fn cut(detail: &str) -> String {
    if detail.len() <= 4096 {
        return detail.to_string();
    }
    let mut end = 4096;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...(cut)", &detail[..end])
}

impl Log {
    /// A log writing `format` lines.
    pub fn new(format: LogFormat) -> Log {
        Log { format }
    }

    /// Writes one event with its fields.
    pub fn event(&self, level: Level, msg: &str, fields: &[(&str, Value)]) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let line = match self.format {
            LogFormat::Json => {
                let mut m = Map::new();
                m.insert("time_unix_ms".into(), Value::from(now.as_millis() as u64));
                m.insert("level".into(), Value::from(level.as_str()));
                m.insert("msg".into(), Value::from(msg));
                for (k, v) in fields {
                    m.insert((*k).to_string(), v.clone());
                }
                Value::Object(m).to_string()
            }
            LogFormat::Text => {
                let mut s = format!("{} {} {msg}", now.as_millis(), level.as_str());
                for (k, v) in fields {
                    match v {
                        Value::String(t) => s.push_str(&format!(" {k}={t:?}")),
                        other => s.push_str(&format!(" {k}={other}")),
                    }
                }
                s
            }
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }

    /// An informational event.
    pub fn info(&self, msg: &str, fields: &[(&str, Value)]) {
        self.event(Level::Info, msg, fields);
    }

    /// A warning.
    pub fn warn(&self, msg: &str, fields: &[(&str, Value)]) {
        self.event(Level::Warn, msg, fields);
    }

    /// A fault.
    pub fn error(&self, msg: &str, fields: &[(&str, Value)]) {
        self.event(Level::Error, msg, fields);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_cut_at_4096_bytes() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(3000);
        let c = cut(&long);
        assert!(c.ends_with("...(cut)"));
        assert!(c.len() <= 4096 + 8);
    }
}
