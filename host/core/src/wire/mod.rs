//! The protocol's messages (`plimsoll.v1`) in protobuf's JSON form, as Connect
//! carries them.
//!
//! Field names are protobuf's lowerCamelCase JSON names; the original snake_case
//! names are accepted too, as protobuf's own parser accepts them. Unknown fields
//! and duplicate keys are refused. A field at its zero value is omitted when written.

pub mod connect;
pub mod details;
pub mod json;
pub mod session;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use session::{
    CloseSessionRequest, CloseSessionResponse, OpenSessionRequest, OpenSessionResponse, SessionEnd, SessionRunResponse,
    SessionTimes,
};

use json::{
    de_bool, de_bytes, de_f64, de_f64_vec, de_i32, de_i64, de_string, de_u32, de_u64, de_vec, is_zero, is_zero_f64,
    ser_bytes, ser_f64, ser_f64_vec, ser_i64, ser_u64,
};

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or JSON that does not fit the message (a wrong type, an unknown or
    /// repeated field, a number out of range).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A message field held something other than a JSON object (an array, say),
    /// which protobuf's JSON mapping does not allow.
    #[error("{0} is not a JSON object")]
    NotAnObject(String),
}

/// Reads a message from JSON as protobuf's JSON mapping allows it: every message
/// (the top level, nested ones, list elements) must be a JSON object.
///
/// # Errors
///
/// [`DecodeError`] naming what does not fit.
pub fn from_json<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, DecodeError> {
    let input: Value = serde_json::from_slice(bytes)?;
    if !input.is_object() {
        return Err(DecodeError::NotAnObject("the message".into()));
    }
    let typed: T = serde_json::from_slice(bytes)?;
    // serde reads a struct from a JSON array too (positionally); protobuf does not.
    // Every place the typed message writes an object, the input must hold one.
    let written = serde_json::to_value(&typed)?;
    same_shape(&written, &input, "the message")?;
    Ok(typed)
}

fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn same_shape(written: &Value, input: &Value, at: &str) -> Result<(), DecodeError> {
    match written {
        Value::Object(fields) => {
            let Value::Object(given) = input else {
                return Err(DecodeError::NotAnObject(at.to_string()));
            };
            for (name, value) in fields {
                let given = given.get(name).or_else(|| given.get(&snake_case(name)));
                if let Some(given) = given.filter(|g| !g.is_null()) {
                    same_shape(value, given, name)?;
                }
            }
            Ok(())
        }
        Value::Array(items) => match input {
            Value::Array(given) if given.len() == items.len() => {
                for (i, (w, g)) in items.iter().zip(given).enumerate() {
                    same_shape(w, g, &format!("{at}[{i}]"))?;
                }
                Ok(())
            }
            _ => Err(DecodeError::NotAnObject(at.to_string())),
        },
        _ => Ok(()),
    }
}

/// A caller's rule for the selected software: `exact` with one identity, or
/// `approved` with 1 to 32.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftwareRule {
    /// `exact`, `approved`, or empty (no rule).
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// The identities, in the order sent.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<String>,
}

/// A file written into the work directory (`ProjectFile`); text only on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// A clean relative path.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The file's text.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub content: String,
}

/// A JavaScript snippet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JavaScriptRun {
    /// The source.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub code: String,
    /// A server-configured host-API capability, selected by name.
    #[serde(
        default,
        alias = "grant_profile",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub grant_profile: String,
}

/// A multi-file project with steps run in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProjectRun {
    /// Files written into the work directory first.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ProjectFile>,
    /// Shell commands, in order; the run stops at the first that fails.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// Relative paths read back after the steps.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// A server-configured host-API capability, selected by name.
    #[serde(
        default,
        alias = "grant_profile",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub grant_profile: String,
}

/// One parameter row of a module run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleRow {
    /// The row's parameter values.
    #[serde(
        default,
        deserialize_with = "de_f64_vec",
        serialize_with = "ser_f64_vec",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub values: Vec<f64>,
}

/// A compiled simulator run once per row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModuleRun {
    /// The simulator's id in the module image.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// The parameter table.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<ModuleRow>,
    /// The horizon, > 0.
    #[serde(
        default,
        alias = "end_time",
        deserialize_with = "de_f64",
        serialize_with = "ser_f64",
        skip_serializing_if = "is_zero_f64"
    )]
    pub end_time: f64,
    /// The communication step, > 0.
    #[serde(default, deserialize_with = "de_f64", serialize_with = "ser_f64", skip_serializing_if = "is_zero_f64")]
    pub step: f64,
}

/// A cell in a session's kept interpreter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellRun {
    /// `javascript` or `python`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub language: String,
    /// The source.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub code: String,
    /// Files written into the session's work directory first.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ProjectFile>,
}

/// The payload kinds a request can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `javascript`
    JavaScript,
    /// `project`
    Project,
    /// `module`
    Module,
    /// `cell`
    Cell,
}

impl Kind {
    /// The name the record encoding and the logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::JavaScript => "javascript",
            Kind::Project => "project",
            Kind::Module => "module",
            Kind::Cell => "cell",
        }
    }
}

/// The payload of a request, borrowed: exactly one of the oneof's fields.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// A snippet.
    JavaScript(&'a JavaScriptRun),
    /// A project.
    Project(&'a ProjectRun),
    /// A module table.
    Module(&'a ModuleRun),
    /// A session cell.
    Cell(&'a CellRun),
}

impl Payload<'_> {
    /// The payload's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::JavaScript(_) => Kind::JavaScript,
            Payload::Project(_) => Kind::Project,
            Payload::Module(_) => Kind::Module,
            Payload::Cell(_) => Kind::Cell,
        }
    }
}

/// Why a request's oneof payload could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// No payload field was set.
    #[error("payload must be exactly one of javascript, project, or module")]
    Missing,
    /// More than one payload field was set.
    #[error("payload must be exactly one of javascript, project, or module; the request sets several")]
    Several,
}

fn one_payload<'a>(
    javascript: &'a Option<JavaScriptRun>,
    project: &'a Option<ProjectRun>,
    module: Option<&'a Option<ModuleRun>>,
    cell: &'a Option<CellRun>,
) -> Result<Payload<'a>, PayloadError> {
    let mut found = Vec::with_capacity(1);
    if let Some(p) = javascript {
        found.push(Payload::JavaScript(p));
    }
    if let Some(p) = project {
        found.push(Payload::Project(p));
    }
    if let Some(Some(p)) = module {
        found.push(Payload::Module(p));
    }
    if let Some(p) = cell {
        found.push(Payload::Cell(p));
    }
    match found.len() {
        0 => Err(PayloadError::Missing),
        1 => Ok(found[0]),
        _ => Err(PayloadError::Several),
    }
}

/// `RunRequest`: one operation in a fresh sandbox.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunRequest {
    /// The protocol number the client speaks; required.
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub protocol: u32,
    /// The floor: empty, or process, container, kernel, vm.
    #[serde(
        default,
        alias = "minimum_isolation",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub minimum_isolation: String,
    /// An opaque correlation id for the audit line.
    #[serde(default, alias = "trace_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub trace_id: String,
    /// The whole run's budget; 0 takes the provider's default.
    #[serde(default, alias = "timeout_ms", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub timeout_ms: i32,
    /// A rule for the selected software.
    #[serde(default, alias = "software_rule", skip_serializing_if = "Option::is_none")]
    pub software_rule: Option<SoftwareRule>,
    /// A snippet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<JavaScriptRun>,
    /// A project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectRun>,
    /// A module table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleRun>,
    /// A cell (stored form of a session call; `Run` refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<CellRun>,
}

impl RunRequest {
    /// The one payload the request carries.
    ///
    /// # Errors
    ///
    /// [`PayloadError`] when none or several are set.
    pub fn payload(&self) -> Result<Payload<'_>, PayloadError> {
        one_payload(&self.javascript, &self.project, Some(&self.module), &self.cell)
    }
}

/// `SessionRunRequest`: a call in an open session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionRunRequest {
    /// As [`RunRequest::protocol`].
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub protocol: u32,
    /// As [`RunRequest::minimum_isolation`].
    #[serde(
        default,
        alias = "minimum_isolation",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub minimum_isolation: String,
    /// As [`RunRequest::trace_id`].
    #[serde(default, alias = "trace_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub trace_id: String,
    /// As [`RunRequest::timeout_ms`].
    #[serde(default, alias = "timeout_ms", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub timeout_ms: i32,
    /// The session's capability; never logged or recorded.
    #[serde(default, alias = "session_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    /// As [`RunRequest::software_rule`].
    #[serde(default, alias = "software_rule", skip_serializing_if = "Option::is_none")]
    pub software_rule: Option<SoftwareRule>,
    /// A snippet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<JavaScriptRun>,
    /// A project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectRun>,
    /// A cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<CellRun>,
}

impl SessionRunRequest {
    /// The one payload the call carries.
    ///
    /// # Errors
    ///
    /// [`PayloadError`] when none or several are set.
    pub fn payload(&self) -> Result<Payload<'_>, PayloadError> {
        one_payload(&self.javascript, &self.project, None, &self.cell)
    }

    /// The same call as a [`RunRequest`] without the session ID: the form whose
    /// digest the record carries and a harness stores.
    pub fn as_run_request(&self) -> RunRequest {
        RunRequest {
            protocol: self.protocol,
            minimum_isolation: self.minimum_isolation.clone(),
            trace_id: self.trace_id.clone(),
            timeout_ms: self.timeout_ms,
            software_rule: self.software_rule.clone(),
            javascript: self.javascript.clone(),
            project: self.project.clone(),
            module: None,
            cell: self.cell.clone(),
        }
    }
}

/// `AdviceFinding`: one metadata-only efficiency observation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdviceFinding {
    /// `fan_out` or `repeated_read`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub pattern: String,
    /// `info`, `low`, `medium` or `high`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub severity: String,
    /// `batch` or `cache`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub remedy: String,
    /// The route's method.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub method: String,
    /// The matched route template, never a raw path.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub route: String,
    /// One templated sentence.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// A better route's method.
    #[serde(
        default,
        alias = "suggested_method",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub suggested_method: String,
    /// A better route the profile exposes.
    #[serde(
        default,
        alias = "suggested_route",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub suggested_route: String,
    /// Successful calls beyond one.
    #[serde(default, alias = "extra_calls", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub extra_calls: i32,
    /// Summed round trips beyond one call's (a model).
    #[serde(
        default,
        alias = "added_latency_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub added_latency_ms: i64,
    /// Gross bytes the flagged calls moved.
    #[serde(
        default,
        alias = "bytes_moved",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub bytes_moved: i64,
}

/// `JavaScriptResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JavaScriptResult {
    /// Kept stdout, an unmarked prefix.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stdout: Vec<u8>,
    /// Kept stderr, an unmarked prefix.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stderr: Vec<u8>,
    /// The guest's exit code (124 timeout, 134 trap).
    #[serde(default, alias = "exit_code", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    /// The run's deadline ended it.
    #[serde(default, alias = "timed_out", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub timed_out: bool,
    /// Stdout lost bytes to the cap.
    #[serde(default, alias = "stdout_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stdout_truncated: bool,
    /// Stderr lost bytes to the cap.
    #[serde(default, alias = "stderr_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stderr_truncated: bool,
    /// Efficiency findings (never part of the record).
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<AdviceFinding>,
}

/// `StepResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StepResult {
    /// The step as run (cut to 16 KiB).
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Kept stdout.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stdout: Vec<u8>,
    /// Kept stderr.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stderr: Vec<u8>,
    /// The step's exit code.
    #[serde(default, alias = "exit_code", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    /// The step hit its budget.
    #[serde(default, alias = "timed_out", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub timed_out: bool,
    /// Wall time of the step.
    #[serde(
        default,
        alias = "duration_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub duration_ms: i64,
    /// Stdout lost bytes to the cap.
    #[serde(default, alias = "stdout_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stdout_truncated: bool,
    /// Stderr lost bytes to the cap.
    #[serde(default, alias = "stderr_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stderr_truncated: bool,
}

/// `ProjectOutcome`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProjectOutcome {
    /// Never accompanies a result.
    #[default]
    Unspecified,
    /// The plan ran to its end.
    Completed,
    /// A request-attributable failure around the steps.
    SetupFailed,
    /// The budget expired, or a step hit its own.
    TimedOut,
    /// No authenticated runner report.
    ProtocolError,
    /// The runner itself failed (newer daemons).
    RunnerFailed,
}

impl ProjectOutcome {
    const NAMES: [(&'static str, ProjectOutcome); 6] = [
        ("PROJECT_OUTCOME_UNSPECIFIED", ProjectOutcome::Unspecified),
        ("PROJECT_OUTCOME_COMPLETED", ProjectOutcome::Completed),
        ("PROJECT_OUTCOME_SETUP_FAILED", ProjectOutcome::SetupFailed),
        ("PROJECT_OUTCOME_TIMED_OUT", ProjectOutcome::TimedOut),
        ("PROJECT_OUTCOME_PROTOCOL_ERROR", ProjectOutcome::ProtocolError),
        ("PROJECT_OUTCOME_RUNNER_FAILED", ProjectOutcome::RunnerFailed),
    ];

    /// The enum number the record digest covers.
    pub fn number(self) -> i32 {
        match self {
            ProjectOutcome::Unspecified => 0,
            ProjectOutcome::Completed => 1,
            ProjectOutcome::SetupFailed => 2,
            ProjectOutcome::TimedOut => 3,
            ProjectOutcome::ProtocolError => 4,
            ProjectOutcome::RunnerFailed => 5,
        }
    }

    /// The log name (`completed`, `timed_out`).
    pub fn log_name(self) -> &'static str {
        match self {
            ProjectOutcome::Unspecified => "unspecified",
            ProjectOutcome::Completed => "completed",
            ProjectOutcome::SetupFailed => "setup_failed",
            ProjectOutcome::TimedOut => "timed_out",
            ProjectOutcome::ProtocolError => "protocol_error",
            ProjectOutcome::RunnerFailed => "runner_failed",
        }
    }
}

impl Serialize for ProjectOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let name =
            Self::NAMES.iter().find(|(_, o)| o == self).map(|(n, _)| *n).unwrap_or("PROJECT_OUTCOME_UNSPECIFIED");
        s.serialize_str(name)
    }
}

impl<'de> Deserialize<'de> for ProjectOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Number(i64),
        }
        match Option::<Raw>::deserialize(d)? {
            None => Ok(ProjectOutcome::Unspecified),
            Some(Raw::Name(n)) => Self::NAMES
                .iter()
                .find(|(name, _)| *name == n)
                .map(|(_, o)| *o)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown project outcome {n:?}"))),
            Some(Raw::Number(n)) => Self::NAMES
                .iter()
                .find(|(_, o)| i64::from(o.number()) == n)
                .map(|(_, o)| *o)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown project outcome {n}"))),
        }
    }
}

/// An artifact read back from the work directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// The requested path.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The file's bytes.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub content: Vec<u8>,
}

/// `ProjectResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProjectResult {
    /// The steps that ran, in order.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepResult>,
    /// How the run concluded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outcome: ProjectOutcome,
    /// The artifacts that existed.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// Context for a non-completed outcome.
    #[serde(
        default,
        alias = "outcome_detail",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub outcome_detail: String,
    /// The artifact budget dropped one or more artifacts.
    #[serde(default, alias = "artifacts_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub artifacts_truncated: bool,
    /// Efficiency findings.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<AdviceFinding>,
}

/// One row's module result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleRowResult {
    /// Steps completed, or the row's negative failure code.
    #[serde(default, deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub status: i32,
    /// `status x width` outputs, step-major.
    #[serde(
        default,
        deserialize_with = "de_f64_vec",
        serialize_with = "ser_f64_vec",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub outputs: Vec<f64>,
}

/// `ModuleResult`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModuleResult {
    /// One per row, in order.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<ModuleRowResult>,
    /// Outputs per step.
    #[serde(default, deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub width: i32,
    /// How the table concluded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outcome: ProjectOutcome,
    /// Context for a non-completed outcome.
    #[serde(
        default,
        alias = "outcome_detail",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub outcome_detail: String,
    /// The worker's stdout.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stdout: Vec<u8>,
    /// The worker's stderr.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stderr: Vec<u8>,
}

/// `CellResult`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CellResult {
    /// Kept stdout.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stdout: Vec<u8>,
    /// Kept stderr.
    #[serde(
        default,
        deserialize_with = "de_bytes",
        serialize_with = "ser_bytes",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub stderr: Vec<u8>,
    /// 0 ran, 1 raised, 124 deadline.
    #[serde(default, alias = "exit_code", deserialize_with = "de_i32", skip_serializing_if = "is_zero")]
    pub exit_code: i32,
    /// The call's deadline ended it.
    #[serde(default, alias = "timed_out", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub timed_out: bool,
    /// Stdout lost bytes to the cap.
    #[serde(default, alias = "stdout_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stdout_truncated: bool,
    /// Stderr lost bytes to the cap.
    #[serde(default, alias = "stderr_truncated", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub stderr_truncated: bool,
    /// A fresh interpreter started for this cell.
    #[serde(default, alias = "interpreter_started", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub interpreter_started: bool,
    /// The interpreter ended during this cell.
    #[serde(default, alias = "interpreter_ended", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub interpreter_ended: bool,
    /// Efficiency findings over the cell's calls through its session's grant
    /// (never part of the record). plimsoll's extension of protocol 4.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub advice: Vec<AdviceFinding>,
}

/// `RunRecord`: the daemon's statement of one run, as digests a harness recomputes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunRecord {
    /// The encoding version (the digest domain's suffix).
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub version: u32,
    /// Digest of what the caller sent.
    #[serde(
        default,
        alias = "request_sha256",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub request_sha256: String,
    /// Digest of the result as sent; empty for an unanswered call.
    #[serde(
        default,
        alias = "result_sha256",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub result_sha256: String,
    /// `RunResponse.sandbox`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// `RunResponse.isolation`.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub isolation: String,
    /// The outer artifact that ran.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub environment: String,
    /// The provider's verified policy digest.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// When the daemon received the request.
    #[serde(
        default,
        alias = "started_unix_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub started_unix_ms: i64,
    /// When the daemon finished the result (start plus monotonic elapsed).
    #[serde(
        default,
        alias = "ended_unix_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub ended_unix_ms: i64,
    /// SHA-256 of the session ID, for a session call.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// The call's number in its session, from 1.
    #[serde(default, deserialize_with = "de_u64", serialize_with = "ser_u64", skip_serializing_if = "is_zero")]
    pub sequence: u64,
    /// The previous call's record digest.
    #[serde(
        default,
        alias = "previous_sha256",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub previous_sha256: String,
    /// This record's own digest.
    #[serde(
        default,
        alias = "record_sha256",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub record_sha256: String,
    /// The selected executable manifest.
    #[serde(
        default,
        alias = "software_identity",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub software_identity: String,
    /// `exact:<identity>` or `approved:sha256:<hex>`.
    #[serde(
        default,
        alias = "software_rule_id",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub software_rule_id: String,
    /// The Connect code of a session call that may have run without an answer.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub unanswered: String,
    /// A typed reference to the sandbox instance (`k8s-pod-uid:...`).
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub instance: String,
}

/// `RunResponse`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunResponse {
    /// The provider that ran it.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// The tier the code ran behind.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub isolation: String,
    /// Wall time of the run, as the daemon measured it.
    #[serde(
        default,
        alias = "duration_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub duration_ms: i64,
    /// The daemon's record of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<RunRecord>,
    /// The selected executable manifest.
    #[serde(
        default,
        alias = "software_identity",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub software_identity: String,
    /// The outer artifact that ran.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub environment: String,
    /// A typed reference to the sandbox instance.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub instance: String,
    /// A snippet's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<JavaScriptResult>,
    /// A project's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectResult>,
    /// A module table's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<ModuleResult>,
    /// A cell's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<CellResult>,
}

/// `PayloadEnvironment`: where one payload kind runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PayloadEnvironment {
    /// The content-addressed artifact, when there is one.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// The longest one run of this kind may take.
    #[serde(default, alias = "max_timeout_ms", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub max_timeout_ms: u32,
    /// The selected executable manifest.
    #[serde(
        default,
        alias = "software_identity",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub software_identity: String,
    /// The languages the provider's checks proved.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub languages: Vec<String>,
}

/// `RunResources`: the per-run envelope the operator configured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunResources {
    /// Memory per run.
    #[serde(default, alias = "memory_mb", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub memory_mb: u32,
    /// CPUs per run.
    #[serde(default, deserialize_with = "de_f64", serialize_with = "ser_f64", skip_serializing_if = "is_zero_f64")]
    pub cpus: f64,
    /// Processes per run.
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub pids: u32,
    /// Writable storage per run.
    #[serde(default, alias = "disk_mb", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub disk_mb: u32,
}

/// `DescribeResponse`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DescribeResponse {
    /// The active provider.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// The provider's current tier.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub isolation: String,
    /// Projects work here.
    #[serde(default, alias = "supports_project", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub supports_project: bool,
    /// Snippet grants work here.
    #[serde(
        default,
        alias = "supports_javascript_grants",
        deserialize_with = "de_bool",
        skip_serializing_if = "is_zero"
    )]
    pub supports_javascript_grants: bool,
    /// Project grants work here.
    #[serde(default, alias = "supports_project_grants", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub supports_project_grants: bool,
    /// Module runs work here.
    #[serde(default, alias = "supports_module", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub supports_module: bool,
    /// The protocol number this daemon serves.
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub protocol: u32,
    /// Where snippets run.
    #[serde(default, alias = "javascript_environment", skip_serializing_if = "Option::is_none")]
    pub javascript_environment: Option<PayloadEnvironment>,
    /// Where projects run.
    #[serde(default, alias = "project_environment", skip_serializing_if = "Option::is_none")]
    pub project_environment: Option<PayloadEnvironment>,
    /// Where module tables run.
    #[serde(default, alias = "module_environment", skip_serializing_if = "Option::is_none")]
    pub module_environment: Option<PayloadEnvironment>,
    /// The per-run envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
    /// The verified policy digest.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// Sessions work here.
    #[serde(default, alias = "supports_sessions", deserialize_with = "de_bool", skip_serializing_if = "is_zero")]
    pub supports_sessions: bool,
    /// The daemon's session lifetime.
    #[serde(default, alias = "session_lifetime_ms", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub session_lifetime_ms: u32,
    /// The daemon's idle timeout.
    #[serde(default, alias = "session_idle_timeout_ms", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub session_idle_timeout_ms: u32,
    /// Where sessions run.
    #[serde(default, alias = "session_environment", skip_serializing_if = "Option::is_none")]
    pub session_environment: Option<PayloadEnvironment>,
    /// Sessions one caller may hold.
    #[serde(default, alias = "max_sessions_per_caller", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub max_sessions_per_caller: u32,
    /// Sessions one owner may hold.
    #[serde(default, alias = "max_sessions_per_owner", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub max_sessions_per_owner: u32,
    /// Where the process tier's engine runs guests: `jailed` (confined worker
    /// processes) or `in-process`; empty for providers without one. Plimsoll's own
    /// field: clients that do not know it skip it.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub engine: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_and_snake_names_both_read() {
        let a: RunRequest = serde_json::from_str(
            r#"{"protocol":4,"minimumIsolation":"vm","timeoutMs":"5000","javascript":{"code":"1"}}"#,
        )
        .expect("camel");
        let b: RunRequest = serde_json::from_str(
            r#"{"protocol":"4","minimum_isolation":"vm","timeout_ms":5000,"javascript":{"code":"1"}}"#,
        )
        .expect("snake");
        assert_eq!(a, b);
        assert_eq!(a.timeout_ms, 5000);
    }

    #[test]
    fn arrays_in_place_of_messages_are_refused() {
        // Each refusal names the message that is not an object, down to the list element.
        for (bad, field) in [
            (r#"[]"#, "the message"),
            (r#"{"protocol":4,"javascript":["console.log(1)"]}"#, "javascript"),
            (r#"{"protocol":4,"project":{"steps":["true"],"files":[["a","b"]]}}"#, "files[0]"),
            (r#"{"protocol":4,"softwareRule":["exact",["a"]],"javascript":{"code":"1"}}"#, "softwareRule"),
            (r#""text""#, "the message"),
        ] {
            let err = from_json::<RunRequest>(bad.as_bytes()).expect_err(bad);
            assert!(matches!(&err, DecodeError::NotAnObject(f) if f == field), "{bad}: {err:?}");
            assert_eq!(err.to_string(), format!("{field} is not a JSON object"), "{bad}");
        }
        let ok = from_json::<RunRequest>(
            br#"{"protocol":4,"software_rule":{"mode":"exact","identities":["a"]},"project":{"steps":["true"],"files":[{"path":"a","content":"b"}]}}"#,
        )
        .expect("a well-formed request");
        assert_eq!(ok.project.map(|p| p.files.len()), Some(1));
    }

    #[test]
    fn unknown_fields_duplicates_and_out_of_range_are_refused() {
        // serde_json's own words, with the position. A scalar's range and type errors
        // name the value and the protobuf type but not the field: the position points
        // at it (serde passes no field name to a `deserialize_with` reader).
        for (bad, message) in [
            (
                r#"{"protocol":4,"bogus":1}"#,
                "unknown field `bogus`, expected one of `protocol`, `minimumIsolation`, `minimum_isolation`, \
                 `traceId`, `trace_id`, `timeoutMs`, `timeout_ms`, `softwareRule`, `software_rule`, `javascript`, \
                 `project`, `module`, `cell` at line 1 column 21",
            ),
            (r#"{"protocol":4,"protocol":4}"#, "duplicate field `protocol` at line 1 column 24"),
            (r#"{"protocol":4,"timeoutMs":2147483648}"#, "2147483648 is out of range for int32 at line 1 column 37"),
            (r#"{"protocol":-1}"#, "-1 is out of range for uint32 at line 1 column 15"),
            (r#"{"protocol":4,"timeoutMs":1.5}"#, "1.5 is not an integer at line 1 column 30"),
            (
                r#"{"protocol":4,"javascript":{"code":"x","extra":true}}"#,
                "unknown field `extra`, expected one of `code`, `grantProfile`, `grant_profile` at line 1 column 46",
            ),
            // The camelCase and snake_case spellings are one field.
            (r#"{"protocol":4,"timeoutMs":5,"timeout_ms":5}"#, "duplicate field `timeoutMs` at line 1 column 40"),
        ] {
            let err = from_json::<RunRequest>(bad.as_bytes()).expect_err(bad);
            assert!(matches!(&err, DecodeError::Json(e) if e.is_data()), "{bad}: {err:?}");
            assert_eq!(err.to_string(), message, "{bad}");
        }
    }

    #[test]
    fn nulls_read_as_zero_values() {
        let r: RunRequest =
            serde_json::from_str(r#"{"protocol":4,"traceId":null,"timeoutMs":null,"javascript":{"code":null}}"#)
                .expect("nulls");
        assert_eq!(r.trace_id, "");
        assert_eq!(r.timeout_ms, 0);
        assert_eq!(r.javascript.map(|j| j.code), Some(String::new()));
    }

    #[test]
    fn payload_must_be_exactly_one() {
        let none: RunRequest = serde_json::from_str(r#"{"protocol":4}"#).expect("json");
        assert_eq!(none.payload().err(), Some(PayloadError::Missing));
        let two: RunRequest =
            serde_json::from_str(r#"{"protocol":4,"javascript":{"code":"1"},"cell":{"code":"1"}}"#).expect("json");
        assert_eq!(two.payload().err(), Some(PayloadError::Several));
    }

    #[test]
    fn responses_write_proto3_json() {
        let resp = RunResponse {
            sandbox: "wasm".into(),
            isolation: "process".into(),
            duration_ms: 12,
            javascript: Some(JavaScriptResult { stdout: b"42\n".to_vec(), ..Default::default() }),
            ..Default::default()
        };
        let text = serde_json::to_string(&resp).expect("json");
        assert_eq!(
            text,
            r#"{"sandbox":"wasm","isolation":"process","durationMs":"12","javascript":{"stdout":"NDIK"}}"#
        );
        let back: RunResponse = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, resp);
    }

    #[test]
    fn doubles_keep_negative_zero_and_nan_names() {
        let m: ModuleRun = serde_json::from_str(
            r#"{"model":"m","rows":[{"values":[-0,"NaN","-Infinity",1e3]}],"endTime":1,"step":"0.5"}"#,
        )
        .expect("json");
        let v = &m.rows[0].values;
        assert!(v[0] == 0.0 && v[0].is_sign_negative());
        assert!(v[1].is_nan());
        assert_eq!(v[2], f64::NEG_INFINITY);
        assert_eq!(v[3], 1000.0);
        assert_eq!(m.step, 0.5);
        let out = serde_json::to_string(&m.rows[0]).expect("json");
        assert_eq!(out, r#"{"values":[-0.0,"NaN","-Infinity",1000.0]}"#);
    }

    #[test]
    fn bytes_accept_url_safe_and_unpadded_base64() {
        let r: JavaScriptResult = serde_json::from_str(r#"{"stdout":"_3g","stderr":"/3g="}"#).expect("json");
        assert_eq!(r.stdout, vec![0xff, 0x78]);
        assert_eq!(r.stderr, vec![0xff, 0x78]);
        assert_eq!(
            serde_json::from_str::<JavaScriptResult>(r#"{"stdout":"!!"}"#).expect_err("w1").to_string(),
            "invalid base64 in a bytes field at line 1 column 15"
        );
    }

    #[test]
    fn outcomes_read_by_name_or_number() {
        let p: ProjectResult = serde_json::from_str(r#"{"outcome":"PROJECT_OUTCOME_TIMED_OUT"}"#).expect("json");
        assert_eq!(p.outcome, ProjectOutcome::TimedOut);
        let q: ProjectResult = serde_json::from_str(r#"{"outcome":2}"#).expect("json");
        assert_eq!(q.outcome, ProjectOutcome::SetupFailed);
        assert_eq!(
            serde_json::from_str::<ProjectResult>(r#"{"outcome":"DONE"}"#).expect_err("w2").to_string(),
            "unknown project outcome \"DONE\" at line 1 column 18"
        );
    }
}
