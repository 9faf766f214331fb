//! What the remote provider plugins (e2b, dockercloud, openshell) share: a run over a
//! sandbox the plugin drives through its vendor (files in, steps in order,
//! artifacts back, a link out of the project never read), the startup smoke
//! test's checks, and the text helpers. Each plugin supplies a [`Remote`] for its
//! vendor and maps the results to its WIT types; this crate knows no WIT.

use std::time::{Duration, Instant};

pub mod wrapper;

/// One output stream, kept to its cap.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub bytes: Vec<u8>,
    /// Bytes past the cap were dropped.
    pub truncated: bool,
}

/// What a command did.
#[derive(Debug)]
pub struct Ran {
    pub exit_code: i32,
    pub timed_out: bool,
    pub stdout: Output,
    pub stderr: Output,
    pub duration_ms: u32,
}

/// A sandbox of one run, as its plugin drives it.
pub trait Remote {
    /// Writes `bytes` to `path`, making its directories.
    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String>;
    /// Runs `script` with `sh -c` in `cwd` until it ends or `deadline` passes
    /// (then it is killed and the result says timed out); each stream keeps
    /// `max_output` bytes.
    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<Ran, String>;
    /// Reads the file at `path`; None when it is not there to read.
    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String>;
    /// Makes the work directory `dir` of a project that uploads nothing.
    fn make_dir(&self, dir: &str) -> Result<(), String> {
        let made =
            self.run(&format!("mkdir -p {}", shell_quote(dir)), "/", Instant::now() + Duration::from_secs(30), 4096)?;
        if made.exit_code != 0 {
            return Err(String::from_utf8_lossy(&made.stderr.bytes).into_owned());
        }
        Ok(())
    }
    /// A shell line run before the artifacts are resolved, so nothing the steps
    /// left changes a path between its check and its read ("" for none).
    fn before_artifacts(&self) -> &'static str {
        ""
    }
    /// Writes a grant's `client` (bare names and contents) into `dir`; returns
    /// the shell line every command of the run exports first: `env`, `{dir}`
    /// in a value replaced by `dir` (see [`exported`]). A failure names the
    /// file it was writing.
    fn install_client<'a>(
        &self,
        dir: &str,
        client: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<String, String> {
        for (name, content) in client {
            self.upload(&format!("{dir}/{name}"), content)
                .map_err(|e| format!("writing the grant's client {name}: {e}"))?;
        }
        Ok(env.into_iter().map(|(k, v)| format!("export {k}={}; ", shell_quote(&v.replace("{dir}", dir)))).collect())
    }
}

/// `script` with `exports` (an [`Remote::install_client`] line) before it.
pub fn exported<'a>(exports: &str, script: &'a str) -> std::borrow::Cow<'a, str> {
    if exports.is_empty() { script.into() } else { format!("{exports}{script}").into() }
}

/// A shell line that SIGKILLs every process the guest may signal except the
/// shell running it and that shell's ancestors (a vendor's exec, a wrapper):
/// what a [`Remote::before_artifacts`] runs where the command is not the
/// sandbox's only process of the guest. Ends with `; `.
pub const KILL_THE_REST: &str = r#"keep=" $$ "; p=$$; while [ "${p:-1}" -gt 1 ]; do p=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null); keep="$keep${p:-1} "; done; for d in /proc/[0-9]*; do case "$keep" in *" ${d#/proc/} "*) ;; *) kill -9 "${d#/proc/}" 2>/dev/null;; esac; done; "#;

/// A failure after something of the caller's reached the sandbox: the run may
/// have happened.
#[derive(Debug, PartialEq, Eq)]
pub struct MayHaveRun(pub String);

fn may_have_run(what: &str, e: String) -> MayHaveRun {
    MayHaveRun(format!("{what}: {e}"))
}

/// The file and command of a snippet in `language`; None for a language the
/// remote plugins do not run.
pub fn snippet_command(language: &str) -> Option<(&'static str, &'static str)> {
    match language {
        "javascript" => Some(("main.js", "exec node main.js")),
        "python" => Some(("main.py", "exec python3 main.py")),
        _ => None,
    }
}

/// Runs a snippet already chosen by [`snippet_command`]: its code written to
/// `dir/file`, then `command` in `dir`, the budget counted from when it starts.
pub fn snippet(
    r: &impl Remote,
    dir: &str,
    (file, command): (&str, &str),
    code: &[u8],
    budget: Duration,
    max_output: usize,
) -> Result<Ran, MayHaveRun> {
    r.upload(&format!("{dir}/{file}"), code).map_err(|e| may_have_run("writing the snippet", e))?;
    r.run(command, dir, Instant::now() + budget, max_output).map_err(|e| may_have_run("running the snippet", e))
}

/// How a project ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    TimedOut,
}

/// A project's run.
#[derive(Debug)]
pub struct Project {
    pub outcome: Outcome,
    pub detail: String,
    /// Each step run, with its command.
    pub steps: Vec<(String, Ran)>,
    pub artifacts: Vec<(String, Vec<u8>)>,
    pub artifacts_truncated: bool,
    /// Artifacts not read because their real path leaves the project, with it.
    pub links_out: Vec<(String, String)>,
}

/// The most artifact bytes read back from one project.
pub const MAX_ARTIFACT_BYTES: usize = 4 << 20;

/// Runs a project in `dir`: its files written, its steps in order until one fails
/// or the budget ends, then its artifacts read back.
pub fn project(
    r: &impl Remote,
    dir: &str,
    files: &[(&str, &[u8])],
    steps: &[String],
    artifacts: &[String],
    budget: Duration,
    max_output: usize,
) -> Result<Project, MayHaveRun> {
    let deadline = Instant::now() + budget;
    for (path, content) in files {
        r.upload(&format!("{dir}/{path}"), content).map_err(|e| may_have_run(&format!("writing {path}"), e))?;
    }
    if files.is_empty() {
        r.make_dir(dir).map_err(|e| may_have_run("making the work directory", e))?;
    }
    let mut done = Vec::new();
    let mut outcome = Outcome::Completed;
    let mut detail = String::new();
    for step in steps {
        if Instant::now() >= deadline {
            outcome = Outcome::TimedOut;
            detail = "the project's budget ran out before this step".into();
            break;
        }
        let ran =
            r.run(step, dir, deadline, max_output).map_err(|e| may_have_run(&format!("running step {step:?}"), e))?;
        let (failed, timed_out) = (ran.exit_code != 0, ran.timed_out);
        done.push((step.clone(), ran));
        if timed_out {
            outcome = Outcome::TimedOut;
            detail = "the project's budget ran out during this step".into();
            break;
        }
        if failed {
            break;
        }
    }
    let read = read_artifacts(r, dir, artifacts)?;
    Ok(Project {
        outcome,
        detail,
        steps: done,
        artifacts: read.files,
        artifacts_truncated: read.truncated,
        links_out: read.links_out,
    })
}

/// The artifacts read back.
#[derive(Default)]
struct Read {
    files: Vec<(String, Vec<u8>)>,
    truncated: bool,
    links_out: Vec<(String, String)>,
}

/// Reads the artifacts back: each path resolved in the guest first (after the
/// plugin's [`Remote::before_artifacts`]), and one whose real path leaves `dir`
/// (a link out) not read, as the docker runner does not read one.
fn read_artifacts(r: &impl Remote, dir: &str, artifacts: &[String]) -> Result<Read, MayHaveRun> {
    if artifacts.is_empty() {
        return Ok(Read::default());
    }
    let mut script = format!("{}for a in", r.before_artifacts());
    for a in artifacts {
        script.push(' ');
        script.push_str(&shell_quote(&format!("{dir}/{a}")));
    }
    script.push_str("; do printf '%s\\0' \"$(realpath -e -- \"$a\" 2>/dev/null)\"; done");
    let resolved = r
        .run(&script, "/", Instant::now() + Duration::from_secs(30), 1 << 20)
        .map_err(|e| may_have_run("resolving the artifacts", e))?;
    let real: Vec<String> =
        resolved.stdout.bytes.split(|b| *b == 0).map(|p| String::from_utf8_lossy(p).into()).collect();
    if resolved.exit_code != 0 || resolved.stdout.truncated || real.len() != artifacts.len() + 1 {
        return Err(MayHaveRun(format!(
            "resolving the artifacts: the guest's answer was cut (exit {})",
            resolved.exit_code
        )));
    }
    let inside = format!("{dir}/");
    let mut read = Read::default();
    let mut total = 0usize;
    for (path, real) in artifacts.iter().zip(&real) {
        if real.is_empty() {
            continue;
        }
        if !real.starts_with(&inside) {
            read.links_out.push((path.clone(), real.clone()));
            continue;
        }
        let Some(bytes) = r.download(real).map_err(|e| may_have_run(&format!("reading artifact {path}"), e))? else {
            continue;
        };
        if total + bytes.len() > MAX_ARTIFACT_BYTES {
            read.truncated = true;
            continue;
        }
        total += bytes.len();
        read.files.push((path.clone(), bytes));
    }
    Ok(read)
}

/// The smoke test's checks in a fresh sandbox: a file written in `dir` is read
/// there, node and python3 run, and `fetch` reaches neither an address nor a
/// name outside. Returns node's version, or the check that failed and why.
pub fn smoke(r: &impl Remote, dir: &str) -> Result<String, (String, String)> {
    let run = |script: &str| {
        r.run(script, dir, Instant::now() + Duration::from_secs(20), 64 << 10)
            .map_err(|e| (script.to_string(), e))
            .map(|ran| (ran.exit_code, String::from_utf8_lossy(&ran.stdout.bytes).trim().to_string()))
    };
    r.upload(&format!("{dir}/probe.txt"), b"probe").map_err(|e| ("upload".to_string(), e))?;
    let (code, cwd) = run("pwd && cat probe.txt")?;
    if code != 0 || cwd != format!("{dir}\nprobe") {
        return Err(("working directory".into(), format!("exit {code}, printed {cwd:?}")));
    }
    let (code, node) = run("node -e 'console.log(process.version)'")?;
    if code != 0 || !node.starts_with('v') {
        return Err(("node".into(), format!("exit {code}, printed {node:?}")));
    }
    let (code, python) = run("python3 -c 'print(6*7)'")?;
    if code != 0 || python != "42" {
        return Err(("python".into(), format!("exit {code}, printed {python:?}")));
    }
    for url in ["https://1.1.1.1", "https://example.com"] {
        let script = format!(
            "node -e \"fetch('{url}',{{signal:AbortSignal.timeout(5000)}}).then(()=>console.log('reached'),()=>console.log('refused'))\""
        );
        let (_, seen) = run(&script)?;
        if seen != "refused" {
            return Err(("egress".into(), format!("{url}: {seen:?}")));
        }
    }
    Ok(node)
}

/// A sweep: deletes every id of `listed` that `keep` does not hold, with
/// `delete`; returns those deleted and, for each that failed, why.
pub fn sweep(
    listed: Vec<String>,
    keep: &[String],
    delete: impl Fn(&str) -> Result<(), String>,
) -> (Vec<String>, Vec<String>) {
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    for id in listed.into_iter().filter(|id| !keep.contains(id)) {
        match delete(&id) {
            Ok(()) => deleted.push(id),
            Err(e) => failed.push(format!("{id}: {e}")),
        }
    }
    (deleted, failed)
}

/// A release: deletes each of `targets` (sandboxes of calls that ended) with
/// `delete`; returns those deleted, telling `warn` of those that failed.
pub fn release(
    vendor: &str,
    targets: Vec<String>,
    delete: impl Fn(&str) -> Result<(), String>,
    warn: impl Fn(&str),
) -> Vec<String> {
    let (deleted, failed) = sweep(targets, &[], delete);
    if !failed.is_empty() {
        warn(&format!(
            "deleting {} {vendor} sandbox(es) failed; each holds capacity until a sweep deletes it: {}",
            failed.len(),
            failed.join("; ")
        ));
    }
    deleted
}

/// The glue every remote plugin needs between this crate and the WIT types its
/// `wit_bindgen::generate!` made, expanded in the plugin's root beside them:
/// `output`, `may_have_run`, `snippet_result`, `snippet_on`, `project_on`, `project_in` and
/// `project_result` (which logs every link out of the project).
#[macro_export]
macro_rules! wit_glue {
    ($name:literal) => {
        fn output(o: $crate::Output) -> Output {
            Output { bytes: o.bytes, truncated: o.truncated }
        }

        fn may_have_run(e: $crate::MayHaveRun) -> RunError {
            RunError::MayHaveRun(e.0)
        }

        fn snippet_result(ran: $crate::Ran) -> SnippetResult {
            SnippetResult {
                exit_code: ran.exit_code,
                timed_out: ran.timed_out,
                stdout: output(ran.stdout),
                stderr: output(ran.stderr),
            }
        }

        /// A snippet in `language`, in `dir` of a fresh sandbox that `open`
        /// makes for `budget`; `finish` gives the evidence (and hands the
        /// sandbox over or deletes it).
        fn snippet_on<S: $crate::Remote>(
            language: &str,
            code: &str,
            limits: &Limits,
            budget: std::time::Duration,
            dir: &str,
            open: impl FnOnce(std::time::Duration) -> Result<S, Refusal>,
            finish: impl FnOnce(S) -> Evidence,
        ) -> Result<(SnippetResult, Evidence), RunError> {
            let command = $crate::snippet_command(language).ok_or_else(|| {
                RunError::Refused(Refusal {
                    reason: RefusalReason::Unsupported,
                    message: format!(concat!("the ", $name, " provider runs javascript and python, not {}"), language),
                })
            })?;
            let sandbox = open(budget).map_err(RunError::Refused)?;
            let max_output = limits.max_output_bytes as usize;
            let ran =
                $crate::snippet(&sandbox, dir, command, code.as_bytes(), budget, max_output).map_err(may_have_run)?;
            Ok((snippet_result(ran), finish(sandbox)))
        }

        /// A project in `dir` of a fresh sandbox that `open` makes for
        /// `budget`; `finish` gives the evidence.
        fn project_on<S: $crate::Remote>(
            (files, steps, artifacts): (&[File], &[String], &[String]),
            limits: &Limits,
            budget: std::time::Duration,
            dir: &str,
            open: impl FnOnce(std::time::Duration) -> Result<S, Refusal>,
            finish: impl FnOnce(S) -> Evidence,
        ) -> Result<(ProjectResult, Evidence), RunError> {
            let sandbox = open(budget).map_err(RunError::Refused)?;
            let p = project_in(&sandbox, dir, files, steps, artifacts, budget, limits.max_output_bytes as usize)?;
            Ok((p, finish(sandbox)))
        }

        /// Runs a project in `dir` of `r` (see [`$crate::project`]), as the WIT
        /// types carry it.
        fn project_in(
            r: &impl $crate::Remote,
            dir: &str,
            files: &[File],
            steps: &[String],
            artifacts: &[String],
            budget: std::time::Duration,
            max_output: usize,
        ) -> Result<ProjectResult, RunError> {
            let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.path.as_str(), f.content.as_slice())).collect();
            let p = $crate::project(r, dir, &files, steps, artifacts, budget, max_output).map_err(may_have_run)?;
            Ok(project_result(p))
        }

        /// A project's run as the WIT types carry it; every link out of the
        /// project is logged.
        fn project_result(p: $crate::Project) -> ProjectResult {
            for (path, real) in &p.links_out {
                log::info(&format!(
                    "artifact {path:?} resolves outside the project directory, to {real:?}: not read back"
                ));
            }
            ProjectResult {
                outcome: match p.outcome {
                    $crate::Outcome::Completed => ProjectOutcome::Completed,
                    $crate::Outcome::TimedOut => ProjectOutcome::TimedOut,
                },
                detail: p.detail,
                steps: p
                    .steps
                    .into_iter()
                    .map(|(command, ran)| StepResult {
                        command,
                        exit_code: ran.exit_code,
                        timed_out: ran.timed_out,
                        duration_ms: ran.duration_ms,
                        stdout: output(ran.stdout),
                        stderr: output(ran.stderr),
                    })
                    .collect(),
                artifacts: p.artifacts.into_iter().map(|(path, content)| File { path, content }).collect(),
                artifacts_truncated: p.artifacts_truncated,
            }
        }
    };
}

/// The grant checks of a remote provider plugin, which carries grants in at
/// most one way (its `describe` names it, and the host sends no other): each
/// takes the way it carries and refuses any other by name, rather than run
/// without the grant.
#[macro_export]
macro_rules! grant_ways {
    ($name:literal) => {
        /// Refuses any grant: for a call that carries none.
        #[allow(dead_code)]
        fn no_grant(grant: Option<&Grant>) -> Result<(), Refusal> {
            match grant {
                None => Ok(()),
                Some(_) => Err(Refusal {
                    reason: RefusalReason::Unsupported,
                    message: concat!("the ", $name, " provider cannot carry a grant here").into(),
                }),
            }
        }

        /// The grant through the host's guard; a relay grant is refused.
        #[allow(dead_code)]
        fn guard_grant(grant: Option<Grant>) -> Result<Option<GuardGrant>, Refusal> {
            match grant {
                None => Ok(None),
                Some(Grant::Guard(g)) => Ok(Some(g)),
                Some(Grant::Relay(_)) => Err(Refusal {
                    reason: RefusalReason::Unsupported,
                    message: concat!("the ", $name, " provider carries grants through the host's guard, not a relay")
                        .into(),
                }),
            }
        }

        /// The grant through the host's relay; a guard grant is refused.
        #[allow(dead_code)]
        fn relay_grant(grant: Option<Grant>) -> Result<Option<RelayGrant>, Refusal> {
            match grant {
                None => Ok(None),
                Some(Grant::Relay(g)) => Ok(Some(g)),
                Some(Grant::Guard(_)) => Err(Refusal {
                    reason: RefusalReason::Unsupported,
                    message: concat!("the ", $name, " provider cannot carry a grant through the host's guard").into(),
                }),
            }
        }
    };
}

/// `NoSession`, for a remote plugin that keeps no sessions: every session call
/// is refused as `unsupported`, naming `$name`. Expanded beside [`wit_glue!`].
#[macro_export]
macro_rules! no_sessions {
    ($name:literal) => {
        /// Sessions are not offered: `describe` says so, and the host never opens one.
        struct NoSession;

        impl GuestSession for NoSession {
            fn open(_: Limits, _: u32, _: Option<Grant>) -> Result<Session, Refusal> {
                Err(no_sessions())
            }

            fn evidence(&self) -> Evidence {
                Evidence {
                    tier: Tier::None,
                    environment: String::new(),
                    software_identity: None,
                    instance: None,
                    claims: vec![],
                }
            }

            fn cell(&self, _: String, _: String, _: Vec<File>, _: Limits) -> Result<Answer, CallError> {
                Err(CallError::Refused(no_sessions()))
            }

            fn snippet(&self, _: String, _: String, _: Limits, _: Option<Grant>) -> Result<Answer, CallError> {
                Err(CallError::Refused(no_sessions()))
            }

            fn project(
                &self,
                _: Vec<File>,
                _: Vec<String>,
                _: Vec<String>,
                _: Limits,
                _: Option<Grant>,
            ) -> Result<Answer, CallError> {
                Err(CallError::Refused(no_sessions()))
            }

            fn suspend(&self) -> Result<bool, String> {
                Ok(false)
            }

            fn close(&self) {}
        }

        fn no_sessions() -> Refusal {
            Refusal {
                reason: RefusalReason::Unsupported,
                message: concat!("the ", $name, " provider does not keep sessions").into(),
            }
        }
    };
}

/// Quotes `s` for `sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Percent-encodes `v` for a query, leaving unreserved bytes and those in `keep`.
pub fn percent(v: &str, keep: &[u8]) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `n` random bytes in hex.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    if getrandom::fill(&mut b).is_err() {
        return "plimsoll-without-randomness".into();
    }
    hex::encode(b)
}

/// A vendor's answer, cut to 512 characters and with no control characters, for
/// plimsoll's words (the host redacts any credential in it).
pub fn vendor_text(body: &[u8]) -> String {
    let text: String =
        String::from_utf8_lossy(body).chars().map(|c| if c.is_control() { ' ' } else { c }).take(512).collect();
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_quoted_path_is_one_word_whatever_it_holds() {
        assert_eq!(shell_quote("/home/user/project/a b"), "'/home/user/project/a b'");
        assert_eq!(shell_quote("it's $(x)"), "'it'\\''s $(x)'");
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(percent("/home/user/a b&c=d.txt", b"/"), "/home/user/a%20b%26c%3Dd.txt");
        assert_eq!(percent("a/b", b""), "a%2Fb");
        assert_eq!(vendor_text(b" bad\nrequest\x00 "), "bad request");
    }

    /// A sandbox in memory: files by path, each command answered from a table.
    #[derive(Default)]
    struct Fake {
        files: RefCell<BTreeMap<String, Vec<u8>>>,
        ran: RefCell<Vec<String>>,
        answers: BTreeMap<&'static str, (i32, &'static [u8])>,
    }

    impl Remote for Fake {
        fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
            self.files.borrow_mut().insert(path.into(), bytes.into());
            Ok(())
        }

        fn run(&self, script: &str, _: &str, _: Instant, _: usize) -> Result<Ran, String> {
            self.ran.borrow_mut().push(script.into());
            let key = if script.contains("realpath") { "realpath" } else { script };
            let (exit_code, out) = self.answers.get(key).copied().unwrap_or((0, b""));
            let stdout = Output { bytes: out.to_vec(), truncated: false };
            Ok(Ran { exit_code, timed_out: false, stdout, stderr: Output::default(), duration_ms: 1 })
        }

        fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
            Ok(self.files.borrow().get(path).cloned())
        }
    }

    #[test]
    fn a_project_stops_at_its_first_failing_step_and_reads_only_inside_its_directory() {
        let mut fake = Fake::default();
        fake.answers.insert("false", (1, b""));
        fake.answers.insert("realpath", (0, b"/p/out.txt\0/etc/passwd\0\0"));
        fake.files.borrow_mut().insert("/etc/passwd".into(), b"root".to_vec());
        let files: [(&str, &[u8]); 1] = [("out.txt", b"made")];
        let steps = ["true".to_string(), "false".into(), "never".into()];
        let wanted = ["out.txt".to_string(), "leak.txt".into(), "missing.txt".into()];
        let p = project(&fake, "/p", &files, &steps, &wanted, Duration::from_secs(5), 100).expect("ran");
        assert_eq!(p.outcome, Outcome::Completed);
        assert_eq!(
            p.steps.iter().map(|(c, r)| (c.as_str(), r.exit_code)).collect::<Vec<_>>(),
            [("true", 0), ("false", 1)]
        );
        assert_eq!(p.artifacts, [("out.txt".to_string(), b"made".to_vec())], "the link to /etc/passwd was read");
        assert_eq!(p.links_out, [("leak.txt".to_string(), "/etc/passwd".to_string())]);
        // A cut answer from the guest is no answer.
        fake.answers.insert("realpath", (0, b"/p/out.txt\0"));
        let e = project(&fake, "/p", &files, &[], &wanted, Duration::from_secs(5), 100).expect_err("cut");
        assert_eq!(e, MayHaveRun("resolving the artifacts: the guest's answer was cut (exit 0)".into()));
    }

    #[test]
    fn a_project_without_files_makes_its_directory() {
        let fake = Fake::default();
        project(&fake, "/p q", &[], &["true".into()], &[], Duration::from_secs(5), 100).expect("ran");
        assert_eq!(fake.ran.borrow().as_slice(), ["mkdir -p '/p q'", "true"]);
    }
}
