//! What the page knows about each plant: its channels, units, views and limits.

use std::f64::consts::{FRAC_PI_2, PI};

use plimsoll_sim::PlantName;

use super::render::*;
use super::saved::*;

/// A recorded column: an observation or an input.
#[derive(Clone, Debug)]
pub(super) struct Channel {
    /// Its name in the plant's README.
    pub(super) name: String,
    /// What it is.
    pub(super) what: &'static str,
    /// The recorded unit (empty for none).
    pub(super) unit: &'static str,
    /// The charted value is the recorded one times this.
    pub(super) scale: f64,
    /// The charted unit.
    pub(super) shown: &'static str,
    /// The charted range at most (in charted units); values beyond are drawn at the edge.
    pub(super) view: Option<(f64, f64)>,
    /// Charted wrapped to (-180, 180].
    pub(super) wrap: bool,
    /// Drawn as a group, not one chart per column (the slits' screen and target).
    pub(super) group: Option<&'static str>,
}

/// A channel in its recorded unit.
pub(super) fn ch(name: &str, what: &'static str, unit: &'static str) -> Channel {
    Channel { name: name.to_string(), what, unit, scale: 1.0, shown: unit, view: None, wrap: false, group: None }
}

impl Channel {
    /// Charted in another unit.
    pub(super) fn shown(mut self, scale: f64, unit: &'static str) -> Channel {
        self.scale = scale;
        self.shown = unit;
        self
    }

    /// Charted over at most `lo..hi`.
    pub(super) fn view(mut self, lo: f64, hi: f64) -> Channel {
        self.view = Some((lo, hi));
        self
    }
}

/// The time axis.
#[derive(Clone, Copy, Debug)]
pub(super) struct Time {
    /// The plant's time unit (of h and t_end).
    pub(super) unit: &'static str,
    /// Charted time is recorded time times this.
    pub(super) scale: f64,
    /// The charted unit.
    pub(super) shown: &'static str,
    /// What the time is.
    pub(super) label: &'static str,
}

/// A plant as the page describes it.
#[derive(Debug)]
pub(super) struct Info {
    /// A heading.
    pub(super) title: &'static str,
    /// The task, in a sentence.
    pub(super) task: &'static str,
    /// How the run is judged.
    pub(super) rule: &'static str,
    /// p0, p1, p2: name and unit.
    pub(super) params: [(&'static str, &'static str); 3],
    /// The time axis.
    pub(super) time: Time,
    /// How the plant is stepped.
    pub(super) stepping: &'static str,
    /// The observations.
    pub(super) observations: Vec<Channel>,
    /// The inputs.
    pub(super) inputs: Vec<Channel>,
}

/// Observations and inputs per tick.
pub(super) fn interface(plant: PlantName) -> (usize, usize) {
    let i = info(plant);
    (i.observations.len(), i.inputs.len())
}

/// Degrees per radian.
pub(super) const DEG: f64 = 180.0 / PI;

pub(super) const SECONDS: Time = Time { unit: "s", scale: 1.0, shown: "s", label: "time" };

/// The page's facts about `plant`.
pub(super) fn info(plant: PlantName) -> Info {
    let cart_pole = |swing: bool| {
        vec![
            ch("x", "cart position", "m").view(-3.0, 3.0),
            ch("v", "cart velocity", "m/s").view(-8.0, 8.0),
            Channel {
                wrap: swing,
                ..ch("theta", "pole angle from upright", "rad").shown(DEG, "°").view(-180.0, 180.0)
            },
            ch("omega", "pole angular velocity", "rad/s").shown(DEG, "°/s").view(-1500.0, 1500.0),
        ]
    };
    let cart_params = [("theta0", "rad"), ("half_length", "m"), ("cart_mass", "kg")];
    let cart_input = vec![ch("force", "horizontal force on the cart", "N").view(-25.0, 25.0)];
    let cart_stepping = "forward Euler at a fixed 1 ms substep, ten substeps a tick";
    match plant {
        PlantName::CartPole => Info {
            title: "Cart-pole balance",
            task: "Keep the pole up from a small start angle for the whole run, pushing the cart with a force of \
                   at most 20 N.",
            rule: "The pole has fallen at the first tick whose recorded angle is past 90 degrees; a run passes if \
                   it never falls. There is no score.",
            params: cart_params,
            time: SECONDS,
            stepping: cart_stepping,
            observations: cart_pole(false),
            inputs: cart_input,
        },
        PlantName::CartPoleSwingUp => Info {
            title: "Cart-pole swing-up",
            task: "Swing the hanging pole up and hold it upright, keeping the cart on a 2.4 m track.",
            rule: "Score 0 once the cart leaves the track (|x| > 2.4 m); otherwise 1 − (the start of the final \
                   unbroken upright stretch, cos θ > 0.98) / ticks. The floor is 0.85.",
            params: cart_params,
            time: SECONDS,
            stepping: cart_stepping,
            observations: cart_pole(true),
            inputs: cart_input,
        },
        PlantName::Shower => Info {
            title: "Shower temperature",
            task: "Bring the shower head into the comfort band and hold it there through a pipe delay and a \
                   toilet flush that drops the cold pressure, without ever scalding.",
            rule: "Above 43 °C at the head is a scald and fails the run. Score: the fraction of ticks with the \
                   head in the comfort band 37–39 °C. The floor is 0.5.",
            params: [("pipe_delay", "s"), ("t_hot", "°C"), ("t_flush", "s")],
            time: SECONDS,
            stepping: "forward Euler at a fixed 10 ms substep",
            observations: vec![
                ch("t_head", "head temperature", "°C"),
                ch("valve", "valve position (hot fraction)", ""),
            ],
            inputs: vec![ch("hot_fraction", "commanded hot fraction", "")],
        },
        PlantName::Ship => Info {
            title: "Ship heading",
            task: "Turn the ship to the ordered course, 30 degrees to starboard, and hold it through waves with a \
                   rudder that lags and is rate-limited.",
            rule: "A heading past 45° is an overshoot and fails. Score: the fraction of ticks within 2° of the \
                   order, counted from the first tick on course. The floor is 0.8.",
            params: [("gain", "1/s"), ("time_constant", "s"), ("wave", "rad/s²")],
            time: SECONDS,
            stepping: "forward Euler at a fixed 50 ms substep",
            observations: vec![
                ch("heading", "heading ψ", "rad").shown(DEG, "°"),
                ch("yaw_rate", "yaw rate", "rad/s").shown(DEG, "°/s"),
                ch("rudder", "rudder angle reached", "rad").shown(DEG, "°"),
            ],
            inputs: vec![ch("rudder_command", "commanded rudder angle", "rad").shown(DEG, "°").view(-60.0, 60.0)],
        },
        PlantName::Buck => Info {
            title: "Buck converter",
            task: "Regulate a step-down converter's output to 5 V from start-up and through a load step (the \
                   load halves), by setting the duty cycle.",
            rule: "Any current past 10 A or voltage past 6 V scores 0. Otherwise the score is the fraction of ticks \
                   from 2 ms on with the output within 0.1 V of 5 V. The floor is 0.6.",
            params: [("v_in", "V"), ("r_load", "Ω"), ("t_step", "s")],
            time: Time { unit: "s", scale: 1000.0, shown: "ms", label: "time" },
            stepping: "forward Euler at a fixed 1 µs substep (an averaged model, no switching ripple)",
            observations: vec![ch("v", "output voltage", "V"), ch("i", "inductor current", "A")],
            inputs: vec![ch("duty", "duty cycle", "").view(-0.5, 1.5)],
        },
        PlantName::BlackHole => Info {
            title: "Black-hole orbit",
            task: "Hold a circular orbit at the target radius, inside the innermost stable circular orbit (r = 6), \
                   after an outward kick, with radial and tangential thrust.",
            rule: "Below the photon sphere (r < 3) the probe is captured; above twice the target it is lost; \
                   either fails. Score: the fraction of ticks with r within 1 % of the target. The floor is 0.9.",
            params: [("r_target", "GM/c²"), ("v0", "c"), ("a_max", "c⁴/GM")],
            time: Time { unit: "τ", scale: 1.0, shown: "τ", label: "proper time τ, in GM/c³" },
            stepping: "forward Euler at a fixed substep of 0.001 in proper time",
            observations: vec![
                ch("r", "radius", "GM/c²"),
                ch("v", "radial speed dr/dτ", "c"),
                ch("omega", "angular speed dφ/dτ", "rad/τ"),
                ch("t", "far-away (coordinate) time", "GM/c³"),
                ch("fuel", "fuel spent, ∫(|a_r| + |a_phi|) dτ", "c"),
                ch("r_target", "the target radius (p0, echoed)", "GM/c²"),
            ],
            inputs: vec![
                ch("a_r", "radial proper acceleration", "c⁴/GM"),
                ch("a_phi", "tangential proper acceleration", "c⁴/GM"),
            ],
        },
        PlantName::Rocket => Info {
            title: "Relativistic rocket",
            task: "Fly out and come home when Earth's clock reads the ordered date, with a limited engine and a \
                   limited tank (the twin paradox).",
            rule: "Home is back within 0.001 light-years of Earth after leaving. Score: 1 − |Earth's date at \
                   arrival − the order| / the order, 0 if never home. The floor is 0.95.",
            params: [("t_target", "yr"), ("fuel_budget", "rapidity"), ("a_max", "c/yr")],
            time: Time { unit: "yr", scale: 1.0, shown: "yr", label: "the ship's proper time" },
            stepping: "forward Euler at a fixed substep of 0.005 years of proper time",
            observations: vec![
                ch("x", "distance from Earth", "ly"),
                ch("beta", "speed as a fraction of c", "c"),
                ch("t", "Earth's clock", "yr"),
                ch("time", "the ship's clock (proper time)", "yr"),
                ch("fuel", "fuel spent, ∫|a| dτ", "rapidity"),
                ch("t_target", "the ordered date (p0, echoed)", "yr"),
            ],
            inputs: vec![ch("acceleration", "proper acceleration", "c/yr")],
        },
        PlantName::SatClock => Info {
            title: "Satellite clock",
            task: "Steer a navigation satellite's clock, which runs fast, through a measurement that reaches the \
                   ground late, for one day.",
            rule: "An error past 1 µs as the ground records it (300 m of ranging error) is unhealthy and fails. \
                   Score: the fraction of the second half of the day within 100 ns. The floor is 0.9.",
            params: [("eccentricity", ""), ("y0", "s/s"), ("delay", "s")],
            time: Time { unit: "s", scale: 1.0 / 3600.0, shown: "h", label: "time" },
            stepping: "forward Euler at a fixed 3 s substep",
            observations: vec![
                ch("measured_error", "clock error as the ground records it", "s").shown(1e6, "µs"),
                ch("time", "the plant's time", "s").shown(1.0 / 3600.0, "h"),
            ],
            inputs: vec![ch("frequency_correction", "fractional frequency correction", "s/s").shown(1e9, "ns/s")],
        },
        PlantName::Slits => {
            let screen = (0..64).map(|j| Channel {
                group: Some("screen"),
                ..ch(&format!("intensity_{j}"), "screen intensity over its maximum", "")
            });
            let target = (0..64).map(|j| Channel {
                group: Some("target"),
                ..ch(&format!("target_{j}"), "target over its maximum", "")
            });
            Info {
                title: "Double slit",
                task: "Set sixteen mask phases so that the 64-point screen pattern matches the target, despite a \
                       hidden phase defect in every cell.",
                rule: "The match is the cosine similarity of the screen pattern and the target. Score: the final \
                       tick's match. The floor is 0.95.",
                params: [("target_family", ""), ("target_offset", "wavelengths"), ("phase_error", "rad")],
                time: Time { unit: "ticks", scale: 1.0, shown: "tick", label: "tick" },
                stepping: "no integration: each tick computes the field on the screen from the phases",
                observations: screen.chain(target).collect(),
                inputs: (0..16).map(|n| ch(&format!("phase_{n}"), "cell phase", "rad")).collect(),
            }
        }
    }
}

/// A line or band drawn on a chart, in the channel's recorded unit.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Limit {
    /// The column (observations first, then inputs).
    pub(super) col: usize,
    /// `limit` (red line), `band` (green band lo..hi), `target` (green dashed) or
    /// `clamp` (grey dashed: the plant clamps the input there).
    pub(super) kind: &'static str,
    /// The line, or the band's low edge.
    pub(super) lo: f64,
    /// The band's high edge (the line again for a line).
    pub(super) hi: f64,
    /// Its label (may be empty).
    pub(super) label: String,
}

/// A time mark on every chart, in the plant's time unit: a line (`t1` none) or a span.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Mark {
    /// Where it starts.
    pub(super) t0: f64,
    /// Where it ends.
    pub(super) t1: Option<f64>,
    /// Its label.
    pub(super) label: String,
}

/// A line.
pub(super) fn line(col: usize, kind: &'static str, at: f64, label: &str) -> Limit {
    Limit { col, kind, lo: at, hi: at, label: label.to_string() }
}

/// A band.
pub(super) fn band(col: usize, lo: f64, hi: f64, label: &str) -> Limit {
    Limit { col, kind: "band", lo, hi, label: label.to_string() }
}

/// The limits the scoring and the plant have for `run`, and its time marks.
pub(super) fn limits(run: &Run) -> (Vec<Limit>, Vec<Mark>) {
    let [p0, p1, p2] = run.params;
    let upright = 0.98f64.acos();
    let force = |col| vec![line(col, "clamp", 20.0, "clamped at ±20 N"), line(col, "clamp", -20.0, "")];
    match run.plant {
        PlantName::CartPole => {
            let mut l = vec![line(2, "limit", FRAC_PI_2, "fallen past 90°"), line(2, "limit", -FRAC_PI_2, "")];
            l.extend(force(4));
            (l, vec![])
        }
        PlantName::CartPoleSwingUp => {
            let mut l = vec![
                line(0, "limit", 2.4, "off the track, |x| > 2.4 m"),
                line(0, "limit", -2.4, ""),
                band(2, -upright, upright, "upright, cos θ > 0.98"),
            ];
            l.extend(force(4));
            (l, vec![])
        }
        PlantName::Shower => (
            vec![
                band(0, 37.0, 39.0, "comfort band 37–39 °C"),
                line(0, "limit", 43.0, "scald, 43 °C"),
                line(2, "clamp", 1.0, "clamped to [0, 1]"),
                line(2, "clamp", 0.0, ""),
            ],
            vec![Mark { t0: p2, t1: Some(p2 + 12.0), label: "toilet flush".into() }],
        ),
        PlantName::Ship => {
            let rad = |deg: f64| deg / DEG;
            (
                vec![
                    line(0, "limit", rad(45.0), "overshoot, 45°"),
                    band(0, rad(28.0), rad(32.0), "on course, 30 ± 2°"),
                    line(2, "clamp", 0.6109, "rudder stop, 35°"),
                    line(2, "clamp", -0.6109, ""),
                    line(3, "clamp", 0.6109, "clamped at ±35°"),
                    line(3, "clamp", -0.6109, ""),
                ],
                vec![],
            )
        }
        PlantName::Buck => (
            vec![
                band(0, 4.9, 5.1, "band 4.9–5.1 V"),
                line(0, "limit", 6.0, "overvoltage, 6 V"),
                line(1, "limit", 10.0, "overcurrent, |i| > 10 A"),
                line(2, "clamp", 1.0, "clamped to [0, 1]"),
                line(2, "clamp", 0.0, ""),
            ],
            vec![
                Mark { t0: 0.002, t1: None, label: "counted from 2 ms".into() },
                Mark { t0: p2, t1: None, label: "load halves".into() },
            ],
        ),
        PlantName::BlackHole => (
            vec![
                band(0, p0 * 0.99, p0 * 1.01, &format!("target r = {} ± 1 %", short(p0))),
                line(0, "limit", 3.0, "photon sphere r = 3: captured below"),
                line(0, "limit", 2.0 * p0, "lost above twice the target"),
                line(6, "clamp", p2, &format!("clamped at ±{}", short(p2))),
                line(6, "clamp", -p2, ""),
                line(7, "clamp", p2, &format!("clamped at ±{}", short(p2))),
                line(7, "clamp", -p2, ""),
            ],
            vec![],
        ),
        PlantName::Rocket => (
            vec![
                line(0, "target", 0.0, "Earth"),
                line(2, "target", p0, &format!("ordered date, {} yr", short(p0))),
                band(2, p0 * 0.95, p0 * 1.05, "arrival here scores 0.95 or more"),
                line(4, "limit", p1, "fuel budget (the engine stops)"),
                line(6, "clamp", p2, &format!("clamped at ±{}", short(p2))),
                line(6, "clamp", -p2, ""),
            ],
            vec![],
        ),
        PlantName::SatClock => (
            vec![
                line(0, "limit", 1e-6, "unhealthy past 1 µs (300 m)"),
                line(0, "limit", -1e-6, ""),
                band(0, -100e-9, 100e-9, "within 100 ns"),
                line(2, "clamp", 1e-8, "clamped at ±10 ns/s"),
                line(2, "clamp", -1e-8, ""),
            ],
            vec![Mark { t0: run.ticks.div_ceil(2) as f64 * run.h, t1: None, label: "scored from here".into() }],
        ),
        PlantName::Slits => {
            let _ = (p0, p1);
            (vec![], vec![])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plant_has_its_interface_and_a_channel_per_column() {
        for p in PlantName::ALL {
            let i = info(p);
            let (w, n) = interface(p);
            assert!(w > 0 && n > 0, "{p}");
            assert_eq!(i.observations.len() + i.inputs.len(), w + n);
        }
        assert_eq!(interface(PlantName::Slits), (128, 16));
        assert_eq!(interface(PlantName::BlackHole), (6, 2));
    }
}
