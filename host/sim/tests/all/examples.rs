//! The example controllers in `examples/sims`: every plant's accepted controller
//! passes and its draft fails, with the fingerprints `examples/sims/README.md`
//! publishes, and the C and Rust forms of a law give the JavaScript form's
//! trajectory bit for bit.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{run, summary};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A plant, its accepted and draft runs on scenario s1: the fingerprint's first 16
/// hex digits (as the README's table prints them) and the draft's failure.
struct Example {
    plant: &'static str,
    accepted: &'static str,
    draft: &'static str,
    failure: &'static str,
}

const EXAMPLES: [Example; 9] = [
    Example { plant: "cartpole", accepted: "63cfd676924a3896", draft: "060d98e8140c0380", failure: "fell" },
    Example {
        plant: "cartpole-swingup",
        accepted: "e28dbdb6a0769585",
        draft: "f618c02545051d50",
        failure: "off_track",
    },
    Example { plant: "shower", accepted: "a1d4ca5a022f4c05", draft: "ca9a569028212d55", failure: "scald" },
    Example { plant: "ship", accepted: "bcae21f31893d07f", draft: "12f1c9b245c618cd", failure: "overshoot" },
    Example { plant: "buck", accepted: "9bcc0a3a963d1185", draft: "1868fe9e80094fa8", failure: "overcurrent" },
    Example { plant: "blackhole", accepted: "f1dd063f8f94fde1", draft: "627389758cddd75b", failure: "captured" },
    Example { plant: "rocket", accepted: "a07dbc0d6c3fe93d", draft: "0cba9c7968d5dadc", failure: "missed_date" },
    Example { plant: "satclock", accepted: "4fd9cde03bcaa811", draft: "6081f3631cc2f448", failure: "unhealthy" },
    Example { plant: "slits", accepted: "d6d5d995ffffe9c9", draft: "d4249329910937a5", failure: "not_matched" },
];

fn example(rel: &str) -> PathBuf {
    Path::new(ROOT).join("examples/sims").join(rel)
}

/// The summary of `plant` judged with the controller file at `path`.
fn judged(plant: &str, path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().and_then(|n| n.to_str()).expect("a file name");
    summary(&run(&format!("--plant {plant}"), name, &bytes))
}

fn prefix(s: &serde_json::Value) -> &str {
    &s["fingerprint"].as_str().expect("a fingerprint")[..16]
}

/// `source` compiled as the README says, with clang for wasm32.
fn compiled(source: &Path) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plimsoll-sim-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let parent = source.parent().and_then(Path::file_name).and_then(|n| n.to_str()).expect("a folder");
    let stem = source.file_stem().and_then(|n| n.to_str()).expect("a stem");
    let out = dir.join(format!("{parent}-{stem}.wasm"));
    let status = Command::new("clang-19")
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-ffp-contract=off", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("clang-19 could not be started ({e}): it is a prerequisite, run .ci/install"));
    assert!(status.success(), "clang-19 failed on {}", source.display());
    out
}

#[test]
fn every_accepted_controller_passes_and_every_draft_fails() {
    for e in EXAMPLES {
        let a = judged(e.plant, &example(&format!("{}/accepted.js", e.plant)));
        assert_eq!((prefix(&a), &a["passed"]), (e.accepted, &true.into()), "{} accepted: {a}", e.plant);
        let d = judged(e.plant, &example(&format!("{}/draft.js", e.plant)));
        assert_eq!(
            (prefix(&d), &d["passed"], &d["failure"]),
            (e.draft, &false.into(), &e.failure.into()),
            "{} draft: {d}",
            e.plant
        );
    }
}

#[test]
fn the_balance_draft_falls_at_the_time_the_readme_records() {
    let d = judged("cartpole", &example("cartpole/draft.js"));
    assert_eq!(d["fell_at"], 5.96, "{d}");
}

#[test]
fn the_c_and_rust_forms_give_the_javascript_forms_trajectory() {
    for (plant, file) in [
        ("cartpole", "accepted"),
        ("cartpole-swingup", "accepted"),
        ("cartpole-swingup", "draft"),
        ("buck", "accepted"),
        ("buck", "draft"),
    ] {
        let js = judged(plant, &example(&format!("{plant}/{file}.js")));
        let c = judged(plant, &compiled(&example(&format!("{plant}/{file}.c"))));
        assert_eq!(c["fingerprint"], js["fingerprint"], "{plant}/{file}: C {c} against JavaScript {js}");
    }
    let rust = Path::new(ROOT).join("guests/sims/controllers/buck/buck.wasm");
    let r = judged("buck", &rust);
    assert_eq!(prefix(&r), "9bcc0a3a963d1185", "the Rust form: {r}");
}

/// The original's published vectors (`examples/wasm-controller` and
/// `examples/wasm-buck`): swing-up s1 to s3 as its C build gave them (its Node
/// reference differs there by V8's `Math.cos`, see `guests/sims/cartpole/README.md`),
/// s4 as both gave it; buck s1 to s4, C and JavaScript alike.
const VECTORS: [(&str, &str, &str); 8] = [
    ("cartpole-swingup", "s1", "e28dbdb6a07695854ce632d17bcc6aac8354012e1376a5bd1931f2549a6c588e"),
    ("cartpole-swingup", "s2", "da4e1845a2bcdba0d5c8903a3eb656abf841d81a6678afa7b5f730a0411121f1"),
    ("cartpole-swingup", "s3", "32e98c0545f135dbdce8cc665936bb3a63a6a98f83745550fc41a018a4aaf3df"),
    ("cartpole-swingup", "s4", "a9a628764119836404c9ad4024d1ab35f638ebb427497e613dda7c0813f158c1"),
    ("buck", "s1", "9bcc0a3a963d11853ba0bd1a7bc3850a00d55115b6a2ee3de2cdd51ad69006f7"),
    ("buck", "s2", "ef91a39f0afe20aab5b6cc32aa41414f44afa9f0a60ba1c9e7f910ccca92db75"),
    ("buck", "s3", "b39ccc8ac760e1d8fe5a2b738eefac644854b2e7ca87c15bb6c23acf919a1a39"),
    ("buck", "s4", "e040e81c7729ede8daf4348e8768db0ff5179c58975a664f695a968d86e66a56"),
];

#[test]
fn the_originals_published_vectors_hold_in_javascript_and_c() {
    for (plant, scenario, fingerprint) in VECTORS {
        let line = format!("--plant {plant} --scenario {scenario}");
        for path in [example(&format!("{plant}/accepted.js")), compiled(&example(&format!("{plant}/accepted.c")))] {
            let bytes = std::fs::read(&path).expect("controller");
            let name = path.file_name().and_then(|n| n.to_str()).expect("a file name");
            let s = summary(&run(&line, name, &bytes));
            assert_eq!(s["fingerprint"], fingerprint, "{plant} {scenario} {}: {s}", path.display());
            assert_eq!(s["passed"], true, "{plant} {scenario} {}: {s}", path.display());
        }
    }
}
