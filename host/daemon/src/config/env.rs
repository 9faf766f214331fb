//! Where settings come from: the environment over the file, and how values are read.

use std::time::Duration;

use super::ConfigError;

/// Reads a duration as the original's settings write them: `90s`, `5m`, `1h30m`,
/// `250ms`, or a bare number of seconds.
pub(super) fn parse_duration(name: &str, v: &str) -> Result<Duration, ConfigError> {
    plimsoll_core::duration::parse(v).ok_or_else(|| {
        ConfigError::Value(format!("{name}={v:?} is not a duration: write it as 90s, 5m, 1h30m or 250ms"))
    })
}

/// A comma-separated list, trimmed, without empty entries.
pub(super) fn list(v: String) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

pub(super) fn parse_bool(name: &str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "" | "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(ConfigError::Value(format!("{name}={v:?} is not a boolean: use 1/true or 0/false"))),
    }
}

pub(super) fn parse_u32(name: &str, v: &str) -> Result<u32, ConfigError> {
    v.parse::<u32>().map_err(|_| ConfigError::Value(format!("{name}={v:?} is not a whole number")))
}

/// A source of variables: the process environment, or a map in tests.
pub trait Env {
    /// The variable's value, if set.
    fn get(&self, name: &str) -> Option<String>;
    /// Every variable name that is set.
    fn names(&self) -> Vec<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn names(&self) -> Vec<String> {
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect()
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        std::collections::HashMap::get(self, name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// One setting: the environment wins over the file; either may be absent.
pub(super) struct Pick<'a> {
    pub(super) env: &'a dyn Env,
    pub(super) explicit: Vec<&'static str>,
}

impl Pick<'_> {
    pub(super) fn string(&mut self, var: &'static str, file: Option<String>) -> Option<String> {
        let v = self.env.get(var).or(file);
        if v.is_some() {
            self.explicit.push(var);
        }
        v
    }

    pub(super) fn u32(&mut self, var: &'static str, file: Option<u32>) -> Result<Option<u32>, ConfigError> {
        match self.env.get(var) {
            Some(v) if v.is_empty() => Ok(file),
            Some(v) => {
                self.explicit.push(var);
                parse_u32(var, &v).map(Some)
            }
            None => {
                if file.is_some() {
                    self.explicit.push(var);
                }
                Ok(file)
            }
        }
    }

    pub(super) fn bool(&mut self, var: &'static str, file: Option<bool>) -> Result<bool, ConfigError> {
        match self.env.get(var) {
            Some(v) => parse_bool(var, &v),
            None => Ok(file.unwrap_or(false)),
        }
    }
}
