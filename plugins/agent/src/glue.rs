//! The WIT glue a plugin's sessions and project runs need around this crate.

/// Expanded in a provider plugin's root, where its `wit_bindgen::generate!`
/// put the provider world's types: `session_failed`, `session_budget`,
/// `cell_answer`, `snippet_answer` and `project_answer` for calls through
/// [`crate::session::Agent`], and `read_report` for the project runner's stdout
/// (see [`crate::runner::read`]).
#[macro_export]
#[allow(clippy::crate_in_macro_def, reason = "the glue names the expanding plugin's own WIT bindings")]
macro_rules! session_glue {
    () => {
        mod session_glue {
            use crate::exports::plimsoll::provider::provider::{
                Answer, CallError, CallOutput, Ending, Failure, SessionEnd,
            };
            use crate::plimsoll::types::types::{
                CellResult, File, Limits, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason, SnippetResult,
                StepResult,
            };

            fn output(bytes: Vec<u8>, truncated: bool) -> Output {
                Output { bytes, truncated }
            }

            fn session_ending(e: $crate::session::Ending) -> Ending {
                let end = match e.end {
                    $crate::session::End::DiskExceeded => SessionEnd::DiskExceeded,
                    $crate::session::End::MainProcessEnded => SessionEnd::MainProcessEnded,
                    $crate::session::End::BoundaryFailed => SessionEnd::BoundaryFailed,
                };
                Ending { end, detail: e.detail }
            }

            /// A failed session call in WIT's words.
            pub(crate) fn session_failed(f: $crate::session::Failed) -> CallError {
                use $crate::session::{Failed, Refuse};
                match f {
                    Failed::Refused(Refuse::Request, message) => {
                        CallError::Refused(Refusal { reason: RefusalReason::Request, message })
                    }
                    Failed::Refused(Refuse::Environment, message) => {
                        CallError::Refused(Refusal { reason: RefusalReason::Environment, message })
                    }
                    Failed::Ended(e) => CallError::Ended(session_ending(e)),
                    Failed::MayHaveRun { detail, ended } => {
                        CallError::MayHaveRun(Failure { detail, ended: ended.map(session_ending) })
                    }
                }
            }

            pub(crate) fn session_budget(limits: &Limits) -> $crate::session::Budget {
                let max_output = if limits.max_output_bytes == 0 { 1 << 20 } else { limits.max_output_bytes };
                $crate::session::Budget { timeout_ms: limits.timeout_ms, max_output }
            }

            /// A cell's answer; an interpreter the kernel killed is named, with the
            /// sandbox's memory (`memory_mb`).
            pub(crate) fn cell_answer(a: $crate::session::Answered, memory_mb: u32) -> Answer {
                let t = &a.trailer;
                let mut stderr = a.stderr;
                if t.ended && !t.timed_out && t.exit == 137 {
                    stderr.extend_from_slice(
                        format!(
                            "\nplimsoll: the interpreter was killed (SIGKILL; the memory limit is {memory_mb} MiB)\n"
                        )
                        .as_bytes(),
                    );
                }
                Answer {
                    output: CallOutput::Cell(CellResult {
                        exit_code: t.exit,
                        timed_out: t.timed_out,
                        stdout: output(a.stdout, t.stdout_truncated),
                        stderr: output(stderr, t.stderr_truncated),
                        interpreter_started: t.started,
                        interpreter_ended: t.ended,
                    }),
                    ended: a.ended.map(session_ending),
                }
            }

            pub(crate) fn snippet_answer(a: $crate::session::Answered) -> Answer {
                let t = &a.trailer;
                Answer {
                    output: CallOutput::Snippet(SnippetResult {
                        exit_code: t.exit,
                        timed_out: t.timed_out,
                        stdout: output(a.stdout, t.stdout_truncated),
                        stderr: output(a.stderr, t.stderr_truncated),
                    }),
                    ended: a.ended.map(session_ending),
                }
            }

            /// A project call's answer: the runner's report under `key`.
            pub(crate) fn project_answer(a: $crate::session::Answered, key: &str) -> Answer {
                let t = &a.trailer;
                let ended =
                    $crate::runner::Ended { timed_out: t.timed_out, oom_killed: false, exit_code: Some(t.exit) };
                Answer {
                    output: CallOutput::Project(read_report(&a.stdout, key, &ended)),
                    ended: a.ended.map(session_ending),
                }
            }

            /// A project's result from what the runner wrote (see [`$crate::runner::read`]).
            pub(crate) fn read_report(stdout: &[u8], key: &str, ended: &$crate::runner::Ended) -> ProjectResult {
                let failed = |outcome, detail: String| ProjectResult {
                    outcome,
                    detail,
                    steps: Vec::new(),
                    artifacts: Vec::new(),
                    artifacts_truncated: false,
                };
                let report = match $crate::runner::read(stdout, key, ended) {
                    $crate::runner::Reading::Report(r) => r,
                    $crate::runner::Reading::TimedOut => {
                        return failed(ProjectOutcome::TimedOut, "run exceeded the time budget".into());
                    }
                    $crate::runner::Reading::ProtocolError(why) => return failed(ProjectOutcome::ProtocolError, why),
                };
                if let Some(e) = report.error {
                    return failed(ProjectOutcome::SetupFailed, e);
                }
                let steps: Vec<StepResult> = report
                    .steps
                    .iter()
                    .map(|s| StepResult {
                        command: s.command.clone(),
                        exit_code: s.exit_code,
                        timed_out: s.timed_out,
                        duration_ms: s.duration_ms,
                        stdout: output($crate::runner::decoded(&s.stdout), s.stdout_truncated),
                        stderr: output($crate::runner::decoded(&s.stderr), s.stderr_truncated),
                    })
                    .collect();
                let (outcome, detail) = match steps.iter().position(|s| s.timed_out) {
                    Some(i) => (ProjectOutcome::TimedOut, format!("step {} exceeded its time budget", i + 1)),
                    None => (ProjectOutcome::Completed, String::new()),
                };
                let artifacts = report
                    .artifacts
                    .iter()
                    .map(|a| File { path: a.path.clone(), content: $crate::runner::decoded(&a.content) })
                    .collect();
                ProjectResult { outcome, detail, steps, artifacts, artifacts_truncated: report.artifacts_truncated }
            }
        }
        use session_glue::{cell_answer, project_answer, read_report, session_budget, session_failed, snippet_answer};
    };
}
