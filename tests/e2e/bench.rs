//! `plimsoll-host bench`: each layer runs, prints its figures as JSON, and measures
//! its peer side by side when the peer is installed (`.ci/install` installs them;
//! in required mode a missing peer fails). Numbers are never asserted.

use std::process::Command;

use super::host;
use super::python::python;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn bench(args: &[&str], env: &[(String, String)]) -> serde_json::Value {
    let mut cmd: Command = host();
    cmd.arg("bench").args(args).arg("--json").current_dir(ROOT);
    cmd.env("PLIMSOLL_BENCH_PEERS", format!("{ROOT}/target/bench-peers")).env("PLIMSOLL_BENCH_PYTHON", python());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("bench");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v["series"].as_array().expect("series").iter().map(|s| s["name"].as_str().expect("name").to_string()).collect()
}

/// Whether peers must be present (CI installs them).
fn required() -> bool {
    super::docker::required()
}

/// Outside required mode a peer that did not run skips its side of the comparison:
/// says so with [`super::docker::skipped`] and the bench's own note on why.
fn peer_skipped(v: &serde_json::Value, peer: &str) {
    let prefix = format!("peer {peer} ");
    let mut notes = v["notes"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_str);
    let why = notes.find(|n| n.starts_with(&prefix)).unwrap_or("the bench left no note");
    super::docker::skipped(&format!("the {peer} side of the comparison: {why}"));
}

#[test]
fn bench_wasm_measures_ours_and_quickjs_emscripten_side_by_side() {
    let v = bench(&["wasm", "--runs", "40", "--concurrency", "2"], &[]);
    assert_eq!(v["series"][0]["name"], "plimsoll wasm");
    assert_eq!((v["series"][0]["runs"].as_u64(), v["series"][0]["concurrency"].as_u64()), (Some(40), Some(2)));
    assert!(v["series"][0]["p50_ms"].as_f64().is_some_and(|p| p > 0.0));
    if required() {
        assert_eq!(names(&v), ["plimsoll wasm", "quickjs-emscripten runtime", "quickjs-emscripten instance"], "{v}");
        assert_eq!(v["ratios"].as_array().map(Vec::len), Some(2), "{v}");
    } else if names(&v).len() == 1 {
        peer_skipped(&v, "quickjs-emscripten");
    }
    assert!(v["machine"]["cores"].as_u64().is_some_and(|c| c > 0));
}

#[test]
fn bench_daemon_and_session_run_against_a_real_daemon_and_jupyter() {
    let v = bench(&["daemon", "--runs", "20", "--concurrency", "2"], &[]);
    assert_eq!(
        names(&v),
        [
            "plimsoll daemon Run",
            "plimsoll daemon session cell",
            "plimsoll daemon session open, cell, close",
            "plimsoll daemon Run, jailed engine",
            "plimsoll daemon session cell, jailed engine",
            "plimsoll daemon session open, cell, close, jailed engine",
        ]
    );
    assert_eq!(v["series"][0]["runs"], 20);
    assert_eq!(v["series"][2]["runs"], 2, "a tenth as many sessions, at least one per caller");
    let v = bench(&["session", "--runs", "20"], &[]);
    assert_eq!(v["series"][0]["name"], "plimsoll session cell");
    assert!(v["series"][0]["what"].as_str().is_some_and(|w| w.starts_with("python ")), "{v}");
    if required() {
        assert_eq!(names(&v), ["plimsoll session cell", "jupyter kernel cell"], "{v}");
    } else if names(&v).len() == 1 {
        peer_skipped(&v, "jupyter kernel");
    }
}

#[test]
fn bench_place_drives_one_two_and_four_daemons_through_one_placer() {
    let v = bench(&["place", "--runs", "24"], &[]);
    assert_eq!(
        names(&v),
        ["placement over 1 daemon", "one daemon, no placement", "placement over 2 daemons", "placement over 4 daemons"],
        "{v}"
    );
    let series = v["series"].as_array().expect("series");
    let in_flight: Vec<_> = series.iter().map(|s| (s["runs"].as_u64(), s["concurrency"].as_u64())).collect();
    assert_eq!(in_flight, [(Some(24), Some(2)), (Some(24), Some(2)), (Some(24), Some(4)), (Some(24), Some(8))]);
    assert!(series.iter().all(|s| s["per_s"].as_f64().is_some_and(|t| t > 0.0) && s["p99_ms"].as_f64().is_some()));
    let notes: Vec<&str> = v["notes"].as_array().expect("notes").iter().filter_map(|n| n.as_str()).collect();
    assert!(
        notes
            .contains(&"placement over 4 daemons: 24 of 24 runs answered, 0 shed by every daemon, 0 refusals moved on"),
        "{notes:?}"
    );
    assert_eq!(v["ratios"].as_array().map(Vec::len), Some(3), "{v}");
}

#[test]
fn bench_docker_compares_fresh_containers_with_docker_run() {
    let Some(fx) = super::docker::fixture("runc") else { return };
    let dir = super::scratch("bench-docker");
    let (plugin, key) = super::docker::signed_plugin(&fx, &dir);
    let env: Vec<(String, String)> = super::docker::docker_env(&fx, &plugin, &key, "runc")
        .into_iter()
        .filter(|(k, _)| k.starts_with("SANDBOX_DOCKER_"))
        .collect();
    let v = bench(&["docker", "--runs", "3"], &env);
    assert_eq!(
        names(&v),
        [
            "plimsoll docker runc",
            "plimsoll docker runc warm pool",
            "plimsoll docker runc warm pool, back to back",
            "plimsoll docker runc warm pool of 4, back to back",
            "docker run --rm runc"
        ],
        "{v}"
    );
    assert_eq!(v["ratios"][0]["peer"], "docker run --rm runc");
    assert_eq!(v["ratios"][1]["ours"], "plimsoll docker runc warm pool");
    assert_eq!(v["ratios"][3]["ours"], "plimsoll docker runc warm pool of 4, back to back");
    // Every paced run (and its warm-up) was a pool hit, and so was every run of the
    // burst from a pool sized for it.
    let notes = v["notes"].to_string();
    assert!(notes.contains("plimsoll docker runc warm pool: 4 of 4 claims were pool hits"), "{notes}");
    assert!(
        notes.contains("plimsoll docker runc warm pool of 4, back to back: 4 of 4 claims were pool hits"),
        "{notes}"
    );

    // With the docker settings, bench session also measures a docker session's cells
    // and an idle docker session's memory.
    let v = bench(&["session", "--runs", "5"], &env);
    assert_eq!(names(&v), ["plimsoll session cell", "plimsoll docker runc session cell", "jupyter kernel cell"], "{v}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("idle docker session under runc: ") && notes.contains("KiB in the daemon"), "{notes}");
}

#[test]
fn bench_refuses_bad_arguments_and_docker_without_its_settings() {
    let o = host().args(["bench", "wasm", "--concurrency", "0"]).output().expect("bench");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--concurrency must be 1 or more"));
    let o = host().args(["bench", "docker"]).output().expect("bench");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bench docker needs the docker provider's settings"));
    let o = host().args(["bench", "gpu"]).output().expect("bench");
    assert_eq!(o.status.code(), Some(2));
}
