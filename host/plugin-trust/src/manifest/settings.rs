//! The settings a plugin declares: each one's kind, whether it is required or
//! what it defaults to, the other names the operator may set it by, and the
//! checks its value must pass before the host starts the plugin.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

/// What a setting holds. The host checks the value is one before anything runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SettingKind {
    /// Text, optionally in a [`Format`] or one of `choices`.
    String,
    /// An absolute `https` URL (`http` only to loopback).
    Url,
    /// A whole number, optionally within `min` and `max`.
    Number,
    /// A duration (`90s`, `5m`, `1h30m`, `250ms`); the plugin reads milliseconds.
    Duration,
    /// A path to a file only the host reads (a CA, a client certificate).
    File,
    /// A credential: the host attaches it to an endpoint and the plugin never sees it.
    /// The operator sets it in the variable or as `<name>-file` in the table.
    Secret,
    /// An IP address.
    Address,
}

impl SettingKind {
    /// The name in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            SettingKind::String => "string",
            SettingKind::Url => "url",
            SettingKind::Number => "number",
            SettingKind::Duration => "duration",
            SettingKind::File => "file",
            SettingKind::Secret => "secret",
            SettingKind::Address => "address",
        }
    }
}

/// A shape a string setting must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Letters, digits, `-` and `_`.
    Word,
    /// A DNS label: 1 to 63 lowercase letters, digits and `-`, a letter or digit at each end.
    DnsLabel,
    /// A label value: at most 63 letters, digits, `-`, `_` and `.`, a letter or digit at each end.
    LabelValue,
    /// An image pinned by content: `<name>@sha256:<64 lowercase hex>`.
    PinnedImage,
    /// An instance stamp: 1 to 64 letters, digits and `@ . _ -`.
    Stamp,
}

impl Format {
    /// Whether `v` has this shape.
    pub fn holds(self, v: &str) -> bool {
        let ends = |c: Option<char>, lower: bool| {
            c.is_some_and(
                |c| if lower { c.is_ascii_lowercase() || c.is_ascii_digit() } else { c.is_ascii_alphanumeric() },
            )
        };
        match self {
            Format::Word => !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            Format::DnsLabel => {
                (1..=63).contains(&v.len())
                    && ends(v.chars().next(), true)
                    && ends(v.chars().last(), true)
                    && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            }
            Format::LabelValue => {
                v.len() <= 63
                    && ends(v.chars().next(), false)
                    && ends(v.chars().last(), false)
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            }
            Format::PinnedImage => v.rsplit_once("@sha256:").is_some_and(|(name, digest)| {
                !name.is_empty()
                    && !name.contains(char::is_whitespace)
                    && digest.len() == 64
                    && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }),
            Format::Stamp => {
                (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"@._-".contains(&b))
            }
        }
    }

    /// What a value must be, for the refusal.
    pub fn says(self) -> &'static str {
        match self {
            Format::Word => "must be letters, digits, dashes and underscores",
            Format::DnsLabel => {
                "must be a DNS label: 1 to 63 lowercase letters, digits and -, a letter or digit at each end"
            }
            Format::LabelValue => {
                "must be a label value: at most 63 letters, digits, - _ ., a letter or digit at each end"
            }
            Format::PinnedImage => {
                "must be pinned by digest (<name>@sha256:<64 hex>), so the read-back can prove what runs"
            }
            Format::Stamp => "must be 1 to 64 letters, digits and @ . _ -",
        }
    }
}

/// Where a URL setting names the sandbox it reaches (`{target}`, which the host
/// fills in per request: one host per sandbox).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetRule {
    /// `{target}` once, anywhere in the URL.
    Anywhere,
    /// `{target}` once, in the URL's host.
    InHost,
}

/// One declared setting.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Setting {
    /// What it holds.
    pub kind: SettingKind,
    /// What it is for, in a few words (`plugin inspect` and refusals print it).
    pub help: String,
    /// Startup is refused without it.
    #[serde(default)]
    pub required: bool,
    /// Its value when the operator sets none; `{hostname}` is this machine's name.
    #[serde(default, deserialize_with = "scalar")]
    pub default: Option<String>,
    /// Other variables it is read from, after `SANDBOX_NAME_SETTING` (the
    /// original system's names: `E2B_API_KEY`).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// A string's shape.
    #[serde(default)]
    pub format: Option<Format>,
    /// A string's only allowed values.
    #[serde(default)]
    pub choices: Vec<String>,
    /// A number's least value.
    #[serde(default)]
    pub min: Option<u64>,
    /// A number's greatest value.
    #[serde(default)]
    pub max: Option<u64>,
    /// A string's or secret's least length.
    #[serde(default)]
    pub min_length: Option<usize>,
    /// A string's or secret's greatest length.
    #[serde(default)]
    pub max_length: Option<usize>,
    /// A URL's `{target}`.
    #[serde(default)]
    pub target: Option<TargetRule>,
    /// A URL that must be `https`, even to loopback.
    #[serde(default)]
    pub https: bool,
    /// A secret whose SHA-256 (lowercase hex) the plugin reads under this name,
    /// to check a backend holds the same secret without ever seeing it.
    #[serde(default)]
    pub sha256_as: Option<String>,
}

fn scalar<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Whole(u64),
    }
    Ok(Some(match Scalar::deserialize(d)? {
        Scalar::Text(s) => s,
        Scalar::Whole(n) => n.to_string(),
    }))
}

/// The `{hostname}` stand-in a default may hold, checked as this name.
const SAMPLE_HOSTNAME: &str = "localhost";

impl Setting {
    pub(super) fn check_declaration(&self, name: &str) -> Result<(), String> {
        let bad = |why: &str| Err(format!("setting {name:?}: {why}"));
        if self.help.trim().is_empty() {
            return bad("help must say what it is for");
        }
        if self.required && self.default.is_some() {
            return bad("required and default exclude each other");
        }
        let string = self.kind == SettingKind::String;
        let lengths = string || self.kind == SettingKind::Secret;
        if !string && (self.format.is_some() || !self.choices.is_empty()) {
            return bad("format and choices are for strings");
        }
        if (self.min.is_some() || self.max.is_some()) && self.kind != SettingKind::Number {
            return bad("min and max are for numbers");
        }
        if (self.min_length.is_some() || self.max_length.is_some()) && !lengths {
            return bad("min-length and max-length are for strings and secrets");
        }
        if (self.target.is_some() || self.https) && self.kind != SettingKind::Url {
            return bad("target and https are for urls");
        }
        if self.sha256_as.is_some() && self.kind != SettingKind::Secret {
            return bad("sha256-as is for secrets");
        }
        if let Some(d) = &self.sha256_as
            && !super::plain_name(d)
        {
            return bad("sha256-as must be lowercase letters, digits and dashes");
        }
        if self.kind == SettingKind::Secret && self.default.is_some() {
            return bad("a secret has no default; the operator sets it");
        }
        for a in &self.aliases {
            let upper = a.as_bytes().first().is_some_and(u8::is_ascii_uppercase)
                && a.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if !upper {
                return bad(&format!("alias {a:?} must be an upper-case variable name"));
            }
            if a.starts_with("PLIMSOLL_") {
                return bad(&format!("alias {a:?} is in the daemon's own PLIMSOLL_ names"));
            }
        }
        if let Some(d) = &self.default {
            let d = d.replace("{hostname}", SAMPLE_HOSTNAME);
            self.check(&d).map_err(|why| format!("setting {name:?}: its default {d:?} {why}"))?;
        }
        Ok(())
    }

    /// Checks a value of this setting and gives what the plugin reads (a
    /// duration in milliseconds, a number in decimal, a trimmed secret).
    ///
    /// # Errors
    ///
    /// What the value must be, to follow the variable's name and value
    /// (`must be letters, digits, dashes and underscores`). It never quotes a secret.
    pub fn check(&self, value: &str) -> Result<String, String> {
        match self.kind {
            SettingKind::String => {
                self.check_length(value)?;
                if let Some(f) = self.format
                    && !f.holds(value)
                {
                    return Err(f.says().into());
                }
                if !self.choices.is_empty() && !self.choices.iter().any(|c| c == value) {
                    return Err(format!("is not one of {}", self.choices.join(", ")));
                }
                Ok(value.to_string())
            }
            SettingKind::Secret => {
                let v = value.trim();
                if !v.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                    return Err("must be visible ASCII with no spaces".into());
                }
                self.check_length(v)?;
                Ok(v.to_string())
            }
            SettingKind::Number => {
                let n: u64 = value.trim().parse().map_err(|_| "is not a whole number".to_string())?;
                match (self.min, self.max) {
                    (Some(lo), Some(hi)) if !(lo..=hi).contains(&n) => Err(format!("is outside {lo}..{hi}")),
                    (Some(lo), None) if n < lo => Err(format!("is below {lo}")),
                    (None, Some(hi)) if n > hi => Err(format!("is above {hi}")),
                    _ => Ok(n.to_string()),
                }
            }
            SettingKind::Duration => plimsoll_core::duration::parse(value.trim())
                .map(|d| d.as_millis().to_string())
                .ok_or_else(|| "is not a duration: write it as 90s, 5m, 1h30m or 250ms".into()),
            SettingKind::Address => {
                value.trim().parse::<IpAddr>().map(|a| a.to_string()).map_err(|_| "is not an IP address".into())
            }
            SettingKind::File => {
                if value.is_empty() {
                    Err("is not a path".into())
                } else {
                    Ok(value.to_string())
                }
            }
            SettingKind::Url => self.check_url(value).map(|()| value.to_string()),
        }
    }

    fn check_length(&self, v: &str) -> Result<(), String> {
        let n = v.chars().count();
        match (self.min_length, self.max_length) {
            (Some(lo), _) if n < lo => Err(format!("must be at least {lo} characters")),
            (_, Some(hi)) if n > hi => Err(format!("must be at most {hi} characters")),
            _ => Ok(()),
        }
    }

    fn check_url(&self, v: &str) -> Result<(), String> {
        let (scheme, rest) = v.split_once("://").ok_or("is not an absolute URL")?;
        match scheme {
            "https" => {}
            "http" if !self.https => {}
            _ if self.https => return Err("must be https".into()),
            _ => return Err("must be https (http only to loopback)".into()),
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.is_empty() {
            return Err("names no host".into());
        }
        let like = self.default.as_deref().map(|d| format!(" (as in {d})")).unwrap_or_default();
        match self.target {
            None => Ok(()),
            Some(TargetRule::Anywhere) if v.matches("{target}").count() == 1 => Ok(()),
            Some(TargetRule::Anywhere) => Err(format!("must name {{target}} once, where the sandbox's ID goes{like}")),
            Some(TargetRule::InHost) if v.matches("{target}").count() == 1 && authority.contains("{target}") => Ok(()),
            Some(TargetRule::InHost) => {
                Err(format!("must name {{target}} once, in its host, where the sandbox's ID goes{like}"))
            }
        }
    }
}

/// How the settings of a [`Group`] go together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupRule {
    /// Set every one or none (a certificate and its key).
    AllOrNone,
    /// Set exactly one (a token or a client certificate).
    ExactlyOne,
    /// Set at most one.
    AtMostOne,
}

/// A rule over several settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Group {
    /// The rule.
    pub rule: GroupRule,
    /// The settings it holds together.
    pub settings: Vec<String>,
}

impl Group {
    pub(super) fn check(&self, settings: &BTreeMap<String, Setting>) -> Result<(), String> {
        if self.settings.len() < 2 {
            return Err("a group holds at least two settings".into());
        }
        for name in &self.settings {
            let s = settings.get(name).ok_or_else(|| format!("a group names {name:?}, which is not a setting"))?;
            if s.required || s.default.is_some() {
                return Err(format!("a group names {name:?}, which is always set (required or defaulted)"));
            }
        }
        Ok(())
    }

    /// How the settings `set` says are set break the rule, if they do.
    pub fn breach(&self, set: &dyn Fn(&str) -> bool) -> Option<Breach> {
        let n = self.settings.iter().filter(|s| set(s)).count();
        match self.rule {
            GroupRule::AllOrNone if n != 0 && n != self.settings.len() => Some(Breach::Partial),
            GroupRule::ExactlyOne if n == 0 => Some(Breach::Missing),
            GroupRule::ExactlyOne | GroupRule::AtMostOne if n > 1 => Some(Breach::Several),
            _ => None,
        }
    }
}

/// How a [`Group`]'s rule was broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breach {
    /// Part of an all-or-none group is set.
    Partial,
    /// None of an exactly-one group is set.
    Missing,
    /// More than one of an exclusive group is set.
    Several,
}

/// Checks `name` (a manifest field, for the error) names a setting of `kind`.
pub(super) fn expect_kind(
    settings: &BTreeMap<String, Setting>,
    field: &str,
    name: &str,
    kind: SettingKind,
) -> Result<(), String> {
    match settings.get(name) {
        None => Err(format!("{field} names {name:?}, which is not a setting")),
        Some(s) if s.kind != kind => {
            Err(format!("{field} names {name:?}, a {}; it must be a {}", s.kind.as_str(), kind.as_str()))
        }
        Some(_) => Ok(()),
    }
}
