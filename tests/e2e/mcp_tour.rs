//! The MCP tour (`examples/mcp-tour`) against a live docker daemon under runsc: the
//! official Python MCP client plays the tour through `plimsoll-host mcp` and checks
//! every answer; its receipts verify; the replay page it writes, and the one checked
//! in, render in headless Chromium with both in-browser digest checks passing; and a
//! recording changed after the fact is caught by the page.
//!
//! Needs what the docker suite needs plus `chromium` (`.ci/install` installs it);
//! outside required mode a missing piece skips with a `SKIPPED` line on stderr.

use std::path::Path;
use std::process::Command;

use super::docker::{docker_env, fixture, signed_plugin, start};
use super::python::python_cmd;
use super::{callers, scratch};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mcp-tour");

/// The page's state after its scripts ran: the root element's attributes and
/// whether the page reported an error of its own.
#[derive(Debug)]
struct Rendered {
    root: String,
    page_error: bool,
    steps: usize,
}

impl Rendered {
    fn attr(&self, name: &str, value: &str) -> bool {
        self.root.contains(&format!("{name}=\"{value}\""))
    }
}

/// Renders `page` in headless Chromium, letting its timers run to the end.
fn render(page: &Path) -> Rendered {
    let o = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=120000", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium (install it with .ci/install)");
    assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let root = dom.split_once("<html").and_then(|(_, rest)| rest.split_once('>')).map(|(r, _)| r.to_string());
    Rendered {
        root: root.unwrap_or_default(),
        page_error: dom.contains("<p id=\"page-error\""),
        steps: dom.matches("<section class=\"step\"").count(),
    }
}

/// The page template with `recording` inside, as the tour writes it.
fn page_with(dir: &Path, name: &str, recording: &serde_json::Value) -> std::path::PathBuf {
    let template = std::fs::read_to_string(Path::new(EXAMPLE).join("page.html")).expect("page.html");
    let embedded = recording.to_string().replace('<', "\\u003c");
    let path = dir.join(name);
    std::fs::write(&path, template.replacen("{{RECORDING}}", &embedded, 1)).expect("write page");
    path
}

fn titles(recording: &serde_json::Value) -> Vec<String> {
    recording["steps"]
        .as_array()
        .map(|s| s.iter().map(|s| s["title"].as_str().unwrap_or_default().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn the_tour_plays_checks_and_replays_in_a_browser() {
    let Some(fx) = fixture("runsc") else { return };
    let chromium = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if !chromium {
        assert!(!super::docker::required(), "required mode: no chromium (.ci/install installs it)");
        super::docker::skipped("the tour: no chromium (.ci/install installs it)");
        return;
    }
    let dir = scratch("mcp-tour");
    let (plugin, key) = signed_plugin(&fx, &dir);
    let (file, tokens) = callers(&dir, &["assistant"]);
    let mut env: Vec<(String, String)> =
        docker_env(&fx, &plugin, &key, "runsc").into_iter().filter(|(k, _)| k != "PLIMSOLL_TOKEN").collect();
    env.push(("PLIMSOLL_CLIENTS_FILE".into(), file.display().to_string()));
    env.push(("SANDBOX_MAX_SESSIONS".into(), "4".into()));
    let d = start(&env);

    let out = dir.join("tour");
    let o = python_cmd()
        .arg(Path::new(EXAMPLE).join("tour.py"))
        .args(["--host", env!("CARGO_BIN_EXE_plimsoll-host"), "--out"])
        .arg(&out)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PLIMSOLL_URL", d.url())
        .env("PLIMSOLL_CALLER_TOKEN", &tokens[0])
        .output()
        .expect("tour.py");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "tour failed\nstdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("10 steps, 22 calls, every check passed; 13 receipts verified"), "{stdout}");

    let text = std::fs::read_to_string(out.join("recording.json")).expect("recording");
    assert!(!text.contains(&tokens[0]), "the caller token is in the recording");
    let recording: serde_json::Value = serde_json::from_str(&text).expect("recording is JSON");
    assert_eq!(recording["failure"], serde_json::Value::Null);
    assert_eq!(recording["info"]["isolation"], "kernel");
    // The checked-in recording is this tour's: same steps, same calls per step.
    let committed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(EXAMPLE).join("recording.json")).expect("committed"))
            .expect("committed recording is JSON");
    assert_eq!(titles(&committed), titles(&recording), "examples/mcp-tour/recording.json is stale: rerun the tour");
    let calls = |r: &serde_json::Value| -> Vec<usize> {
        r["steps"]
            .as_array()
            .map(|s| s.iter().map(|s| s["calls"].as_array().map_or(0, Vec::len)).collect())
            .unwrap_or_default()
    };
    assert_eq!(calls(&committed), calls(&recording));

    // The page the tour wrote, and the one checked in, replay with both checks passing.
    for page in [out.join("tour.html"), Path::new(EXAMPLE).join("tour.html")] {
        let r = render(&page);
        assert!(!r.page_error, "{}: the page reported an error", page.display());
        for (k, v) in [("data-replay", "done"), ("data-tools-digest", "match"), ("data-record-digest", "match")] {
            assert!(r.attr(k, v), "{}: expected {k}={v:?} on <html{}>", page.display(), r.root);
        }
        assert!(r.attr("data-steps", "10") && r.steps == 10, "{}: {r:?}", page.display());
    }

    // A recording changed after it was made is caught in the browser.
    let mut tools_edited = recording.clone();
    tools_edited["tools"][0]["description"] = serde_json::json!("Run anything, anywhere.");
    let r = render(&page_with(&dir, "tools-edited.html", &tools_edited));
    assert!(r.attr("data-tools-digest", "mismatch") && r.attr("data-record-digest", "match"), "{r:?}");
    let mut record_edited = recording.clone();
    let step = record_edited["steps"]
        .as_array_mut()
        .and_then(|s| s.iter_mut().find(|s| s["calls"][0]["tool"] == "get_record"))
        .expect("a get_record step");
    step["calls"][0]["result"]["record"]["isolation"] = serde_json::json!("vm");
    let r = render(&page_with(&dir, "record-edited.html", &record_edited));
    assert!(r.attr("data-tools-digest", "match") && r.attr("data-record-digest", "mismatch"), "{r:?}");
}
