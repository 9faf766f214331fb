//! The judge's command line, the same wherever it runs: the `plimsoll-judge`
//! program in the sandbox image, a project step on the wasm provider, and
//! `plimsoll-host sim run` (which adds only `--daemon`).

use std::time::Duration;

use crate::catalogue::{ModelName, PlantName};
use crate::judge::{DEFAULT_ANSWER, Trial};

/// The judge's usage text.
pub const USAGE: &str = "usage: plimsoll-judge --plant PLANT --controller FILE [--scenario NAME | --params P0,P1,P2]
                      [--tick H] [--stop T] [--answer-ms MS] [--jac] [--out FILE]
       plimsoll-judge table --model MODEL --params FILE --end T --step H [--out FILE]
       plimsoll-judge plants";

/// The longest per-answer deadline a run may set.
pub const MAX_ANSWER_MS: u64 = 60_000;

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Judge one controller.
    Run(Trial),
    /// Run a module table.
    Table(TableArgs),
    /// List the plants and models with their defaults.
    Plants,
    /// Print the usage.
    Help,
}

/// `plimsoll-judge table`: one fresh model instance per row of a parameter file.
#[derive(Clone, Debug, PartialEq)]
pub struct TableArgs {
    /// The model.
    pub model: ModelName,
    /// The parameter file: one row per line, values separated by spaces.
    pub params: String,
    /// The horizon.
    pub end: f64,
    /// The step.
    pub step: f64,
    /// Where the PLSM record goes.
    pub out: String,
}

/// A relative path with no empty, `.` or `..` segment.
fn clean_path(flag: &str, p: &str) -> Result<String, String> {
    if p.is_empty() || p.starts_with('/') || p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return Err(format!("{flag} must be a relative path inside the work directory, not {p:?}"));
    }
    Ok(p.to_string())
}

/// A finite number > 0.
fn positive(flag: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{flag} must be a finite number greater than 0, not {:?}", crate::controller::shorten(v))),
    }
}

/// Splits `--flag=value` and `--flag value`, in order.
struct Flags<'a> {
    args: std::slice::Iter<'a, String>,
}

impl<'a> Flags<'a> {
    fn next(&mut self) -> Option<Result<(&'a str, Option<&'a str>), String>> {
        let arg = self.args.next()?;
        let Some(flag) = arg.strip_prefix("--") else {
            return Some(Err(format!("unexpected argument {:?}\n{USAGE}", crate::controller::shorten(arg))));
        };
        if let Some((name, value)) = flag.split_once('=') {
            return Some(Ok((name, Some(value))));
        }
        Some(Ok((flag, None)))
    }

    fn value(&mut self, name: &str, inline: Option<&'a str>) -> Result<&'a str, String> {
        match inline {
            Some(v) => Ok(v),
            None => self.args.next().map(String::as_str).ok_or_else(|| format!("--{name} needs a value\n{USAGE}")),
        }
    }
}

/// Reads the judge's arguments (without the program name).
///
/// # Errors
///
/// A usage text naming the first problem (the judge exits 2 with it).
pub fn parse(args: &[String]) -> Result<Command, String> {
    match args.first().map(String::as_str) {
        Some("table") => return table(&args[1..]).map(Command::Table),
        Some("plants") if args.len() == 1 => return Ok(Command::Plants),
        Some("--help" | "-h" | "help") => return Ok(Command::Help),
        None => return Err(USAGE.to_string()),
        _ => {}
    }
    let mut flags = Flags { args: args.iter() };
    let (mut plant, mut controller, mut scenario, mut params) = (None, None, None, None);
    let (mut tick, mut stop, mut answer, mut jacobian, mut out) = (None, None, DEFAULT_ANSWER, false, None);
    while let Some(next) = flags.next() {
        let (name, inline) = next?;
        match name {
            "plant" => plant = Some(PlantName::parse(flags.value(name, inline)?)?),
            "controller" => controller = Some(clean_path("--controller", flags.value(name, inline)?)?),
            "scenario" => scenario = Some(flags.value(name, inline)?.to_string()),
            "params" => params = Some(three(flags.value(name, inline)?)?),
            "tick" => tick = Some(positive("--tick", flags.value(name, inline)?)?),
            "stop" => stop = Some(positive("--stop", flags.value(name, inline)?)?),
            "answer-ms" => {
                let v = flags.value(name, inline)?;
                answer = match v.parse::<u64>() {
                    Ok(ms) if (1..=MAX_ANSWER_MS).contains(&ms) => Duration::from_millis(ms),
                    _ => {
                        return Err(format!(
                            "--answer-ms must be a whole number of milliseconds from 1 to {MAX_ANSWER_MS}, not {:?}",
                            crate::controller::shorten(v)
                        ));
                    }
                }
            }
            "jac" if inline.is_none() => jacobian = true,
            "out" => out = Some(clean_path("--out", flags.value(name, inline)?)?),
            other => return Err(format!("unknown option --{}\n{USAGE}", crate::controller::shorten(other))),
        }
    }
    let plant = plant.ok_or_else(|| format!("--plant is required\n{USAGE}"))?;
    let controller = controller.ok_or_else(|| format!("--controller is required\n{USAGE}"))?;
    let (scenario, params) = match (scenario, params) {
        (Some(_), Some(_)) => return Err("give either --scenario or --params, not both".to_string()),
        (Some(name), None) => {
            let sc = plant.scenario(&name)?;
            (Some(sc.name), sc.params)
        }
        (None, Some(p)) => (None, p),
        (None, None) => {
            let sc = plant.scenarios()[0];
            (Some(sc.name), sc.params)
        }
    };
    let (default_tick, default_stop) = plant.timing();
    Ok(Command::Run(Trial {
        plant,
        scenario,
        params,
        tick: tick.unwrap_or(default_tick),
        stop: stop.unwrap_or(default_stop),
        answer,
        jacobian,
        controller,
        out: out.unwrap_or_else(|| "trajectory.bin".to_string()),
    }))
}

/// Three finite numbers separated by commas.
fn three(v: &str) -> Result<[f64; 3], String> {
    let bad = || {
        format!(
            "--params takes three finite numbers separated by commas, such as 0.2,0.5,1.0; not {:?}",
            crate::controller::shorten(v)
        )
    };
    let values: Vec<f64> =
        v.split(',').map(|s| s.trim().parse::<f64>()).collect::<Result<_, _>>().map_err(|_| bad())?;
    let p: [f64; 3] = values.try_into().map_err(|_| bad())?;
    if p.iter().all(|x| x.is_finite()) { Ok(p) } else { Err(bad()) }
}

fn table(args: &[String]) -> Result<TableArgs, String> {
    let mut flags = Flags { args: args.iter() };
    let (mut model, mut params, mut end, mut step, mut out) = (None, None, None, None, None);
    while let Some(next) = flags.next() {
        let (name, inline) = next?;
        match name {
            "model" => model = Some(ModelName::parse(flags.value(name, inline)?)?),
            "params" => params = Some(clean_path("--params", flags.value(name, inline)?)?),
            "end" => end = Some(positive("--end", flags.value(name, inline)?)?),
            "step" => step = Some(positive("--step", flags.value(name, inline)?)?),
            "out" => out = Some(clean_path("--out", flags.value(name, inline)?)?),
            other => return Err(format!("unknown option --{}\n{USAGE}", crate::controller::shorten(other))),
        }
    }
    fn need<T>(v: Option<T>, flag: &str) -> Result<T, String> {
        v.ok_or_else(|| format!("table needs {flag}\n{USAGE}"))
    }
    Ok(TableArgs {
        model: need(model, "--model")?,
        params: need(params, "--params")?,
        end: need(end, "--end")?,
        step: need(step, "--step")?,
        out: out.unwrap_or_else(|| "results.bin".to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn run(s: &str) -> Result<Trial, String> {
        match parse(&args(s))? {
            Command::Run(t) => Ok(t),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn defaults_come_from_the_plant_and_its_first_scenario() {
        let t = run("--plant cartpole --controller c.js").expect("parses");
        assert_eq!((t.tick, t.stop, t.params, t.scenario), (0.01, 20.0, [0.2, 0.5, 1.0], Some("s1")));
        assert_eq!((t.out.as_str(), t.answer, t.jacobian), ("trajectory.bin", DEFAULT_ANSWER, false));
        let t = run("--plant=buck --controller=c.wasm --scenario s3 --tick 2e-5 --stop 0.01 --jac --out r/s3.bin")
            .expect("parses");
        assert_eq!((t.params, t.tick, t.stop, t.jacobian), ([16.0, 2.0, 0.012], 2e-5, 0.01, true));
        let t = run("--plant shower --controller c.js --params 3,55,30 --answer-ms 500").expect("parses");
        assert_eq!((t.params, t.scenario, t.answer), ([3.0, 55.0, 30.0], None, Duration::from_millis(500)));
    }

    #[test]
    fn bad_arguments_are_refused_with_their_reason() {
        let cases = [
            ("--plant pendulum --controller c.js", "unknown plant \"pendulum\": the plants are"),
            ("--plant cartpole", "--controller is required"),
            ("--controller c.js", "--plant is required"),
            ("--plant cartpole --controller c.js --params 1,2", "--params takes three finite numbers"),
            ("--plant cartpole --controller c.js --params 1,2,inf", "--params takes three finite numbers"),
            ("--plant cartpole --controller c.js --params 1,2,3 --scenario s1", "give either --scenario or --params"),
            ("--plant cartpole --controller c.js --tick 0", "--tick must be a finite number greater than 0, not \"0\""),
            ("--plant cartpole --controller c.js --tick -1", "--tick must be a finite number greater than 0"),
            ("--plant cartpole --controller c.js --stop NaN", "--stop must be a finite number greater than 0"),
            ("--plant cartpole --controller c.js --stop inf", "--stop must be a finite number greater than 0"),
            ("--plant cartpole --controller c.js --answer-ms 0", "--answer-ms must be a whole number"),
            ("--plant cartpole --controller ../c.js", "--controller must be a relative path"),
            ("--plant cartpole --controller c.js --out /etc/x", "--out must be a relative path"),
            ("--plant cartpole --controller c.js --frob", "unknown option --frob"),
            ("--plant cartpole --controller c.js extra", "unexpected argument \"extra\""),
            ("--plant cartpole --controller", "--controller needs a value"),
            ("--plant buck --controller c.js --scenario s9", "buck has no scenario \"s9\""),
        ];
        for (line, want) in cases {
            let e = run(line).expect_err(line);
            assert!(e.starts_with(want), "{line}: {e}");
        }
    }

    #[test]
    fn table_arguments_are_read() {
        let Ok(Command::Table(t)) = parse(&args("table --model vanderpol --params params.txt --end 20 --step 0.01"))
        else {
            panic!("table");
        };
        assert_eq!((t.model, t.end, t.step, t.out.as_str()), (ModelName::VanDerPol, 20.0, 0.01, "results.bin"));
        let e = parse(&args("table --model nosuch --params p --end 1 --step 1")).expect_err("unknown");
        assert!(e.starts_with("unknown simulator \"nosuch\""), "{e}");
        let e = parse(&args("table --model lorenz --params p --end 1")).expect_err("no step");
        assert!(e.starts_with("table needs --step"), "{e}");
    }
}
