//! The line protocol on the QuickJS engine, fed directly: a line that holds line
//! endings of its own is split as node's readline splits a chunk, and one that holds
//! none reaches the listener whole.

use std::time::Duration;

use plimsoll_sim::controller::js::JsController;
use plimsoll_sim::controller::{Ask, Controller};

use crate::support::library;

const SECOND: Duration = Duration::from_secs(1);

/// A controller that answers each line event with its length and the number of
/// events so far, so a split shows as two answers.
fn counting() -> JsController {
    let code = "let n = 0; require('readline').createInterface({ input: process.stdin })\
                .on('line', (l) => process.stdout.write(`${l.length} ${++n}\\n`));";
    let lib = library();
    let js = lib.js().expect("QuickJS links");
    js.start(lib.engine(), &lib.settings().controller, SECOND, code, "count.js").expect("starts")
}

fn answer(c: &mut JsController, line: &str) -> Vec<f64> {
    let ask = Ask { tick: 0, observation: &[], line, inputs: 2 };
    c.answer(&ask, SECOND).expect("an answer")
}

#[test]
fn a_plain_line_is_one_event_and_embedded_endings_split_it_as_readline_does() {
    let mut c = counting();
    assert_eq!(answer(&mut c, "0.25 -1.5"), [9.0, 1.0]);
    // `a\rbc` is the chunk `a\rbc\n`: two lines, `a` and `bc`, answered in turn.
    assert_eq!(answer(&mut c, "a\rbc"), [1.0, 2.0]);
    assert_eq!(answer(&mut c, "queued"), [2.0, 3.0]);
    // `x\r\n` within one chunk ends one line, and the `\n` fed after it an empty one.
    assert_eq!(answer(&mut c, "x\r\n"), [1.0, 4.0]);
    assert_eq!(answer(&mut c, "next"), [0.0, 5.0]);
    assert_eq!(answer(&mut c, "last"), [4.0, 6.0]);
}
