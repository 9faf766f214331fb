//! The WIT glue a plugin's sessions and project runs need around this crate.

/// Expanded in a provider plugin's root, where its `wit_bindgen::generate!`
/// put the provider world's types: `session_language`, `session_cell`,
/// `session_snippet`, `session_project` and `session_ended_after` for calls through
/// [`crate::session::Agent`]; `report_key`, `runner_plan` and `report_room` for
/// the project runner's run, and `read_report` for its stdout (see
/// [`crate::runner::read`]).
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

            /// Refuses a session call in a language `provider`'s agent keeps no interpreter for.
            pub(crate) fn session_language(provider: &str, language: &str) -> Result<(), CallError> {
                match language {
                    "javascript" | "python" => Ok(()),
                    other => Err(CallError::Refused(Refusal {
                        reason: RefusalReason::Unsupported,
                        message: format!("the {provider} provider's sessions run javascript and python, not {other}"),
                    })),
                }
            }

            /// A cell through `agent`, in a sandbox of `memory_mb`.
            pub(crate) fn session_cell<C: $crate::session::Channel>(
                agent: &$crate::session::Agent<C>,
                (language, code, files): (&str, &str, &[File]),
                limits: &Limits,
                memory_mb: u32,
            ) -> Result<Answer, CallError> {
                let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.path.as_str(), f.content.as_slice())).collect();
                let a = agent.cell(language, code, &files, session_budget(limits)).map_err(session_failed)?;
                Ok(cell_answer(a, memory_mb))
            }

            /// `answer` with the session ended by `ending`, something that went
            /// wrong after the call (a way out that would not close): an answer or
            /// a may-have-run failure keeps what the call did and ends the session;
            /// a refusal becomes the ending (nothing ran, and no call can run now).
            pub(crate) fn session_ended_after(
                answer: Result<Answer, CallError>,
                ending: Ending,
            ) -> Result<Answer, CallError> {
                match answer {
                    Ok(mut a) => {
                        a.ended = a.ended.or(Some(ending));
                        Ok(a)
                    }
                    Err(CallError::MayHaveRun(mut f)) => {
                        f.ended = f.ended.or(Some(ending));
                        Err(CallError::MayHaveRun(f))
                    }
                    Err(CallError::Refused(_)) => Err(CallError::Ended(ending)),
                    Err(other) => Err(other),
                }
            }

            /// A snippet through `agent`.
            pub(crate) fn session_snippet<C: $crate::session::Channel>(
                agent: &$crate::session::Agent<C>,
                (language, code): (&str, &str),
                env: &[(String, String)],
                limits: &Limits,
            ) -> Result<Answer, CallError> {
                agent.snippet(language, code, env, session_budget(limits)).map(snippet_answer).map_err(session_failed)
            }

            /// A project through `agent`: the runner on `plan` for `steps` steps, its
            /// report under `key`.
            pub(crate) fn session_project<C: $crate::session::Channel>(
                agent: &$crate::session::Agent<C>,
                (plan, steps): (serde_json::Value, usize),
                limits: &Limits,
                key: &str,
            ) -> Result<Answer, CallError> {
                let a =
                    agent.project(plan, report_room(limits, steps), session_budget(limits)).map_err(session_failed)?;
                Ok(project_answer(a, key))
            }

            /// A project through `agent` on the runner: a fresh report key, the plan
            /// for a sandbox of `memory` with each step given only `env` in
            /// `work_dir`, and the report read under that key.
            pub(crate) fn session_runner_project<C: $crate::session::Channel>(
                agent: &$crate::session::Agent<C>,
                (files, steps, artifacts): (&[File], &[String], &[String]),
                limits: &Limits,
                memory: (u32, $crate::runner::MemorySource),
                (env, work_dir): (&[&str], Option<&str>),
            ) -> Result<Answer, CallError> {
                let key = report_key().map_err(CallError::Refused)?;
                let plan = runner_plan((files, steps, artifacts), limits, memory, 0, (env, work_dir), &key);
                session_project(agent, (plan, steps.len()), limits, &key)
            }

            /// A fresh 32-byte report key, hex-encoded, for one project run.
            pub(crate) fn report_key() -> Result<String, Refusal> {
                $crate::runner::report_key().ok_or_else(|| Refusal {
                    reason: RefusalReason::Environment,
                    message: "no randomness for the report key".into(),
                })
            }

            /// The runner's plan (see [`$crate::runner::Plan`]) for a sandbox of
            /// `memory_mb` read from `source`, each step under `step_processes`
            /// processes (0: no cap) with only `env`, in `work_dir` (None: the
            /// runner's `/work`).
            pub(crate) fn runner_plan(
                (files, steps, artifacts): (&[File], &[String], &[String]),
                limits: &Limits,
                (memory_mb, source): (u32, $crate::runner::MemorySource),
                step_processes: u32,
                (env, work_dir): (&[&str], Option<&str>),
                key: &str,
            ) -> serde_json::Value {
                let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.path.as_str(), f.content.as_slice())).collect();
                $crate::runner::Plan {
                    files: &files,
                    steps,
                    artifacts,
                    timeout_ms: limits.timeout_ms,
                    max_output: session_budget(limits).max_output,
                    memory_mb,
                    memory_source: source,
                    step_processes,
                    env,
                    work_dir,
                }
                .json(key)
            }

            /// The bytes a runner's report of `steps` steps may take on stdout.
            pub(crate) fn report_room(limits: &Limits, steps: usize) -> u32 {
                $crate::runner::report_cap(session_budget(limits).max_output, steps)
            }

            /// A call naming its own grant in a session whose relay serves each
            /// call's: the call's description written beside the relay's client
            /// (`write`), `call` run, the description removed (`remove`). One that
            /// will not go ends the session (the host's slot is empty again
            /// anyway, so nothing reaches the broker). `place` names the
            /// session's sandbox for the texts ("openshell sandbox").
            #[allow(dead_code, reason = "only where a relay serves each call's grant")]
            pub(crate) fn session_described(
                place: &str,
                write: impl FnOnce() -> Result<(), String>,
                remove: impl Fn() -> Result<(), String>,
                call: impl FnOnce() -> Result<Answer, CallError>,
            ) -> Result<Answer, CallError> {
                if let Err(e) = write() {
                    let why = format!("describing the call's grant in the session's {place} failed ({e})");
                    return Err(match remove() {
                        Ok(()) => CallError::Refused(Refusal {
                            reason: RefusalReason::Environment,
                            message: format!("{why}; nothing ran"),
                        }),
                        Err(e) => CallError::Ended(Ending {
                            end: SessionEnd::BoundaryFailed,
                            detail: format!("{why}, and it could not be removed again ({e}); nothing ran"),
                        }),
                    });
                }
                let answer = call();
                let Err(e) = remove() else { return answer };
                let ending = Ending {
                    end: SessionEnd::BoundaryFailed,
                    detail: format!(
                        "the grant of a call could not be removed from the session's {place} after it ({e})"
                    ),
                };
                session_ended_after(answer, ending)
            }

            /// What a session's read-back before a call says of its sandbox,
            /// `place` naming it ("openshell sandbox"): the vendor did not answer
            /// (refused; the session goes on), the sandbox is gone, or it
            /// changed (either ends the session as `sandbox_changed`).
            #[allow(dead_code, reason = "only where a session reads its sandbox back by a vendor's API")]
            pub(crate) struct ReadBack<'a> {
                pub(crate) place: &'a str,
            }

            #[allow(dead_code, reason = "only where a session reads its sandbox back by a vendor's API")]
            impl ReadBack<'_> {
                pub(crate) fn unanswered(&self, what: &str, e: String) -> CallError {
                    CallError::Refused(Refusal {
                        reason: RefusalReason::Environment,
                        message: format!("reading the session's {} back failed ({what}: {e}); nothing ran", self.place),
                    })
                }

                pub(crate) fn gone(&self) -> CallError {
                    CallError::Ended(Ending {
                        end: SessionEnd::SandboxChanged,
                        detail: format!("the session's {} is gone; nothing ran", self.place),
                    })
                }

                pub(crate) fn changed(&self, why: String) -> CallError {
                    CallError::Ended(Ending {
                        end: SessionEnd::SandboxChanged,
                        detail: format!(
                            "the session's {} changed since it was opened ({why}); nothing ran",
                            self.place
                        ),
                    })
                }
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
            fn session_failed(f: $crate::session::Failed) -> CallError {
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

            fn session_budget(limits: &Limits) -> $crate::session::Budget {
                let max_output = if limits.max_output_bytes == 0 { 1 << 20 } else { limits.max_output_bytes };
                $crate::session::Budget { timeout_ms: limits.timeout_ms, max_output }
            }

            /// A cell's answer; an interpreter the kernel killed is named, with the
            /// sandbox's memory (`memory_mb`).
            fn cell_answer(a: $crate::session::Answered, memory_mb: u32) -> Answer {
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

            fn snippet_answer(a: $crate::session::Answered) -> Answer {
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
            fn project_answer(a: $crate::session::Answered, key: &str) -> Answer {
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
        #[allow(unused_imports, reason = "each plugin uses what its sessions need")]
        use session_glue::{
            ReadBack, read_report, report_key, report_room, runner_plan, session_cell, session_described,
            session_ended_after, session_language, session_project, session_runner_project, session_snippet,
        };
    };
}
