//! The authorization server's lasting state on disk, so a restart keeps every
//! connection: registered clients, approvals, tokens as their SHA-256 only,
//! and the digests of refresh tokens rotated away, so one presented again
//! after a restart still revokes its connection. What lasts minutes (held
//! requests, codes) is not kept; a restart drops them and the client asks again.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::{Approval, AuthServer, Client, Digest, Token};

/// The file's layout version.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    version: u32,
    clients: Vec<SavedClient>,
    approvals: Vec<SavedApproval>,
    tokens: Vec<SavedToken>,
    /// Oldest first. Absent from files written before it was kept.
    #[serde(default)]
    spent_refresh: Vec<SavedSpent>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedSpent {
    sha256: String,
    approval: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedClient {
    id: String,
    name: String,
    redirect_uris: Vec<String>,
    registered_unix: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedApproval {
    id: String,
    client_id: String,
    client_name: String,
    redirect_uri: String,
    scope: String,
    approved_unix: u64,
    last_used_unix: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedToken {
    sha256: String,
    approval: String,
    client_id: String,
    /// When an access token ends; none for a refresh token.
    until_unix: Option<u64>,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn wall(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

impl AuthServer {
    /// What lasts across a restart, as the bytes of `connections.json`.
    /// `now` and `wall` are the same moment on the two clocks.
    pub fn saved(&self, now: Instant, wall_now: SystemTime) -> Vec<u8> {
        let at = |i: Instant| {
            // Instants only translate to wall time relative to a shared moment.
            if i >= now { unix(wall_now + (i - now)) } else { unix(wall_now - (now - i)) }
        };
        let saved = Saved {
            version: VERSION,
            // Only clients with an approval: registration needs no credential,
            // so it must not be able to make this server write to disk.
            clients: self
                .clients
                .iter()
                .filter(|(id, _)| self.approvals.values().any(|a| &a.client_id == *id))
                .map(|(id, c)| SavedClient {
                    id: id.clone(),
                    name: c.name.clone(),
                    redirect_uris: c.redirect_uris.clone(),
                    registered_unix: at(c.registered),
                })
                .collect(),
            approvals: self
                .approvals
                .values()
                .map(|a| SavedApproval {
                    id: a.id.clone(),
                    client_id: a.client_id.clone(),
                    client_name: a.client_name.clone(),
                    redirect_uri: a.redirect_uri.clone(),
                    scope: a.scope.clone(),
                    approved_unix: unix(a.approved_at),
                    last_used_unix: a.last_used.map(unix),
                })
                .collect(),
            tokens: self
                .tokens
                .iter()
                .map(|(d, t)| SavedToken {
                    sha256: hex::encode(d),
                    approval: t.approval.clone(),
                    client_id: t.client_id.clone(),
                    until_unix: t.until.map(at),
                })
                .collect(),
            spent_refresh: self
                .spent_refresh
                .iter()
                .map(|(d, approval)| SavedSpent { sha256: hex::encode(d), approval: approval.clone() })
                .collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&saved).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Takes back what [`AuthServer::saved`] wrote, dropping what expired
    /// while the server was down.
    ///
    /// # Errors
    ///
    /// Bytes that are not such a file, naming what is wrong.
    pub fn restore(&mut self, bytes: &[u8], now: Instant, wall_now: SystemTime) -> Result<(), String> {
        let saved: Saved = serde_json::from_slice(bytes).map_err(|e| format!("not a connections file: {e}"))?;
        if saved.version != VERSION {
            return Err(format!("layout version {} is not {VERSION}", saved.version));
        }
        let digest_of = |hex_digits: &str| -> Result<Digest, String> {
            hex::decode(hex_digits)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| format!("token digest {hex_digits:?} is not 64 hex digits"))
        };
        let back = |secs: u64| -> Instant {
            match wall(secs).duration_since(wall_now) {
                Ok(ahead) => now + ahead,
                Err(e) => now.checked_sub(e.duration()).unwrap_or(now),
            }
        };
        for c in saved.clients {
            if c.redirect_uris.iter().any(|u| super::redirect_host(u).is_none()) {
                return Err(format!("client {} has a redirect URI this server does not take", c.name));
            }
            let client = Client { name: c.name, redirect_uris: c.redirect_uris, registered: back(c.registered_unix) };
            self.clients.insert(c.id, client);
        }
        for a in saved.approvals {
            if !self.clients.contains_key(&a.client_id) {
                return Err(format!("approval {} names a client the file does not hold", a.id));
            }
            let approval = Approval {
                id: a.id.clone(),
                client_id: a.client_id,
                client_name: a.client_name,
                redirect_uri: a.redirect_uri,
                scope: a.scope,
                approved_at: wall(a.approved_unix),
                last_used: a.last_used_unix.map(wall),
            };
            self.approvals.insert(a.id, approval);
        }
        for t in saved.tokens {
            let digest = digest_of(&t.sha256)?;
            if !self.approvals.contains_key(&t.approval) {
                continue;
            }
            let until = t.until_unix.map(back);
            if until.is_some_and(|u| u <= now) {
                continue;
            }
            self.tokens.insert(digest, Token { approval: t.approval, client_id: t.client_id, until });
        }
        for spent in saved.spent_refresh {
            let digest = digest_of(&spent.sha256)?;
            if self.approvals.contains_key(&spent.approval) {
                self.spent_refresh.push_back((digest, spent.approval));
            }
        }
        while self.spent_refresh.len() > super::MAX_SPENT_REFRESH {
            self.spent_refresh.pop_front();
        }
        self.expire(now);
        Ok(())
    }
}
