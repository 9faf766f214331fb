//! Saved runs for the report's tests.

use base64::Engine as _;
use plimsoll_sim::PlantName;
use plimsoll_sim::score::{self, Record};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::plants::interface;
use super::saved::{Run, read_run};

/// A saved run of `plant` whose trajectory is `values`, judged by this build's
/// rules, in the layout `sim run --save` writes.
pub(super) fn saved(plant: PlantName, values: &[f64], source: &str) -> Value {
    let (width, nin) = interface(plant);
    let (h, t_end) = plant.timing();
    let sc = plant.scenarios()[0];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ticks = values.len() / (width + nin);
    let a = score::assess(plant, &Record { width, inputs: nin, tick: h, params: sc.params, values });
    let summary = plimsoll_sim::summary::Summary {
        fingerprint: hex::encode(Sha256::digest(&bytes)),
        ticks: ticks as u64,
        h,
        width,
        nin,
        params: sc.params,
        final_state: values[values.len() - width - nin..values.len() - nin].to_vec(),
        jacobians: None,
        plant,
        scenario: Some(sc.name),
        stop: t_end,
        assessment: a,
    };
    let mut s: Value = serde_json::from_str(&summary.to_json()).expect("summary JSON");
    s["provider"] = json!("wasm");
    s["tier"] = json!("process");
    json!({
        "version": 1, "summary": s, "plant": plant.as_str(), "provider": "wasm", "tier": "process",
        "environment": "plimsoll-sim:sha256:00", "record": "ab".repeat(32), "duration_ms": 12,
        "controller": { "name": "accepted.js", "source": source },
        "trajectory": base64::engine::general_purpose::STANDARD.encode(&bytes),
    })
}

/// A balanced cart-pole run of three ticks.
pub(super) fn cartpole(source: &str) -> Value {
    saved(PlantName::CartPole, &[0.0, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0, 0.1, 0.0, 2.0, 0.0, 0.0, 0.05, 0.0, 3.0], source)
}

pub(super) fn read(doc: &Value) -> anyhow::Result<Run> {
    read_run("run.json", doc.to_string().as_bytes())
}

pub(super) fn refusal(doc: &Value) -> String {
    format!("{:#}", read(doc).expect_err("refused"))
}
