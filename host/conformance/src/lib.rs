//! The provider conformance suite, written once: what every backend that runs
//! snippets and projects must do through a daemon, checked with the Rust client
//! (which checks every answer's record and tier). `plimsoll-host plugin check`
//! runs it against a plugin it loads as the daemon would, and `tests/e2e` runs
//! it against every backend's fake; a backend adds one line, not a copy.
//!
//! 1. Start a daemon serving the backend; make a [`plimsoll_client::Client`].
//! 2. Say what the backend states in an [`Expected`].
//! 3. [`run`] gives one [`Check`] per promise, each passed or failed with why.

#![deny(missing_docs)]

use plimsoll_client::{Client, Options, SessionOptions};
use plimsoll_core::wire::{DescribeResponse, ModuleRow, ModuleRun, ProjectOutcome, RunRequest};
use plimsoll_core::{Floor, Reason};

/// What a backend states about itself.
#[derive(Clone, Debug)]
pub struct Expected {
    /// Its name on the wire.
    pub provider: String,
    /// The tier it proves.
    pub tier: String,
    /// How its records name what ran (`docker-image:sha256:`, `e2b-template:`).
    pub environment: String,
    /// A floor above its tier, refused before dispatch (none above `vm`).
    pub above: Option<Floor>,
    /// The bytes each output stream keeps.
    pub output_cap: usize,
}

/// One promise checked: its name and what was seen, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`snippet`, `floor above the tier`).
    pub name: &'static str,
    /// What was seen when it held, or why it did not.
    pub outcome: Result<String, String>,
}

impl Check {
    /// One line for a terminal: `ok   name: what` or `FAIL name: why`.
    pub fn line(&self) -> String {
        match &self.outcome {
            Ok(what) => format!("ok   {}: {what}", self.name),
            Err(why) => format!("FAIL {}: {why}", self.name),
        }
    }
}

fn opts(timeout_ms: i32) -> Options {
    Options { timeout_ms, ..Options::default() }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `Err(why)` unless `cond`.
fn hold(cond: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(why()) }
}

/// The project every backend runs: four files, two steps, an artifact a step made
/// (text) and one it wrote byte by byte (every byte value, so nothing on the way
/// may treat it as text).
const FILES: [(&str, &str); 4] = [
    ("two.py", "print(1 + 1)\n"),
    (
        "main.py",
        "import helper\nopen('out.txt', 'w').write(str(helper.answer()) + '\\n')\nopen('blob.bin', 'wb').write(bytes(range(256)) * 4)\nprint('built')\n",
    ),
    ("helper.py", "def answer():\n    return 6 * 7\n"),
    ("spin.py", "while True:\n    pass\n"),
];

/// Runs every check against the daemon `client` talks to.
pub async fn run(client: &Client, e: &Expected) -> Vec<Check> {
    let mut checks = Vec::new();
    let desc = client.describe().await.map_err(|err| format!("describe failed: {err}"));
    checks.push(Check { name: "describe", outcome: describe(&desc, e) });
    checks.push(Check { name: "snippet", outcome: snippet(client, e).await });
    checks.push(Check { name: "uncaught exception", outcome: exception(client).await });
    checks.push(Check { name: "snippet past its budget", outcome: past_budget(client).await });
    checks.push(Check { name: "output past the cap", outcome: output_cap(client, e).await });
    checks.push(Check { name: "project with a binary artifact", outcome: project(client).await });
    checks.push(Check { name: "failing step stops the plan", outcome: failing_step(client).await });
    checks.push(Check { name: "project past its budget", outcome: project_past_budget(client).await });
    if let Some(floor) = e.above {
        checks.push(Check { name: "floor above the tier", outcome: floor_above(client, floor).await });
    }
    let sessions = desc.as_ref().is_ok_and(|d| d.supports_sessions);
    checks.push(Check { name: "session cell", outcome: session(client, sessions).await });
    let modules = desc.as_ref().is_ok_and(|d| d.supports_module);
    checks.push(Check { name: "module table", outcome: module_table(client, modules).await });
    checks
}

fn describe(desc: &Result<DescribeResponse, String>, e: &Expected) -> Result<String, String> {
    let d = desc.as_ref().map_err(Clone::clone)?;
    hold(d.sandbox == e.provider && d.isolation == e.tier, || {
        format!("states {} at {}, not {} at {}", d.sandbox, d.isolation, e.provider, e.tier)
    })?;
    Ok(format!("{} at tier {}", d.sandbox, d.isolation))
}

async fn snippet(client: &Client, e: &Expected) -> Result<String, String> {
    let r = client.run_javascript("console.log(6*7)", &opts(0)).await.map_err(|err| err.to_string())?;
    let out = r.javascript.as_ref().map(|j| text(&j.stdout)).unwrap_or_default();
    hold(out == "42\n", || format!("printed {out:?}, not \"42\\n\""))?;
    let rec = r.record.ok_or("the answer carries no record")?;
    hold(rec.provider == e.provider && rec.isolation == e.tier, || {
        format!("its record says {} at {}", rec.provider, rec.isolation)
    })?;
    hold(rec.environment.starts_with(&e.environment), || {
        format!("its record's environment {:?} does not start {:?}", rec.environment, e.environment)
    })?;
    Ok(format!("42, recorded at {} in {}", rec.isolation, rec.environment))
}

async fn exception(client: &Client) -> Result<String, String> {
    let r = client.run_javascript("throw new Error('boom')", &opts(0)).await.map_err(|err| err.to_string())?;
    let js = r.javascript.ok_or("no javascript result")?;
    hold(js.exit_code == 1 && text(&js.stderr).contains("boom"), || {
        format!("exit {}, stderr {:?}", js.exit_code, text(&js.stderr))
    })?;
    Ok("exit 1, the error on stderr".into())
}

async fn past_budget(client: &Client) -> Result<String, String> {
    let r = client.run_javascript("for(;;){}", &opts(2000)).await.map_err(|err| err.to_string())?;
    let js = r.javascript.ok_or("no javascript result")?;
    hold(js.exit_code == 124 && js.timed_out, || format!("exit {}, timed out {}", js.exit_code, js.timed_out))?;
    Ok("exit 124, timed out".into())
}

async fn output_cap(client: &Client, e: &Expected) -> Result<String, String> {
    let code = "console.log('x'.repeat(3*1024*1024))";
    let r = client.run_javascript(code, &opts(0)).await.map_err(|err| err.to_string())?;
    let js = r.javascript.ok_or("no javascript result")?;
    hold(js.stdout_truncated && js.stdout.len() == e.output_cap, || {
        format!("kept {} bytes (truncated {}), not {}", js.stdout.len(), js.stdout_truncated, e.output_cap)
    })?;
    Ok(format!("{} bytes kept and the rest flagged", js.stdout.len()))
}

async fn project(client: &Client) -> Result<String, String> {
    let r = client
        .run_project(
            &FILES,
            &["python3 two.py", "python3 main.py"],
            &["out.txt", "blob.bin", "not-made.txt"],
            &opts(60_000),
        )
        .await
        .map_err(|err| err.to_string())?;
    let p = r.project.ok_or("no project result")?;
    hold(p.outcome == ProjectOutcome::Completed, || format!("ended {:?}: {}", p.outcome, p.outcome_detail))?;
    let outs: Vec<String> = p.steps.iter().map(|s| text(&s.stdout)).collect();
    hold(outs == ["2\n", "built\n"], || format!("the steps printed {outs:?}"))?;
    let names: Vec<&str> = p.artifacts.iter().map(|a| a.path.as_str()).collect();
    hold(names == ["out.txt", "blob.bin"], || {
        format!("artifacts {names:?}, not out.txt and blob.bin (an artifact not made is left out)")
    })?;
    hold(p.artifacts[0].content == b"42\n", || format!("out.txt holds {:?}", text(&p.artifacts[0].content)))?;
    let blob: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
    hold(p.artifacts[1].content == blob, || {
        format!("blob.bin came back as {} bytes, not the 1024 written", p.artifacts[1].content.len())
    })?;
    Ok("two steps, a text and a 1024-byte binary artifact read back exactly".into())
}

async fn failing_step(client: &Client) -> Result<String, String> {
    let stop = [("fail.py", "import sys\nsys.exit(3)\n"), ("never.py", "print('never')\n")];
    let r = client
        .run_project(&stop, &["python3 fail.py", "python3 never.py"], &[], &opts(30_000))
        .await
        .map_err(|err| err.to_string())?;
    let p = r.project.ok_or("no project result")?;
    let first = p.steps.first().map(|s| s.exit_code);
    hold(p.outcome == ProjectOutcome::Completed && p.steps.len() == 1 && first == Some(3), || {
        format!("{:?} with {} step(s), the first exiting {first:?}", p.outcome, p.steps.len())
    })?;
    Ok("exit 3, the next step not run".into())
}

async fn project_past_budget(client: &Client) -> Result<String, String> {
    let r = client.run_project(&FILES, &["python3 spin.py"], &[], &opts(3000)).await.map_err(|err| err.to_string())?;
    let p = r.project.ok_or("no project result")?;
    hold(p.outcome == ProjectOutcome::TimedOut, || format!("ended {:?}", p.outcome))?;
    Ok("timed out".into())
}

async fn floor_above(client: &Client, floor: Floor) -> Result<String, String> {
    let above = Options { floor: Some(floor), ..Options::default() };
    match client.run_javascript("console.log(1)", &above).await {
        Ok(_) => Err(format!("a run with floor {floor} ran")),
        Err(err) if err.not_dispatched() == Some(Reason::Isolation) => {
            Ok(format!("floor {floor} refused before dispatch"))
        }
        Err(err) => Err(format!("refused otherwise than isolation before dispatch: {err}")),
    }
}

/// Where the backend runs module tables, a small VanDerPol table completes
/// with every row's steps; where it does not, one is refused before anything
/// is made.
async fn module_table(client: &Client, offered: bool) -> Result<String, String> {
    let rows = (1..=3).map(|i| ModuleRow { values: vec![f64::from(i), 2.0, 0.0] }).collect();
    let table = ModuleRun { model: "vanderpol".into(), rows, end_time: 1.0, step: 0.01 };
    let req = RunRequest { module: Some(table), ..RunRequest::default() };
    let answer = client.run(req).await;
    if !offered {
        return match answer {
            Ok(_) => Err("describe offers no module tables, but one ran".into()),
            Err(err) if err.not_dispatched() == Some(Reason::Unsupported) => {
                Ok("none offered; a table is refused before anything is made".into())
            }
            Err(err) => Err(format!("refused otherwise than unsupported before dispatch: {err}")),
        };
    }
    let m = answer.map_err(|err| err.to_string())?.module.ok_or("the answer carries no module result")?;
    hold(m.outcome == ProjectOutcome::Completed, || format!("ended {:?}: {}", m.outcome, m.outcome_detail))?;
    // 100 steps of 0.01 to 1.0, each with its outputs.
    let steps: Vec<i32> = m.runs.iter().map(|r| r.status).collect();
    hold(steps == [100, 100, 100], || format!("rows completed {steps:?} steps, not 100 each"))?;
    let width = usize::try_from(m.width).unwrap_or(0);
    hold(width > 0 && m.runs.iter().all(|r| r.outputs.len() == 100 * width), || {
        format!("a row's outputs are not 100 steps of {width}")
    })?;
    Ok(format!("three VanDerPol rows of 100 steps, {width} outputs wide"))
}

/// Where the backend keeps sessions, a cell keeps what the last one left; where
/// it does not, opening one is refused before anything is made.
async fn session(client: &Client, offered: bool) -> Result<String, String> {
    if !offered {
        return match client.open_session(&SessionOptions::default()).await {
            Ok(_) => Err("describe offers no sessions, but one opened".into()),
            Err(err) if err.not_dispatched() == Some(Reason::Unsupported) => {
                Ok("none offered; opening one is refused before anything is made".into())
            }
            Err(err) => Err(format!("refused otherwise than unsupported before dispatch: {err}")),
        };
    }
    let s = client.open_session(&SessionOptions::default()).await.map_err(|err| format!("open: {err}"))?;
    let kept = async {
        s.run_cell("javascript", "globalThis.kept = 41", &[], &opts(0)).await.map_err(|err| err.to_string())?;
        let r =
            s.run_cell("javascript", "console.log(kept + 1)", &[], &opts(0)).await.map_err(|err| err.to_string())?;
        let out = r.cell.map(|c| text(&c.stdout)).unwrap_or_default();
        hold(out == "42\n", || format!("the second cell printed {out:?}: the first cell's state was not kept"))
    }
    .await;
    let closed = s.close().await.map_err(|err| format!("close: {err}"));
    kept?;
    closed?;
    Ok("a cell keeps the last one's state, and the session closes".into())
}
