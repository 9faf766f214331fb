//! What a snippet prints and how it ends.

use std::time::Duration;

use plimsoll_core::provider::{Provider, Snippet};
use plimsoll_core::validate::Language;
use plimsoll_core::{Floor, Reason, Tier};

use super::{run, text, wasm};

const FIVE_S: Duration = Duration::from_secs(5);

#[test]
fn console_log_prints_to_stdout() {
    let r = run("console.log(6*7)", FIVE_S);
    assert_eq!(text(&r.stdout), "42\n");
    assert_eq!(r.exit_code, 0);
    assert!(!r.timed_out);
    assert!(r.stderr.is_empty());
}

#[test]
fn error_and_warn_go_to_stderr_log_and_info_to_stdout() {
    let r =
        run("console.log('a'); console.error('b'); console.warn('c'); console.info('d'); console.debug('e')", FIVE_S);
    assert_eq!(text(&r.stdout), "a\nd\ne\n");
    assert_eq!(text(&r.stderr), "b\nc\n");
}

#[test]
fn values_print_as_node_shows_them() {
    let r = run("console.log('hi', 6*7, [1,2,3], {a: 1, b: 'x'}, null, undefined, -0, 10n, new Map([[1,2]]))", FIVE_S);
    assert_eq!(text(&r.stdout), "hi 42 [ 1, 2, 3 ] { a: 1, b: 'x' } null undefined -0 10n Map(1) { 1 => 2 }\n");
    let r = run("console.log('%s is %d years', 'Ann', 42.5, 'extra')", FIVE_S);
    assert_eq!(text(&r.stdout), "Ann is 42.5 years extra\n");
}

#[test]
fn numbers_print_and_parse_as_node_does() {
    // 2^-1017: QuickJS's own printer gives a digit more (7.1202363472230444e-307);
    // the engine prints with plimsoll-jsnum, the shortest, as node does. The tie
    // 1394865425023536.25 prints its even neighbour.
    let r = run(
        "const t = 2 ** -1017; console.log(String(t), String(1394865425023536.25), 0.1 + 0.2, 1e21, 1.5e-7, -0.000001); \
         console.log(Number('7.120236347223045e-307') === t, Number('-.5e3'), Number(' 12 '), Number('0x1f'), \
         Number('1_0'), parseFloat('2.5e-3x'), JSON.parse('[1e400, 0.1]'), Number('9007199254740993'))",
        FIVE_S,
    );
    assert_eq!(
        text(&r.stdout),
        "7.120236347223045e-307 1394865425023536.2 0.30000000000000004 1e+21 1.5e-7 -0.000001\n\
         true -500 12 31 NaN 0.0025 [ Infinity, 0.1 ] 9007199254740992\n"
    );
}

#[test]
fn math_dates_and_regexps_work() {
    let r = run(
        r#"console.log(JSON.stringify({a:Math.sqrt(2), d:new Date(0).toISOString(), r:/a(b+)/.exec("xabbb")[1]}))"#,
        FIVE_S,
    );
    assert_eq!(text(&r.stdout), "{\"a\":1.4142135623730951,\"d\":\"1970-01-01T00:00:00.000Z\",\"r\":\"bbb\"}\n");
}

#[test]
fn an_uncaught_exception_is_exit_1_with_the_message_on_stderr() {
    let r = run("console.log('before'); throw new TypeError('boom')", FIVE_S);
    assert_eq!(r.exit_code, 1);
    assert_eq!(text(&r.stdout), "before\n");
    let err = text(&r.stderr);
    assert!(err.starts_with("Uncaught TypeError: boom\n"), "{err}");
    assert!(err.contains("<snippet>"), "{err}");
}

#[test]
fn a_syntax_error_is_a_result() {
    let r = run("let x = ;", FIVE_S);
    assert_eq!(r.exit_code, 1);
    assert!(text(&r.stderr).starts_with("Uncaught SyntaxError"), "{}", text(&r.stderr));
}

#[test]
fn thrown_non_errors_are_described() {
    let r = run("throw {code: 7}", FIVE_S);
    assert_eq!(r.exit_code, 1);
    assert_eq!(text(&r.stderr), "Uncaught { code: 7 }\n");
}

#[test]
fn promises_and_timers_settle_before_the_run_ends() {
    let r = run(
        "setTimeout(() => console.log('t2'), 20); setTimeout(() => console.log('t1'), 10); \
         Promise.resolve().then(() => console.log('p')); (async () => { await null; console.log('a') })(); console.log('s')",
        FIVE_S,
    );
    assert_eq!(text(&r.stdout), "s\np\na\nt1\nt2\n");
    assert_eq!(r.exit_code, 0);
}

#[test]
fn an_unhandled_rejection_is_exit_1() {
    let r = run("Promise.reject(new Error('nope'))", FIVE_S);
    assert_eq!(r.exit_code, 1);
    assert!(text(&r.stderr).starts_with("Uncaught (in promise) Error: nope"), "{}", text(&r.stderr));
    let handled = run("Promise.reject(new Error('nope')).catch(e => console.log('caught', e.message))", FIVE_S);
    assert_eq!(handled.exit_code, 0);
    assert_eq!(text(&handled.stdout), "caught nope\n");
}

#[test]
fn there_is_no_filesystem_network_or_environment() {
    let r = run(
        "console.log(typeof require, typeof process, typeof fetch, typeof XMLHttpRequest, typeof std, typeof os, typeof readFile)",
        FIVE_S,
    );
    assert_eq!(text(&r.stdout), "undefined undefined undefined undefined undefined undefined undefined\n");
}

#[test]
fn runs_share_nothing() {
    // Every run starts from one snapshot in a reused pool slot: what one run changes
    // in the snapshot's context (globals, prototypes, the prelude's console) must be
    // gone in the next, however often the slots are reused.
    for _ in 0..20 {
        let a = run(
            "globalThis.leak = 41; Object.prototype.polluted = 1; console.log = () => {}; \
             Math.random = () => 4; console.error(leak + 1)",
            FIVE_S,
        );
        assert_eq!(text(&a.stderr), "42\n");
        let b = run("console.log(typeof leak, ({}).polluted, Math.random() < 1)", FIVE_S);
        assert_eq!(text(&b.stdout), "undefined undefined true\n");
    }
}

#[test]
fn the_evidence_is_the_process_tier_and_the_component_digest() {
    let ran = wasm()
        .run_snippet(&Snippet {
            language: Language::JavaScript,
            code: "1",
            timeout: FIVE_S,
            floor: Some(Floor::Process),
            grant: None,
        })
        .expect("runs");
    assert_eq!(ran.evidence.tier, Tier::Process);
    assert_eq!(ran.evidence.environment, plimsoll_runtime::wasm::quickjs_identity());
}

#[test]
fn a_floor_above_process_is_refused_with_isolation() {
    for floor in [Floor::Container, Floor::Kernel, Floor::Vm] {
        let err = wasm()
            .run_snippet(&Snippet {
                language: Language::JavaScript,
                code: "1",
                timeout: FIVE_S,
                floor: Some(floor),
                grant: None,
            })
            .expect_err("refused");
        let plimsoll_core::provider::RunError::Refused(r) = err else { panic!("not a refusal: {err}") };
        assert_eq!(r.reason, Reason::Isolation);
    }
}

#[test]
fn python_is_unsupported_here() {
    let err = wasm()
        .run_snippet(&Snippet {
            language: Language::Python,
            code: "print(1)",
            timeout: FIVE_S,
            floor: None,
            grant: None,
        })
        .expect_err("refused");
    let plimsoll_core::provider::RunError::Refused(r) = err else { panic!("not a refusal: {err}") };
    assert_eq!(r.reason, Reason::Unsupported);
    assert_eq!(
        r.message,
        "the wasm provider's snippets are javascript, not python; python runs as a project of `python3 FILE` steps \
         or as a session cell"
    );
}

#[test]
fn every_run_of_the_snapshot_draws_its_own_random_sequence() {
    let a = run("console.log(Math.random(), Math.random())", FIVE_S);
    let b = run("console.log(Math.random(), Math.random())", FIVE_S);
    assert_eq!((a.exit_code, b.exit_code), (0, 0));
    assert_ne!(a.stdout, b.stdout, "two runs from one snapshot gave one sequence");
    let values: Vec<f64> = text(&a.stdout).split_whitespace().map(|v| v.parse().expect("a number")).collect();
    assert!(values.iter().all(|v| (0.0..1.0).contains(v)) && values[0] != values[1], "{values:?}");
}

#[test]
fn the_component_imports_no_filesystem_sockets_or_http() {
    let engine = wasmtime::Engine::default();
    let component =
        wasmtime::component::Component::new(&engine, plimsoll_runtime::wasm::QUICKJS_COMPONENT).expect("compiles");
    let imports: Vec<String> = component.component_type().imports(&engine).map(|(name, _)| name.to_string()).collect();
    assert!(imports.iter().any(|i| i == "plimsoll:engine/console@0.1.0"), "{imports:?}");
    for i in &imports {
        let allowed = i.starts_with("plimsoll:engine/")
            || i.starts_with("wasi:io/")
            || i.starts_with("wasi:clocks/")
            || i.starts_with("wasi:random/insecure-seed")
            // Math.random's seed, drawn at each run (the component is a snapshot).
            || i.starts_with("wasi:random/random@")
            || i.starts_with("wasi:cli/");
        assert!(allowed, "the engine imports {i}");
    }
}
