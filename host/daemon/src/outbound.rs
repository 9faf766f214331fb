//! The daemon's side of plugins' outbound HTTP: every call a plugin makes goes
//! into the log, without bodies, header values or queries.

use std::sync::Arc;

use plimsoll_runtime::plugin::http::{CallLog, CallRecord};
use serde_json::json;

use crate::log::Log;

/// A call log for `plugin`'s gate: one line per request (per stream, at its end).
pub fn call_log(log: Log, plugin: &str) -> CallLog {
    let plugin = plugin.to_string();
    Arc::new(move |r: &CallRecord| {
        let fields = [
            ("plugin", json!(plugin)),
            ("endpoint", json!(r.endpoint)),
            ("target", json!(r.target)),
            ("method", json!(r.method)),
            ("path", json!(r.path)),
            ("status", json!(r.status)),
            ("sent_bytes", json!(r.sent)),
            ("received_bytes", json!(r.received)),
            ("ms", json!(r.elapsed.as_millis() as u64)),
            ("streamed", json!(r.streamed)),
        ];
        match &r.error {
            // A stream the plugin let go of once it had read enough.
            None if r.cancelled => {
                let mut fields = fields.to_vec();
                fields.push(("cancelled", json!(true)));
                log.info("plugin http call", &fields);
            }
            None => log.info("plugin http call", &fields),
            Some(e) => {
                let mut fields = fields.to_vec();
                fields.push(("error", json!(e)));
                log.warn("plugin http call failed", &fields);
            }
        }
    })
}

/// How the gate reaches one endpoint alias: its URL, the credential and TLS
/// files the host reads (the plugin sees none of them), its fixed address.
///
/// # Errors
///
/// A TLS file that cannot be read.
pub fn endpoint(
    alias: &str,
    e: &crate::config::EndpointConfig,
) -> Result<plimsoll_runtime::plugin::http::Endpoint, String> {
    use plimsoll_runtime::plugin::http::{Endpoint, EndpointTls, TokenExchange};
    let read = |what: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("endpoint {alias}: reading its {what} {}: {e}", p.display()))
    };
    let ca_pem = e.ca_file.as_deref().map(|p| read("CA file", p)).transpose()?;
    let client_pem = match &e.client_cert {
        Some((cert, key)) => Some((read("client certificate", cert)?, read("client key", key)?)),
        None => None,
    };
    Ok(Endpoint {
        base: e.url.clone(),
        headers: e.headers.iter().map(|(k, v)| (k.clone(), v.expose().to_string())).collect(),
        tls: EndpointTls { ca_pem, client_pem },
        connect_to: e.connect_to,
        exchange: e.exchange.as_ref().map(|x| TokenExchange {
            url: x.url.clone(),
            identifier: x.identifier.clone(),
            secret: x.secret.expose().to_string(),
        }),
    })
}

/// The gate a plugin's requests pass: each endpoint the operator set (see
/// [`endpoint`]), the secrets it holds from answers, and every call logged.
///
/// # Errors
///
/// A TLS file that cannot be read or holds no certificate, or a URL the gate refuses.
pub fn gate(
    plugin: &str,
    endpoints: &std::collections::BTreeMap<String, crate::config::EndpointConfig>,
    held: Vec<plimsoll_runtime::plugin::http::HeldSecret>,
    log: Log,
) -> Result<plimsoll_runtime::plugin::http::HttpGate, String> {
    let mut out = std::collections::BTreeMap::new();
    for (alias, e) in endpoints {
        out.insert(alias.clone(), endpoint(alias, e)?);
    }
    plimsoll_runtime::plugin::http::HttpGate::new(out)?.holding(held).map(|g| g.logging(call_log(log, plugin)))
}
