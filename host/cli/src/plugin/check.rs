//! `plimsoll-host plugin check`: loads a plugin as the daemon would (its
//! settings, signature, approvals, WIT packages, smoke test) and runs the shared
//! conformance suite against it through a daemon on loopback, one line per check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use plimsoll_core::{Floor, Tier};
use plimsoll_daemon::config::{Config, Env, LogFormat, ProcessEnv};
use plimsoll_daemon::log::Log;
use plimsoll_daemon::server::Server;
use plimsoll_runtime::plugin::manifest::{Manifest, PluginKind, variable_prefix};

/// The process environment under the settings `plugin check` fixes.
struct CheckEnv {
    over: BTreeMap<String, String>,
}

impl Env for CheckEnv {
    fn get(&self, name: &str) -> Option<String> {
        self.over.get(name).cloned().or_else(|| ProcessEnv.get(name))
    }

    fn names(&self) -> Vec<String> {
        let mut n = ProcessEnv.names();
        n.extend(self.over.keys().cloned());
        n.sort();
        n.dedup();
        n
    }
}

/// One line of the report; `false` when it failed.
fn say(ok: bool, name: &str, what: &str) -> bool {
    println!("{} {name}: {what}", if ok { "ok  " } else { "FAIL" });
    ok
}

/// The weakest floor `tier` does not meet, if any.
fn above(tier: Tier) -> Option<Floor> {
    Floor::ALL.into_iter().find(|f| !tier.meets(*f))
}

/// Checks the provider plugin in `dir`, with the operator's settings from
/// `settings` (a `plimsoll.toml`) and the environment; exits 1 on any failure.
///
/// # Errors
///
/// The directory holds no manifest to read.
pub fn check(
    dir: &Path,
    settings: Option<&Path>,
    trusted_keys: &[PathBuf],
    approve: &[String],
) -> anyhow::Result<ExitCode> {
    let path = dir.join(plimsoll_runtime::plugin::MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest = Manifest::parse(&text).map_err(anyhow::Error::msg)?;
    if manifest.kind != PluginKind::Provider {
        say(false, "kind", &format!("{} is a {}; plugin check runs the provider suite", manifest.name, manifest.kind));
        return Ok(ExitCode::FAILURE);
    }
    let name = manifest.name.clone();
    let prefix = variable_prefix(&name);
    let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
    let token = plimsoll_daemon::callers::new_token().context("drawing a token")?;
    let mut over: BTreeMap<String, String> = [
        ("SANDBOX_PROVIDER".to_string(), name.clone()),
        (format!("{prefix}_PLUGIN"), dir.display().to_string()),
        ("PLIMSOLL_TOKEN".into(), token.clone()),
        ("PLIMSOLL_ADDR".into(), "127.0.0.1:0".into()),
        ("PLIMSOLL_METRICS_ADDR".into(), "off".into()),
        ("PLIMSOLL_LOG_FORMAT".into(), "text".into()),
        ("SANDBOX_RATE_PER_MIN".into(), "0".into()),
    ]
    .into();
    if !trusted_keys.is_empty() {
        let keys: Vec<String> = trusted_keys.iter().map(|k| k.display().to_string()).collect();
        over.insert(format!("{prefix}_PLUGIN_KEYS"), keys.join(","));
    }
    let approved: Vec<String> = if approve.is_empty() {
        manifest.capabilities.iter().map(|c| c.as_str().to_string()).collect()
    } else {
        approve.to_vec()
    };
    over.insert(format!("{prefix}_PLUGIN_APPROVE"), approved.join(","));
    if ProcessEnv.get("SANDBOX_MAX_SESSIONS").is_none() {
        over.insert("SANDBOX_MAX_SESSIONS".into(), "1".into());
    }
    let env = CheckEnv { over };
    let config = match Config::load(settings, &env) {
        Ok(c) => c,
        Err(e) => {
            say(false, "settings", &e.to_string());
            return Ok(ExitCode::FAILURE);
        }
    };
    let declared = manifest.settings.len();
    say(true, "settings", &format!("{declared} declared, read and checked by kind; approved {}", approved.join(", ")));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting a runtime")?;
    let passed = rt.block_on(suite(config, &manifest, token))?;
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Serves the plugin, runs the checks, stops, and builds it once more to see
/// what its startup sweep finds.
async fn suite(config: Config, manifest: &Manifest, token: String) -> anyhow::Result<bool> {
    let log = Log::new(LogFormat::Text);
    let server = match Server::start(config.clone(), log).await {
        Ok(s) => s,
        Err(e) => {
            say(false, "load", &e.to_string());
            return Ok(false);
        }
    };
    let addr = server.local_addr().context("the daemon's address")?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    let client = plimsoll_client::Client::new(&format!("http://{addr}"), Some(token))?;
    let desc = client.describe().await?;
    let tier = Tier::from_wire(&desc.isolation);
    let max = manifest.max_tier.unwrap_or(Tier::Process);
    let mut passed = say(true, "load", "signature, approvals, WIT packages and smoke test passed");
    passed &= say(
        tier <= max && tier >= Tier::Process,
        "tier",
        &format!("{} states {tier}; its manifest allows at most {max}", manifest.name),
    );
    let expected = plimsoll_conformance::Expected {
        provider: manifest.name.clone(),
        tier: tier.to_string(),
        environment: String::new(),
        above: above(tier),
        output_cap: plimsoll_runtime::plugin::PluginLimits::default().max_output as usize,
    };
    for c in plimsoll_conformance::run(&client, &expected).await {
        println!("{}", c.line());
        passed &= c.outcome.is_ok();
    }
    let _ = stop.send(());
    let _ = serving.await;
    let again = tokio::task::spawn_blocking(move || plimsoll_daemon::providers::build(&config, log)).await?;
    match again {
        Ok(built) if manifest.capabilities.contains(&plimsoll_runtime::plugin::Capability::Containers) => {
            say(
                true,
                "sweep",
                &format!("the host's container sweep ran ({} of ended daemons removed)", built.swept.len()),
            );
        }
        Ok(built) if built.swept.is_empty() => {
            say(true, "sweep", "a fresh start's sweep listed this instance's sandboxes and found none left behind");
        }
        Ok(built) => {
            passed &= say(
                false,
                "sweep",
                &format!(
                    "the checks left {} sandbox(es) a fresh start deleted: {}",
                    built.swept.len(),
                    built.swept.join(", ")
                ),
            );
        }
        Err(e) => passed &= say(false, "sweep", &e.to_string()),
    }
    Ok(passed)
}
