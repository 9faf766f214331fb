//! `plimsoll-host advise`: the efficiency advisor's report of one granted run, as a
//! self-contained HTML page, from the daemon's JSON log. A profile with
//! `advice_retention: "detailed"` logs each granted run's findings (the operator's
//! hints included) and its call trace: metadata only, never paths, bodies or
//! credentials. The page shows them; every string in it is escaped.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use serde_json::Value;

use plimsoll_core::html::escape as esc;

/// Arguments of `advise`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's JSON log (PLIMSOLL_LOG_FORMAT=json); `-` or nothing reads stdin.
    log: Option<PathBuf>,
    /// The run with this trace ID (the request's `trace_id`).
    #[arg(long, conflicts_with = "record")]
    trace_id: Option<String>,
    /// The run whose record digest starts with this (hex).
    #[arg(long)]
    record: Option<String>,
    /// Where to write the page (default stdout).
    #[arg(long, short)]
    out: Option<PathBuf>,
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => String::new(),
        other => esc(&other.to_string()),
    }
}

/// Picks the run: the one named, else the last one with findings.
fn pick<'a>(lines: &'a [Value], trace_id: Option<&str>, record: Option<&str>) -> anyhow::Result<&'a Value> {
    let granted = |v: &&Value| v.get("grant_profile").is_some();
    let found = match (trace_id, record) {
        (Some(t), _) => lines.iter().filter(granted).rfind(|v| v["trace_id"] == t),
        (_, Some(r)) => {
            lines.iter().filter(granted).rfind(|v| v["record_sha256"].as_str().is_some_and(|d| d.starts_with(r)))
        }
        _ => lines.iter().filter(granted).rfind(|v| v.get("advice_findings").is_some()),
    };
    match (found, trace_id, record) {
        (Some(v), _, _) => Ok(v),
        (None, Some(t), _) => bail!("no granted run with trace ID {t:?} in the log"),
        (None, _, Some(r)) => bail!("no granted run whose record digest starts with {r:?} in the log"),
        (None, _, _) => bail!(
            "no granted run with findings in the log; the profile must set \"advice_retention\": \"detailed\" for the log to keep them"
        ),
    }
}

/// Renders the page for one run's log line.
pub fn render(run: &Value) -> String {
    let mut h = String::new();
    h.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n",
    );
    h.push_str("<title>plimsoll: efficiency findings</title>\n<style>\n");
    h.push_str(
        "body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#1c1c1c}\n",
    );
    h.push_str("table{border-collapse:collapse;width:100%;margin:.6em 0 1.4em}th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left}\n");
    h.push_str("code{background:#f3f3f3;padding:0 .25em}.sev-high{color:#a40000}.sev-medium{color:#9a5b00}.sev-low{color:#285e00}\n");
    h.push_str(".hint{background:#f7f7ee;border-left:4px solid #c9b800;padding:.5em .8em;white-space:pre-wrap}\n</style></head><body>\n");
    h.push_str("<h1>Efficiency findings for one granted run</h1>\n");
    h.push_str(
        "<p>The advisor reads the run's call trace after the run. It never changed the run. Callers see only a \
suggested route the grant already opens; the hints below are for the operator.</p>\n<table>\n",
    );
    for (label, key) in [
        ("grant profile", "grant_profile"),
        ("caller", "caller"),
        ("trace ID", "trace_id"),
        ("record", "record_sha256"),
        ("isolation", "isolation"),
        ("calls", "host_calls"),
        ("refused by the broker", "host_calls_denied"),
        ("shed (circuit open)", "host_calls_shed"),
        ("past the trace's row cap", "host_calls_dropped"),
        ("time", "time"),
    ] {
        if let Some(v) = run.get(key) {
            h.push_str(&format!("<tr><th>{label}</th><td><code>{}</code></td></tr>\n", text(v)));
        }
    }
    h.push_str("</table>\n<h2>Findings</h2>\n");
    let findings = run["advice_findings"].as_array().cloned().unwrap_or_default();
    if findings.is_empty() {
        h.push_str("<p>None: no route was called often enough to make a pattern.</p>\n");
    }
    for f in &findings {
        let sev = f["severity"].as_str().unwrap_or("low");
        let sev_class = if matches!(sev, "high" | "medium" | "low") { sev } else { "low" };
        h.push_str(&format!(
            "<h3><span class=\"sev-{sev_class}\">{}</span> {} on <code>{} {}</code> (remedy: {})</h3>\n<p>{}</p>\n",
            text(&f["severity"]),
            text(&f["pattern"]),
            text(&f["method"]),
            text(&f["route"]),
            text(&f["remedy"]),
            text(&f["detail"])
        ));
        h.push_str(&format!(
            "<p>Calls beyond one: {}; round trips beyond the longest (a model): {} ms; bytes moved: {}.</p>\n",
            text(&f["extra_calls"]),
            text(&f["added_latency_ms"]),
            text(&f["bytes_moved"])
        ));
        if let Some(s) = f["suggested"].as_str() {
            h.push_str(&format!("<p>The code can use <code>{}</code>, which this grant opens.</p>\n", esc(s)));
        }
        let op = &f["operator"];
        match op["kind"].as_str() {
            Some("grant_route") => h.push_str(&format!(
                "<div class=\"hint\">Operator: the API declares the batch route <code>{}</code>; add it to the profile's allow list.</div>\n",
                text(&op["route"])
            )),
            Some("candidate_route") => h.push_str(&format!(
                "<div class=\"hint\">Operator: <code>{}</code> is known and may answer these reads in one call.</div>\n",
                text(&op["route"])
            )),
            Some("prompt") => h.push_str(&format!(
                "<div class=\"hint\">Operator, a prompt for an API review:\n\n{}</div>\n",
                text(&op["text"])
            )),
            _ => {}
        }
    }
    let calls = run["call_trace"]["calls"].as_array().cloned().unwrap_or_default();
    h.push_str("<h2>Call trace</h2>\n");
    if calls.is_empty() {
        h.push_str("<p>The log kept no trace for this run.</p>\n");
    } else {
        h.push_str("<table><tr><th>#</th><th>route</th><th>status</th><th>delivered</th><th>request bytes</th><th>response bytes</th><th>latency (ms)</th></tr>\n");
        for c in &calls {
            let ms = c["latency_us"].as_u64().map(|us| format!("{:.1}", us as f64 / 1000.0)).unwrap_or_default();
            h.push_str(&format!(
                "<tr><td>{}</td><td><code>{} {}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{ms}</td></tr>\n",
                text(&c["seq"]),
                text(&c["method"]),
                text(&c["route"]),
                text(&c["status"]),
                text(&c["delivered"]),
                text(&c["req_bytes"]),
                text(&c["resp_bytes"])
            ));
        }
        h.push_str("</table>\n");
    }
    h.push_str("<p>Routes are templates; the trace has no field for a path, a query, a body or a credential.</p>\n</body></html>\n");
    h
}

/// Runs `advise`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let mut raw = String::new();
    match args.log.as_deref() {
        None => std::io::stdin().read_to_string(&mut raw).context("reading the log from stdin")?,
        Some(p) if p.as_os_str() == "-" => std::io::stdin().read_to_string(&mut raw).context("reading stdin")?,
        Some(p) => {
            raw = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            raw.len()
        }
    };
    // Lines that are not JSON (a text-format log, other output) are skipped.
    let lines: Vec<Value> = raw.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let run = pick(&lines, args.trace_id.as_deref(), args.record.as_deref())?;
    let page = render(run);
    match &args.out {
        Some(p) => std::fs::write(p, page).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{page}"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(extra: &str) -> Value {
        serde_json::from_str(&format!(
            r#"{{"msg":"code run","grant_profile":"inventory","caller":"<b>x</b>","trace_id":"t-1","host_calls":7{extra}}}"#
        ))
        .expect("json")
    }

    #[test]
    fn the_page_escapes_every_string_and_shows_hints_and_the_trace() {
        let run = line(
            r#","advice_findings":[{"pattern":"fan_out","severity":"low","remedy":"batch","method":"GET","route":"/items/*",
            "detail":"GET /items/* was called 7 times in one run; no known route answers in one call","suggested":null,
            "operator":{"kind":"prompt","text":"Code calls GET /items/* <once> & more"},"extra_calls":6,"added_latency_ms":12,"bytes_moved":300}],
            "call_trace":{"calls":[{"seq":1,"method":"GET","route":"/items/*","status":200,"delivered":true,"req_bytes":0,"resp_bytes":40,"latency_us":1500}],"dropped":0,"denied":0,"shed":0}"#,
        );
        let page = render(&run);
        assert!(page.contains("<code>&lt;b&gt;x&lt;/b&gt;</code>"), "the caller is escaped");
        assert!(!page.contains("<b>x</b>"));
        assert!(page.contains("Code calls GET /items/* &lt;once&gt; &amp; more"));
        assert!(
            page.contains(
                "<td><code>GET /items/*</code></td><td>200</td><td>true</td><td>0</td><td>40</td><td>1.5</td>"
            )
        );
        assert!(
            page.contains("Calls beyond one: 6; round trips beyond the longest (a model): 12 ms; bytes moved: 300.")
        );
    }

    #[test]
    fn the_run_is_picked_by_trace_id_or_record_and_a_missing_one_says_why() {
        let mut a = line(r#","advice_findings":[]"#);
        a["record_sha256"] = "abcdef".into();
        let mut b = line("");
        b["trace_id"] = "t-2".into();
        let other = serde_json::json!({"msg": "code run", "trace_id": "t-3"});
        let lines = vec![a, b, other];
        assert_eq!(pick(&lines, Some("t-2"), None).expect("found")["trace_id"], "t-2");
        assert_eq!(pick(&lines, None, Some("abc")).expect("found")["record_sha256"], "abcdef");
        assert_eq!(pick(&lines, None, None).expect("found")["trace_id"], "t-1");
        assert_eq!(
            pick(&lines, Some("t-3"), None).expect_err("not granted").to_string(),
            "no granted run with trace ID \"t-3\" in the log"
        );
        assert!(pick(&lines[1..], None, None).expect_err("none").to_string().contains("advice_retention"));
    }
}
