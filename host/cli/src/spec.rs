//! `plimsoll-host spec import`: grant profiles, in-sandbox clients and a tool
//! description from one OpenAPI 3.x document (printed on stdout; what was skipped
//! or dropped, and why, on stderr).

use std::path::PathBuf;
use std::process::ExitCode;

use plimsoll_specgen::Language;

/// `spec` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Read an OpenAPI 3.x document (JSON or YAML) and print one thing it gives.
    Import(ImportArgs),
}

/// What `spec import` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// A profile's `allow` list, as JSON.
    Profile,
    /// A typed client over the grant's in-sandbox client (see --language, --sdk).
    Client,
    /// Every route the document names, for a profile's `catalog`.
    Catalog,
    /// The `health_check` route (an operation marked x-plimsoll-health-check: true).
    Health,
    /// A profile's `batch_of` (operations marked x-plimsoll-batch-of).
    Batch,
    /// A description of the client an agent can read.
    Tool,
}

/// The client's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A preamble adding one method per operation to the grant's client.
    Javascript,
    /// A module of one function per operation over `plimsoll_host`.
    Python,
}

/// `spec import` arguments.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The document (`.json`, `.yaml`).
    pub document: PathBuf,
    /// What to print.
    #[arg(long, value_enum, default_value = "profile")]
    pub emit: Emit,
    /// The client's language, with --emit client.
    #[arg(long, value_enum, default_value = "javascript")]
    pub language: Lang,
    /// The grant client's global (the profile's `global`).
    #[arg(long, default_value = "host")]
    pub global: String,
    /// The global the JavaScript client installs itself as.
    #[arg(long, default_value = "api")]
    pub sdk: String,
    /// The Python module's name, as the tool description tells an agent to import it.
    #[arg(long, default_value = "api_client")]
    pub module: String,
}

/// A name both languages can bind: an ASCII letter or `_`, then letters, digits or `_`.
fn check_name(flag: &str, name: &str) -> anyhow::Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 64;
    anyhow::ensure!(ok, "{flag} {name:?} is not a plain identifier (a letter or _, then letters, digits or _)");
    Ok(())
}

/// Runs a `spec` subcommand.
///
/// # Errors
///
/// The document could not be read or was refused as a whole; no health check
/// was marked for `--emit health`.
pub fn main(cmd: Command) -> anyhow::Result<ExitCode> {
    let Command::Import(args) = cmd;
    check_name("--global", &args.global)?;
    check_name("--sdk", &args.sdk)?;
    check_name("--module", &args.module)?;
    anyhow::ensure!(
        args.sdk != args.global,
        "--sdk and --global must differ: the client is frozen, the SDK is a global of its own"
    );
    let text = std::fs::read(&args.document)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.document.display()))
        .and_then(|b| {
        String::from_utf8(b).map_err(|_| anyhow::anyhow!("{} is not UTF-8", args.document.display()))
    })?;
    let import = plimsoll_specgen::import(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.document.display()))?;
    for skip in &import.skips {
        eprintln!("skipped {}: {}", skip.what, skip.reason);
    }
    for warning in &import.warnings {
        eprintln!("warning: {warning}");
    }
    let out = match args.emit {
        Emit::Profile => plimsoll_specgen::profile(&import),
        Emit::Catalog => plimsoll_specgen::catalog(&import),
        Emit::Batch => plimsoll_specgen::batch(&import),
        Emit::Tool => plimsoll_specgen::tool(&import, &args.sdk, &args.module),
        Emit::Health => match plimsoll_specgen::health(&import) {
            Some(line) => format!("{line}\n"),
            None => anyhow::bail!("no operation is marked x-plimsoll-health-check: true (a GET of a concrete path)"),
        },
        Emit::Client => {
            let language = match args.language {
                Lang::Javascript => Language::JavaScript,
                Lang::Python => Language::Python,
            };
            plimsoll_specgen::client(&import, language, &args.global, &args.sdk)
        }
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
