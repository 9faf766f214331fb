//! The project runner (`runners/project/runner.py`) as plugins drive it: its plan,
//! the room its report needs, the key that authenticates the report, and what
//! its stdout says once read. [`crate::session_glue`] maps a reading to WIT.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::report;

/// The most bytes a run's artifacts may hold together, as the original's runner allows.
pub const MAX_ARTIFACT_BYTES: u32 = 8 << 20;

/// The most processes and threads of the guest user (RLIMIT_NPROC) while a step
/// runs under runsc: node with worker threads and a child fits; a fork bomb stops at
/// EAGAIN instead of ending the sandbox.
pub const RUNSC_STEP_PROCESSES: u32 = 24;

/// Where the runner reads the memory its steps use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// The container's cgroup.
    Cgroup,
    /// `/proc/meminfo`: gVisor's, and a microVM's, are the sandbox's own.
    Meminfo,
}

/// One project run's plan.
#[derive(Debug)]
pub struct Plan<'a> {
    /// Relative paths under the work directory and their contents.
    pub files: &'a [(&'a str, &'a [u8])],
    pub steps: &'a [String],
    pub artifacts: &'a [String],
    pub timeout_ms: u32,
    /// Bytes kept per stream of each step.
    pub max_output: u32,
    /// The sandbox's memory: the runner keeps its steps below it, so the
    /// sandbox's own limit never ends the runner.
    pub memory_mb: u32,
    pub memory_source: MemorySource,
    /// RLIMIT_NPROC for each step (0: none).
    pub step_processes: u32,
    /// The only variables each step gets, `NAME=value`.
    pub env: &'a [&'a str],
    /// Where the files go and the steps run (the runner's `/work` when None).
    pub work_dir: Option<&'a str>,
}

impl Plan<'_> {
    /// The plan as the runner reads it, with the report key (hex).
    pub fn json(&self, key: &str) -> serde_json::Value {
        let files: Vec<serde_json::Value> = self
            .files
            .iter()
            .map(|(path, content)| serde_json::json!({"path": path, "content": STANDARD.encode(content)}))
            .collect();
        let env: std::collections::BTreeMap<&str, &str> = self.env.iter().filter_map(|kv| kv.split_once('=')).collect();
        serde_json::json!({
            "files": files,
            "steps": self.steps,
            "artifacts": self.artifacts,
            "timeoutMs": self.timeout_ms,
            "maxOutput": self.max_output,
            "maxArtifactBytes": MAX_ARTIFACT_BYTES,
            "memoryBytes": u64::from(self.memory_mb) << 20,
            "memorySource": match self.memory_source {
                MemorySource::Cgroup => "cgroup",
                MemorySource::Meminfo => "meminfo",
            },
            "stepProcesses": self.step_processes,
            "env": env,
            "workDir": self.work_dir,
            "reportKey": key,
        })
    }
}

/// The most bytes a runner's report may take on stdout: every step's two streams,
/// the artifacts in base64 (4/3 of their bytes), and room for the JSON around them.
pub fn report_cap(max_output: u32, steps: usize) -> u32 {
    let artifacts = MAX_ARTIFACT_BYTES / 3 * 4 + (1 << 20);
    max_output
        .saturating_mul(2)
        .saturating_mul(u32::try_from(steps.max(1)).unwrap_or(u32::MAX))
        .saturating_add(artifacts)
}

/// A fresh 32-byte report key, hex-encoded; None without randomness.
pub fn report_key() -> Option<String> {
    Some(crate::random_hex(32)).filter(|k| !k.is_empty())
}

/// How the runner's process ended, for reading its report.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub timed_out: bool,
    pub oom_killed: bool,
    pub exit_code: Option<i32>,
}

/// What the runner's stdout says.
#[derive(Debug)]
pub enum Reading {
    /// Its authenticated report.
    Report(report::Report),
    /// No authenticated report, and the budget ran out.
    TimedOut,
    /// No authenticated report: the detail says why.
    ProtocolError(String),
}

/// Reads the runner's stdout: only a frame whose MAC verifies under `key` (hex)
/// counts.
pub fn read(stdout: &[u8], key: &str, ended: &Ended) -> Reading {
    let key = hex::decode(key).unwrap_or_default();
    let body = match report::find(stdout, &key) {
        report::Found::Authentic(b) => b,
        _ if ended.timed_out => return Reading::TimedOut,
        report::Found::Forged => return Reading::ProtocolError("no authenticated runner report".into()),
        report::Found::Missing => {
            let why = if ended.oom_killed { " after running out of memory" } else { "" };
            return Reading::ProtocolError(format!(
                "the runner did not report{why} (exit {})",
                ended.exit_code.unwrap_or(-1)
            ));
        }
    };
    match serde_json::from_slice::<report::Report>(&body) {
        Ok(r) => Reading::Report(r),
        Err(_) => Reading::ProtocolError("could not parse sandbox result".into()),
    }
}

/// A base64 field of the report, decoded (empty when it is not base64).
pub fn decoded(s: &str) -> Vec<u8> {
    STANDARD.decode(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(work_dir: Option<&str>) -> serde_json::Value {
        let steps = ["true".to_string()];
        Plan {
            files: &[("a.txt", b"hi")],
            steps: &steps,
            artifacts: &[],
            timeout_ms: 1000,
            max_output: 10,
            memory_mb: 64,
            memory_source: MemorySource::Cgroup,
            step_processes: 0,
            env: &["HOME=/tmp"],
            work_dir,
        }
        .json("00")
    }

    #[test]
    fn the_plan_names_its_work_directory_only_when_told_one() {
        assert_eq!(plan(Some("/tmp/plimsoll/work"))["workDir"], "/tmp/plimsoll/work");
        assert!(plan(None)["workDir"].is_null(), "the runner's own /work");
        let p = plan(None);
        assert_eq!((p["files"][0]["content"].as_str(), p["env"]["HOME"].as_str()), (Some("aGk="), Some("/tmp")));
        assert_eq!((p["memoryBytes"].as_u64(), p["memorySource"].as_str()), (Some(64 << 20), Some("cgroup")));
    }
}
