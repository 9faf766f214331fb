//! The original's oracle: cart-pole balance from 0.2 rad, 20 s at 10 ms.

use crate::support::{run, summary};

/// The accepted law u = 40 theta + 5 omega + x + v, as a core module, in the same
/// order of operations as the JavaScript.
const ACCEPTED_WAT: &str = r#"(module
  (func (export "control") (param $x f64) (param $v f64) (param $theta f64) (param $omega f64) (param $k i32) (result f64)
    (f64.add
      (f64.add
        (f64.add (f64.mul (f64.const 40) (local.get $theta)) (f64.mul (f64.const 5) (local.get $omega)))
        (f64.mul (f64.const 1) (local.get $x)))
      (f64.mul (f64.const 1) (local.get $v)))))"#;

#[test]
fn the_accepted_balance_controller_gives_the_published_fingerprint() {
    let j = run("--plant cartpole", "accepted.wat", ACCEPTED_WAT.as_bytes());
    let s = summary(&j);
    assert_eq!(s["ticks"], 2000);
    assert_eq!(s["fell_at"], serde_json::Value::Null);
    assert_eq!(s["fingerprint"], "63cfd676924a3896127d60c97333677f3b3c804dd764dba001121f6c234a937f", "{s}");
}

#[test]
fn the_draft_with_two_wrong_signs_drops_the_pole_at_5_96_s() {
    let draft = ACCEPTED_WAT.replace("(f64.const 1)", "(f64.const -1)");
    let j = run("--plant cartpole", "draft.wat", draft.as_bytes());
    let s = summary(&j);
    assert_eq!(s["fell_at"], 5.96, "{s}");
    assert_eq!(s["passed"], false);
    assert_eq!(s["fingerprint"], "060d98e8140c03800347c4c947c07b2ab0011c3e6017e9a84529793afbbb53b9", "{s}");
}
