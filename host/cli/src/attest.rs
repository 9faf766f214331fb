//! `plimsoll-host attest`: sign checked runs into a bundle, and check bundles.
//!
//! The daemon never holds a signing key. `run` sends a request, checks the answer
//! exactly as the Rust client does, signs the record and appends it to a bundle;
//! `verify` re-checks a whole bundle with only the public key; `replay` sends its
//! single runs again and compares their result digests.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use plimsoll_attest::{Entry, KeySigner};
use plimsoll_client::Client;
use plimsoll_core::record;
use plimsoll_core::wire::{RunRequest, RunResponse};
use plimsoll_runtime::plugin::http::{Endpoint, HttpGate};
use plimsoll_runtime::plugin::signer::SignerPlugin;
use plimsoll_runtime::plugin::{self};
use plimsoll_runtime::{Engine, EngineConfig};

/// The caller's token for the daemon (never on a command line).
const TOKEN_VAR: &str = "PLIMSOLL_CALLER_TOKEN";
/// The signing key's PEM text, when `--key` is absent.
const KEY_VAR: &str = "PLIMSOLL_ATTEST_KEY";
/// Exit status of a run that was refused before anything ran.
const EXIT_REFUSED: u8 = 69;
/// Exit status of a run that may have run without a checked answer.
const EXIT_MAY_HAVE_RUN: u8 = 70;

/// `attest` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a signing key: OUT (PKCS#8 PEM, mode 0600) and OUT.pub (SPKI PEM).
    Keygen {
        /// The private key's path.
        #[arg(long)]
        out: PathBuf,
    },
    /// Send one RunRequest (protocol JSON), check the answer, sign its record and
    /// append it to the bundle. The token comes from PLIMSOLL_CALLER_TOKEN.
    Run {
        /// Where to run, who signs, and the bundle.
        #[command(flatten)]
        target: Target,
        /// The request: a RunRequest as JSON.
        request: PathBuf,
    },
    /// Open a session, send CALLS (a JSON array of RunRequests: snippets, projects,
    /// cells) in order, sign each answer as it comes, close, sign the close, and
    /// append it all to the bundle. The token comes from PLIMSOLL_CALLER_TOKEN.
    Session {
        /// Where to run, who signs, and the bundle.
        #[command(flatten)]
        target: Target,
        /// The calls: a JSON array of RunRequests.
        calls: PathBuf,
    },
    /// Check every signature, exchange, chain and link of a bundle, and its final checkpoint.
    Verify {
        /// The signer's public key (SPKI PEM).
        #[arg(long = "pub")]
        public: PathBuf,
        /// The bundle.
        bundle: PathBuf,
    },
    /// Check one line on its own, and say what that does not establish.
    VerifyEntry {
        /// The signer's public key (SPKI PEM).
        #[arg(long = "pub")]
        public: PathBuf,
        /// The line, from 1.
        #[arg(long)]
        line: usize,
        /// The bundle.
        bundle: PathBuf,
    },
    /// Write each signed run of a bundle that verifies as a CycloneDX 1.6 bill of
    /// materials; with --check, rebuild it and refuse any difference from BOM.
    Bom {
        /// The signer's public key (SPKI PEM).
        #[arg(long = "pub")]
        public: PathBuf,
        /// Check BOM against the bundle instead of writing one.
        #[arg(long, requires = "bom", conflicts_with = "out")]
        check: bool,
        /// Where to write the BOM (stdout without it).
        #[arg(short = 'o', long)]
        out: Option<PathBuf>,
        /// The bundle.
        bundle: PathBuf,
        /// The BOM to check (with --check).
        #[arg(requires = "check")]
        bom: Option<PathBuf>,
    },
    /// Verify a bundle, then send its single runs again and compare result digests.
    Replay {
        /// The daemon's base URL.
        #[arg(long)]
        daemon: String,
        /// The signer's public key (SPKI PEM).
        #[arg(long = "pub")]
        public: PathBuf,
        /// The bundle.
        bundle: PathBuf,
    },
}

/// Runs an `attest` subcommand.
///
/// # Errors
///
/// What failed, in words that name the check.
pub fn main(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Keygen { out } => {
            let public_path = PathBuf::from(format!("{}.pub", out.display()));
            let public = plimsoll_keys::write_pair_at(&out, &public_path)?;
            println!("private key  {} (keep it secret; mode 0600)", out.display());
            println!("public key   {}", public_path.display());
            println!("key ID       {}", plimsoll_keys::key_id(&public));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { target, request } => run(&target, &request),
        Command::Session { target, calls } => session(&target, &calls),
        Command::Verify { public, bundle } => {
            let key = public_key(&public)?;
            let bytes = read(&bundle)?;
            let report = plimsoll_attest::verify_bundle(&bytes, &key)?;
            let mut line = format!(
                "verified {} lines signed by key {}, whole to its last checkpoint: {} single runs",
                report.lines, report.key_id, report.runs
            );
            for (session, calls) in &report.sessions {
                line.push_str(&format!(
                    "; session {}…, {calls} calls, chain closed",
                    plimsoll_attest::bundle::short(session)
                ));
            }
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Command::VerifyEntry { public, line, bundle } => {
            let key = public_key(&public)?;
            println!("{}", plimsoll_attest::verify_entry(&read(&bundle)?, line, &key)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Replay { daemon, public, bundle } => replay(&daemon, &public, &bundle),
        Command::Bom { public, check, out, bundle, bom } => {
            let key = public_key(&public)?;
            let bytes = read(&bundle)?;
            if let (true, Some(bom)) = (check, bom) {
                let runs = plimsoll_attest::bom::check(&bytes, &read(&bom)?, &key)?;
                println!("{} is the bill of materials of {}: {runs} signed runs", bom.display(), bundle.display());
                return Ok(ExitCode::SUCCESS);
            }
            let mut text = serde_json::to_string_pretty(&plimsoll_attest::bom::build(&bytes, &key)?)?;
            text.push('\n');
            match out {
                Some(path) => std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("writing the BOM to {}: {e}", path.display()))?,
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn public_key(path: &Path) -> anyhow::Result<plimsoll_keys::VerifyingKey> {
    let pem = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(plimsoll_keys::public_key(&pem)?)
}

fn client(daemon: &str) -> anyhow::Result<Client> {
    let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
    Ok(Client::new(daemon, token)?)
}

fn summary(resp: &RunResponse) -> String {
    if let Some(js) = &resp.javascript {
        format!("exit {}", js.exit_code)
    } else if let Some(p) = &resp.project {
        format!("{:?}, {} steps", p.outcome, p.steps.len())
    } else if let Some(c) = &resp.cell {
        format!("exit {}{}", c.exit_code, if c.interpreter_started { ", a fresh interpreter" } else { "" })
    } else if let Some(m) = &resp.module {
        format!("{:?}, {} rows", m.outcome, m.runs.len())
    } else {
        "no result".into()
    }
}

/// Where `run` and `session` send, who signs, and the bundle they append to.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The daemon's base URL.
    #[arg(long)]
    daemon: String,
    /// Who signs.
    #[command(flatten)]
    signer: SignerArgs,
    /// The bundle (JSON Lines), created mode 0600.
    #[arg(long)]
    bundle: PathBuf,
    /// Accept a bundle others may read or write.
    #[arg(long)]
    shared_bundle: bool,
}

/// Who signs: a key file, the key's text in PLIMSOLL_ATTEST_KEY, or a signer plugin.
#[derive(Debug, clap::Args)]
pub struct SignerArgs {
    /// The signing key (PKCS#8 PEM); PLIMSOLL_ATTEST_KEY holds its text otherwise.
    #[arg(long, conflicts_with = "signer_plugin")]
    key: Option<PathBuf>,
    /// A signer plugin directory (signed like any plugin) instead of a key.
    #[arg(long)]
    signer_plugin: Option<PathBuf>,
    /// A public key trusted to sign plugins (SPKI PEM); repeat for several.
    #[arg(long = "plugin-trusted-key", requires = "signer_plugin")]
    plugin_trusted_keys: Vec<PathBuf>,
    /// Capabilities approved for the signer plugin, comma-separated (http, log).
    #[arg(long = "plugin-approve", value_delimiter = ',', requires = "signer_plugin")]
    plugin_approve: Vec<String>,
    /// ALIAS=URL for an endpoint the plugin's manifest names; repeat for several.
    /// PLIMSOLL_SIGNER_TOKEN, when set, goes to each as a bearer credential the
    /// plugin never sees.
    #[arg(long = "signer-endpoint", requires = "signer_plugin")]
    signer_endpoints: Vec<String>,
}

/// The credential the host attaches to a signer plugin's endpoints.
const SIGNER_TOKEN_VAR: &str = "PLIMSOLL_SIGNER_TOKEN";

/// A signer plugin as the harness's signer: the key it names is read once, and its
/// ID must be the one the plugin states.
struct PluginSigner {
    plugin: SignerPlugin,
    key: plimsoll_keys::VerifyingKey,
}

impl plimsoll_attest::Signer for PluginSigner {
    fn key(&self) -> &plimsoll_keys::VerifyingKey {
        &self.key
    }

    fn sign(&self, pae: &[u8]) -> Result<plimsoll_keys::Signature, plimsoll_attest::AttestError> {
        let bytes = self.plugin.sign(pae).map_err(plimsoll_attest::AttestError::Signature)?;
        plimsoll_keys::Signature::from_slice(&bytes).map_err(|_| {
            plimsoll_attest::AttestError::Signature("the signer plugin's signature is not 64 bytes".into())
        })
    }
}

fn signer(args: &SignerArgs) -> anyhow::Result<Box<dyn plimsoll_attest::Signer>> {
    let Some(dir) = &args.signer_plugin else {
        let pem = match &args.key {
            Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            None => std::env::var(KEY_VAR)
                .map_err(|_| anyhow::anyhow!("no signing key: pass --key, --signer-plugin, or set {KEY_VAR}"))?,
        };
        return Ok(Box::new(KeySigner::from_pem(&pem)?));
    };
    let trusted = args.plugin_trusted_keys.iter().map(|p| public_key(p)).collect::<anyhow::Result<Vec<_>>>()?;
    let approved = args
        .plugin_approve
        .iter()
        .map(|c| plugin::Capability::parse(c).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Endpoints whose URL the manifest makes a setting are read as a provider's
    // settings are (SANDBOX_<NAME>_<SETTING>); the rest are --signer-endpoint's.
    let read = plimsoll_daemon::config::adapter_plugin(
        dir,
        plugin::manifest::PluginKind::Signer,
        &plimsoll_daemon::config::ProcessEnv,
        &mut std::collections::BTreeMap::new(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let verified = plugin::verify(dir, &trusted, &approved)?;
    if verified.manifest != read.manifest {
        bail!("the signer plugin's plugin.toml changed while it was read; try again");
    }
    let token = std::env::var(SIGNER_TOKEN_VAR).ok().filter(|t| !t.is_empty());
    let mut endpoints = std::collections::BTreeMap::new();
    for (alias, e) in &read.endpoints {
        endpoints.insert(alias.clone(), plimsoll_daemon::outbound::endpoint(alias, e).map_err(anyhow::Error::msg)?);
    }
    for e in &args.signer_endpoints {
        let (alias, url) =
            e.split_once('=').ok_or_else(|| anyhow::anyhow!("--signer-endpoint {e:?} must be ALIAS=URL"))?;
        let headers = token.iter().map(|t| ("authorization".to_string(), format!("Bearer {t}"))).collect();
        endpoints.insert(alias.to_string(), Endpoint { base: url.to_string(), headers, ..Endpoint::default() });
    }
    for alias in verified.manifest.endpoints.keys() {
        if !endpoints.contains_key(alias) {
            bail!("the signer plugin calls endpoint {alias:?}: map it with --signer-endpoint {alias}=URL");
        }
    }
    let gate = std::sync::Arc::new(HttpGate::new(endpoints).map_err(anyhow::Error::msg)?);
    let engine =
        Engine::new(&EngineConfig { max_instances: 4, cache_dir: None }).context("starting the wasm engine")?;
    let plugin = SignerPlugin::new(&engine, verified, approved, Some(gate))?;
    let info = plugin.key().map_err(anyhow::Error::msg)?;
    if info.algorithm != "ed25519" {
        bail!("the signer plugin signs with {:?}; the harness accepts ed25519 only", info.algorithm);
    }
    let key = plimsoll_keys::public_key_der(&info.public_key)?;
    if plimsoll_keys::key_id(&key) != info.key_id {
        bail!(
            "the signer plugin names key {}, but its public key's ID is {}",
            info.key_id,
            plimsoll_keys::key_id(&key)
        );
    }
    Ok(Box::new(PluginSigner { plugin, key }))
}

/// Appends `entries`; when that fails, keeps them in a side file and says where.
fn append_or_keep(
    bundle: &Path,
    signer: &dyn plimsoll_attest::Signer,
    shared: bool,
    entries: &[Entry],
) -> anyhow::Result<()> {
    if let Err(e) = plimsoll_attest::append(bundle, signer, shared, entries) {
        let kept = keep_unsealed(bundle, entries)
            .map(|p| format!("the signed entries are kept, unlinked, in {}", p.display()))
            .unwrap_or_else(|k| format!("keeping the signed entries failed too: {k:#}"));
        bail!("{e}; {kept}");
    }
    Ok(())
}

fn session(target: &Target, calls: &Path) -> anyhow::Result<ExitCode> {
    let (daemon, bundle, shared) = (target.daemon.as_str(), target.bundle.as_path(), target.shared_bundle);
    let signer = signer(&target.signer)?;
    let signer = signer.as_ref();
    let requests: Vec<RunRequest> = serde_json::from_slice(&read(calls)?)
        .with_context(|| format!("{} is not a JSON array of RunRequests", calls.display()))?;
    plimsoll_attest::check_appendable(bundle, signer.key(), shared)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let c = client(daemon)?;
    let s = rt.block_on(c.open_session(&plimsoll_client::SessionOptions::default()))?;
    let mut entries = Vec::new();
    let mut failure = None;
    for (i, mut req) in requests.into_iter().enumerate() {
        req.protocol = plimsoll_core::protocol::NUMBER;
        // The stored request is the session call as a RunRequest, without the session ID.
        let stored = serde_json::to_vec(&req)?;
        match rt.block_on(s.call(req)) {
            Ok(resp) => {
                println!("call {}: {}", i + 1, summary(&resp));
                entries.push(Entry::call(signer, &stored, &serde_json::to_vec(&resp)?, true)?);
            }
            Err(plimsoll_client::Error::Unanswered { record, message, .. }) => {
                println!("call {}: may have run without an answer ({message}); its record is signed", i + 1);
                entries.push(Entry::unanswered(signer, &stored, &record)?);
            }
            Err(e) => {
                failure = Some(format!("call {}: {e}", i + 1));
                break;
            }
        }
    }
    let closed = rt.block_on(s.close())?;
    let close = plimsoll_attest::statement::ClosePredicate::closed(&closed);
    entries.push(Entry::close(signer, &close)?);
    append_or_keep(bundle, signer, shared, &entries)?;
    println!(
        "session {}…: {} calls and the close signed into {}",
        plimsoll_attest::bundle::short(&close.session),
        close.calls,
        bundle.display()
    );
    match failure {
        Some(f) => bail!("{f}; the calls before it and the close are signed"),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn run(target: &Target, request: &Path) -> anyhow::Result<ExitCode> {
    let (daemon, bundle, shared) = (target.daemon.as_str(), target.bundle.as_path(), target.shared_bundle);
    let signer = signer(&target.signer)?;
    let signer = signer.as_ref();
    let text = read(request)?;
    let req: RunRequest = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a RunRequest in protocol JSON", request.display()))?;
    plimsoll_attest::check_appendable(bundle, signer.key(), shared)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let exchange = match rt.block_on(client(daemon)?.run_exchange(req)) {
        Ok(x) => x,
        Err(e) if e.not_dispatched().is_some() => {
            eprintln!("plimsoll-host: refused before anything ran: {e}; the bundle is unchanged");
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Err(e) => {
            eprintln!(
                "plimsoll-host: the run may have happened, without a checked answer: {e}; the bundle is unchanged"
            );
            return Ok(ExitCode::from(EXIT_MAY_HAVE_RUN));
        }
    };
    let entry = Entry::call(signer, &exchange.request, &exchange.response, false)?;
    let rec = exchange.answer.record.clone().unwrap_or_default();
    append_or_keep(bundle, signer, shared, std::slice::from_ref(&entry))?;
    println!("ran on {} ({}): {}", exchange.answer.sandbox, exchange.answer.isolation, summary(&exchange.answer));
    println!("record {} signed into {}; request {}", rec.record_sha256, bundle.display(), rec.request_sha256);
    Ok(ExitCode::SUCCESS)
}

/// Writes signed entries, without links, to a new side file beside the bundle.
fn keep_unsealed(bundle: &Path, entries: &[Entry]) -> anyhow::Result<PathBuf> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let mut suffix = [0u8; 4];
    getrandom::fill(&mut suffix).map_err(|e| anyhow::anyhow!("the OS gave no randomness: {e}"))?;
    let path = PathBuf::from(format!("{}.unsealed-{now}-{}.jsonl", bundle.display(), hex::encode(suffix)));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    for entry in entries {
        f.write_all(&serde_json::to_vec(entry)?)?;
        f.write_all(b"\n")?;
    }
    f.sync_all()?;
    Ok(path)
}

fn replay(daemon: &str, public: &Path, bundle: &Path) -> anyhow::Result<ExitCode> {
    let key = public_key(public)?;
    let runs = plimsoll_attest::replayable(&read(bundle)?, &key)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let c = client(daemon)?;
    let mut differ = 0;
    for r in &runs {
        let recorded = &r.record.result_sha256;
        match rt.block_on(c.run(r.request.clone())) {
            Ok(resp) => {
                let replayed = record::result_digest(&resp);
                if &replayed == recorded {
                    println!("line {}: same result ({})", r.line, plimsoll_attest::bundle::short(&replayed));
                } else {
                    differ += 1;
                    println!(
                        "line {}: different result: recorded {}, replayed {}",
                        r.line,
                        plimsoll_attest::bundle::short(recorded),
                        plimsoll_attest::bundle::short(&replayed)
                    );
                }
            }
            Err(e) => {
                differ += 1;
                println!("line {}: the replay failed: {e}", r.line);
            }
        }
    }
    if differ > 0 {
        bail!("{differ} of {} replays did not reproduce the recorded result", runs.len());
    }
    Ok(ExitCode::SUCCESS)
}
