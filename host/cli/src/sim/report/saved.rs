//! Reading a saved run and checking it against its trajectory and this build's rules.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{anyhow, bail};
use base64::Engine as _;
use plimsoll_sim::PlantName;
use plimsoll_sim::number::js;
use plimsoll_sim::score::{self, Assessment, Record, Value as Scored};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::VERSION;
use super::plants::*;
use super::render::*;

/// A verdict, as saved or as recomputed: non-finite numbers are `None`, as the
/// summary writes them `null`.
#[derive(Clone, Debug)]
pub(super) struct Verdict {
    /// Whether the run passed its task.
    pub(super) passed: bool,
    /// The failure's name.
    pub(super) failure: Option<String>,
    /// The score, where the task has one.
    pub(super) score: Option<f64>,
    /// The score a pass needs.
    pub(super) floor: Option<f64>,
    /// Cart-pole balance only: `Some(None)` never fell, `Some(Some(t))` fell at t.
    pub(super) fell_at: Option<Option<f64>>,
    /// The named measurements, in order.
    pub(super) metrics: Vec<(String, Option<f64>)>,
}

impl Verdict {
    /// The verdict this build's rules give.
    pub(super) fn of(a: &Assessment) -> Verdict {
        let finite = |v: f64| Some(v).filter(|v| v.is_finite());
        let value = |v: Scored| match v {
            Scored::Number(n) => finite(n),
            Scored::Null => None,
        };
        Verdict {
            passed: a.passed,
            failure: a.failure.map(str::to_string),
            score: a.score.and_then(finite),
            floor: a.floor.and_then(finite),
            fell_at: a.fell_at.map(value),
            metrics: a.metrics.iter().map(|(n, v)| (n.to_string(), value(*v))).collect(),
        }
    }

    /// Whether the saved verdict `self` is the `earned` one: the same pass, failure
    /// and metric names, and numbers equal to within four units in the last place
    /// (a JSON writer without exact round trips may have moved them by one).
    pub(super) fn agrees(&self, earned: &Verdict) -> bool {
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => a == b || (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs()),
            _ => false,
        };
        // The saved metrics come back in key order; the rules give them in their own.
        let mut mine = self.metrics.clone();
        let mut theirs = earned.metrics.clone();
        mine.sort_by(|a, b| a.0.cmp(&b.0));
        theirs.sort_by(|a, b| a.0.cmp(&b.0));
        self.passed == earned.passed
            && self.failure == earned.failure
            && close(self.score, earned.score)
            && close(self.floor, earned.floor)
            && self.fell_at.is_some() == earned.fell_at.is_some()
            && close(self.fell_at.flatten(), earned.fell_at.flatten())
            && mine.len() == theirs.len()
            && mine.iter().zip(&theirs).all(|(a, b)| a.0 == b.0 && close(a.1, b.1))
    }

    /// `passed`, or `failed (fell)`.
    pub(super) fn word(&self) -> String {
        match (&self.passed, &self.failure) {
            (true, _) => "passed".into(),
            (false, Some(f)) => format!("failed ({f})"),
            (false, None) => "failed".into(),
        }
    }
}

/// One saved run, checked.
#[derive(Debug)]
pub(super) struct Run {
    /// The file it was read from, as given on the command line.
    pub(super) file: String,
    /// The plant.
    pub(super) plant: PlantName,
    /// The judge's summary as saved (with provider and tier).
    pub(super) summary: Value,
    /// SHA-256 hex of the trajectory.
    pub(super) fingerprint: String,
    /// Recorded ticks.
    pub(super) ticks: usize,
    /// The tick, in the plant's time unit.
    pub(super) h: f64,
    /// The stop time.
    pub(super) t_end: f64,
    /// Observations per tick.
    pub(super) width: usize,
    /// Inputs per tick.
    pub(super) nin: usize,
    /// The scenario's parameters.
    pub(super) params: [f64; 3],
    /// The scenario's name, when one was named or defaulted.
    pub(super) scenario: Option<String>,
    /// The verdict (saved, and checked against the trajectory).
    pub(super) verdict: Verdict,
    /// The provider that ran the judge.
    pub(super) provider: String,
    /// The isolation tier the provider reported.
    pub(super) tier: String,
    /// The run's environment identity.
    pub(super) environment: String,
    /// The run record's digest, when the provider recorded one.
    pub(super) record: Option<String>,
    /// How long the run took, in milliseconds.
    pub(super) duration_ms: u64,
    /// The controller's file name.
    pub(super) controller: String,
    /// The controller's source (or a note for a compiled module).
    pub(super) source: String,
    /// The trajectory: little-endian f64, per tick the observations then the inputs.
    pub(super) bytes: Vec<u8>,
}

/// The doubles of a trajectory (little-endian; a trailing partial value is dropped).
pub(super) fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            f64::from_le_bytes(b)
        })
        .collect()
}

impl Run {
    /// The file name the run was read from (without its folders).
    pub(super) fn file_name(&self) -> &str {
        std::path::Path::new(&self.file).file_name().and_then(|n| n.to_str()).unwrap_or(&self.file)
    }

    /// The controller's file name as the caller gave it (a compiled module travels
    /// as `NAME.b64`).
    pub(super) fn controller_file(&self) -> &str {
        if self.source.starts_with("(a compiled module") {
            self.controller.strip_suffix(".b64").unwrap_or(&self.controller)
        } else {
            &self.controller
        }
    }

    /// What happened, in the plant's words: `fell at 5.96 s`, `score 0.908 (floor 0.6)`.
    pub(super) fn headline(&self) -> String {
        let unit = info(self.plant).time.unit;
        let v = &self.verdict;
        match (v.fell_at, v.score) {
            (Some(None), _) => format!("balanced for {} {unit}", js(self.t_end)),
            (Some(Some(t)), _) => format!("fell at {} {unit}", js(t)),
            (None, Some(s)) => match v.floor {
                Some(f) => format!("score {} (floor {})", short(s), js(f)),
                None => format!("score {}", short(s)),
            },
            (None, None) => v.word(),
        }
    }
}

/// The value at `path` (dot-separated keys) of the run read from `file`.
pub(super) fn field<'v>(file: &str, doc: &'v Value, path: &str) -> anyhow::Result<&'v Value> {
    let mut at = doc;
    for key in path.split('.') {
        at = at.get(key).ok_or_else(|| anyhow!("{file}: missing field {path}"))?;
    }
    Ok(at)
}

/// A string field.
pub(super) fn text<'v>(file: &str, doc: &'v Value, path: &str) -> anyhow::Result<&'v str> {
    field(file, doc, path)?.as_str().ok_or_else(|| anyhow!("{file}: field {path} is not a string"))
}

/// A whole-number field.
pub(super) fn whole(file: &str, doc: &Value, path: &str) -> anyhow::Result<u64> {
    field(file, doc, path)?.as_u64().ok_or_else(|| anyhow!("{file}: field {path} is not a whole number"))
}

/// A count field that fits in memory.
pub(super) fn count(file: &str, doc: &Value, path: &str) -> anyhow::Result<usize> {
    usize::try_from(whole(file, doc, path)?).map_err(|_| anyhow!("{file}: field {path} is too large"))
}

/// A number field.
pub(super) fn number(file: &str, doc: &Value, path: &str) -> anyhow::Result<f64> {
    field(file, doc, path)?.as_f64().ok_or_else(|| anyhow!("{file}: field {path} is not a number"))
}

/// A number field that may be `null` (or absent, when `absent_ok`).
pub(super) fn maybe_number(file: &str, doc: &Value, path: &str) -> anyhow::Result<Option<f64>> {
    match field(file, doc, path) {
        Ok(Value::Null) | Err(_) => Ok(None),
        Ok(v) => v.as_f64().map(Some).ok_or_else(|| anyhow!("{file}: field {path} is not a number or null")),
    }
}

/// A string field that may be `null` or absent.
pub(super) fn maybe_text(file: &str, doc: &Value, path: &str) -> anyhow::Result<Option<String>> {
    match field(file, doc, path) {
        Ok(Value::Null) | Err(_) => Ok(None),
        Ok(v) => v.as_str().map(|s| Some(s.to_string())).ok_or_else(|| anyhow!("{file}: field {path} is not a string")),
    }
}

/// Reads and checks one saved run; `file` names it in every error.
///
/// # Errors
///
/// Not JSON, a missing or mistyped field, an unknown plant or version, a trajectory
/// that is not base64, does not hash to the fingerprint or has the wrong length, an
/// interface that is not the plant's, or a saved verdict the trajectory does not earn.
pub(super) fn read_run(file: &str, bytes: &[u8]) -> anyhow::Result<Run> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| anyhow!("{file} is not JSON: {e}"))?;
    if !doc.is_object() {
        bail!("{file} is not a saved run (a JSON object written by sim run --save)");
    }
    let version = whole(file, &doc, "version")?;
    if version != VERSION {
        bail!("{file}: version {version} is not one this build reads ({VERSION})");
    }
    let plant_name = text(file, &doc, "plant")?;
    let plant = PlantName::parse(plant_name).map_err(|e| anyhow!("{file}: field plant: {e}"))?;
    let summary = field(file, &doc, "summary")?;
    if !summary.is_object() {
        bail!("{file}: field summary is not an object");
    }
    let summary_plant = text(file, &doc, "summary.plant")?;
    if summary_plant != plant_name {
        bail!("{file}: summary.plant {summary_plant:?} differs from plant {plant_name:?}");
    }

    // The trajectory is the fingerprinted bytes, or the run is refused.
    let fingerprint = text(file, &doc, "summary.fingerprint")?;
    if fingerprint.len() != 64 || !fingerprint.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        bail!("{file}: summary.fingerprint is not 64 lower-case hex digits");
    }
    let trajectory = base64::engine::general_purpose::STANDARD
        .decode(text(file, &doc, "trajectory")?)
        .map_err(|e| anyhow!("{file}: field trajectory is not base64: {e}"))?;
    let actual = hex::encode(Sha256::digest(&trajectory));
    if actual != fingerprint {
        bail!(
            "{file}: the trajectory hashes to {actual}, not to the summary's fingerprint {fingerprint}: \
             the file was changed after the run"
        );
    }
    let ticks = count(file, &doc, "summary.ticks")?;
    let width = count(file, &doc, "summary.width")?;
    let nin = count(file, &doc, "summary.nin")?;
    let (obs, inputs) = interface(plant);
    if (width, nin) != (obs, inputs) {
        bail!(
            "{file}: the summary says {width} observations and {nin} inputs per tick, but {plant} records {obs} \
             and {inputs}"
        );
    }
    let wanted = ticks.checked_mul(width + nin).and_then(|n| n.checked_mul(8));
    if wanted != Some(trajectory.len()) {
        bail!(
            "{file}: the summary says {ticks} ticks of {width} + {nin} values, but the trajectory holds {} bytes \
             ({} values)",
            trajectory.len(),
            trajectory.len() / 8
        );
    }
    let h = number(file, &doc, "summary.h")?;
    let t_end = number(file, &doc, "summary.t_end")?;
    if !(h.is_finite() && h > 0.0) {
        bail!("{file}: summary.h is not a positive tick");
    }
    let list = field(file, &doc, "summary.params")?
        .as_array()
        .filter(|l| l.len() == 3)
        .ok_or_else(|| anyhow!("{file}: field summary.params is not a list of three numbers"))?;
    let mut params = [0.0; 3];
    for (p, v) in params.iter_mut().zip(list) {
        *p = v.as_f64().ok_or_else(|| anyhow!("{file}: field summary.params is not a list of three numbers"))?;
    }

    // The saved verdict, and the one this build's rules give the trajectory.
    let passed = field(file, &doc, "summary.passed")?
        .as_bool()
        .ok_or_else(|| anyhow!("{file}: field summary.passed is not true or false"))?;
    let metrics = field(file, &doc, "summary.metrics")?
        .as_object()
        .ok_or_else(|| anyhow!("{file}: field summary.metrics is not an object"))?
        .iter()
        .map(|(name, v)| match v {
            Value::Null => Ok((name.clone(), None)),
            v => v
                .as_f64()
                .map(|n| (name.clone(), Some(n)))
                .ok_or_else(|| anyhow!("{file}: field summary.metrics.{name} is not a number or null")),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let fell_at = match summary.get("fell_at") {
        None => None,
        Some(_) => Some(maybe_number(file, &doc, "summary.fell_at")?),
    };
    let saved = Verdict {
        passed,
        failure: maybe_text(file, &doc, "summary.failure")?,
        score: maybe_number(file, &doc, "summary.score")?,
        floor: maybe_number(file, &doc, "summary.floor")?,
        fell_at,
        metrics,
    };
    let values = doubles(&trajectory);
    let earned = Verdict::of(&score::assess(plant, &Record { width, inputs: nin, tick: h, params, values: &values }));
    if !saved.agrees(&earned) {
        bail!(
            "{file}: the saved verdict ({}) is not what this build's rules give its trajectory ({}); it was judged \
             by other rules or changed after the run",
            describe(&saved),
            describe(&earned)
        );
    }

    // Who ran it.
    let provider = text(file, &doc, "provider")?.to_string();
    let tier = text(file, &doc, "tier")?.to_string();
    for (key, top) in [("provider", &provider), ("tier", &tier)] {
        if let Some(s) = maybe_text(file, &doc, &format!("summary.{key}"))?
            && &s != top
        {
            bail!("{file}: summary.{key} {s:?} differs from {key} {top:?}");
        }
    }
    Ok(Run {
        file: file.to_string(),
        plant,
        summary: summary.clone(),
        fingerprint: fingerprint.to_string(),
        ticks,
        h,
        t_end,
        width,
        nin,
        params,
        scenario: maybe_text(file, &doc, "summary.scenario")?,
        verdict: earned,
        provider,
        tier,
        environment: text(file, &doc, "environment")?.to_string(),
        record: maybe_text(file, &doc, "record")?,
        duration_ms: whole(file, &doc, "duration_ms")?,
        controller: text(file, &doc, "controller.name")?.to_string(),
        source: text(file, &doc, "controller.source")?.to_string(),
        bytes: trajectory,
    })
}

/// A verdict in one line, for an error.
pub(super) fn describe(v: &Verdict) -> String {
    let mut s = v.word();
    if let Some(score) = v.score {
        let _ = write!(s, ", score {}", js(score));
    }
    if let Some(fell) = v.fell_at {
        let _ = write!(s, ", fell_at {}", fell.map_or("null".to_string(), js));
    }
    for (name, value) in &v.metrics {
        let _ = write!(s, ", {name} {}", value.map_or("null".to_string(), js));
    }
    s
}

/// The runs by plant, in the catalogue's order; each plant's runs in the order given.
pub(super) fn group(runs: &[Run]) -> Vec<(PlantName, Vec<&Run>)> {
    let mut by: BTreeMap<usize, (PlantName, Vec<&Run>)> = BTreeMap::new();
    for run in runs {
        let at = PlantName::ALL.iter().position(|p| *p == run.plant).unwrap_or(PlantName::ALL.len());
        by.entry(at).or_insert_with(|| (run.plant, Vec::new())).1.push(run);
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_saved_run_reads_back_with_its_verdict() {
        let run = read(&cartpole("// ok")).expect("reads");
        assert_eq!(run.plant, PlantName::CartPole);
        assert_eq!((run.ticks, run.width, run.nin), (3, 4, 1));
        assert!(run.verdict.passed);
        assert_eq!(run.headline(), "balanced for 20 s");
        assert_eq!(doubles(&run.bytes)[4], 1.0);
    }

    #[test]
    fn a_tampered_trajectory_is_refused_naming_the_file() {
        let mut doc = cartpole("");
        let mut bytes = base64::engine::general_purpose::STANDARD
            .decode(doc["trajectory"].as_str().expect("trajectory"))
            .expect("base64");
        bytes[17] ^= 1;
        doc["trajectory"] = json!(base64::engine::general_purpose::STANDARD.encode(&bytes));
        let e = refusal(&doc);
        assert!(e.starts_with("run.json: the trajectory hashes to "), "{e}");
        assert!(e.ends_with("the file was changed after the run"), "{e}");
        doc["trajectory"] = json!("not base64!");
        assert!(refusal(&doc).starts_with("run.json: field trajectory is not base64"));
    }

    #[test]
    fn missing_or_mistyped_fields_are_refused_by_name() {
        for (path, want) in [
            ("controller.source", "run.json: missing field controller.source"),
            ("summary.fingerprint", "run.json: missing field summary.fingerprint"),
            ("tier", "run.json: missing field tier"),
            ("version", "run.json: missing field version"),
        ] {
            let mut doc = cartpole("");
            let (parent, key) = path.rsplit_once('.').map_or((None, path), |(p, k)| (Some(p), k));
            let holder = match parent {
                Some(p) => &mut doc[p],
                None => &mut doc,
            };
            holder.as_object_mut().expect("object").remove(key);
            assert_eq!(refusal(&doc), want);
        }
        let mut doc = cartpole("");
        doc["summary"]["ticks"] = json!("3");
        assert_eq!(refusal(&doc), "run.json: field summary.ticks is not a whole number");
        assert!(format!("{:#}", read_run("x.json", b"{").expect_err("not JSON")).starts_with("x.json is not JSON"));
        doc = cartpole("");
        doc["version"] = json!(2);
        assert_eq!(refusal(&doc), "run.json: version 2 is not one this build reads (1)");
        doc = cartpole("");
        doc["plant"] = json!("pendulum");
        assert!(refusal(&doc).starts_with("run.json: field plant: unknown plant \"pendulum\""));
    }

    #[test]
    fn the_summary_must_agree_with_the_trajectory() {
        let mut doc = cartpole("");
        doc["summary"]["ticks"] = json!(4);
        assert_eq!(
            refusal(&doc),
            "run.json: the summary says 4 ticks of 4 + 1 values, but the trajectory holds 120 bytes (15 values)"
        );
        doc = cartpole("");
        doc["summary"]["width"] = json!(3);
        doc["summary"]["nin"] = json!(2);
        assert_eq!(
            refusal(&doc),
            "run.json: the summary says 3 observations and 2 inputs per tick, but cartpole records 4 and 1"
        );
        doc = cartpole("");
        doc["summary"]["passed"] = json!(false);
        doc["summary"]["failure"] = json!("fell");
        let e = refusal(&doc);
        assert!(e.starts_with("run.json: the saved verdict (failed (fell), fell_at null,"), "{e}");
        doc = cartpole("");
        doc["summary"]["metrics"]["max_abs_x"] = json!(9);
        assert!(refusal(&doc).contains("is not what this build's rules give its trajectory"));
        doc = cartpole("");
        doc["summary"]["tier"] = json!("vm");
        assert_eq!(refusal(&doc), "run.json: summary.tier \"vm\" differs from tier \"process\"");
    }

    #[test]
    fn runs_are_grouped_by_plant_in_catalogue_order_keeping_their_order() {
        let ship = |heading: f64| saved(PlantName::Ship, &[heading, 0.0, 0.0, 0.1], "");
        let docs = [ship(0.5), cartpole("// a"), ship(0.52), cartpole("// b")];
        let runs: Vec<Run> = docs.iter().map(|d| read(d).expect("reads")).collect();
        let g = group(&runs);
        assert_eq!(
            g.iter().map(|(p, rs)| (*p, rs.len())).collect::<Vec<_>>(),
            [(PlantName::CartPole, 2), (PlantName::Ship, 2)]
        );
        assert_eq!(g[0].1[0].source, "// a");
        assert_eq!(doubles(&g[1].1[1].bytes)[0], 0.52);
        // Two runs of one controller name are told apart by their files.
        assert_eq!(labels(&g[0].1), ["accepted.js (run.json)", "accepted.js (run.json) #2"]);
        let page = render(&runs, None);
        assert!(page.contains("<nav class=\"index\""));
        assert!(page.contains("href=\"#plant-ship\"") && page.contains("id=\"plant-cartpole\""));
        let one = render(&runs[1..2], None);
        assert!(!one.contains("<nav class=\"index\""));
        assert!(one.contains("<title>Cart-pole balance: accepted.js</title>"));
    }
}
