//! One library for the whole test binary, on a standalone engine.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use plimsoll_sim::{Judged, Library, Settings, Source, Trial, args, judge, standalone};

/// The committed QuickJS component.
pub const QUICKJS: &[u8] = include_bytes!("../../../../guests/quickjs/quickjs.wasm");

/// The shared library.
pub fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        let engine = standalone::engine().expect("engine");
        Library::new(
            &engine,
            Settings::new(64, standalone::EPOCH_TICK),
            QUICKJS,
            standalone::loader(&engine, None, |_| None),
        )
    })
}

/// Parses a judge command line.
pub fn trial(line: &str) -> Trial {
    let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
    match args::parse(&argv).expect("arguments parse") {
        args::Command::Run(t) => t,
        other => panic!("not a run: {other:?}"),
    }
}

/// Judges `line` with the controller file `name` holding `bytes`, within 60 s.
pub fn run(line: &str, name: &str, bytes: &[u8]) -> Judged {
    let t = trial(&format!("{line} --controller {name}"));
    let source = Source::read(name, bytes.to_vec()).expect("controller reads");
    judge::judge(library(), &t, source, Instant::now() + Duration::from_secs(60))
}

/// The summary of a run that must have completed.
pub fn summary(j: &Judged) -> serde_json::Value {
    assert_eq!(j.exit, 0, "stderr: {}", String::from_utf8_lossy(&j.stderr));
    serde_json::from_slice(&j.stdout).expect("summary is JSON")
}
