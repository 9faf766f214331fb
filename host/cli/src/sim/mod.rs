//! `plimsoll-host sim`: simulation runs of controllers against plants, and their
//! replay pages.

mod report;
mod run;

use std::process::ExitCode;

/// `sim` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Judge a controller against a plant: on the embedded default (wasm, the
    /// process tier) or, with --daemon, as a project run on a daemon. Prints the
    /// summary JSON as its last line.
    Run(Box<run::Args>),
    /// Write one self-contained replay page (no network, no third-party script) from
    /// runs saved with `sim run --save`.
    Report(report::Args),
}

/// Runs `plimsoll-host sim`.
pub fn main(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => run::main(*args),
        Command::Report(args) => report::main(args),
    }
}
