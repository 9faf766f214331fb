//! Controllers in their three forms, behind one trait the judge drives tick by tick:
//! JavaScript on our QuickJS engine speaking the original's line protocol
//! ([`js`]), a core wasm module exporting `control` ([`module`], C compiled for
//! wasm32), and a component of the `controller-guest` world ([`component`], Rust).
//! Each runs in its own fresh store with its own memory cap and a deadline per answer.

use std::time::Duration;

use base64::Engine as _;

use crate::walls::Stopped;

pub mod component;
pub mod js;
pub mod module;

/// Bytes a controller may write on stderr that are kept (the rest is dropped).
pub const STDERR_CAP: usize = 64 << 10;

/// Bytes a JavaScript controller may leave unread on stdout before it is called a
/// flood: far more than any answer line, small enough that a runaway writer costs
/// nothing.
pub const PENDING_CAP: usize = 1 << 20;

/// One tick as the controller is asked it.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The tick index, from 0.
    pub tick: u32,
    /// The observations, as the plant reported them.
    pub observation: &'a [f64],
    /// The state line (observations, then the Jacobian suffix when asked), without
    /// its newline; empty for a controller that does not read lines.
    pub line: &'a str,
    /// How many values the answer must hold (the plant's inputs).
    pub inputs: usize,
}

/// A controller the judge can ask.
pub trait Controller {
    /// Answers one tick within `budget`.
    ///
    /// # Errors
    ///
    /// The [`Fault`] that stopped this controller; it is not asked again.
    fn answer(&mut self, ask: &Ask<'_>, budget: Duration) -> Result<Vec<f64>, Fault>;

    /// Ends the controller's input and gives it `budget` to finish. A controller
    /// that lingers is not a fault.
    fn finish(&mut self, budget: Duration);

    /// What it wrote on stderr, at most [`STDERR_CAP`] bytes.
    fn stderr(&self) -> &[u8];

    /// Whether it reads the state line's text (the line protocol); the other
    /// forms take the values, so the judge need not write the text for them.
    fn reads_lines(&self) -> bool {
        false
    }
}

/// Why a controller gave no usable answer (the judge exits 3).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Fault {
    /// It did not answer before its deadline.
    #[error("did not answer within {0} ms")]
    Late(u64),
    /// It returned without writing an answer line.
    #[error("answered nothing (it wrote no line)")]
    Silent,
    /// It left a line unfinished.
    #[error("wrote {0:?} without ending the line")]
    Unfinished(String),
    /// It ended (exited, or stopped listening) before answering.
    #[error("exited without answering{}", match .0 { Some(c) => format!(" (status {c})"), None => String::new() })]
    Exited(Option<i32>),
    /// It threw something nothing caught.
    #[error("threw an uncaught exception (its error is on stderr)")]
    Raised,
    /// It answered the wrong number of values.
    #[error("answered {got} value(s); the plant takes {want}")]
    Count {
        /// Values in the answer.
        got: usize,
        /// Inputs the plant takes.
        want: usize,
    },
    /// A value was not a finite number.
    #[error("answered {0:?}, which is not a finite number")]
    NotFinite(String),
    /// It wrote more than [`PENDING_CAP`] bytes that were not answers.
    #[error("flooded its output (more than {PENDING_CAP} bytes beyond its answers)")]
    Flood,
    /// Its store ran out of memory or trapped.
    #[error("{0}")]
    Stopped(Stopped),
    /// It cannot be run at all (its imports, its `control` export, its kind).
    #[error("{0}")]
    Unusable(String),
}

/// The form a controller file is in, read from its name and its first bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// JavaScript text (`.js`, `.mjs`, `.cjs`).
    JavaScript(String),
    /// A core wasm module, binary or text (`.wat`).
    Module(Vec<u8>),
    /// A component (the Rust form).
    Component(Vec<u8>),
}

/// The first bytes of a binary core module (magic, version 1).
const MODULE_HEADER: [u8; 8] = *b"\0asm\x01\0\0\0";
/// The first bytes of a binary component (magic, version 0x0d, layer 1).
const COMPONENT_HEADER: [u8; 8] = *b"\0asm\x0d\0\x01\0";

impl Source {
    /// Reads a controller file named `name` holding `bytes`: `.js`, `.mjs` and `.cjs`
    /// are JavaScript; `.wat` is a core module in text form; `.b64` is base64 of a
    /// binary module or component (project files travel as text); anything else must
    /// be a binary module or component.
    ///
    /// # Errors
    ///
    /// A usage text naming the file and what it should be.
    pub fn read(name: &str, bytes: Vec<u8>) -> Result<Source, String> {
        let lower = name.to_ascii_lowercase();
        if [".js", ".mjs", ".cjs"].iter().any(|s| lower.ends_with(s)) {
            return String::from_utf8(bytes)
                .map(Source::JavaScript)
                .map_err(|_| format!("controller {name} is not UTF-8 text, so it cannot be JavaScript"));
        }
        if lower.ends_with(".wat") {
            return Ok(Source::Module(bytes));
        }
        let bytes = if lower.ends_with(".b64") {
            let text: Vec<u8> = bytes.into_iter().filter(|b| !b.is_ascii_whitespace()).collect();
            base64::engine::general_purpose::STANDARD
                .decode(&text)
                .map_err(|e| format!("controller {name} is not base64 ({e})"))?
        } else {
            bytes
        };
        match bytes.get(..8) {
            Some(h) if h == MODULE_HEADER => Ok(Source::Module(bytes)),
            Some(h) if h == COMPONENT_HEADER => Ok(Source::Component(bytes)),
            _ => Err(format!(
                "cannot tell what kind of controller {name} is: give JavaScript as .js, a C controller as a \
                 compiled wasm module (.wasm, .wat, or base64 as .wasm.b64), or a controller component (.wasm)"
            )),
        }
    }
}

/// Reads one answer line as the original judge does: trimmed, split on runs of
/// whitespace, each token read as JavaScript's `Number` reads it; exactly `want`
/// values, all finite.
///
/// # Errors
///
/// [`Fault::Count`] or [`Fault::NotFinite`].
pub fn parse_answer(line: &str, want: usize) -> Result<Vec<f64>, Fault> {
    let text = line.trim_matches(crate::number::is_js_space);
    let tokens: Vec<&str> = if text.is_empty() {
        Vec::new()
    } else {
        text.split(crate::number::is_js_space).filter(|t| !t.is_empty()).collect()
    };
    if tokens.len() != want {
        return Err(Fault::Count { got: tokens.len(), want });
    }
    tokens
        .iter()
        .map(|t| {
            let v = crate::number::parse_js(t);
            if v.is_finite() { Ok(v) } else { Err(Fault::NotFinite(shorten(t))) }
        })
        .collect()
}

/// At most 40 characters of `text`, for an error message.
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_the_original_judge_reads_them() {
        assert_eq!(parse_answer("1.5", 1), Ok(vec![1.5]));
        assert_eq!(parse_answer("  -2 3e1\t", 2), Ok(vec![-2.0, 30.0]));
        assert_eq!(parse_answer("", 1), Err(Fault::Count { got: 0, want: 1 }));
        assert_eq!(parse_answer("   ", 1), Err(Fault::Count { got: 0, want: 1 }));
        assert_eq!(parse_answer("1 2", 1), Err(Fault::Count { got: 2, want: 1 }));
        assert_eq!(parse_answer("NaN", 1), Err(Fault::NotFinite("NaN".into())));
        assert_eq!(parse_answer("Infinity", 1), Err(Fault::NotFinite("Infinity".into())));
        assert_eq!(parse_answer("abc", 1), Err(Fault::NotFinite("abc".into())));
        assert_eq!(parse_answer("0x10", 1), Ok(vec![16.0]));
        assert!(parse_answer("-0", 1).is_ok_and(|v| v[0].to_bits() == (-0.0f64).to_bits()));
    }

    #[test]
    fn a_controller_file_is_read_by_its_name_and_first_bytes() {
        assert_eq!(Source::read("c.js", b"x".to_vec()), Ok(Source::JavaScript("x".into())));
        assert_eq!(Source::read("c.wat", b"(module)".to_vec()), Ok(Source::Module(b"(module)".to_vec())));
        let module = MODULE_HEADER.to_vec();
        assert_eq!(Source::read("c.wasm", module.clone()), Ok(Source::Module(module.clone())));
        let b64 = base64::engine::general_purpose::STANDARD.encode(&module);
        assert_eq!(Source::read("c.wasm.b64", format!("{b64}\n").into_bytes()), Ok(Source::Module(module)));
        let component = COMPONENT_HEADER.to_vec();
        assert_eq!(Source::read("c.wasm", component.clone()), Ok(Source::Component(component)));
        let e = Source::read("c.py", b"print(1)".to_vec()).expect_err("python");
        assert!(e.starts_with("cannot tell what kind of controller c.py is"), "{e}");
        let e = Source::read("c.wasm.b64", b"!!".to_vec()).expect_err("garbage");
        assert!(e.starts_with("controller c.wasm.b64 is not base64"), "{e}");
    }
}
