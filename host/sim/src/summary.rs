//! The judge's summary line: one JSON object, its first keys exactly the original
//! judge's (`fingerprint`, `ticks`, `h`, `width`, `nin`, `params`, `final`, then
//! `jacobians` when asked), numbers written as JavaScript's `JSON.stringify` writes
//! them; then ours: the plant, scenario, stop time, `fell_at` for the cart-pole
//! balance, the score and its floor, the metrics, and whether the run passed.

use crate::catalogue::PlantName;
use crate::score::{Assessment, Value};

/// A completed run's summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// SHA-256 hex of the trajectory bytes.
    pub fingerprint: String,
    /// Recorded ticks.
    pub ticks: u64,
    /// The tick.
    pub h: f64,
    /// Observations per tick.
    pub width: usize,
    /// Inputs per tick.
    pub nin: usize,
    /// The parameters.
    pub params: [f64; 3],
    /// The last recorded observations.
    pub final_state: Vec<f64>,
    /// The Jacobians file, its kind, the plant's states and its SHA-256, when asked.
    pub jacobians: Option<(String, &'static str, u32, String)>,
    /// The plant.
    pub plant: PlantName,
    /// The scenario, when one was named (or defaulted).
    pub scenario: Option<&'static str>,
    /// The stop time.
    pub stop: f64,
    /// The task's verdict.
    pub assessment: Assessment,
}

/// Appends `v` as `JSON.stringify` writes a number (NaN and infinities as null).
fn number(out: &mut String, v: f64) {
    if v.is_finite() {
        crate::number::push_js(out, v);
    } else {
        out.push_str("null");
    }
}

/// Appends `s` as a JSON string.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn list(out: &mut String, values: &[f64]) {
    out.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        number(out, *v);
    }
    out.push(']');
}

fn value(out: &mut String, v: Value) {
    match v {
        Value::Number(n) => number(out, n),
        Value::Null => out.push_str("null"),
    }
}

impl Summary {
    /// The summary as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        let mut o = String::with_capacity(512);
        o.push_str("{\"fingerprint\":");
        string(&mut o, &self.fingerprint);
        o.push_str(&format!(",\"ticks\":{},\"h\":", self.ticks));
        number(&mut o, self.h);
        o.push_str(&format!(",\"width\":{},\"nin\":{},\"params\":", self.width, self.nin));
        list(&mut o, &self.params);
        o.push_str(",\"final\":");
        list(&mut o, &self.final_state);
        if let Some((file, kind, nx, sha)) = &self.jacobians {
            o.push_str(",\"jacobians\":{\"file\":");
            string(&mut o, file);
            o.push_str(",\"kind\":");
            string(&mut o, kind);
            o.push_str(&format!(",\"nx\":{nx},\"sha256\":"));
            string(&mut o, sha);
            o.push('}');
        }
        o.push_str(",\"plant\":");
        string(&mut o, self.plant.as_str());
        if let Some(s) = self.scenario {
            o.push_str(",\"scenario\":");
            string(&mut o, s);
        }
        o.push_str(",\"t_end\":");
        number(&mut o, self.stop);
        let a = &self.assessment;
        if let Some(fell) = a.fell_at {
            o.push_str(",\"fell_at\":");
            value(&mut o, fell);
        }
        if let Some(score) = a.score {
            o.push_str(",\"score\":");
            number(&mut o, score);
        }
        if let Some(floor) = a.floor {
            o.push_str(",\"floor\":");
            number(&mut o, floor);
        }
        o.push_str(",\"metrics\":{");
        for (i, (name, v)) in a.metrics.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            string(&mut o, name);
            o.push(':');
            value(&mut o, *v);
        }
        o.push_str(&format!("}},\"passed\":{}", a.passed));
        if let Some(f) = a.failure {
            o.push_str(",\"failure\":");
            string(&mut o, f);
        }
        o.push('}');
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_keeps_the_original_keys_first_and_javascript_numbers() {
        let s = Summary {
            fingerprint: "ab".into(),
            ticks: 2000,
            h: 0.01,
            width: 4,
            nin: 1,
            params: [0.2, 0.5, 1.0],
            final_state: vec![-0.018, 1e-7, f64::NAN, 20.0],
            jacobians: None,
            plant: PlantName::CartPole,
            scenario: Some("s1"),
            stop: 20.0,
            assessment: Assessment {
                fell_at: Some(Value::Null),
                score: None,
                floor: None,
                metrics: vec![("final_x", Value::Number(-0.018))],
                passed: true,
                failure: None,
            },
        };
        assert_eq!(
            s.to_json(),
            r#"{"fingerprint":"ab","ticks":2000,"h":0.01,"width":4,"nin":1,"params":[0.2,0.5,1],"final":[-0.018,1e-7,null,20],"plant":"cartpole","scenario":"s1","t_end":20,"fell_at":null,"metrics":{"final_x":-0.018},"passed":true}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&s.to_json()).expect("valid JSON");
        assert_eq!(parsed["ticks"], 2000);
    }
}
