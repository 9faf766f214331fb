//! `plimsoll-host record`: digests of protocol messages, for interop debugging.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use plimsoll_core::record;
use plimsoll_core::wire::{RunRecord, RunRequest, RunResponse, SessionRunRequest, from_json};

/// `record` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the digest of a protocol JSON message (proto3 JSON names; int64 as
    /// strings or numbers; bytes as base64).
    Digest(DigestArgs),
}

/// What `record digest` reads.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Kind {
    /// A RunRequest, or a SessionRunRequest (its session ID is left out).
    Request,
    /// The result part of a RunResponse (or of a SessionRunResponse's `run`).
    Result,
    /// A RunRecord, or the `record` of a RunResponse; its own digest is checked.
    Record,
}

/// Arguments of `record digest`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status 0 when the digest was printed; 1 when the input does not \
parse, or a record's stated recordSha256 differs from the digest of its fields.")]
pub struct DigestArgs {
    /// What the file holds.
    #[arg(long, value_enum)]
    kind: Kind,
    /// The JSON file, or `-` for standard input.
    file: PathBuf,
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).context("reading standard input")?;
        return Ok(b);
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Takes one field out of a JSON object, if it is there, as bytes to parse alone.
fn field(bytes: &[u8], name: &str) -> Option<Vec<u8>> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.get(name).filter(|x| x.is_object()).map(|x| x.to_string().into_bytes())
}

/// Runs `plimsoll-host record`.
pub fn main(cmd: Command) -> anyhow::Result<ExitCode> {
    let Command::Digest(args) = cmd;
    let bytes = read(&args.file)?;
    let what = args.file.display();
    match args.kind {
        Kind::Request => {
            let in_session = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .is_some_and(|v| v.get("sessionId").or_else(|| v.get("session_id")).is_some());
            let digest = if in_session {
                let call: SessionRunRequest =
                    from_json(&bytes).with_context(|| format!("{what} is not a SessionRunRequest"))?;
                record::request_digest(&call.as_run_request())
            } else {
                let req: RunRequest = from_json(&bytes).with_context(|| format!("{what} is not a RunRequest"))?;
                record::request_digest(&req)
            };
            println!("{digest}");
        }
        Kind::Result => {
            let body = field(&bytes, "run").unwrap_or(bytes);
            let resp: RunResponse = from_json(&body).with_context(|| format!("{what} is not a RunResponse"))?;
            println!("{}", record::result_digest(&resp));
        }
        Kind::Record => {
            let body = field(&bytes, "record").unwrap_or(bytes);
            let rec: RunRecord = from_json(&body).with_context(|| format!("{what} is not a RunRecord"))?;
            let digest = record::record_digest(&rec)?;
            println!("{digest}");
            if !rec.record_sha256.is_empty() && rec.record_sha256 != digest {
                eprintln!("the record states recordSha256 {}, but its fields digest to {digest}", rec.record_sha256);
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
