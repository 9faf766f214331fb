//! Watch streams: a LIST with `watch=true` answers 200 and a chunked stream
//! of `{"type","object"}` lines, one per change after the asked
//! resourceVersion, until `timeoutSeconds` (or the client leaves). A
//! resourceVersion older than the kept history gets one ERROR line carrying
//! a 410 Expired Status, and the stream ends.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::select::{Fields, Labels};
use super::status::Status;
use super::store::{Event, EventType, Expired, Resource};
use super::{Fake, Mode};
use crate::server::{self, Body, Request};

/// How long a watch lasts unless `timeoutSeconds` says otherwise.
const DEFAULT_TIMEOUT_S: u64 = 1800;

/// What a watch selects.
#[derive(Debug, Clone)]
pub struct Selection {
    pub resource: Resource,
    /// None: every namespace.
    pub namespace: Option<String>,
    pub labels: Labels,
    pub fields: Fields,
}

impl Selection {
    fn matches(&self, object: &Value) -> bool {
        let ns = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        self.namespace.as_deref().is_none_or(|n| !self.resource.namespaced() || n == ns)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// What a watcher of this selection sees of `event`: a change that
    /// leaves the selection is DELETED, one that enters it ADDED, as the
    /// API server's watch cache reports them.
    pub fn translate(&self, event: &Event) -> Option<EventType> {
        if event.key.resource != self.resource {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.old.as_deref().is_some_and(|o| self.matches(o));
        match (event.kind, before, now) {
            (EventType::Added, _, true) => Some(EventType::Added),
            (EventType::Deleted, true, _) => Some(EventType::Deleted),
            (EventType::Modified, true, true) => Some(EventType::Modified),
            (EventType::Modified, false, true) => Some(EventType::Added),
            (EventType::Modified, true, false) => Some(EventType::Deleted),
            _ => None,
        }
    }
}

/// One line of a watch stream.
pub fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// The line that ends a watch whose resourceVersion is too old.
pub fn expired_line(e: Expired) -> Bytes {
    line("ERROR", &Status::expired(e.asked, e.now).json())
}

/// Serves a watch of `selection` for `req`.
pub async fn serve(fake: Arc<Fake>, selection: Selection, req: &Request) -> http::Response<Body> {
    let rv = req.param("resourceVersion").unwrap_or_default();
    let from = match rv.as_str() {
        "" | "0" => None,
        n => match n.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return Status::bad_request(format!(
                    "invalid resource version {n:?}: strconv.ParseUint: parsing {n:?}: invalid syntax"
                ))
                .response();
            }
        },
    };
    let timeout = match req.param("timeoutSeconds") {
        Some(t) => match t.parse::<u64>() {
            Ok(t) => t,
            Err(_) => return Status::bad_request(format!("invalid timeoutSeconds {t:?}")).response(),
        },
        None => DEFAULT_TIMEOUT_S,
    };
    let (response, tx) = server::streamed("application/json");
    if selection.resource == Resource::SandboxClaims && fake.cluster.mode == Some(Mode::Gone) {
        let name = selection.fields.name().unwrap_or_default().to_string();
        if fake.quirks().watched.insert(name) {
            let now = fake.lock_store().rv();
            let _ = tx.try_send(expired_line(Expired { asked: from.unwrap_or(now), now }));
            return response;
        }
    }
    let opened = {
        let store = fake.lock_store();
        let now = store.rv();
        // No resourceVersion: the current state as ADDED events, then changes.
        let initial: Vec<Value> = match from {
            None => store
                .list(selection.resource, selection.namespace.as_deref())
                .into_iter()
                .filter(|o| selection.matches(o))
                .collect(),
            Some(_) => Vec::new(),
        };
        store.watch(selection.resource, from.unwrap_or(now)).map(|(past, rx)| (initial, past, rx))
    };
    let (initial, past, mut rx) = match opened {
        Ok(o) => o,
        Err(e) => {
            let _ = tx.try_send(expired_line(e));
            return response;
        }
    };
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        for o in &initial {
            if tx.send(line("ADDED", o)).await.is_err() {
                return;
            }
        }
        for e in &past {
            if let Some(kind) = selection.translate(e)
                && tx.send(line(kind.as_str(), &e.object)).await.is_err()
            {
                return;
            }
        }
        loop {
            tokio::select! {
                e = rx.recv() => match e {
                    Ok(e) => {
                        if let Some(kind) = selection.translate(&e)
                            && tx.send(line(kind.as_str(), &e.object)).await.is_err()
                        {
                            return;
                        }
                    }
                    // Fallen too far behind, or the store is gone: the client
                    // resumes from the last resourceVersion it saw.
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return,
                },
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
            }
        }
    });
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::store::Key;

    fn event(kind: EventType, old: Option<Value>, new: Value) -> Event {
        Event {
            rv: 7,
            kind,
            key: Key::new(Resource::SandboxClaims, "plimsoll", "a"),
            object: Arc::new(new),
            old: old.map(Arc::new),
        }
    }

    fn claim(run: &str) -> Value {
        json!({"metadata": {"name": "a", "namespace": "plimsoll", "labels": {"run": run}}})
    }

    #[test]
    fn lines_are_one_json_event_each() {
        // One line, ending at its one newline (key order is serde_json's to choose).
        let l = line("ADDED", &json!({"kind": "SandboxClaim"}));
        assert_eq!((l.iter().filter(|b| **b == b'\n').count(), l.last()), (1, Some(&b'\n')));
        let v: Value = serde_json::from_slice(&l).expect("json");
        assert_eq!(v, json!({"type": "ADDED", "object": {"kind": "SandboxClaim"}}));
        let e = expired_line(Expired { asked: 5, now: 300 });
        let v: Value = serde_json::from_slice(&e).expect("json");
        assert_eq!(
            v,
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                   "status": "Failure", "message": "too old resource version: 5 (300)", "reason": "Expired",
                   "code": 410}})
        );
        assert!(e.ends_with(b"\n"));
    }

    #[test]
    fn changes_into_and_out_of_a_selection_are_added_and_deleted() {
        let s = Selection {
            resource: Resource::SandboxClaims,
            namespace: Some("plimsoll".into()),
            labels: Labels::parse("run=1").expect("labels"),
            fields: Fields::parse("metadata.name=a").expect("fields"),
        };
        assert_eq!(s.translate(&event(EventType::Added, None, claim("1"))), Some(EventType::Added));
        assert_eq!(s.translate(&event(EventType::Added, None, claim("2"))), None);
        assert_eq!(s.translate(&event(EventType::Modified, Some(claim("1")), claim("1"))), Some(EventType::Modified));
        assert_eq!(s.translate(&event(EventType::Modified, Some(claim("2")), claim("1"))), Some(EventType::Added));
        assert_eq!(s.translate(&event(EventType::Modified, Some(claim("1")), claim("2"))), Some(EventType::Deleted));
        assert_eq!(s.translate(&event(EventType::Modified, Some(claim("2")), claim("2"))), None);
        assert_eq!(s.translate(&event(EventType::Deleted, Some(claim("1")), claim("1"))), Some(EventType::Deleted));
        let mut other = event(EventType::Added, None, claim("1"));
        other.key.resource = Resource::Sandboxes;
        assert_eq!(s.translate(&other), None);
        let elsewhere = json!({"metadata": {"name": "a", "namespace": "other", "labels": {"run": "1"}}});
        assert_eq!(s.translate(&event(EventType::Added, None, elsewhere)), None);
    }
}
