//! The daemon's grants: the operator's profiles and the broker every granted run
//! calls through. A caller only selects a profile by name; the credential is
//! minted here per run and never leaves the host.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use plimsoll_core::provider::{Grant, HostApi};
use plimsoll_core::wire::{AdviceFinding, RunResponse};
use plimsoll_core::{Reason, Refusal};
use plimsoll_grants::advice::{self, Finding, Routes};
use plimsoll_grants::profile::{AdviceAudience, Retention, SessionCredential, not_available};
use plimsoll_grants::route::Route;
use plimsoll_grants::token::{Credential, MintError, MintScope, Minter, PluginBroker, Secret, Shaped, Shaper};
use plimsoll_runtime::plugin::broker::BrokerPlugin;
use plimsoll_runtime::plugin::{self, Capability};
use plimsoll_runtime::{Engine, EngineConfig};

use crate::config::BrokerPlugins;
use plimsoll_grants::{Broker, CallTrace, LoadContext, Profile, Profiles, RunGrant};
use serde_json::{Value, json};

/// The profiles and the broker.
#[derive(Debug)]
pub struct DaemonGrants {
    profiles: Profiles,
    broker: Arc<Broker>,
}

/// One run's grant: what the provider carries, and the host's own handle on it.
#[derive(Debug)]
pub struct Opened {
    /// The grant the provider installs.
    pub grant: Grant,
    /// The broker session, kept to close it and read its trace.
    pub run: Arc<RunGrant>,
}

impl Opened {
    /// The grant of `profile` whose calls go to `run`.
    fn over(profile: &Profile, run: Arc<RunGrant>) -> Opened {
        Opened { grant: client(profile, run.clone()), run }
    }
}

/// `profile`'s client (its global, routes and SDK) over `api`.
pub fn client(profile: &Profile, api: Arc<dyn HostApi>) -> Grant {
    Grant { global: profile.global.clone(), routes: profile.route_lines(), preamble: profile.preamble.clone(), api }
}

/// What a granted run left: its trace and the findings over it.
#[derive(Debug)]
pub struct Closed {
    /// The profile's name.
    pub profile: String,
    /// The trace.
    pub trace: CallTrace,
    /// The advisor's findings (empty when the profile turns it off).
    pub findings: Vec<Finding>,
    /// Who sees the findings.
    pub audience: AdviceAudience,
    /// What the log keeps of them.
    pub retention: Retention,
}

impl DaemonGrants {
    /// Loads the profiles file, reading credentials from the environment.
    ///
    /// # Errors
    ///
    /// The file, the profile and the rule it breaks; the daemon does not start.
    pub fn load(path: &Path, plugins: &dyn Fn(&str) -> Option<PluginBroker>) -> Result<DaemonGrants, String> {
        let env = |var: &str| std::env::var(var).ok();
        let profiles =
            Profiles::load(path, &LoadContext { env: &env, dir: None, plugins }).map_err(|e| e.to_string())?;
        DaemonGrants::new(profiles)
    }

    /// Grants over `profiles`.
    ///
    /// # Errors
    ///
    /// The broker's HTTP client could not be set up.
    pub fn new(profiles: Profiles) -> Result<DaemonGrants, String> {
        Ok(DaemonGrants { profiles, broker: Broker::new()? })
    }

    /// The profiles.
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// The profile `name` if `caller` may use it.
    ///
    /// # Errors
    ///
    /// A `permission` refusal, the same for an unknown profile and a forbidden one.
    pub fn select(&self, name: &str, caller: &str) -> Result<Arc<Profile>, Refusal> {
        self.profiles.select(name, caller)
    }

    /// Opens one run's grant: mints its credential for `caller`, bounded by `budget`.
    ///
    /// # Errors
    ///
    /// A `permission` refusal when no credential could be minted (nothing ran).
    pub fn open(&self, profile: Arc<Profile>, caller: &str, budget: Duration) -> Result<Opened, Refusal> {
        let run = self.broker.open(profile.clone(), caller, budget)?;
        Ok(Opened::over(&profile, run))
    }

    /// Opens one call's grant of a session opened with `profile`, charged to the
    /// session's `spent` budget; the credential is the session's `held` one when
    /// the profile mints per session, else minted for the call.
    ///
    /// # Errors
    ///
    /// As [`DaemonGrants::open`].
    pub fn open_in_session(
        &self,
        profile: Arc<Profile>,
        caller: &str,
        budget: Duration,
        spent: plimsoll_grants::Spent,
        held: &plimsoll_grants::HeldCredential,
    ) -> Result<Opened, Refusal> {
        let held = (profile.session_credential == SessionCredential::Session).then_some(held);
        let run = self.broker.open_counting(profile.clone(), caller, budget, spent, held)?;
        Ok(Opened::over(&profile, run))
    }

    /// Whether `caller` may name some profile in a session's calls, so its
    /// sessions need a way to the broker from their open.
    pub fn sessions_possible(&self, caller: &str) -> bool {
        self.profiles.iter().any(|p| p.allow_in_sessions && p.admits(caller))
    }

    /// The profile a session call names: sessions with a grant are refused unless
    /// the profile allows them (the original's rule).
    ///
    /// # Errors
    ///
    /// A `permission` refusal: unknown, forbidden, or not for sessions.
    pub fn for_session(&self, name: &str, caller: &str) -> Result<Arc<Profile>, Refusal> {
        let p = self.select(name, caller)?;
        if !p.allow_in_sessions {
            return Err(Refusal::new(
                Reason::Permission,
                format!(
                    "grant_profile {name:?} does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile"
                ),
            ));
        }
        Ok(p)
    }
}

/// The refusal for a session call naming a profile on a daemon without grants.
pub fn no_profiles(name: &str) -> Refusal {
    not_available(name)
}

/// Ends a run's grant (later calls are refused, so the trace is complete) and
/// runs the advisor over its trace.
pub fn close(opened: &Opened) -> Closed {
    let trace = opened.run.close();
    let p = opened.run.profile();
    let findings = if p.advice == AdviceAudience::Off {
        Vec::new()
    } else {
        advice::advise(&trace, Routes { granted: &p.allow, catalog: &p.catalog, batch_of: &p.batch_of })
    };
    Closed { profile: p.name.clone(), trace, findings, audience: p.advice, retention: p.advice_retention }
}

impl Closed {
    /// The findings the caller sees: only when the profile says so, never the
    /// operator's hints.
    pub fn for_caller(&self) -> Vec<AdviceFinding> {
        if self.audience != AdviceAudience::Caller {
            return Vec::new();
        }
        self.findings.iter().map(Finding::to_wire).collect()
    }

    /// Puts the caller's findings on the result `resp` holds, whichever kind.
    pub fn advise(&self, resp: &mut RunResponse) {
        let advice = self.for_caller();
        if let Some(js) = resp.javascript.as_mut() {
            js.advice = advice;
        } else if let Some(p) = resp.project.as_mut() {
            p.advice = advice;
        } else if let Some(cell) = resp.cell.as_mut() {
            cell.advice = advice;
        }
    }

    /// The run's log fields: call counts always, findings as the profile retains them.
    pub fn log_fields(&self) -> Vec<(&'static str, Value)> {
        let t = &self.trace;
        let mut out = vec![
            ("grant_profile", json!(self.profile)),
            ("host_calls", json!(t.calls.len() as u64 + u64::from(t.dropped))),
            ("host_calls_denied", json!(t.denied)),
            ("host_calls_dropped", json!(t.dropped)),
            ("host_calls_shed", json!(t.shed)),
        ];
        if self.findings.is_empty() {
            return out;
        }
        match self.retention {
            Retention::None => {}
            Retention::Aggregate => {
                let mut counts = std::collections::BTreeMap::<&str, u32>::new();
                for f in &self.findings {
                    *counts.entry(f.pattern).or_default() += 1;
                }
                out.push(("advice", json!(counts)));
            }
            Retention::Detailed => {
                out.push(("advice_findings", json!(self.findings)));
                out.push(("call_trace", json!(self.trace)));
            }
        }
        out
    }
}

/// A broker plugin as a profile's minter.
#[derive(Debug)]
struct PluginMinter(Arc<BrokerPlugin>);

impl Minter for PluginMinter {
    fn mint(&self, scope: &MintScope<'_>) -> Result<Credential, MintError> {
        let ttl = scope.budget + plimsoll_grants::token::JWT_GRACE;
        let m = self.0.mint(scope.subject, ttl, scope.scopes).map_err(MintError::Plugin)?;
        if m.authorization.is_empty() || !m.authorization.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(MintError::Unprintable);
        }
        let expires = std::time::UNIX_EPOCH + Duration::from_millis(m.expires_unix_ms);
        if expires <= std::time::SystemTime::now() {
            return Err(MintError::Expired);
        }
        Ok(Credential { authorization: Secret::new(m.authorization), expires: Some(expires) })
    }
}

/// A broker plugin as a profile's shaper.
#[derive(Debug)]
struct PluginShaper(Arc<BrokerPlugin>);

impl Shaper for PluginShaper {
    fn shape(&self, route: &Route, path: &str, body: Option<&[u8]>) -> Result<Shaped, String> {
        let s = self.0.shape(route.method().as_str(), route.template(), path, body)?;
        Ok(Shaped { path: s.path, headers: s.headers, body: s.body })
    }
}

/// The variable holding the `Authorization` the host attaches to a broker plugin's
/// endpoint: `PLIMSOLL_BROKER_AUTH_<PLUGIN>_<ALIAS>`, upper-cased, dashes as underscores.
pub fn auth_var(plugin: &str, alias: &str) -> String {
    format!("{}{plugin}_{alias}", crate::config::BROKER_AUTH_PREFIX).to_ascii_uppercase().replace(['-', '.'], "_")
}

/// Verifies and loads every configured broker plugin: its signature against the
/// vendor keys the operator trusts, its capabilities (http and log only), its
/// endpoints, and its declared routes.
///
/// # Errors
///
/// The plugin and the check that failed; the daemon does not start.
pub fn load_plugins(
    cfg: &BrokerPlugins,
    log: crate::log::Log,
) -> Result<std::collections::BTreeMap<String, PluginBroker>, String> {
    let mut out = std::collections::BTreeMap::new();
    if cfg.dirs.is_empty() {
        return Ok(out);
    }
    let mut keys = Vec::new();
    for path in &cfg.trusted_keys {
        let pem = std::fs::read_to_string(path).map_err(|e| format!("reading vendor key {}: {e}", path.display()))?;
        keys.push(plugin::signature::public_key(&pem).map_err(|e| format!("vendor key {}: {e}", path.display()))?);
    }
    let approved = vec![Capability::Http, Capability::Log];
    let engine = Engine::new(&EngineConfig { max_instances: 64, cache_dir: EngineConfig::default_cache_dir() })
        .map_err(|e| format!("starting the broker plugins' engine: {e}"))?;
    for read in &cfg.read {
        let verified = plugin::verify(&read.dir, &keys, &approved).map_err(|e| format!("broker plugin: {e}"))?;
        let name = verified.manifest.name.clone();
        if verified.manifest != read.manifest {
            return Err(format!(
                "broker plugin {name}: its plugin.toml changed after startup read its settings; start again"
            ));
        }
        // Endpoints whose URL is a setting were read with the settings; the rest
        // the operator maps by name.
        let mut endpoints = read.endpoints.clone();
        for alias in verified.manifest.endpoints.keys().filter(|a| !read.endpoints.contains_key(*a)) {
            let Some((_, _, url)) = cfg.endpoints.iter().find(|(p, a, _)| *p == name && a == alias) else {
                return Err(format!(
                    "broker plugin {name} calls endpoint {alias:?}: map it with PLIMSOLL_BROKER_ENDPOINTS={name}.{alias}=URL"
                ));
            };
            let headers = std::env::var(auth_var(&name, alias))
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| vec![("authorization".to_string(), crate::config::Secret::new(v))])
                .unwrap_or_default();
            let endpoint = crate::config::EndpointConfig {
                url: url.clone(),
                ca_file: None,
                client_cert: None,
                connect_to: None,
                headers,
                exchange: None,
            };
            endpoints.insert(alias.clone(), endpoint);
        }
        let gate = crate::outbound::gate(&name, &endpoints, Vec::new(), log)
            .map_err(|e| format!("broker plugin {name}: {e}"))?;
        let gate = Arc::new(gate);
        let loaded = Arc::new(
            BrokerPlugin::new(&engine, verified, approved.clone(), Some(gate))
                .map_err(|e| format!("broker plugin {name}: {e}"))?,
        );
        let declared = loaded.describe().map_err(|e| format!("broker plugin {name}: {e}"))?;
        let routes = declared
            .routes
            .iter()
            .map(|r| Route::parse(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("broker plugin {name} declares a bad route: {e}"))?;
        let mut schemas = Vec::new();
        for (line, text) in &declared.schemas {
            let r = Route::parse(line).map_err(|e| format!("broker plugin {name} declares a bad schema route: {e}"))?;
            if !routes.contains(&r) {
                return Err(format!("broker plugin {name} declares a schema for {r}, which it does not serve"));
            }
            let schema = plimsoll_grants::schema::Schema::parse(text)
                .map_err(|e| format!("broker plugin {name}: the schema for {r}: {e}"))?;
            schemas.push((r, schema));
        }
        out.insert(
            name,
            PluginBroker {
                minter: Arc::new(PluginMinter(loaded.clone())),
                routes,
                shaper: Arc::new(PluginShaper(loaded)),
                schemas,
            },
        );
    }
    Ok(out)
}
