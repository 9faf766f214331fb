//! Grants on agentsandbox: a granted run's code reaches the host's broker
//! while its pod keeps no way out at all. The pod's network policies still deny
//! it every egress (the read-back refuses any that allows one); instead the
//! host reaches in, as it does for every exec, through the API server's pod
//! proxy. The plugin writes the grant's client into the pod and starts the
//! broker relay there (`plimsoll-agent broker-relay`, as the guest: a Unix
//! socket for the client and a loopback port); then it asks the host for
//! upgraded connections to sandboxd's `/v1/relay` on that port
//! (`http.relay-upgraded`), which sandboxd joins to the relay and the host joins
//! to the run's broker socket and nothing else.
//!
//! A relay, rather than a guard allowed by a NetworkPolicy as E2B's rules allow
//! one: a policy that lets pods reach the daemon opens a network path from
//! every pod it selects, and the plugin could not prove from the policy alone
//! that the path ends at the guard; the daemon would need a certificate the
//! pods trust, and a pod would hold its guard credential. Through the pod
//! proxy the pod gains nothing: the connection comes in, authenticated by the
//! API server and sandboxd's token, to a broker that admits only the run's token.

use std::time::{Duration, Instant};

use plimsoll_plugin_agent::relayed::AGENT;
use plimsoll_plugin_remote::{self as remote, Remote};

use crate::exports::plimsoll::provider::provider::RelayGrant;
use crate::plimsoll::host::http::{self, Request};
use crate::plimsoll::types::types::{File, Refusal, RefusalReason};
use crate::{Claimed, refused};

/// Where a grant's client and the relay's socket go, in the pod's `/tmp`.
pub const CLIENT_DIR: &str = "/tmp/plimsoll/host";
/// The protocol sandboxd's relay upgrades to.
const PROTOCOL: &str = "plimsoll-relay";
/// How many connections into the relay the host keeps open: how many of the
/// run's calls to the broker may be in flight at once.
const STREAMS: u32 = 6;

impl Claimed {
    /// Carries `g` in: writes its client, starts the relay at its socket, and
    /// has the host open connections to the relay's port through the pod
    /// proxy. Nothing of the caller's runs yet, so every failure is a refusal.
    pub(crate) fn carry(&mut self, g: &RelayGrant) -> Result<(), Refusal> {
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let client = g.client.iter().map(|f| (f.path.as_str(), f.content.as_slice()));
        let exports =
            self.install_client(CLIENT_DIR, client, g.env.iter().cloned()).map_err(|e| env("the grant's client", e))?;
        let socket = format!("{CLIENT_DIR}/{}", g.socket);
        let started = self
            .sandboxd()
            .exec(&[AGENT.to_string(), "broker-relay".into(), socket], None, Duration::from_secs(20))
            .map_err(|e| env("starting the grant's relay", e))?;
        let port = String::from_utf8_lossy(&started.stdout).trim().parse::<u16>().ok().filter(|p| *p > 0);
        let port = port.filter(|_| started.exit_code == 0).ok_or_else(|| {
            env(
                "starting the grant's relay",
                format!("it exited {}: {}", started.exit_code, remote::vendor_text(&started.stderr)),
            )
        })?;
        let request = Request {
            endpoint: "pods".into(),
            target: None,
            method: "POST".into(),
            path: format!(
                "/api/v1/namespaces/{}/pods/{}:{}/proxy/v1/relay?port={port}",
                self.namespace, self.pod, self.port
            ),
            headers: vec![],
            body: vec![],
            timeout_ms: 30_000,
        };
        http::relay_upgraded(&request, PROTOCOL, STREAMS).map_err(|e| env("opening the grant's relay", e))?;
        self.exports = exports;
        self.relaying = true;
        Ok(())
    }

    /// Writes `files` (bare names) beside the grant's client: one call's
    /// description of its grant.
    pub(crate) fn write_call_description(&self, files: &[File]) -> Result<(), String> {
        files.iter().try_for_each(|f| self.upload(&format!("{CLIENT_DIR}/{}", f.path), &f.content))
    }

    /// Removes what [`Claimed::write_call_description`] wrote, once the call ended.
    pub(crate) fn remove_call_description(&self, files: &[File]) -> Result<(), String> {
        let paths: Vec<String> =
            files.iter().map(|f| remote::shell_quote(&format!("{CLIENT_DIR}/{}", f.path))).collect();
        let ran =
            self.run(&format!("rm -f -- {}", paths.join(" ")), "/", Instant::now() + Duration::from_secs(20), 4096)?;
        match ran.exit_code {
            0 => Ok(()),
            code => Err(format!("rm exited {code}: {}", remote::vendor_text(&ran.stderr.bytes))),
        }
    }
}
