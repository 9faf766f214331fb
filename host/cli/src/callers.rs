//! `plimsoll-host callers`: manage a clients file.

use std::path::PathBuf;
use std::process::ExitCode;

use plimsoll_daemon::callers;

/// `callers` subcommands. Each edit locks the file, refuses a symlink, and replaces
/// it atomically with mode 0600. Running daemons read the file at startup: restart
/// them after an edit.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add a caller; its token is printed once, to standard output.
    Create {
        /// The clients file (created if missing).
        #[arg(long)]
        file: PathBuf,
        /// The caller's ID.
        #[arg(long)]
        id: String,
        /// A scope (repeatable; default code:run).
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// List callers and their scopes (never tokens).
    List {
        /// The clients file.
        #[arg(long)]
        file: PathBuf,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Give a caller a new token, printed once to standard output.
    Rotate {
        /// The clients file.
        #[arg(long)]
        file: PathBuf,
        /// The caller's ID.
        #[arg(long)]
        id: String,
    },
    /// Remove a caller.
    Revoke {
        /// The clients file.
        #[arg(long)]
        file: PathBuf,
        /// The caller's ID.
        #[arg(long)]
        id: String,
    },
}

const RESTART: &str = "running daemons read the clients file at startup: restart them for this to take effect";

/// Runs `plimsoll-host callers`.
pub fn main(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Create { file, id, scopes } => {
            let token = callers::create(&file, &id, &scopes)?;
            println!("{token}");
            eprintln!("created caller {id:?} in {}; the token above is shown once; {RESTART}", file.display());
        }
        Command::List { file, json } => {
            let list = callers::list(&file)?;
            if json {
                let v: Vec<_> =
                    list.iter().map(|(id, scopes)| serde_json::json!({"id": id, "scopes": scopes})).collect();
                println!("{}", serde_json::json!({ "clients": v }));
            } else {
                for (id, scopes) in list {
                    println!("{id}\t{}", scopes.join(" "));
                }
            }
        }
        Command::Rotate { file, id } => {
            let token = callers::rotate(&file, &id)?;
            println!("{token}");
            eprintln!("rotated caller {id:?}; the old token stops working once daemons restart; {RESTART}");
        }
        Command::Revoke { file, id } => {
            callers::revoke(&file, &id)?;
            eprintln!("revoked caller {id:?}; {RESTART}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
