//! Secrets a backend hands out per target, which the host keeps and the plugin
//! never sees (a backend answering a sandbox's create with the access token of
//! that sandbox's data plane, or minting a scoped bearer per sandbox). The
//! host takes the field out of the answer before the plugin reads it, and
//! attaches it as a header to the plugin's later requests to that target.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// One kind of held secret, as the plugin's manifest declares it.
pub use plimsoll_plugin_trust::manifest::HeldSecret;

/// The most secrets held at once; past it the oldest is forgotten (its target,
/// long gone in any sane use, then answers 401 to the plugin).
pub const MAX_HELD: usize = 4096;

/// The held secrets of one gate.
#[derive(Debug, Default)]
pub(super) struct Vault {
    kinds: Vec<HeldSecret>,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    values: BTreeMap<(usize, String), String>,
    order: VecDeque<(usize, String)>,
}

impl Vault {
    pub(super) fn new(kinds: Vec<HeldSecret>) -> Vault {
        Vault { kinds, held: Mutex::new(Held::default()) }
    }

    /// Whether answers from `endpoint` may carry a held secret (then they are
    /// only ever read whole, so the host can take it out).
    pub(super) fn scans(&self, endpoint: &str) -> bool {
        self.kinds.iter().any(|k| k.from == endpoint)
    }

    /// Headers only the host sets on requests to `endpoint`.
    pub(super) fn headers_for(&self, endpoint: &str) -> impl Iterator<Item = &str> {
        self.kinds.iter().filter(move |k| k.to == endpoint).map(|k| k.header.as_str())
    }

    /// The held headers a request to `endpoint` at `target` carries.
    pub(super) fn attach(&self, endpoint: &str, target: Option<&str>) -> Vec<(String, String)> {
        let Some(target) = target else { return Vec::new() };
        let held = lock(&self.held);
        self.kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| k.to == endpoint)
            .filter_map(|(i, k)| {
                held.values.get(&(i, target.to_string())).map(|v| (k.header.clone(), format!("{}{v}", k.value_prefix)))
            })
            .collect()
    }

    /// Takes every held field out of an answer from `endpoint`, keeping each
    /// whose target is named beside it; returns the body the plugin may read and
    /// the targets whose secrets it now holds.
    pub(super) fn take(&self, endpoint: &str, body: Vec<u8>) -> (Vec<u8>, Vec<String>) {
        let kinds: Vec<(usize, &HeldSecret)> =
            self.kinds.iter().enumerate().filter(|(_, k)| k.from == endpoint).collect();
        if kinds.is_empty() {
            return (body, Vec::new());
        }
        let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&body) else {
            // Not JSON: it cannot carry the field by name, but it must not carry it
            // at all, so nothing of it reaches the plugin if a held value appears.
            let body = if kinds.iter().any(|(_, k)| contains(&body, k.field.as_bytes())) { Vec::new() } else { body };
            return (body, Vec::new());
        };
        let mut found = Vec::new();
        let mut strip = |obj: &mut serde_json::Map<String, serde_json::Value>| {
            for (i, k) in &kinds {
                if let Some(secret) = obj.remove(&k.field) {
                    let target = obj
                        .get(&k.target_field)
                        .and_then(|t| t.as_str())
                        .and_then(|t| t.strip_prefix(k.target_prefix.as_str()))
                        .map(str::to_string);
                    if let (Some(secret), Some(target)) = (secret.as_str(), target) {
                        found.push((*i, target, secret.to_string()));
                    }
                }
            }
        };
        match &mut value {
            serde_json::Value::Object(obj) => strip(obj),
            serde_json::Value::Array(items) => {
                for item in items {
                    if let serde_json::Value::Object(obj) = item {
                        strip(obj);
                    }
                }
            }
            _ => {}
        }
        if found.is_empty() && !kinds.iter().any(|(_, k)| contains(&body, k.field.as_bytes())) {
            return (body, Vec::new());
        }
        let captured: Vec<String> = found.iter().map(|(_, t, _)| t.clone()).collect();
        let mut held = lock(&self.held);
        for (i, target, secret) in found {
            let key = (i, target);
            if held.values.insert(key.clone(), secret).is_none() {
                held.order.push_back(key);
            }
            while held.order.len() > MAX_HELD {
                if let Some(old) = held.order.pop_front() {
                    held.values.remove(&old);
                }
            }
        }
        (serde_json::to_vec(&value).unwrap_or_default(), captured)
    }

    /// Forgets every secret held for `target` (its sandbox was deleted).
    pub(super) fn forget(&self, target: &str) {
        let mut held = lock(&self.held);
        held.values.retain(|(_, t), _| t != target);
        held.order.retain(|(_, t)| t != target);
    }

    /// Every secret held now.
    pub(super) fn values(&self) -> Vec<String> {
        lock(&self.held).values.values().cloned().collect()
    }

    /// How many secrets are held.
    pub(super) fn len(&self) -> usize {
        lock(&self.held).values.len()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
