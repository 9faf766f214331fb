//! `plimsoll-host sim report`: a replay page written from runs saved by `sim run
//! --save`, rendered in headless Chromium. Chromium is a prerequisite (`.ci/install`
//! installs it): without it these tests fail, they do not skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{err, exec, out};

/// The cart-pole's example controllers.
const CARTPOLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sims/cartpole");

/// How long one Chromium render may take.
const CHROMIUM_BUDGET: Duration = Duration::from_secs(120);

/// A fresh scratch directory under the target directory.
fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("{}/{}-{name}", env!("CARGO_TARGET_TMPDIR"), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Judges `controller` (a cart-pole example) on the embedded default, saving the
/// run in `dir`; returns the saved file and the printed summary.
fn save(dir: &Path, controller: &str) -> (PathBuf, serde_json::Value) {
    save_run(dir, "cartpole", &format!("{CARTPOLE}/{controller}.js"), controller)
}

/// Judges the controller at `source` on `plant`, saving the run as `dir/name.json`.
fn save_run(dir: &Path, plant: &str, source: &str, name: &str) -> (PathBuf, serde_json::Value) {
    let saved = dir.join(format!("{name}.json"));
    let path = saved.to_str().expect("UTF-8 path");
    let o = exec(&["sim", "run", "--plant", plant, "--controller", source, "--save", path], b"");
    assert_eq!(o.status.code(), Some(0), "sim run {plant} {name}: {}", err(&o));
    let text = out(&o);
    let last = text.lines().last().expect("a summary line");
    (saved, serde_json::from_str(last).expect("the summary is JSON"))
}

/// Runs Chromium headless on `page` with `extra` flags and a new profile (in
/// `profile`); returns what it printed on standard output. Its output goes to files,
/// so a large DOM cannot fill a pipe nobody reads.
///
/// # Panics
///
/// When Chromium is missing (naming `.ci/install`), fails or overruns its budget.
fn chromium(page: &Path, profile: &Path, extra: &[String]) -> String {
    std::fs::create_dir_all(profile).expect("profile directory");
    let stdout = profile.with_extension("stdout");
    let stderr = profile.with_extension("stderr");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("chromium could not be started ({e}): it is a prerequisite, run .ci/install"));
    let started = Instant::now();
    let status = loop {
        match child.try_wait().expect("wait for chromium") {
            Some(status) => break status,
            None if started.elapsed() > CHROMIUM_BUDGET => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish rendering {} in {CHROMIUM_BUDGET:?}", page.display());
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    assert!(status.success(), "chromium failed ({status}): {}", read(&stderr));
    read(&stdout)
}

/// A screenshot's pixels as RGB triples, with its width and height.
fn pixels(png_bytes: &[u8]) -> (Vec<[u8; 3]>, u32, u32) {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG that fits in memory")];
    let info = reader.next_frame(&mut buf).expect("the PNG's pixels");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "a colour screenshot, not {:?}", info.color_type);
    let px = buf[..info.buffer_size()].chunks_exact(channels).map(|p| [p[0], p[1], p[2]]).collect();
    (px, info.width, info.height)
}

/// Pixels within a small distance of `colour`.
fn near(px: &[[u8; 3]], colour: [u8; 3]) -> usize {
    px.iter().filter(|p| p.iter().zip(colour).map(|(a, b)| a.abs_diff(b) as u32).sum::<u32>() <= 30).count()
}

#[test]
fn the_cartpole_page_renders_both_runs_their_fingerprints_and_verdicts() {
    let dir = fresh("sim-report");
    let (accepted, accepted_summary) = save(&dir, "accepted");
    let (draft, draft_summary) = save(&dir, "draft");
    let page = dir.join("page.html");
    let o = exec(
        &[
            "sim",
            "report",
            draft.to_str().expect("UTF-8"),
            accepted.to_str().expect("UTF-8"),
            "-o",
            page.to_str().expect("UTF-8"),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "sim report: {}", err(&o));
    assert!(out(&o).starts_with(&format!("wrote {} (2 runs, 1 plant, ", page.display())), "{}", out(&o));
    let fingerprints = [&draft_summary, &accepted_summary].map(|s| s["fingerprint"].as_str().expect("fp").to_string());
    assert_ne!(fingerprints[0], fingerprints[1]);

    // The page as written: the text is in the HTML, and nothing is fetched.
    let html = std::fs::read_to_string(&page).expect("the page");
    for fp in &fingerprints {
        assert!(html.contains(fp.as_str()), "the page lacks {fp}");
    }
    assert!(html.contains("Content-Security-Policy") && html.contains("default-src 'none'"));
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "an external reference");

    // The screenshot is a drawn page: not one colour, and both runs' colours appear.
    let shot = dir.join("page.png");
    chromium(
        &page,
        &dir.join("profile-shot"),
        &["--window-size=1280,2000".into(), format!("--screenshot={}", shot.display())],
    );
    let (px, width, height) = pixels(&std::fs::read(&shot).expect("the screenshot"));
    assert_eq!((width, height), (1280, 2000));
    let mut counts = std::collections::HashMap::<[u8; 3], usize>::new();
    for p in &px {
        *counts.entry(*p).or_default() += 1;
    }
    let background = counts.iter().max_by_key(|(_, n)| **n).map(|(c, _)| *c).expect("pixels");
    let differ = px.len() - near(&px, background);
    assert!(differ * 100 > px.len() * 5, "only {differ} of {} pixels differ from the background", px.len());
    let mut distinct = std::collections::HashSet::new();
    for (c, n) in &counts {
        if *n >= 50 {
            distinct.insert(c.map(|v| v >> 4));
        }
    }
    assert!(distinct.len() >= 8, "only {} distinct colours: {distinct:?}", distinct.len());
    let (blue, orange) = (near(&px, [0x2a, 0x78, 0xd6]), near(&px, [0xeb, 0x68, 0x34]));
    assert!(blue > 300 && orange > 300, "the runs' colours are barely drawn: blue {blue}, orange {orange}");

    // The DOM after the script ran: it drew without error, and the text shows both
    // fingerprints and both verdicts.
    let dom = chromium(&page, &dir.join("profile-dom"), &["--dump-dom".into()]);
    assert!(dom.contains("data-replay=\"ready\""), "the replay script did not finish");
    assert!(!dom.contains("id=\"replay-error\""), "the replay script reported an error");
    for fp in &fingerprints {
        assert!(dom.contains(&format!("<code class=\"fp\">{fp}</code>")), "the DOM lacks {fp}");
    }
    assert!(dom.contains("failed (fell)") && dom.contains("fell at 5.96 s"), "the draft's verdict");
    assert!(dom.contains(">passed<") && dom.contains("balanced for 20 s"), "the accepted verdict");
    assert!(dom.contains("What this page does not claim"));
    assert_eq!(dom.matches("<canvas").count(), 1, "one animation");
    assert_eq!(dom.matches("<div class=\"chart\">").count(), 5, "a chart per observation and input");
}

#[test]
fn a_run_changed_after_it_was_saved_is_refused_naming_its_file() {
    let dir = fresh("sim-report-refused");
    let (accepted, _) = save(&dir, "accepted");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&accepted).expect("saved run")).expect("saved run is JSON");
    // One character changed: other bytes under the saved fingerprint.
    let b64 = doc["trajectory"].as_str().expect("trajectory").replacen('A', "B", 1);
    doc["trajectory"] = serde_json::Value::from(b64);
    let changed = dir.join("changed.json");
    std::fs::write(&changed, doc.to_string()).expect("write");
    let page = dir.join("page.html");
    let o = exec(&["sim", "report", changed.to_str().expect("UTF-8"), "-o", page.to_str().expect("UTF-8")], b"");
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let e = err(&o);
    assert!(e.starts_with(&format!("plimsoll-host: {}: the trajectory hashes to ", changed.display())), "{e}");
    assert!(!page.exists(), "a page was written for a changed run");
}

#[test]
fn every_plant_draws_on_one_page_behind_an_index() {
    let dir = fresh("sim-report-all");
    // A controller per plant that answers the same inputs every tick: whatever it
    // earns, its trajectory drives that plant's animation and charts.
    let plants = [
        ("cartpole", "0"),
        ("cartpole-swingup", "5"),
        ("shower", "0.5"),
        ("ship", "0.2"),
        ("buck", "0.42"),
        ("blackhole", "0 0.001"),
        ("rocket", "1"),
        ("satclock", "-5e-9"),
        ("slits", &["0.3"; 16].join(" ")),
    ];
    let mut runs = Vec::new();
    for (plant, answer) in plants {
        let source = dir.join(format!("{plant}.js"));
        std::fs::write(
            &source,
            format!(
                "require('readline').createInterface({{ input: process.stdin }})\n  .on('line', () => \
                 process.stdout.write('{answer}\\n'));\n"
            ),
        )
        .expect("write controller");
        let (saved, _) = save_run(&dir, plant, source.to_str().expect("UTF-8"), plant);
        runs.push(saved.to_str().expect("UTF-8").to_string());
    }
    let page = dir.join("page.html");
    let mut args: Vec<&str> = vec!["sim", "report"];
    args.extend(runs.iter().map(String::as_str));
    args.extend(["-o", page.to_str().expect("UTF-8"), "--title", "Every plant"]);
    let o = exec(&args, b"");
    assert_eq!(o.status.code(), Some(0), "sim report: {}", err(&o));
    assert!(out(&o).starts_with(&format!("wrote {} (9 runs, 9 plants, ", page.display())), "{}", out(&o));

    let dom = chromium(&page, &dir.join("profile-dom"), &["--window-size=1280,2000".into(), "--dump-dom".into()]);
    assert!(dom.contains("data-replay=\"ready\""), "the replay script did not finish");
    assert!(!dom.contains("id=\"replay-error\""), "the replay script reported an error");
    assert!(dom.contains("<title>Every plant</title>"));
    assert_eq!(dom.matches("<a class=\"card\" href=\"#plant-").count(), 9, "an index card per plant");
    assert_eq!(dom.matches("<canvas").count(), 9, "an animation per plant");
    for (plant, _) in plants {
        assert!(dom.contains(&format!("<section class=\"plant\" id=\"plant-{plant}\">")), "no section for {plant}");
    }
}
