//! `plimsoll-host serve`: the daemon.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use plimsoll_daemon::config::{Config, PLUGIN_VARIABLES, ProcessEnv, VARIABLES};
use plimsoll_daemon::log::Log;
use plimsoll_daemon::server::{Server, signal};

fn variables_help() -> String {
    let mut s = String::from(
        "Environment (overrides plimsoll.toml; an unknown PLIMSOLL_*/SANDBOX_* variable fails startup):\n",
    );
    for (name, key, what) in VARIABLES {
        let key = if key.is_empty() { String::new() } else { format!(" [{key}]") };
        let _ = writeln!(s, "  {name}{key}\n      {what}");
    }
    s.push_str("\nThe provider plugin's (NAME is SANDBOX_PROVIDER in upper case, - as _):\n");
    for (name, key, what) in PLUGIN_VARIABLES {
        let _ = writeln!(s, "  {name} [{key}]\n      {what}");
    }
    s
}

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = variables_help())]
pub struct Args {
    /// The configuration file (default: $PLIMSOLL_CONFIG, else none).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

/// Runs `plimsoll-host serve` until SIGTERM or SIGINT, then drains.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let config = match Config::load(args.config.as_deref(), &ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("plimsoll-host serve: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let log = Log::new(config.log_format);
    // Every admitted run or session call gets a blocking thread (the engine runs
    // guests synchronously); admission, not tokio's default of 512, is the bound.
    let blocking = config.admission.max_concurrent as usize + 64;
    let rt = tokio::runtime::Builder::new_multi_thread().max_blocking_threads(blocking).enable_all().build()?;
    rt.block_on(async move {
        match Server::start(config, log).await {
            Ok(server) => {
                server.serve(signal()).await;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                log.error("startup refused", &[("error", serde_json::json!(e.to_string()))]);
                eprintln!("plimsoll-host serve: {e}");
                Ok(ExitCode::from(2))
            }
        }
    })
}
