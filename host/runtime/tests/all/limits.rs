//! The walls: deadline, memory, output caps.

use std::time::{Duration, Instant};

use plimsoll_runtime::wasm::{EXIT_TIMEOUT, EXIT_TRAP};

use super::{run, text, wasm};

#[test]
fn an_endless_loop_is_stopped_by_its_deadline() {
    let budget = Duration::from_millis(300);
    wasm(); // compiled (or loaded) before the clock starts
    let start = Instant::now();
    let r = run("for(;;){}", budget);
    let took = start.elapsed();
    assert_eq!(r.exit_code, EXIT_TIMEOUT);
    assert!(r.timed_out);
    assert!(took >= budget, "stopped early: {took:?}");
    // How close to the budget it stops is measured by `cargo bench --bench snippet`;
    // here only that the deadline, not something else, ended it (shared CI machines
    // are too noisy for a tight bound).
    assert!(took < budget + Duration::from_secs(10), "not stopped by the deadline: {took:?}");
}

#[test]
fn output_before_the_deadline_is_kept() {
    let r = run("console.log('started'); for(;;){}", Duration::from_millis(100));
    assert!(r.timed_out);
    assert_eq!(text(&r.stdout), "started\n");
}

#[test]
fn a_memory_bomb_is_a_result_not_a_crash() {
    let r = run("let a = []; for (let i = 0;; i++) a.push(new Array(100000).fill(i))", Duration::from_secs(20));
    assert!(!r.timed_out);
    assert!(r.exit_code == 1 || r.exit_code == EXIT_TRAP, "exit {}", r.exit_code);
    let err = text(&r.stderr);
    assert!(err.contains("out of memory"), "{err}");
    // The host is fine afterwards.
    assert_eq!(text(&run("console.log(1)", Duration::from_secs(5)).stdout), "1\n");
}

#[test]
fn ten_mib_of_stdout_keeps_64_kib_and_sets_the_flag() {
    let r = run("console.log('x'.repeat(10 << 20))", Duration::from_secs(20));
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout.len(), 64 << 10);
    assert!(r.stdout_truncated);
    assert!(!r.stderr_truncated);
    let r = run("for (let i = 0; i < 20000; i++) console.error('line ' + i)", Duration::from_secs(20));
    assert_eq!(r.stderr.len(), 64 << 10);
    assert!(r.stderr_truncated);
    assert!(r.stderr.starts_with(b"line 0\nline 1\n"));
}

#[test]
fn deep_recursion_is_a_result() {
    let r = run("function f(n) { return f(n + 1) + 1 } f(0)", Duration::from_secs(10));
    assert!(r.exit_code == 1 || r.exit_code == EXIT_TRAP, "exit {}", r.exit_code);
    assert!(!r.stderr.is_empty());
}
