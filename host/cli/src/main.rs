//! `plimsoll-host`: the one plimsoll binary.
//!
//! Exit statuses, for every subcommand that runs code:
//! - the guest's own exit code when a run produced a result (0, 1, 124 timeout,
//!   134 trap, or whatever the program exited with);
//! - 69 when the request was refused and nothing ran (the reason is printed);
//! - 70 when the run failed after the code may have run (never retried);
//! - 2 for a usage error, 1 for any other failure of the command itself.

mod advise;
mod attest;
mod bench;
mod callers;
mod place;
mod plugin;
mod record;
mod run;
mod serve;
mod sim;
mod spec;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Refused: nothing ran.
pub const EXIT_REFUSED: u8 = 69;
/// Failed after the code may have run.
pub const EXIT_MAY_HAVE_RUN: u8 = 70;

#[derive(Debug, Parser)]
#[command(
    name = "plimsoll-host",
    version,
    about = "Run untrusted code in a sandbox and state how strong that sandbox was",
    long_about = "Run untrusted code in a sandbox and state how strong that sandbox was: its isolation \
tier, weakest first process, container, kernel, vm. The tier is evidence (configuration, a verified \
runtime, a startup smoke test), never attestation.",
    after_help = "Exit statuses: the guest's exit code for a result; 69 refused (nothing ran); \
70 failed after the code may have run; 2 usage error; 1 other failure."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one snippet on the embedded default provider (wasm, the process tier).
    Run(run::Args),
    /// Serve the protocol-4 daemon (Connect JSON over HTTP/1.1 and h2c, or TLS).
    Serve(serve::Args),
    /// Manage the callers in a clients file.
    #[command(subcommand)]
    Callers(callers::Command),
    /// Run one snippet on the first of several daemons that fits it and does not refuse it.
    Place(place::Args),
    /// Run-record tools.
    #[command(subcommand)]
    Record(record::Command),
    /// Provider plugin keys and signatures.
    #[command(subcommand)]
    Plugin(plugin::Command),
    /// Sign checked runs into a bundle, and check bundles (the daemon holds no key).
    #[command(subcommand)]
    Attest(attest::Command),
    /// Serve MCP for AI assistants (configured by PLIMSOLL_URL and friends): on
    /// stdio, or over HTTPS with `serve-http`.
    Mcp(McpArgs),
    /// Render one granted run's efficiency findings and call trace (HTML) from the daemon's log.
    Advise(advise::Args),
    /// Measure one layer (wasm, daemon, session, docker) with its peer side by side.
    Bench(bench::Args),
    /// Simulation runs: judge a controller against a plant, and replay pages.
    #[command(subcommand)]
    Sim(sim::Command),
    /// Grant profiles and in-sandbox clients from an OpenAPI 3.x document.
    #[command(subcommand)]
    Spec(spec::Command),
    /// The jailed engine worker; started only by the daemon, with its socket as stdin.
    #[command(hide = true)]
    EngineWorker,
}

/// `plimsoll-host mcp [serve-http ...]`.
#[derive(Debug, clap::Args)]
struct McpArgs {
    #[command(subcommand)]
    mode: Option<McpMode>,
}

#[derive(Debug, Subcommand)]
enum McpMode {
    /// Serve MCP over HTTPS at /mcp for connections the owner approves after
    /// signing in with a passkey; needs a daemon at kernel or vm and receipts.
    ServeHttp(ServeHttpArgs),
}

#[derive(Debug, clap::Args)]
struct ServeHttpArgs {
    /// The address to bind.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: std::net::SocketAddr,
    /// The certificate chain to serve TLS with (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Serve plain HTTP on loopback to a TLS reverse proxy, which must send
    /// X-Forwarded-Proto: https and X-Forwarded-Host naming the public host.
    #[arg(long)]
    behind_proxy: bool,
    /// The URL browsers and clients use, https://NAME[:PORT] (default
    /// https://localhost:PORT on loopback). Passkeys are bound to NAME.
    #[arg(long)]
    public_url: Option<String>,
    /// Where the owner's passkeys are kept (default
    /// $XDG_STATE_HOME/plimsoll/mcp, else ~/.local/state/plimsoll/mcp).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
}

fn default_state_dir() -> anyhow::Result<std::path::PathBuf> {
    let base = match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) if !x.is_empty() => std::path::PathBuf::from(x),
        (_, Some(h)) if !h.is_empty() => std::path::PathBuf::from(h).join(".local/state"),
        _ => anyhow::bail!("no HOME or XDG_STATE_HOME to keep the owner's passkeys under: give --state-dir"),
    };
    Ok(base.join("plimsoll/mcp"))
}

/// `plimsoll-host mcp`: the configuration comes from the environment an AI
/// application starts the server with; on stdio, stdout carries only MCP.
fn mcp(args: McpArgs) -> anyhow::Result<ExitCode> {
    let config = plimsoll_mcp::Config::from(|k| std::env::var(k).ok())?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match args.mode {
        None => rt.block_on(plimsoll_mcp::serve(config)).map_err(anyhow::Error::msg)?,
        Some(McpMode::ServeHttp(a)) => {
            let opts = plimsoll_mcp::http::Options {
                listen: a.listen,
                tls: a.tls_cert.zip(a.tls_key),
                behind_proxy: a.behind_proxy,
                public_url: a.public_url,
                state_dir: match a.state_dir {
                    Some(d) => d,
                    None => default_state_dir()?,
                },
            };
            rt.block_on(plimsoll_mcp::http::serve_http(config, opts))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(args) => run::main(args),
        Command::Serve(args) => serve::main(args),
        Command::Callers(cmd) => callers::main(cmd),
        Command::Place(args) => place::main(args),
        Command::Record(cmd) => record::main(cmd),
        Command::Plugin(cmd) => plugin::main(cmd),
        Command::Attest(cmd) => attest::main(cmd),
        Command::Mcp(args) => mcp(args),
        Command::Advise(args) => advise::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Sim(cmd) => sim::main(cmd),
        Command::Spec(cmd) => spec::main(cmd),
        Command::EngineWorker => Ok(ExitCode::from(u8::try_from(plimsoll_runtime::jail::worker::serve()).unwrap_or(1))),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("plimsoll-host: {e:#}");
            ExitCode::from(1)
        }
    }
}
