//! `plimsoll-host sim report`: one self-contained replay page for simulation runs
//! saved with `sim run --save`.
//!
//! 1. Each RUN.json is read and checked ([`read_run`]): its trajectory decodes, hashes
//!    to the summary's fingerprint, holds the summary's ticks × (width + nin) values,
//!    matches the plant's interface, and earns the saved verdict under this build's
//!    rules ([`plimsoll_sim::score`]). Anything else is refused, naming the file.
//! 2. The runs are grouped by plant, in the catalogue's order ([`group`]).
//! 3. The page is written ([`render`]): every word and number a reader checks
//!    (verdicts, fingerprints, metrics, parameters, controller sources) is in the HTML
//!    itself; the trajectories travel as JSON data for the inline script, which draws
//!    the animation and the charts from the recorded bytes. Nothing is fetched: the
//!    page's Content-Security-Policy allows only its own script and style, by hash.
//!
//! The template is `page.html` (with `page.css` and `page.js`) beside this file.

mod plants;
mod render;
mod saved;

use render::render;
use saved::{group, read_run};
#[cfg(test)]
mod fixtures;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// The page skeleton: `{{NAME}}` placeholders, filled by [`fill`].
const TEMPLATE: &str = include_str!("page.html");
/// The page's style sheet.
const STYLE: &str = include_str!("page.css");
/// The page's script: it draws the animations and charts from the embedded data.
const SCRIPT: &str = include_str!("page.js");

/// The RUN.json layout this build reads (`sim run --save` writes it).
const VERSION: u64 = 1;

/// Arguments of `sim report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Runs saved with `sim run --save`.
    #[arg(value_name = "RUN.json", required = true)]
    runs: Vec<PathBuf>,
    /// The page to write.
    #[arg(short = 'o', long = "out", value_name = "PAGE.html")]
    out: PathBuf,
    /// The page's title (default: the plant and its runs, or the plants).
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
}

/// Runs `plimsoll-host sim report`.
///
/// # Errors
///
/// A run that cannot be read or fails a check (named by its file), or a page that
/// cannot be written.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let mut runs = Vec::with_capacity(args.runs.len());
    for path in &args.runs {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        runs.push(read_run(&path.display().to_string(), &bytes)?);
    }
    let page = render(&runs, args.title.as_deref());
    std::fs::write(&args.out, &page).with_context(|| format!("writing {}", args.out.display()))?;
    let plants = group(&runs).len();
    println!(
        "wrote {} ({} run{}, {} plant{}, {} bytes)",
        args.out.display(),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        plants,
        if plants == 1 { "" } else { "s" },
        page.len()
    );
    Ok(ExitCode::SUCCESS)
}
