//! The bouncing ball of the Modelica Reference FMUs (v0.0.41), run as a module-run
//! model: one row is e, h, v; each step of the caller's step writes h, v. Forward
//! Euler with a fixed 1 ms substep; after each substep the event indicator is checked,
//! and a crossing bounces the ball (it rests at h = DBL_MIN once the rebound is below
//! 0.1). See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use plimsoll_sim_kit::Model;

/// Gravity, m/s² (the start value of `g`).
pub const G: f64 = -9.81;
/// Below this rebound speed, m/s, the ball stops bouncing.
pub const V_MIN: f64 = 0.1;
/// The event indicator's hysteresis, m.
pub const EVENT_EPSILON: f64 = 1e-10;

/// The ball's states and parameters.
#[derive(Debug, Clone)]
pub struct BouncingBall {
    /// The height, m.
    h: f64,
    /// The velocity, m/s.
    v: f64,
    /// Gravity, m/s² (0 once the ball rests).
    g: f64,
    /// The coefficient of restitution.
    e: f64,
}

impl Model for BouncingBall {
    const NAME: &'static str = "BouncingBall";
    const PARAMETERS: [&'static str; 3] = ["e", "h", "v"];
    const OBSERVATIONS: &'static [&'static str] = &["h", "v"];
    const INPUTS: &'static [&'static str] = &[];
    const SOLVER_STEP: f64 = 1e-3;
    const STATES: usize = 2;
    const EVENT_INDICATORS: usize = 1;

    fn new([e, h, v]: [f64; 3]) -> BouncingBall {
        // Start values h = 1, v = 0, g = -9.81, e = 0.7, then the row sets e, h, v.
        BouncingBall { h, v, g: G, e }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.h, self.v]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.h, self.v] = [x[0], x[1]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&[self.v, self.g]);
    }

    fn set_inputs(&mut self, _u: &[f64]) {}

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.states(out);
    }

    fn event_indicators(&self, z: &mut [f64]) {
        z[0] = if self.h > -EVENT_EPSILON && self.h <= 0.0 && self.v > 0.0 { -EVENT_EPSILON } else { self.h };
    }

    fn event_update(&mut self) {
        if self.h <= 0.0 && self.v < 0.0 {
            self.h = f64::MIN_POSITIVE;
            self.v = -self.v * self.e;
            if self.v < V_MIN {
                self.v = 0.0;
                self.g = 0.0;
            }
        }
    }
}

/// The module-run export: the original's `sim_run` over [`BouncingBall`].
pub type BouncingBallRun = plimsoll_sim_kit::model::Fmu<BouncingBall>;

plimsoll_sim_kit::model!(BouncingBallRun);

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::model::{TableModel, sweep};
    use sha2::{Digest, Sha256};

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn reproduces_the_reference_checksum() {
        let record = sweep::<BouncingBallRun>(100, 3.0, (0.1, 0.95), 1.0, 0.0);
        assert_eq!(record.len(), 480_400);
        assert_eq!(hex(&Sha256::digest(&record)), "b031e512febeef2aea72b38e52c84e6f5e1bc92396c991c1a2a93218f825a8ec");
    }

    #[test]
    fn samples_of_a_dead_ball() {
        let out = BouncingBallRun::run(&[0.1, 1.0, 0.0], 3.0, 0.01, 302).expect("the row runs");
        assert_eq!(out.len(), 2 * 300);
        assert_eq!(out[..2], [0.99955855, -0.0981]);
        // v first turns positive at step 46 (the bounce).
        let first_up = (0..300).find(|&n| out[2 * n + 1] > 0.0).expect("it bounces");
        assert_eq!(first_up + 1, 46);
        assert_eq!(out[2 * first_up..2 * first_up + 2], [0.002904740999999985, 0.3757229999999979]);
        // At rest on DBL_MIN at the end.
        assert_eq!(out[598..], [2.2250738585072014e-308, 0.0]);
        assert_eq!(f64::MIN_POSITIVE.to_bits(), 0x0010_0000_0000_0000);
    }

    #[test]
    fn a_ball_starting_on_the_floor_falls_forever() {
        let out = BouncingBallRun::run(&[0.7, 0.0, 0.0], 1.0, 0.01, 102).expect("the row runs");
        assert!(out.chunks(2).all(|s| s[0] <= 0.0));
        assert!(out[198] < -4.0);
    }

    #[test]
    fn describes_itself() {
        let d = BouncingBallRun::describe();
        assert_eq!(d.name, "BouncingBall");
        assert_eq!(d.parameters, ["e", "h", "v"]);
        assert_eq!(d.outputs, ["h", "v"]);
    }
}
