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
            None => log.info("plugin http call", &fields),
            Some(e) => {
                let mut fields = fields.to_vec();
                fields.push(("error", json!(e)));
                log.warn("plugin http call failed", &fields);
            }
        }
    })
}
