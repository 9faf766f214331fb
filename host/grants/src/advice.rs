//! The efficiency advisor: deterministic detectors over a run's call trace. It
//! runs after the run, never changes it, and states only route templates and
//! numbers (no string the guest chose is ever echoed).

use std::collections::BTreeMap;

use plimsoll_core::wire::AdviceFinding;
use serde::Serialize;

use crate::route::{Method, Route};
use crate::trace::CallTrace;

/// Calls of one per-item route that make a fan-out.
pub const FAN_OUT_MIN: usize = 6;
/// Same-size reads of one fixed route that make a repeated read.
pub const REPEATED_READ_MIN: usize = 4;

/// What the advisor knows of a profile.
#[derive(Clone, Copy, Debug)]
pub struct Routes<'a> {
    /// The granted routes.
    pub granted: &'a [Route],
    /// The API's full route list (grants nothing).
    pub catalog: &'a [Route],
    /// Batch routes: each answers what many calls of its per-item routes would.
    pub batch_of: &'a [(Route, Vec<Route>)],
}

/// What only the operator is told: a change to the grant or the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OperatorHint {
    /// A declared batch route exists but this profile does not grant it.
    GrantRoute {
        /// The route to grant.
        route: String,
    },
    /// The collection route above the per-item one is known and may answer in one call.
    CandidateRoute {
        /// The collection route.
        route: String,
    },
    /// Nothing known answers in one call: a prompt to paste into a design review.
    Prompt {
        /// The prompt.
        text: String,
    },
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `fan_out` or `repeated_read`.
    pub pattern: &'static str,
    /// `low`, `medium` or `high`.
    pub severity: &'static str,
    /// `batch` or `cache`.
    pub remedy: &'static str,
    /// The route called.
    pub method: Method,
    /// Its template.
    pub route: String,
    /// One templated sentence.
    pub detail: String,
    /// A granted route that answers in one call (the agent can fix it).
    pub suggested: Option<String>,
    /// Operator-only guidance.
    pub operator: Option<OperatorHint>,
    /// Successful calls beyond one.
    pub extra_calls: u32,
    /// Summed round trips beyond the longest one, in milliseconds (a model).
    pub added_latency_ms: u64,
    /// Request and response bytes of those calls.
    pub bytes_moved: u64,
}

impl Finding {
    /// The form a caller sees: never the operator's hint.
    pub fn to_wire(&self) -> AdviceFinding {
        let (suggested_method, suggested_route) = match self.suggested.as_deref().and_then(|s| s.split_once(' ')) {
            Some((m, r)) => (m.to_string(), r.to_string()),
            None => (String::new(), String::new()),
        };
        AdviceFinding {
            pattern: self.pattern.into(),
            severity: self.severity.into(),
            remedy: self.remedy.into(),
            method: self.method.as_str().into(),
            route: self.route.clone(),
            detail: self.detail.clone(),
            suggested_method,
            suggested_route,
            extra_calls: i32::try_from(self.extra_calls).unwrap_or(i32::MAX),
            added_latency_ms: i64::try_from(self.added_latency_ms).unwrap_or(i64::MAX),
            bytes_moved: i64::try_from(self.bytes_moved).unwrap_or(i64::MAX),
        }
    }
}

fn severity(count: usize) -> &'static str {
    match count {
        100.. => "high",
        25.. => "medium",
        _ => "low",
    }
}

#[derive(Default)]
struct Group {
    count: usize,
    latency_us: Vec<u64>,
    bytes: u64,
    sizes: BTreeMap<u64, usize>,
}

/// The findings for one run's trace, in route order.
pub fn advise(trace: &CallTrace, routes: Routes<'_>) -> Vec<Finding> {
    let mut groups: BTreeMap<(Method, &str), Group> = BTreeMap::new();
    for row in trace.calls.iter().filter(|r| r.delivered && (200..300).contains(&r.status)) {
        let g = groups.entry((row.method, row.route.as_str())).or_default();
        g.count += 1;
        g.latency_us.push(row.latency_us);
        g.bytes += row.req_bytes + row.resp_bytes;
        *g.sizes.entry(row.resp_bytes).or_default() += 1;
    }
    let at_least = if trace.dropped > 0 { "at least " } else { "" };
    let mut out = Vec::new();
    for ((method, template), g) in &groups {
        let route = format!("{method} {template}");
        let added_latency_ms = {
            let total: u64 = g.latency_us.iter().sum();
            (total - g.latency_us.iter().max().copied().unwrap_or(0)) / 1000
        };
        let per_item = template.split('/').any(|s| s == "*");
        if per_item && g.count >= FAN_OUT_MIN {
            let (suggested, operator, tail) = route_fan_out(*method, template, routes);
            out.push(Finding {
                pattern: "fan_out",
                severity: severity(g.count),
                remedy: "batch",
                method: *method,
                route: template.to_string(),
                detail: format!("{route} was called {at_least}{} times in one run; {tail}", g.count),
                suggested,
                operator,
                extra_calls: (g.count - 1) as u32,
                added_latency_ms,
                bytes_moved: g.bytes,
            });
        }
        let same_size = g.sizes.values().copied().max().unwrap_or(0);
        if !per_item && *method == Method::Get && same_size >= REPEATED_READ_MIN {
            out.push(Finding {
                pattern: "repeated_read",
                severity: if severity(same_size) == "high" { "medium" } else { severity(same_size) },
                remedy: "cache",
                method: *method,
                route: template.to_string(),
                detail: format!(
                    "{route} answered {at_least}{same_size} reads of the same size in one run; read it once and keep the answer"
                ),
                suggested: None,
                operator: None,
                extra_calls: (same_size - 1) as u32,
                added_latency_ms,
                bytes_moved: g.bytes,
            });
        }
    }
    out
}

/// Where a fan-out of `method template` should go instead.
fn route_fan_out(method: Method, template: &str, routes: Routes<'_>) -> (Option<String>, Option<OperatorHint>, String) {
    if method != Method::Get {
        return (None, None, "a write fan-out is reported, never routed".into());
    }
    let declared = routes
        .batch_of
        .iter()
        .find(|(_, items)| items.iter().any(|r| r.method() == method && r.template() == template))
        .map(|(batch, _)| batch);
    if let Some(batch) = declared {
        if routes.granted.contains(batch) {
            return (Some(batch.to_string()), None, format!("{batch} answers in one call"));
        }
        return (
            None,
            Some(OperatorHint::GrantRoute { route: batch.to_string() }),
            "a batch route exists but this grant does not include it".into(),
        );
    }
    if let Some(parent) = template.strip_suffix("/*").filter(|p| !p.is_empty()) {
        let known =
            routes.granted.iter().chain(routes.catalog).any(|r| r.method() == Method::Get && r.template() == parent);
        if known {
            return (
                None,
                Some(OperatorHint::CandidateRoute { route: format!("GET {parent}") }),
                "a collection route may answer in one call".into(),
            );
        }
    }
    let text = format!(
        "Code calls GET {template} once per item, many times in one run. Propose the smallest API change that \
         answers these reads in one call (a batch or filtered collection route), or state that none is warranted."
    );
    (None, Some(OperatorHint::Prompt { text }), "no known route answers in one call".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::CallRow;

    fn r(line: &str) -> Route {
        Route::parse(line).expect("route")
    }

    fn row(seq: u32, method: Method, route: &str, status: u16, resp: u64, latency_ms: u64) -> CallRow {
        CallRow {
            seq,
            method,
            route: route.into(),
            status,
            delivered: status != 0,
            req_bytes: 0,
            resp_bytes: resp,
            latency_us: latency_ms * 1000,
        }
    }

    fn fan(n: u32, route: &str) -> CallTrace {
        CallTrace {
            calls: (1..=n).map(|i| row(i, Method::Get, route, 200, 10 + u64::from(i), 2)).collect(),
            ..CallTrace::default()
        }
    }

    #[test]
    fn a_fan_out_with_a_granted_batch_route_suggests_it_to_the_caller() {
        let granted = [r("GET /items"), r("GET /items/*")];
        let batch = [(r("GET /items"), vec![r("GET /items/*")])];
        let f = advise(&fan(6, "/items/*"), Routes { granted: &granted, catalog: &[], batch_of: &batch });
        assert_eq!(f.len(), 1);
        let w = f[0].to_wire();
        assert_eq!((w.pattern.as_str(), w.severity.as_str(), w.remedy.as_str()), ("fan_out", "low", "batch"));
        assert_eq!((w.suggested_method.as_str(), w.suggested_route.as_str()), ("GET", "/items"));
        assert_eq!(w.detail, "GET /items/* was called 6 times in one run; GET /items answers in one call");
        assert_eq!((w.extra_calls, w.added_latency_ms, w.bytes_moved), (5, 10, 11 + 12 + 13 + 14 + 15 + 16));
        assert_eq!(f[0].operator, None);
    }

    #[test]
    fn five_calls_are_not_a_fan_out_and_failures_do_not_count() {
        let granted = [r("GET /items/*")];
        let routes = Routes { granted: &granted, catalog: &[], batch_of: &[] };
        assert!(advise(&fan(5, "/items/*"), routes).is_empty());
        let mut t = fan(5, "/items/*");
        t.calls.push(row(6, Method::Get, "/items/*", 404, 5, 1));
        t.calls.push(row(7, Method::Get, "/items/*", 0, 0, 1));
        assert!(advise(&t, routes).is_empty());
    }

    #[test]
    fn operator_hints_never_reach_the_wire() {
        let granted = [r("GET /items/*")];
        let batch = [(r("GET /items"), vec![r("GET /items/*")])];
        let f = advise(&fan(25, "/items/*"), Routes { granted: &granted, catalog: &[], batch_of: &batch });
        assert_eq!(f[0].severity, "medium");
        assert_eq!(f[0].operator, Some(OperatorHint::GrantRoute { route: "GET /items".into() }));
        let w = f[0].to_wire();
        assert_eq!((w.suggested_method.as_str(), w.suggested_route.as_str()), ("", ""));

        let catalog = [r("GET /items")];
        let f = advise(&fan(100, "/items/*"), Routes { granted: &granted, catalog: &catalog, batch_of: &[] });
        assert_eq!(f[0].severity, "high");
        assert_eq!(f[0].operator, Some(OperatorHint::CandidateRoute { route: "GET /items".into() }));

        let f = advise(&fan(7, "/items/*"), Routes { granted: &granted, catalog: &[], batch_of: &[] });
        assert!(
            matches!(&f[0].operator, Some(OperatorHint::Prompt { text }) if text.starts_with("Code calls GET /items/* once per item"))
        );
    }

    #[test]
    fn write_fan_outs_are_reported_never_routed() {
        let t = CallTrace {
            calls: (1..=6).map(|i| row(i, Method::Post, "/items/*", 201, 2, 1)).collect(),
            ..CallTrace::default()
        };
        let f = advise(&t, Routes { granted: &[], catalog: &[], batch_of: &[] });
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].suggested.clone(), f[0].operator.clone()), (None, None));
        assert_eq!(
            f[0].detail,
            "POST /items/* was called 6 times in one run; a write fan-out is reported, never routed"
        );
    }

    #[test]
    fn repeated_reads_need_four_same_size_answers_of_a_fixed_route() {
        let same = |n: u32, size: u64| CallTrace {
            calls: (1..=n).map(|i| row(i, Method::Get, "/config", 200, size, 1)).collect(),
            ..CallTrace::default()
        };
        let routes = Routes { granted: &[], catalog: &[], batch_of: &[] };
        assert!(advise(&same(3, 9), routes).is_empty());
        let f = advise(&same(4, 9), routes);
        assert_eq!((f[0].pattern, f[0].remedy, f[0].extra_calls), ("repeated_read", "cache", 3));
        let mut t = same(3, 9);
        t.calls.push(row(4, Method::Get, "/config", 200, 10, 1));
        assert!(advise(&t, routes).is_empty(), "different sizes are different answers");
        let mut many = same(150, 9);
        many.dropped = 4;
        let f = advise(&many, routes);
        assert_eq!(f[0].severity, "medium", "a repeated read is never high");
        assert!(f[0].detail.contains("answered at least 150 reads"), "{}", f[0].detail);
    }
}
