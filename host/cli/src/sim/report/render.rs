//! Writing the page: the HTML every reader checks, and the data the script draws.

use std::fmt::Write as _;

use base64::Engine as _;
use plimsoll_sim::PlantName;
use plimsoll_sim::number::js;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::plants::*;
use super::saved::*;
use super::{SCRIPT, STYLE, TEMPLATE};
use plimsoll_core::html::escape as esc;

/// The run colours (the CSS classes c0 to c5 use the same).
pub(super) const COLOURS: [&str; 6] = ["#2a78d6", "#eb6834", "#2e9e5b", "#8a55c8", "#b5842a", "#d04f8f"];

/// A number for reading: four significant digits, an exponent when very large or small.
pub(super) fn short(v: f64) -> String {
    if !v.is_finite() {
        return js(v);
    }
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        let s = format!("{v:.3e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if s == "-0" { "0".into() } else { s }
}

/// A value with its unit.
pub(super) fn with_unit(v: f64, unit: &str) -> String {
    match unit {
        "" => short(v),
        "°" => format!("{}°", short(v)),
        u => format!("{} {u}", short(v)),
    }
}

/// A metric's unit, by its name.
pub(super) fn metric_unit(plant: PlantName, name: &str) -> &'static str {
    let time = info(plant).time.unit;
    match name {
        n if n.ends_with("_at_tick") || n.ends_with("at_tick") => "",
        n if n.ends_with("_at") || n.starts_with("first_") || n == "upright_from" => time,
        "final_x" | "max_abs_x" => "m",
        "final_theta" => "rad",
        "max_t" => "°C",
        "max_heading_deg" => "°",
        "max_v" => "V",
        "max_abs_i" => "A",
        "max_abs_error_ns" => "ns",
        "ordered_earth_date" | "earth_date_at_arrival" | "ship_age_at_arrival" => "yr",
        "farthest_ly" => "ly",
        "top_speed_c" => "c",
        _ => "",
    }
}

/// A metric's name in words: `reached_0_9_at_tick` reads `reached 0.9 at tick`.
pub(super) fn metric_words(name: &str) -> String {
    name.replace("_0_9_", " 0.9 ").replace('_', " ")
}

/// A metric's value for reading.
pub(super) fn metric_value(plant: PlantName, name: &str, v: Option<f64>) -> String {
    match v {
        None if name.ends_with("_at") || name.ends_with("at_tick") || name.starts_with("first_") => "never".into(),
        None if name == "upright_from" => "never".into(),
        None => "none".into(),
        // The buck converter's times read in milliseconds, as its charts do.
        Some(v) if plant == PlantName::Buck && metric_unit(plant, name) == "s" => with_unit(v * 1e3, "ms"),
        Some(v) => with_unit(v, metric_unit(plant, name)),
    }
}

/// Each run's label: its controller's name, with its file where two share one.
pub(super) fn labels(runs: &[&Run]) -> Vec<String> {
    let mut out: Vec<String> = runs.iter().map(|r| r.controller_file().to_string()).collect();
    let first: Vec<String> = out.clone();
    for (i, run) in runs.iter().enumerate() {
        if first.iter().filter(|n| **n == first[i]).count() > 1 {
            out[i] = format!("{} ({})", run.controller_file(), run.file_name());
        }
    }
    for i in 0..out.len() {
        let same = out[..i].iter().filter(|n| **n == out[i]).count();
        if same > 0 {
            out[i] = format!("{} #{}", out[i], same + 1);
        }
    }
    out
}

/// The scenario in words: `s1: theta0 0.2 rad, half_length 0.5 m, cart_mass 1 kg`.
pub(super) fn scenario(run: &Run) -> String {
    let i = info(run.plant);
    let params: Vec<String> =
        i.params.iter().zip(run.params).map(|((name, unit), v)| format!("{name} {}", with_unit(v, unit))).collect();
    match &run.scenario {
        Some(s) => format!("{s}: {}", params.join(", ")),
        None => format!("parameters given: {}", params.join(", ")),
    }
}

/// The command that makes the same run again.
pub(super) fn reproduce(run: &Run) -> String {
    let (tick, stop) = run.plant.timing();
    let mut c = format!("plimsoll-host sim run --plant {} --controller {}", run.plant, run.controller_file());
    match &run.scenario {
        Some(s) => {
            let _ = write!(c, " --scenario {s}");
        }
        None => {
            let _ = write!(c, " --params {}", run.params.map(js).join(","));
        }
    }
    if run.h != tick {
        let _ = write!(c, " --tick {}", js(run.h));
    }
    if run.t_end != stop {
        let _ = write!(c, " --stop {}", js(run.t_end));
    }
    if run.summary.get("jacobians").is_some() {
        c.push_str(" --jac");
    }
    c.push_str(" --save RUN.json");
    c
}

/// Where `other`'s record first differs from `first`'s: `None` when identical.
pub(super) fn parts_at(first: &Run, other: &Run) -> Option<usize> {
    let row = 8 * (first.width + first.nin);
    let k = first.bytes.chunks(row).zip(other.bytes.chunks(row)).position(|(a, b)| a != b);
    match k {
        Some(k) => Some(k),
        None if first.bytes.len() == other.bytes.len() => None,
        None => Some(first.ticks.min(other.ticks)),
    }
}

/// The page for `runs`.
pub(super) fn render(runs: &[Run], title: Option<&str>) -> String {
    let groups = group(runs);
    let title = match title {
        Some(t) => t.to_string(),
        None if groups.len() == 1 => {
            let (plant, rs) = &groups[0];
            format!("{}: {}", info(*plant).title, labels(rs).join(" against "))
        }
        None => format!("Simulation replays: {} plants, {} runs", groups.len(), runs.len()),
    };
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<header class=\"top\"><h1>{}</h1><p class=\"lede\">{} saved run{} of {} plant{}, each checked when this page \
         was written: its trajectory hashes to its fingerprint, and the plant's rule applied to the trajectory gives \
         the verdict shown. The animations and charts replay the recorded trajectories; no physics runs in this \
         page. <a href=\"#claims\">What this page does not claim</a>.</p></header>",
        esc(&title),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        groups.len(),
        if groups.len() == 1 { "" } else { "s" },
    );
    if groups.len() > 1 {
        index(&mut body, &groups);
    }
    let mut data = Vec::new();
    for (plant, rs) in &groups {
        section(&mut body, *plant, rs);
        data.push(plant_data(*plant, rs));
    }
    claims(&mut body, &groups);
    let _ = write!(
        body,
        "<footer><p>Written by plimsoll-host {} <code>sim report</code>. The page is self-contained: no network, no \
         third-party script, no external font or image.</p></footer>",
        esc(env!("CARGO_PKG_VERSION"))
    );
    let data = json!({ "plants": data }).to_string();
    fill(
        TEMPLATE,
        &[
            ("TITLE", esc(&title)),
            ("CSP", csp()),
            ("STYLE", STYLE.to_string()),
            ("BODY", body),
            ("DATA", script_json(&data)),
            ("SCRIPT", SCRIPT.to_string()),
        ],
    )
}

/// JSON made safe inside `<script type="application/json">`: no `<`, `>` or `&`
/// (they only occur inside strings, where the `\u` escapes mean the same).
pub(super) fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

/// The Content-Security-Policy: nothing may load; only this page's script and style run.
pub(super) fn csp() -> String {
    let hash = |s: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s.as_bytes()));
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; base-uri 'none'; form-action 'none'",
        hash(SCRIPT),
        hash(STYLE)
    )
}

/// `template` with each `{{NAME}}` replaced by its value; the values are not scanned.
pub(super) fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find("}}").and_then(|end| values.iter().find(|(k, _)| *k == &after[..end]).map(|kv| (end, kv))) {
            Some((end, (_, v))) => {
                out.push_str(v);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The index: one card per plant.
pub(super) fn index(body: &mut String, groups: &[(PlantName, Vec<&Run>)]) {
    body.push_str("<nav class=\"index\" aria-label=\"Plants\"><h2>Plants</h2><div class=\"cards\">\n");
    for (plant, rs) in groups {
        let i = info(*plant);
        let _ = write!(
            body,
            "<a class=\"card\" href=\"#plant-{p}\"><span class=\"card-title\">{t}</span> <code>{p}</code><ul>",
            p = esc(plant.as_str()),
            t = esc(i.title)
        );
        for (k, (run, label)) in rs.iter().zip(labels(rs)).enumerate() {
            let _ = write!(
                body,
                "<li><span class=\"swatch c{c}\"></span>{l}: <span class=\"{cls}\">{w}</span>, {h}</li>",
                c = k % COLOURS.len(),
                l = esc(&label),
                cls = if run.verdict.passed { "pass" } else { "fail" },
                w = esc(&run.verdict.word()),
                h = esc(&run.headline())
            );
        }
        body.push_str("</ul></a>\n");
    }
    body.push_str("</div></nav>\n");
}

/// One plant's section: task, tiles, replay, charts and the runs in full.
pub(super) fn section(body: &mut String, plant: PlantName, rs: &[&Run]) {
    let i = info(plant);
    let names = labels(rs);
    let _ = write!(
        body,
        "<section class=\"plant\" id=\"plant-{p}\"><h2>{t} <code>{p}</code></h2>\n<p>{task}</p>\n<p class=\"rule\">\
         <strong>How a run is judged.</strong> {rule}</p>\n",
        p = esc(plant.as_str()),
        t = esc(i.title),
        task = esc(i.task),
        rule = esc(i.rule)
    );
    // The tiles: one per run.
    body.push_str("<div class=\"tiles\">");
    for (k, (run, label)) in rs.iter().zip(&names).enumerate() {
        let metrics: Vec<String> = run
            .verdict
            .metrics
            .iter()
            .map(|(n, v)| format!("{} {}", metric_words(n), metric_value(plant, n, *v)))
            .collect();
        let _ = write!(
            body,
            "<div class=\"tile c{c}\"><div class=\"tile-head\"><span class=\"swatch c{c}\"></span>{l}</div>\
             <div class=\"verdict {cls}\">{w}</div><div class=\"headline\">{h}</div>\
             <div class=\"tile-metrics\">{m}</div></div>",
            c = k % COLOURS.len(),
            l = esc(label),
            cls = if run.verdict.passed { "pass" } else { "fail" },
            w = esc(&run.verdict.word()),
            h = esc(&run.headline()),
            m = esc(&metrics.join(", "))
        );
    }
    body.push_str("</div>\n");
    // How the records compare.
    if rs.len() > 1 {
        body.push_str("<ul class=\"compare\">");
        for (run, label) in rs.iter().zip(&names).skip(1) {
            let first = rs[0];
            let line = match parts_at(first, run) {
                None => format!("{} and {}: identical records (the same fingerprint).", esc(&names[0]), esc(label)),
                Some(k) => format!(
                    "{} and {}: the records first differ at tick {k} of {}{}.",
                    esc(&names[0]),
                    esc(label),
                    first.ticks.max(run.ticks),
                    if i.time.unit == "ticks" {
                        String::new()
                    } else {
                        format!(" (t = {} {})", esc(&short(k as f64 * first.h)), esc(i.time.unit))
                    }
                ),
            };
            let _ = write!(body, "<li>{line}</li>");
        }
        body.push_str("</ul>\n");
    }
    // The replay and the charts, drawn by the script.
    let _ = write!(
        body,
        "<div class=\"replay\" data-plant=\"{p}\"><noscript><p class=\"note\">The animation and the charts are drawn \
         by this page's script from the recorded trajectories; everything else on the page is plain text.</p>\
         </noscript></div>\n<h3>Every observation and input against {time}</h3>\n<div class=\"charts\" \
         data-plant=\"{p}\"></div>\n",
        p = esc(plant.as_str()),
        time = esc(i.time.label)
    );
    // Each run in full.
    body.push_str("<div class=\"runs\">");
    for (k, (run, label)) in rs.iter().zip(&names).enumerate() {
        run_card(body, run, label, k);
    }
    body.push_str("</div></section>\n");
}

/// One run in full: verdict, fingerprint, scenario, provenance and source.
pub(super) fn run_card(body: &mut String, run: &Run, label: &str, k: usize) {
    let i = info(run.plant);
    let v = &run.verdict;
    let _ = write!(
        body,
        "<article class=\"run c{c}\"><h3><span class=\"swatch c{c}\"></span>{l} <span class=\"verdict {cls}\">{w}\
         </span></h3><p class=\"headline\">{h}</p><dl>",
        c = k % COLOURS.len(),
        l = esc(label),
        cls = if v.passed { "pass" } else { "fail" },
        w = esc(&v.word()),
        h = esc(&run.headline())
    );
    let mut fact = |term: &str, html: String| {
        let _ = write!(body, "<dt>{}</dt><dd>{html}</dd>", esc(term));
    };
    fact(
        "Fingerprint",
        format!(
            "<code class=\"fp\">{}</code><small>SHA-256 of the recorded trajectory ({} bytes): its identity, not a \
             score</small>",
            esc(&run.fingerprint),
            run.bytes.len()
        ),
    );
    fact("Scenario", esc(&scenario(run)));
    fact(
        "Ticks",
        format!(
            "{} ticks of {} {u}, to {} {u}; {} observation{} and {} input{} a tick",
            run.ticks,
            esc(&js(run.h)),
            esc(&js(run.t_end)),
            run.width,
            if run.width == 1 { "" } else { "s" },
            run.nin,
            if run.nin == 1 { "" } else { "s" },
            u = esc(i.time.unit)
        ),
    );
    if let Some(s) = v.score {
        fact(
            "Score",
            format!(
                "<span title=\"{}\">{}</span>{}",
                esc(&js(s)),
                esc(&short(s)),
                v.floor.map(|f| format!(" (floor {})", esc(&js(f)))).unwrap_or_default()
            ),
        );
    }
    if let Some(fell) = v.fell_at {
        fact(
            "Fell at",
            match fell {
                Some(t) => format!("{} {}", esc(&js(t)), esc(i.time.unit)),
                None => "never (null)".into(),
            },
        );
    }
    fact("Verdict", format!("<span class=\"{}\">{}</span>", if v.passed { "pass" } else { "fail" }, esc(&v.word())));
    fact(
        "Provider and tier",
        format!(
            "{} at the <strong>{}</strong> tier<small>The tier is evidence (configuration, a verified runtime, a \
             startup smoke test), never attestation.</small>",
            esc(&run.provider),
            esc(&run.tier)
        ),
    );
    fact(
        "Run record",
        match &run.record {
            Some(r) => format!("<code class=\"fp\">{}</code>", esc(r)),
            None => "none recorded".into(),
        },
    );
    fact(
        "Environment",
        if run.environment.is_empty() {
            "not stated".into()
        } else {
            format!("<code class=\"fp\">{}</code>", esc(&run.environment))
        },
    );
    fact("Duration", format!("{} ms", run.duration_ms));
    fact("Saved as", format!("<code>{}</code>", esc(run.file_name())));
    body.push_str("</dl>");
    // Metrics, and the final observations where there are few.
    body.push_str("<table class=\"metrics\"><caption>Metrics</caption>");
    for (name, value) in &v.metrics {
        let _ = write!(
            body,
            "<tr><th>{}</th><td title=\"{}\">{}</td></tr>",
            esc(name),
            esc(&value.map_or("null".to_string(), js)),
            esc(&metric_value(run.plant, name, *value))
        );
    }
    body.push_str("</table>");
    if run.width <= 8 {
        let finals: Vec<f64> = run
            .summary
            .get("final")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |l| l.iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect());
        if finals.len() == run.width {
            body.push_str("<table class=\"metrics\"><caption>Final observations</caption>");
            for (c, value) in i.observations.iter().zip(finals) {
                let _ = write!(
                    body,
                    "<tr><th>{}</th><td title=\"{}\">{}</td></tr>",
                    esc(&c.name),
                    esc(&js(value)),
                    esc(&with_unit(value, c.unit))
                );
            }
            body.push_str("</table>");
        }
    }
    let lines = run.source.lines().count();
    let _ = write!(
        body,
        "<details class=\"source\" open><summary>Controller <code>{n}</code> ({lines} line{s})</summary><pre><code>{src}\
         </code></pre></details>",
        n = esc(run.controller_file()),
        s = if lines == 1 { "" } else { "s" },
        src = esc(&run.source)
    );
    let summary = serde_json::to_string_pretty(&run.summary).unwrap_or_default();
    let _ = write!(
        body,
        "<details><summary>The judge's summary, as saved</summary><pre>{}</pre></details>\
         <details><summary>Run it again</summary><pre>{}</pre></details></article>",
        esc(&summary),
        esc(&reproduce(run))
    );
}

/// What the page does not claim.
pub(super) fn claims(body: &mut String, groups: &[(PlantName, Vec<&Run>)]) {
    let stepping: Vec<String> =
        groups.iter().map(|(p, _)| format!("{} ({}): {}", info(*p).title, p, info(*p).stepping)).collect();
    body.push_str("<section class=\"claims\" id=\"claims\"><h2>What this page does not claim</h2><ul>");
    let items = [
        "The isolation tier beside each run is evidence, never attestation: it stands for the provider's \
         configuration plus behavioural tests (a verified runtime, a startup smoke test). Nothing here was attested \
         by hardware."
            .to_string(),
        "A fingerprint is the identity of a trajectory within one build of the plant: two runs with the same \
         fingerprint recorded the same bits. It is not a score, and it says nothing about physical accuracy; another \
         build of the plant, or a controller using another maths library, may record other bits."
            .to_string(),
        format!(
            "Each plant is stepped as it is defined, not as nature would be: {}. That is not a claim about accuracy.",
            stepping.join("; ")
        ),
        "The browser only replays the recorded trajectories: no physics runs in this page. The animations and \
         charts are drawn from the saved bytes; the only derived values are the orbit's angle (the recorded dφ/dτ \
         times the tick, summed) and the double slit's match per tick (the scoring's cosine similarity)."
            .to_string(),
        "A passing score does not rank controllers: two runs that both pass are not ordered here (settling time, \
         overshoot and control effort are not judged beyond each plant's rule)."
            .to_string(),
        "A run is one scenario: passing it says nothing about the plant's other scenarios or parameters.".to_string(),
        "The checks were made when the page was written; the page itself carries no signature, and anyone can edit \
         an HTML file. To check a run, run it again (each run's \u{201c}Run it again\u{201d}) and compare fingerprints."
            .to_string(),
    ];
    for item in items {
        let _ = write!(body, "<li>{}</li>", esc(&item));
    }
    body.push_str("</ul></section>\n");
}

/// The script's data for one plant: its channels, limits, marks and runs.
pub(super) fn plant_data(plant: PlantName, rs: &[&Run]) -> Value {
    let i = info(plant);
    let channel = |c: &Channel, col: usize, input: bool| {
        json!({
            "col": col, "name": c.name, "what": c.what, "unit": c.unit, "scale": c.scale, "shown": c.shown,
            "view": c.view.map(|(lo, hi)| [lo, hi]), "wrap": c.wrap, "input": input, "group": c.group,
        })
    };
    let mut channels: Vec<Value> = i.observations.iter().enumerate().map(|(k, c)| channel(c, k, false)).collect();
    let n = i.observations.len();
    channels.extend(i.inputs.iter().enumerate().map(|(k, c)| channel(c, n + k, true)));
    let (mut all_limits, mut all_marks): (Vec<Limit>, Vec<Mark>) = (Vec::new(), Vec::new());
    for run in rs {
        let (l, m) = limits(run);
        for l in l {
            if !all_limits.contains(&l) {
                all_limits.push(l);
            }
        }
        for m in m {
            if !all_marks.contains(&m) {
                all_marks.push(m);
            }
        }
    }
    let runs: Vec<Value> = rs
        .iter()
        .zip(labels(rs))
        .enumerate()
        .map(|(k, (run, label))| {
            json!({
                "label": label, "colour": COLOURS[k % COLOURS.len()], "h": run.h, "ticks": run.ticks,
                "width": run.width, "nin": run.nin, "params": run.params, "passed": run.verdict.passed,
                "failure": run.verdict.failure, "fell_at": run.verdict.fell_at.flatten(),
                "trajectory": base64::engine::general_purpose::STANDARD.encode(&run.bytes),
            })
        })
        .collect();
    json!({
        "plant": plant.as_str(), "title": i.title,
        "time": { "unit": i.time.unit, "scale": i.time.scale, "shown": i.time.shown, "label": i.time.label },
        "channels": channels,
        "limits": all_limits.iter().map(|l| json!({
            "col": l.col, "kind": l.kind, "lo": l.lo, "hi": l.hi, "label": l.label,
        })).collect::<Vec<_>>(),
        "marks": all_marks.iter().map(|m| json!({ "t0": m.t0, "t1": m.t1, "label": m.label })).collect::<Vec<_>>(),
        "runs": runs,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn run_text_is_escaped_and_the_data_cannot_close_its_script() {
        let evil = "</script><script>alert(1)</script><!-- & \"'";
        let mut doc = cartpole(evil);
        doc["controller"]["name"] = json!("<b>x</b>.js");
        let run = read(&doc).expect("reads");
        let page = render(&[run], Some("a <title>"));
        assert!(page.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!-- &amp; &quot;&#39;"));
        assert!(page.contains("&lt;b&gt;x&lt;/b&gt;.js"));
        assert!(page.contains("<title>a &lt;title&gt;</title>"));
        // Exactly the page's own two script elements, and the data JSON has no '<'.
        assert_eq!(page.matches("<script").count(), 2, "{page}");
        assert_eq!(page.matches("</script>").count(), 2);
        let data = page.split("<script type=\"application/json\" id=\"plimsoll-data\">").nth(1).expect("data");
        let data = data.split("</script>").next().expect("end");
        assert!(!data.contains('<') && !data.contains('>') && !data.contains('&'));
        let parsed: Value = serde_json::from_str(data).expect("data is JSON");
        assert_eq!(parsed["plants"][0]["runs"][0]["label"], "<b>x</b>.js");
    }

    #[test]
    fn the_page_states_the_checked_facts_in_its_html() {
        let run = read(&cartpole("const k = 40;")).expect("reads");
        let fp = run.fingerprint.clone();
        let page = render(&[run], None);
        assert!(page.contains(&format!("<code class=\"fp\">{fp}</code>")));
        assert!(page.contains("balanced for 20 s") && page.contains(">passed<"));
        assert!(page.contains("s1: theta0 0.2 rad, half_length 0.5 m, cart_mass 1 kg"));
        assert!(page.contains("What this page does not claim"));
        assert!(page.contains("never attestation"));
        assert!(page.contains("const k = 40;"));
        assert!(page.contains("plimsoll-host sim run --plant cartpole --controller accepted.js --scenario s1"));
        assert!(!page.contains("{{"), "a placeholder was left");
    }

    #[test]
    fn the_template_keeps_the_script_and_style_the_policy_hashes() {
        for name in ["TITLE", "CSP", "STYLE", "BODY", "DATA", "SCRIPT"] {
            assert_eq!(TEMPLATE.matches(&format!("{{{{{name}}}}}")).count(), 1, "{name}");
        }
        assert!(TEMPLATE.contains("<style>{{STYLE}}</style>"));
        assert!(TEMPLATE.contains("<script>{{SCRIPT}}</script>"));
        assert!(!SCRIPT.contains("</script") && !STYLE.contains("</style"));
        // Nothing in the page's own code reaches for the network.
        for s in [SCRIPT, STYLE, TEMPLATE] {
            assert!(!s.contains("http:") && !s.contains("https:") && !s.contains("url("), "an external reference");
        }
    }

    #[test]
    fn numbers_read_short() {
        assert_eq!(short(0.9077777777777778), "0.9078");
        assert_eq!(short(20.0), "20");
        assert_eq!(short(2081.2040477279634), "2081");
        assert_eq!(short(-0.01824284173812331), "-0.01824");
        assert_eq!(short(2.6493573809726386e-9), "2.649e-9");
        assert_eq!(short(1e-6), "1e-6");
        assert_eq!(short(-0.00001), "-1e-5");
    }
}
