//! A run's call trace: metadata only. A row has no field for a path, a query, a
//! body or a credential, so none can be recorded by mistake.

use serde::Serialize;

use crate::route::Method;

/// The most rows a trace keeps, whatever a profile's call budget; later calls are
/// counted in [`CallTrace::dropped`].
pub const MAX_ROWS: usize = 256;

/// One brokered call that matched a granted route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallRow {
    /// 1 for the run's first call that matched.
    pub seq: u32,
    /// The method.
    pub method: Method,
    /// The matched route template (never the concrete path).
    pub route: String,
    /// The upstream's status, or 0 when none came back.
    pub status: u16,
    /// Whether the upstream's answer reached the guest.
    pub delivered: bool,
    /// Request body bytes.
    pub req_bytes: u64,
    /// Response body bytes.
    pub resp_bytes: u64,
    /// The round trip, in microseconds.
    pub latency_us: u64,
}

/// Every call of one run, as metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CallTrace {
    /// Calls that matched a route, in order, up to [`MAX_ROWS`].
    pub calls: Vec<CallRow>,
    /// Matched calls beyond [`MAX_ROWS`].
    pub dropped: u32,
    /// Calls refused by the broker: unlisted routes, budget, size, capacity.
    pub denied: u32,
    /// Calls shed while the upstream's circuit was open.
    pub shed: u32,
}

impl CallTrace {
    /// Whether no call was attempted.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.dropped == 0 && self.denied == 0 && self.shed == 0
    }

    /// Calls attempted: matched, dropped from the rows, denied and shed.
    pub fn attempted(&self) -> u64 {
        self.calls.len() as u64 + u64::from(self.dropped) + u64::from(self.denied) + u64::from(self.shed)
    }
}
