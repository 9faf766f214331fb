//! `plimsoll-host place`: one run over several daemons, for operators. The run goes
//! to the first daemon whose `Describe` fits it and that does not refuse it for a
//! reason another may not share (`plimsoll_client::place`); every answer is checked
//! by the client that received it.

use std::path::PathBuf;
use std::process::ExitCode;

use plimsoll_client::place::{Backend, DESCRIPTION_TTL, Need, Placer};
use plimsoll_client::{Client, Settings};
use plimsoll_core::validate::{self, Language};
use plimsoll_core::wire::RunRequest;
use plimsoll_core::{Refusal, protocol};

use crate::run::{Sent, payload, read_code, refused, sent_timeout_ms, show};

/// Arguments of `place`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Each daemon's token comes from PLIMSOLL_CALLER_TOKEN_<NAME> (the name upper-cased, \
anything but letters and digits as _), else PLIMSOLL_CALLER_TOKEN.\n\
Exit statuses: as run's: the guest's exit code for a result; 69 refused by every daemon or by the one that ended \
placement, nothing ran; 70 failed after the code may have run.")]
pub struct Args {
    /// A daemon of the set, in order of preference: NAME=URL. Give it once per daemon.
    #[arg(long = "daemon", value_name = "NAME=URL", required = true)]
    daemons: Vec<String>,
    /// The weakest tier the run accepts: process, container, kernel or vm.
    #[arg(long = "min-isolation", value_name = "TIER")]
    min_isolation: Option<String>,
    /// Only daemons whose environment for this payload states this identity.
    #[arg(long, value_name = "ID")]
    environment: Option<String>,
    /// Only daemons of this provider (wasm, docker, e2b, ...).
    #[arg(long)]
    provider: Option<String>,
    /// The snippet's language: javascript, or python (a one-step project).
    #[arg(long = "lang", default_value = "javascript")]
    language: String,
    /// The run's budget in milliseconds (0 or unset: each daemon's default).
    #[arg(long = "timeout-ms", value_name = "N")]
    timeout_ms: Option<u64>,
    /// A PEM CA certificate to trust for https daemons.
    #[arg(long = "tls-ca", value_name = "PATH")]
    tls_ca: Option<PathBuf>,
    /// Print the protocol's RunResponse JSON instead of lines.
    #[arg(long)]
    json: bool,
    /// The code to run.
    #[arg(short = 'c', value_name = "CODE", conflicts_with = "file")]
    code: Option<String>,
    /// A file holding the code, or `-` for standard input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

/// The environment variable holding daemon `name`'s token.
fn token_var(name: &str) -> String {
    let upper: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("PLIMSOLL_CALLER_TOKEN_{upper}")
}

/// The daemons `--daemon NAME=URL` names, each with its own client and token.
fn backends(args: &Args) -> Result<Vec<Backend>, Refusal> {
    let token = |var: &str| std::env::var(var).ok().filter(|t| !t.is_empty());
    args.daemons
        .iter()
        .map(|spec| {
            let Some((name, url)) = spec.split_once('=').filter(|(n, u)| !n.is_empty() && !u.is_empty()) else {
                return Err(Refusal::request(format!(
                    "invalid request: --daemon {spec:?} is not NAME=URL (for example runsc=http://127.0.0.1:8746)"
                )));
            };
            let settings = Settings { ca_file: args.tls_ca.clone(), ..Settings::default() };
            let client = Client::with_settings(
                url,
                token(&token_var(name)).or_else(|| token("PLIMSOLL_CALLER_TOKEN")),
                settings,
            )
            .map_err(|e| Refusal::request(format!("invalid request: daemon {name}: {e}")))?;
            Ok(Backend { name: name.to_string(), client })
        })
        .collect()
}

/// Runs `plimsoll-host place`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let checked = read_code(&args.code, &args.file)?.and_then(|code| {
        let language = Language::parse(&args.language)?;
        let floor = validate::floor(args.min_isolation.as_deref().unwrap_or(""))?;
        Ok((code, language, floor, sent_timeout_ms(args.timeout_ms)?))
    });
    let (code, language, floor, timeout_ms) = match checked {
        Ok(checked) => checked,
        Err(r) => return Ok(refused(args.json, &r)),
    };
    let placer = match backends(&args)
        .and_then(|b| Placer::new(b, DESCRIPTION_TTL).map_err(|e| Refusal::request(format!("invalid request: {e}"))))
    {
        Ok(p) => p,
        Err(r) => return Ok(refused(args.json, &r)),
    };
    let req = payload(language, code, RunRequest { protocol: protocol::NUMBER, timeout_ms, ..RunRequest::default() });
    let need = Need { floor, environment: args.environment.clone(), provider: args.provider.clone() };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = rt.block_on(placer.run(req, &need));
    let passed = match &outcome {
        Ok(placed) => &placed.passed,
        Err(unplaced) => &unplaced.passed,
    };
    for p in passed {
        eprintln!("passed over {} ({}): {}", p.backend, p.reason, p.message);
    }
    let sent = match outcome {
        Ok(placed) => {
            eprintln!("placed on {}", placed.backend);
            Sent::Answered(Box::new(placed.value))
        }
        Err(unplaced) => {
            if let Some(backend) = &unplaced.backend {
                eprintln!("placement ended at {backend}");
            }
            Sent::from_client(Err(unplaced.error))
        }
    };
    show(args.json, sent)
}

#[cfg(test)]
mod tests {
    use super::token_var;

    #[test]
    fn each_daemon_has_a_token_variable_of_its_own() {
        assert_eq!(token_var("runsc"), "PLIMSOLL_CALLER_TOKEN_RUNSC");
        assert_eq!(token_var("eu-west.1"), "PLIMSOLL_CALLER_TOKEN_EU_WEST_1");
    }
}
