//! The pull-request receipt (`examples/pr-receipt`) against a live docker daemon
//! under runsc: `receipt.sh` runs the sample JavaScript project's tests at the
//! kernel tier and writes a signed receipt (bundle, BOM, the run's public key) with
//! no key left behind, and `verify.sh` accepts it for that tree and refuses it for
//! a changed file, other steps, another key ID, or a bundle that lost a line; a
//! failing test suite still gets a receipt, which says so.

use std::path::Path;
use std::process::{Command, Output};

use super::scratch;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/pr-receipt");

fn script(name: &str, url: &str, args: &[&str]) -> Output {
    Command::new(format!("{EXAMPLE}/{name}"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("PLIMSOLL_DAEMON", url)
        .env("PLIMSOLL_CALLER_TOKEN", super::docker::TOKEN)
        .env("PLIMSOLL_HOST", env!("CARGO_BIN_EXE_plimsoll-host"))
        .output()
        .expect("the script runs")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[test]
fn a_pull_request_receipt_is_made_under_gvisor_and_verified_for_its_tree_only() {
    let Some(fx) = super::docker::fixture("runsc") else { return };
    let dir = scratch("pr-receipt");
    let (plugin, key) = super::docker::signed_plugin(&fx, &dir);
    let d = super::docker::start(&super::docker::docker_env(&fx, &plugin, &key, "runsc"));
    let url = d.url();
    let project = dir.join("project");
    copy_tree(&Path::new(EXAMPLE).join("sample"), &project);
    let (p, r) = (project.display().to_string(), dir.join("receipt").display().to_string());

    let o = script("receipt.sh", &url, &[&p, &r, "node --test"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("isolation kernel, outcome completed\n  exit 0  node --test\n"), "{out}");
    let key_id =
        err.lines().find_map(|l| l.strip_prefix("key ID       ")).expect("the key's ID in the log").to_string();
    let mut made: Vec<String> = std::fs::read_dir(&r)
        .expect("receipt dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(made, ["bom.json", "receipt.jsonl", "receipt.pub"], "the private key is not kept");

    let o = script("verify.sh", &url, &[&r, &p, "--key-id", &key_id, "node --test"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.ends_with("receipt verified: this tree's steps passed, signed at the tier above\n"), "{out}");

    // Another key ID, other steps, a changed file: each refused, naming why.
    let o = script("verify.sh", &url, &[&r, &p, "--key-id", &"0".repeat(64), "node --test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("the receipt is not signed by key 0000"), "{o:?}");
    let o = script("verify.sh", &url, &[&r, &p, "node --test test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("  the steps differ"), "{o:?}");
    let changed = dir.join("changed");
    copy_tree(&project, &changed);
    std::fs::write(changed.join("sum.js"), "module.exports = { sum: () => 6 };\n").expect("write");
    let o = script("verify.sh", &url, &[&r, &changed.display().to_string(), "node --test"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o).1;
    assert!(
        err.contains("the receipt's signed request is not this tree") && err.contains("  sum.js: differs"),
        "{err}"
    );

    // A receipt whose bundle lost a line.
    let cut = dir.join("cut");
    copy_tree(Path::new(&r), &cut);
    let bundle = std::fs::read_to_string(cut.join("receipt.jsonl")).expect("bundle");
    let kept: Vec<&str> = bundle.lines().take(1).collect();
    std::fs::write(cut.join("receipt.jsonl"), kept.join("\n") + "\n").expect("write");
    let o = script("verify.sh", &url, &[&cut.display().to_string(), &p, "node --test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("incomplete bundle"), "{o:?}");

    // Failing tests still get a receipt, and it says they failed.
    let failing = dir.join("failing");
    copy_tree(&project, &failing);
    std::fs::write(failing.join("sum.js"), "module.exports = { sum: () => 1 };\n").expect("write");
    let (f, fr) = (failing.display().to_string(), dir.join("failing-receipt").display().to_string());
    let o = script("receipt.sh", &url, &[&f, &fr, "node --test"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(text(&o).0.contains("outcome completed\n  exit 1  node --test"), "{o:?}");
    let o = script("verify.sh", &url, &[&fr, &f, "node --test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("the steps did not all pass"), "{o:?}");
}
