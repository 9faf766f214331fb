//! What a trajectory earned: the score or metrics each plant's task is judged by,
//! and whether it passed. The rules the original published (cart-pole balance and
//! swing-up, buck) are kept exactly; the others are ours, stated in each plant's
//! README and in SPECIFICATION.md. Scores are computed from the recorded trajectory
//! with plain IEEE arithmetic (and the plants' own libm for the one cosine), so
//! every tier gives the same numbers.

use crate::catalogue::PlantName;

/// A value in the summary: a number, or JSON `null` (never happened, none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Number(f64),
    /// `null`.
    Null,
}

impl From<Option<f64>> for Value {
    fn from(v: Option<f64>) -> Value {
        v.map_or(Value::Null, Value::Number)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Number(v)
    }
}

/// A plant's verdict on one trajectory.
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    /// Cart-pole balance only: when the pole first passed 90 degrees, or null.
    pub fell_at: Option<Value>,
    /// The score in [0, 1], where the task has one.
    pub score: Option<f64>,
    /// The score a pass needs.
    pub floor: Option<f64>,
    /// Named measurements, in order.
    pub metrics: Vec<(&'static str, Value)>,
    /// Whether the run passed its task.
    pub passed: bool,
    /// The first failure's name (`off_track`, `scald`, ...), when it failed.
    pub failure: Option<&'static str>,
}

/// A recorded trajectory: `rows` of `width` observations then `inputs` values.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Observations per tick.
    pub width: usize,
    /// Inputs per tick.
    pub inputs: usize,
    /// The tick length.
    pub tick: f64,
    /// The scenario's parameters.
    pub params: [f64; 3],
    /// Every recorded value, tick after tick.
    pub values: &'a [f64],
}

impl<'a> Record<'a> {
    /// The rows, one per recorded tick.
    pub fn rows(&self) -> impl Iterator<Item = &'a [f64]> + 'a {
        self.values.chunks_exact(self.width + self.inputs)
    }

    /// Recorded ticks.
    pub fn ticks(&self) -> usize {
        self.values.len() / (self.width + self.inputs).max(1)
    }

    /// Observation `i` of every tick.
    pub fn column(&self, i: usize) -> impl Iterator<Item = f64> + 'a {
        self.rows().map(move |r| r[i])
    }

    /// The time of tick `k` as the original printed it (`k * h`).
    fn at(&self, k: usize) -> f64 {
        k as f64 * self.tick
    }
}

fn abs(v: f64) -> f64 {
    if v < 0.0 { -v } else { v }
}

/// The fraction `hits / of`, or 0 when nothing counted.
fn fraction(hits: usize, of: usize) -> f64 {
    if of == 0 { 0.0 } else { hits as f64 / of as f64 }
}

/// Judges `record` on `plant`'s task.
pub fn assess(plant: PlantName, record: &Record<'_>) -> Assessment {
    match plant {
        PlantName::CartPole => balance(record),
        PlantName::CartPoleSwingUp => swing_up(record),
        PlantName::Shower => shower(record),
        PlantName::Ship => ship(record),
        PlantName::Buck => buck(record),
        PlantName::BlackHole => black_hole(record),
        PlantName::Rocket => rocket(record),
        PlantName::SatClock => sat_clock(record),
        PlantName::Slits => slits(record),
    }
}

fn verdict(
    score: Option<f64>,
    floor: Option<f64>,
    failure: Option<&'static str>,
    metrics: Vec<(&'static str, Value)>,
) -> Assessment {
    let failure = failure.or(match (score, floor) {
        (Some(s), Some(f)) if s < f => Some("below_floor"),
        _ => None,
    });
    Assessment { fell_at: None, score, floor, metrics, passed: failure.is_none(), failure }
}

/// The original's oracle: the pole fell at the first tick whose recorded angle
/// (before that tick's force) is past 90 degrees; a run passes if it never fell.
fn balance(r: &Record<'_>) -> Assessment {
    let fell = r.column(2).position(|theta| abs(theta) > std::f64::consts::FRAC_PI_2).map(|k| r.at(k));
    let last = r.rows().last();
    let metrics = vec![
        ("final_x", last.map(|row| row[0]).into()),
        ("final_theta", last.map(|row| row[2]).into()),
        ("max_abs_x", r.column(0).fold(0.0, |m, x| if abs(x) > m { abs(x) } else { m }).into()),
    ];
    Assessment {
        fell_at: Some(fell.into()),
        score: None,
        floor: None,
        metrics,
        passed: fell.is_none(),
        failure: fell.map(|_| "fell"),
    }
}

/// The original's swing-up rule: 0 once the cart leaves the 2.4 m track, else
/// 1 - (start of the final unbroken upright stretch, cos(theta) > 0.98) / ticks;
/// the floor is 0.85.
fn swing_up(r: &Record<'_>) -> Assessment {
    let n = r.ticks();
    let mut up_from: Option<usize> = None;
    let mut off_track = None;
    let mut max_x = 0.0;
    for (k, row) in r.rows().enumerate() {
        if abs(row[0]) > max_x {
            max_x = abs(row[0]);
        }
        if off_track.is_none() && abs(row[0]) > 2.4 {
            off_track = Some(k);
        }
        if plimsoll_libm::cos(row[2]) > 0.98 {
            up_from.get_or_insert(k);
        } else {
            up_from = None;
        }
    }
    let (score, failure) = match (n, off_track, up_from) {
        (0, _, _) => (0.0, Some("empty_trajectory")),
        (_, Some(_), _) => (0.0, Some("off_track")),
        (_, None, None) => (0.0, Some("never_upright")),
        (_, None, Some(k)) => (1.0 - k as f64 / n as f64, None),
    };
    let metrics = vec![
        ("upright_from", up_from.filter(|_| off_track.is_none()).map(|k| r.at(k)).into()),
        ("off_track_at", off_track.map(|k| r.at(k)).into()),
        ("max_abs_x", max_x.into()),
    ];
    verdict(Some(score), Some(0.85), failure, metrics)
}

/// The original's buck rule: 0 at any current past 10 A or voltage past 6 V, else
/// the fraction of ticks from 2 ms with the output within 0.1 V of 5 V; the floor
/// is 0.6.
fn buck(r: &Record<'_>) -> Assessment {
    let from = (0.002 / r.tick).round() as usize;
    let (mut counted, mut in_band) = (0usize, 0usize);
    let (mut max_v, mut max_i) = (f64::NEG_INFINITY, 0.0);
    let (mut over_v, mut over_i) = (None, None);
    for (k, row) in r.rows().enumerate() {
        let (v, i) = (row[0], row[1]);
        if v > max_v {
            max_v = v;
        }
        if abs(i) > max_i {
            max_i = abs(i);
        }
        if over_i.is_none() && abs(i) > 10.0 {
            over_i = Some(k);
        }
        if over_v.is_none() && v > 6.0 {
            over_v = Some(k);
        }
        if k >= from {
            counted += 1;
            if abs(v - 5.0) <= 0.1 {
                in_band += 1;
            }
        }
    }
    let band = fraction(in_band, counted);
    let first = match (over_i, over_v) {
        (Some(i), Some(v)) if v < i => Some("overvoltage"),
        (Some(_), _) => Some("overcurrent"),
        (None, Some(_)) => Some("overvoltage"),
        (None, None) if in_band == 0 => Some("never_regulated"),
        (None, None) => None,
    };
    let score = if first.is_some() { 0.0 } else { band };
    let metrics = vec![
        ("max_v", if r.ticks() == 0 { Value::Null } else { max_v.into() }),
        ("max_abs_i", max_i.into()),
        ("overvoltage_at", over_v.map(|k| r.at(k)).into()),
        ("overcurrent_at", over_i.map(|k| r.at(k)).into()),
        ("band_fraction", band.into()),
    ];
    verdict(Some(score), Some(0.6), first, metrics)
}

/// Ours: the head must never pass 43 C (a scald fails the run); the score is the
/// fraction of ticks with the head in the comfort band 37 to 39 C; the floor is 0.5.
fn shower(r: &Record<'_>) -> Assessment {
    let mut max_t = f64::NEG_INFINITY;
    let (mut scald, mut first_in) = (None, None);
    let mut in_band = 0;
    for (k, row) in r.rows().enumerate() {
        let t = row[0];
        if t > max_t {
            max_t = t;
        }
        if scald.is_none() && t > 43.0 {
            scald = Some(k);
        }
        if (37.0..=39.0).contains(&t) {
            in_band += 1;
            first_in.get_or_insert(k);
        }
    }
    let band = fraction(in_band, r.ticks());
    let failure = scald.map(|_| "scald").or(if in_band == 0 { Some("never_comfortable") } else { None });
    let metrics = vec![
        ("max_t", if r.ticks() == 0 { Value::Null } else { max_t.into() }),
        ("scald_at", scald.map(|k| r.at(k)).into()),
        ("first_in_band", first_in.map(|k| r.at(k)).into()),
        ("band_fraction", band.into()),
    ];
    verdict(Some(if scald.is_some() { 0.0 } else { band }), Some(0.5), failure, metrics)
}

/// Ours: ordered to 30 degrees starboard; a heading past 45 degrees is an
/// overshoot and fails; the score is the fraction of ticks within 2 degrees of the
/// order, counted from the first tick on course; the floor is 0.8.
fn ship(r: &Record<'_>) -> Assessment {
    let deg = |rad: f64| rad * (180.0 / std::f64::consts::PI);
    let mut max_h = f64::NEG_INFINITY;
    let (mut over, mut first_on) = (None, None);
    let (mut counted, mut on) = (0, 0);
    for (k, row) in r.rows().enumerate() {
        let h = deg(row[0]);
        if h > max_h {
            max_h = h;
        }
        if over.is_none() && h > 45.0 {
            over = Some(k);
        }
        let on_course = abs(h - 30.0) <= 2.0;
        if on_course {
            first_on.get_or_insert(k);
        }
        if first_on.is_some() {
            counted += 1;
            if on_course {
                on += 1;
            }
        }
    }
    let band = fraction(on, counted);
    let failure = over.map(|_| "overshoot").or(if first_on.is_none() { Some("never_on_course") } else { None });
    let metrics = vec![
        ("max_heading_deg", if r.ticks() == 0 { Value::Null } else { max_h.into() }),
        ("overshoot_at", over.map(|k| r.at(k)).into()),
        ("first_on_course", first_on.map(|k| r.at(k)).into()),
        ("band_fraction", band.into()),
    ];
    verdict(Some(if failure.is_some() { 0.0 } else { band }), Some(0.8), failure, metrics)
}

/// Ours: hold r within 1 % of the target radius (p0); below the photon sphere
/// (r < 3) the craft is captured, above twice the target it is lost, and either
/// fails; the score is the fraction of ticks in the band; the floor is 0.9. (A
/// wider band passes a law that only damps the radial speed and drifts outward.)
fn black_hole(r: &Record<'_>) -> Assessment {
    let target = r.params[0];
    let (mut min_r, mut max_r) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut captured, mut lost) = (None, None);
    let mut in_band = 0;
    for (k, row) in r.rows().enumerate() {
        let radius = row[0];
        if radius < min_r {
            min_r = radius;
        }
        if radius > max_r {
            max_r = radius;
        }
        if captured.is_none() && radius < 3.0 {
            captured = Some(k);
        }
        if lost.is_none() && radius > 2.0 * target {
            lost = Some(k);
        }
        if abs(radius - target) <= 0.01 * target {
            in_band += 1;
        }
    }
    let band = fraction(in_band, r.ticks());
    let last = r.rows().last();
    let failure = match (captured, lost) {
        (Some(c), Some(l)) if l < c => Some("lost"),
        (Some(_), _) => Some("captured"),
        (None, Some(_)) => Some("lost"),
        (None, None) => None,
    };
    let empty = r.ticks() == 0;
    let metrics = vec![
        ("r_target", target.into()),
        ("min_r", if empty { Value::Null } else { min_r.into() }),
        ("max_r", if empty { Value::Null } else { max_r.into() }),
        ("captured_at", captured.map(|k| r.at(k)).into()),
        ("lost_at", lost.map(|k| r.at(k)).into()),
        ("band_fraction", band.into()),
        ("fuel_used", last.map(|row| row[4]).into()),
        ("far_time_elapsed", last.map(|row| row[3]).into()),
    ];
    verdict(Some(if failure.is_some() { 0.0 } else { band }), Some(0.9), failure, metrics)
}

/// Ours: leave Earth and come home (back within 0.001 light-years of it after
/// leaving) when Earth's clock reads the ordered date (p0); the score is 1 -
/// |arrival - order| / order (0 if never home); the floor is 0.95.
fn rocket(r: &Record<'_>) -> Assessment {
    /// How close to Earth counts as home, in light-years.
    const HOME: f64 = 1e-3;
    let order = r.params[0];
    let mut left = false;
    let mut arrival: Option<&[f64]> = None;
    let (mut farthest, mut top) = (0.0, 0.0);
    for row in r.rows() {
        let (x, beta) = (row[0], row[1]);
        if x > farthest {
            farthest = x;
        }
        if abs(beta) > top {
            top = abs(beta);
        }
        if x > HOME {
            left = true;
        } else if left {
            arrival = Some(row);
            break;
        }
    }
    let (score, failure) = match arrival {
        None => (0.0, Some("never_home")),
        Some(row) => {
            let miss = abs(row[2] - order) / order;
            let score = if miss < 1.0 { 1.0 - miss } else { 0.0 };
            (score, if score < 0.95 { Some("missed_date") } else { None })
        }
    };
    let metrics = vec![
        ("ordered_earth_date", order.into()),
        ("earth_date_at_arrival", arrival.map(|row| row[2]).into()),
        ("ship_age_at_arrival", arrival.map(|row| row[3]).into()),
        ("fuel_at_arrival", arrival.map(|row| row[4]).into()),
        ("farthest_ly", farthest.into()),
        ("top_speed_c", top.into()),
    ];
    verdict(Some(score), Some(0.95), failure, metrics)
}

/// Ours: the clock error as the ground records it must never pass 1 microsecond
/// (300 m of ranging error: unhealthy, a failure); the score is the fraction of
/// the second half of the day within 100 ns; the floor is 0.9.
fn sat_clock(r: &Record<'_>) -> Assessment {
    let n = r.ticks();
    let mut max_err = 0.0;
    let mut unhealthy = None;
    let (mut counted, mut in_band) = (0, 0);
    for (k, row) in r.rows().enumerate() {
        let e = abs(row[0]);
        if e > max_err {
            max_err = e;
        }
        if unhealthy.is_none() && e > 1e-6 {
            unhealthy = Some(k);
        }
        if 2 * k >= n {
            counted += 1;
            if e <= 100e-9 {
                in_band += 1;
            }
        }
    }
    let band = fraction(in_band, counted);
    let failure = unhealthy.map(|_| "unhealthy");
    let metrics = vec![
        ("max_abs_error_ns", (max_err * 1e9).into()),
        ("unhealthy_at", unhealthy.map(|k| r.at(k)).into()),
        ("band_fraction", band.into()),
    ];
    verdict(Some(if failure.is_some() { 0.0 } else { band }), Some(0.9), failure, metrics)
}

/// Ours: the match is the cosine similarity of the screen pattern (the first 64
/// observations) and the target (the next 64); the score is the final tick's
/// match; the floor is 0.95 (the original's delivered-design bar).
fn slits(r: &Record<'_>) -> Assessment {
    let half = r.width / 2;
    let matches: Vec<f64> = r
        .rows()
        .map(|row| {
            let (pattern, target) = (&row[..half], &row[half..r.width]);
            let dot: f64 = pattern.iter().zip(target).map(|(a, b)| a * b).sum();
            let pp: f64 = pattern.iter().map(|a| a * a).sum();
            let tt: f64 = target.iter().map(|b| b * b).sum();
            let norm = (pp * tt).sqrt();
            if norm > 0.0 { dot / norm } else { 0.0 }
        })
        .collect();
    let final_match = matches.last().copied();
    let mut best: Option<(usize, f64)> = None;
    for (k, m) in matches.iter().enumerate() {
        if best.is_none_or(|(_, b)| *m > b) {
            best = Some((k, *m));
        }
    }
    let reached = matches.iter().position(|m| *m >= 0.9);
    let score = final_match.unwrap_or(0.0);
    let failure = if score < 0.95 { Some("not_matched") } else { None };
    let metrics = vec![
        ("final_match", final_match.into()),
        ("best_match", best.map(|(_, m)| m).into()),
        ("best_at_tick", best.map(|(k, _)| k as f64).into()),
        ("reached_0_9_at_tick", reached.map(|k| k as f64).into()),
    ];
    verdict(Some(score), Some(0.95), failure, metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(width: usize, inputs: usize, tick: f64, params: [f64; 3], values: &[f64]) -> Record<'_> {
        Record { width, inputs, tick, params, values }
    }

    #[test]
    fn balance_reports_the_first_tick_past_ninety_degrees() {
        let v = [0.0, 0.0, 0.1, 0.0, 1.0, 0.0, 0.0, 1.6, 0.0, 1.0, 0.0, 0.0, 1.7, 0.0, 1.0];
        let a = assess(PlantName::CartPole, &rec(4, 1, 0.01, [0.2, 0.5, 1.0], &v));
        assert_eq!(a.fell_at, Some(Value::Number(0.01)));
        assert!(!a.passed);
        assert_eq!(a.failure, Some("fell"));
        let a = assess(PlantName::CartPole, &rec(4, 1, 0.01, [0.2, 0.5, 1.0], &v[..5]));
        assert_eq!(a.fell_at, Some(Value::Null));
        assert!(a.passed);
    }

    #[test]
    fn swing_up_scores_the_final_upright_stretch_and_fails_off_track() {
        // Hanging for 2 ticks, upright for 2: score 1 - 2/4.
        let v = [0.0, 0.0, 3.1, 0.0, 0.0, 0.0, 0.0, 3.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.0];
        let a = assess(PlantName::CartPoleSwingUp, &rec(4, 1, 0.01, [3.0, 0.5, 1.0], &v));
        assert_eq!(a.score, Some(0.5));
        assert_eq!(a.failure, Some("below_floor"));
        let mut off = v;
        off[10] = 2.5;
        let a = assess(PlantName::CartPoleSwingUp, &rec(4, 1, 0.01, [3.0, 0.5, 1.0], &off));
        assert_eq!((a.score, a.failure), (Some(0.0), Some("off_track")));
    }

    #[test]
    fn buck_counts_the_band_from_two_milliseconds_and_fails_on_a_limit() {
        let mut v = Vec::new();
        for k in 0..400 {
            v.extend_from_slice(&[if k < 200 { 1.0 } else { 5.05 }, 1.0, 0.5]);
        }
        let a = assess(PlantName::Buck, &rec(2, 1, 1e-5, [12.0, 4.0, 0.01], &v));
        assert_eq!(a.score, Some(1.0));
        assert!(a.passed);
        v[3 * 300] = 6.5;
        let a = assess(PlantName::Buck, &rec(2, 1, 1e-5, [12.0, 4.0, 0.01], &v));
        assert_eq!((a.score, a.failure), (Some(0.0), Some("overvoltage")));
    }
}
