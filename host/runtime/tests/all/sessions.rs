//! Wasm sessions: one kept QuickJS interpreter for JavaScript cells, as the
//! session conformance cases describe them for one language.

use std::time::Duration;

use plimsoll_core::wire::CellResult;
use plimsoll_runtime::wasm::{EXIT_TIMEOUT, WasmSession};

use super::{text, wasm};

const BUDGET: Duration = Duration::from_secs(5);

fn cell(s: &mut WasmSession, code: &str) -> CellResult {
    s.cell(code, &[], BUDGET).expect("a cell result")
}

#[test]
fn cell_state_survives_calls() {
    let mut s = wasm().session();
    let first = cell(&mut s, "var base = 40; function add(n) { return base + n }");
    assert!(first.interpreter_started && !first.interpreter_ended);
    assert_eq!(first.exit_code, 0, "{}", text(&first.stderr));
    let r = cell(&mut s, "base = 41; base");
    assert_eq!((text(&r.stdout), r.interpreter_started), ("41\n".into(), false));
    let r = cell(&mut s, "add(1)");
    assert_eq!(text(&r.stdout), "42\n");
}

#[test]
fn a_trailing_expression_is_shown_as_a_notebook_shows_it() {
    let mut s = wasm().session();
    assert_eq!(text(&cell(&mut s, "({a: 1, b: [1, 2]})").stdout), "{ a: 1, b: [ 1, 2 ] }\n");
    assert_eq!(text(&cell(&mut s, "'text'").stdout), "'text'\n");
    assert_eq!(text(&cell(&mut s, "let nothing = 1").stdout), "");
}

#[test]
fn top_level_await_works() {
    let mut s = wasm().session();
    let r = cell(&mut s, "await new Promise(r => setTimeout(() => r(6 * 7), 10))");
    assert_eq!((r.exit_code, text(&r.stdout)), (0, "42\n".into()), "{}", text(&r.stderr));
}

#[test]
fn a_cell_error_keeps_the_state() {
    let mut s = wasm().session();
    cell(&mut s, "var kept = 'still here'");
    let r = cell(&mut s, "throw new Error('boom')");
    assert_eq!(r.exit_code, 1);
    let err = text(&r.stderr);
    assert!(err.contains("boom") && err.contains("<cell 2>"), "{err}");
    assert!(!r.interpreter_ended);
    assert_eq!(text(&cell(&mut s, "kept").stdout), "'still here'\n");
}

#[test]
fn a_deadline_ends_the_interpreter_and_the_next_cell_starts_afresh_with_the_files() {
    let mut s = wasm().session();
    let r = s.cell("var lost = 1", &[("data.txt".into(), b"kept".to_vec())], BUDGET).expect("cell");
    assert_eq!(r.exit_code, 0, "{}", text(&r.stderr));
    let r = s.cell("for (;;) {}", &[], Duration::from_millis(300)).expect("spin");
    assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (EXIT_TIMEOUT, true, true));
    let r = cell(&mut s, "typeof lost");
    assert!(r.interpreter_started, "a fresh interpreter");
    assert_eq!(text(&r.stdout), "'undefined'\n");
    let r = cell(&mut s, "readFile('data.txt')");
    assert_eq!(text(&r.stdout), "'kept'\n", "{}", text(&r.stderr));
}

#[test]
fn cell_files_are_readable_and_replaced_by_later_writes() {
    let mut s = wasm().session();
    let r = s.cell("readFile('a/b.txt')", &[("a/b.txt".into(), b"one".to_vec())], BUDGET).expect("cell");
    assert_eq!(text(&r.stdout), "'one'\n", "{}", text(&r.stderr));
    let r = s.cell("readFile('a/b.txt')", &[("a/b.txt".into(), b"two".to_vec())], BUDGET).expect("cell");
    assert_eq!(text(&r.stdout), "'two'\n");
}

#[test]
fn sessions_do_not_share_state_or_files() {
    let mut a = wasm().session();
    let mut b = wasm().session();
    a.cell("var mine = 1", &[("f".into(), b"x".to_vec())], BUDGET).expect("a");
    assert_eq!(text(&cell(&mut b, "typeof mine").stdout), "'undefined'\n");
    let r = cell(&mut b, "readFile('f')");
    // Not found, rather than any failure.
    assert_eq!(r.exit_code, 1, "{}", text(&r.stdout));
    assert!(text(&r.stderr).contains("Error: ENOENT: no such file 'f'"), "{}", text(&r.stderr));
}

#[test]
fn output_is_per_cell() {
    let mut s = wasm().session();
    cell(&mut s, "console.log('first')");
    let r = cell(&mut s, "console.error('second')");
    assert_eq!((text(&r.stdout), text(&r.stderr)), (String::new(), "second\n".into()));
}

#[test]
fn top_level_let_const_and_class_may_be_declared_again() {
    let mut s = wasm().session();
    for code in ["let base = 40", "const k = 1; class C { v() { return 1 } }"] {
        let r = cell(&mut s, code);
        assert_eq!(r.exit_code, 0, "{}", text(&r.stderr));
    }
    let r = cell(&mut s, "let base = 41; const k = 2; class C { v() { return base + k } }\nnew C().v()");
    assert_eq!((r.exit_code, text(&r.stdout)), (0, "43\n".into()), "{}", text(&r.stderr));
    assert!(!r.interpreter_started);
    // Below the top level, the language's own rules still hold.
    let r = cell(&mut s, "{ let x = 1; let x = 2 }");
    assert_eq!(r.exit_code, 1);
    assert!(text(&r.stderr).contains("SyntaxError"), "{}", text(&r.stderr));
}

#[test]
fn a_trailing_promise_is_shown_as_what_it_settled_to() {
    let mut s = wasm().session();
    assert_eq!(text(&cell(&mut s, "Promise.resolve(6).then((n) => n * 7)").stdout), "42\n");
    let r = cell(&mut s, "Promise.reject(new Error('refused'))");
    assert_eq!(r.exit_code, 1);
    assert!(text(&r.stderr).contains("refused"), "{}", text(&r.stderr));
    assert_eq!(text(&cell(&mut s, "new Promise(() => {})").stdout), "Promise { <pending> }\n");
}
