//! The `plimsoll-host` binary, driven as a user drives it.

mod jail;
mod record;
mod run;
mod sim_report;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// The built binary with a private component cache under the target directory.
pub fn host() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_plimsoll-host"));
    c.env("PLIMSOLL_CACHE_DIR", concat!(env!("CARGO_TARGET_TMPDIR"), "/plimsoll-cache"));
    c.env_remove("SANDBOX_MEMORY_MB");
    c.env_remove("SANDBOX_WASM_PYTHON");
    c
}

/// Runs the binary with `args`, feeding `stdin`.
pub fn exec(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = host()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plimsoll-host");
    child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// Standard output as text.
pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch file under the target directory.
pub fn scratch(name: &str, content: &[u8]) -> String {
    let path = format!("{}/{}-{name}", env!("CARGO_TARGET_TMPDIR"), std::process::id());
    std::fs::write(&path, content).expect("write scratch file");
    path
}
