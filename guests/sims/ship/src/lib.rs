//! The ship: heading by a first-order Nomoto yaw model, turned by a rudder that follows
//! the commanded angle (clamped to ±35°) with a 2 s lag and a 3°/s slew limit, and
//! pushed by a sinusoidal wave yaw acceleration. The heading is not wrapped and
//! nothing terminates. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_libm::sin;
use plimsoll_sim_kit::{FmuPlant, Model, clamp_abs};

/// The wave encounter frequency, rad/s (period ≈ 12.6 s).
pub const WAVE_OMEGA: f64 = 0.5;
/// The rudder's hard stop on the command, rad ("35 degrees").
pub const DELTA_MAX: f64 = 0.6109;
/// The rudder's slew limit, rad/s ("3 degrees per second").
pub const DELTA_RATE: f64 = 0.0524;
/// The rudder actuator's lag, s.
pub const TAU_R: f64 = 2.0;

/// The ship's states, parameters and input.
#[derive(Debug, Clone)]
pub struct Ship {
    /// The heading, rad.
    psi: f64,
    /// The yaw rate, rad/s.
    r: f64,
    /// The rudder angle reached, rad.
    delta: f64,
    /// The commanded rudder angle, rad, as sent (clamped when used).
    u: f64,
    /// The Nomoto gain, 1/s.
    gain: f64,
    /// The Nomoto time constant, s.
    time_constant: f64,
    /// The wave yaw-acceleration amplitude, rad/s².
    wave: f64,
}

impl Ship {
    /// The original's `calculateValues`: the derivatives in state order at FMU time
    /// `time`.
    fn calculate(&self, time: f64) -> [f64; 3] {
        let cmd = clamp_abs(self.u, DELTA_MAX);
        let der_r = (self.gain * self.delta - self.r) / self.time_constant + self.wave * sin(WAVE_OMEGA * time);
        let der_delta = clamp_abs((cmd - self.delta) / TAU_R, DELTA_RATE);
        [self.r, der_r, der_delta]
    }
}

impl Model for Ship {
    const NAME: &'static str = "Ship";
    const PARAMETERS: [&'static str; 3] = ["gain", "time_constant", "wave"];
    const OBSERVATIONS: &'static [&'static str] = &["heading", "yaw_rate", "rudder"];
    const INPUTS: &'static [&'static str] = &["rudder_command"];
    const SOLVER_STEP: f64 = 5e-2;
    const STATES: usize = 3;

    fn new([gain, time_constant, wave]: [f64; 3]) -> Ship {
        Ship { psi: 0.0, r: 0.0, delta: 0.0, u: 0.0, gain, time_constant, wave }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.psi, self.r, self.delta]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.psi, self.r, self.delta] = [x[0], x[1], x[2]];
    }

    fn derivatives(&mut self, time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&self.calculate(time));
    }

    fn set_inputs(&mut self, u: &[f64]) {
        self.u = u[0];
    }

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.states(out);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<Ship>);

/// The plant the component exports.
pub type ShipPlant = FmuPlant<Ship>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::{CoSim, Plant};

    fn start(p: [f64; 3]) -> ShipPlant {
        ShipPlant::start(p, 0.5, 300.0).expect("the ship starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn first_substeps_by_hand() {
        let mut sim = CoSim::<Ship>::new([0.2, 20.0, 0.002], 300.0);
        sim.model.set_inputs(&[0.1]);
        sim.do_step(0.0, 0.5).expect("the step runs");
        assert_eq!(sim.time(), 10.0 * 5e-2);
        let (mut psi, mut r, mut delta) = (0.0_f64, 0.0_f64, 0.0_f64);
        for n in 0..10 {
            let time = f64::from(n) * 5e-2;
            let rate = (0.1 - delta) / 2.0;
            let rate = if rate > 0.0524 { 0.0524 } else { rate };
            let d = [r, (0.2 * delta - r) / 20.0 + 0.002 * plimsoll_libm::sin(0.5 * time), rate];
            psi += 5e-2 * d[0];
            r += 5e-2 * d[1];
            delta += 5e-2 * d[2];
            if n == 0 {
                // (0.1 - 0) / 2 = 0.05 is under the slew limit.
                assert_eq!(delta, 5e-2 * 0.05);
                assert_eq!(r, 0.0);
            }
        }
        let mut x = [0.0; 3];
        sim.model.states(&mut x);
        assert_eq!(bits(&x), bits(&[psi, r, delta]));
    }

    #[test]
    fn command_and_slew_are_clamped() {
        let p = [0.2, 20.0, 0.002];
        let (mut big, mut stop, mut neg, mut neg_stop) = (start(p), start(p), start(p), start(p));
        for _ in 0..100 {
            big.step(&[3.0]).expect("step");
            stop.step(&[0.6109]).expect("step");
            neg.step(&[-3.0]).expect("step");
            neg_stop.step(&[-0.6109]).expect("step");
        }
        assert_eq!(bits(&big.observe()), bits(&stop.observe()));
        assert_eq!(bits(&neg.observe()), bits(&neg_stop.observe()));
        // The first tick runs at the slew limit: 10 substeps of 0.05 * 0.0524.
        let mut one = start(p);
        one.step(&[3.0]).expect("step");
        let mut delta = 0.0;
        for _ in 0..10 {
            delta += 5e-2 * 0.0524;
        }
        assert_eq!(one.observe()[2], delta);
    }

    #[test]
    fn wave_uses_start_of_substep_time() {
        // K = 0, no rudder: r integrates the wave alone.
        let mut sim = CoSim::<Ship>::new([0.0, 20.0, 0.002], 300.0);
        sim.do_step(0.0, 0.5).expect("step");
        let mut r = 0.0_f64;
        for n in 0..10 {
            r += 5e-2 * ((0.0 * 0.0 - r) / 20.0 + 0.002 * plimsoll_libm::sin(0.5 * (f64::from(n) * 5e-2)));
        }
        let mut x = [0.0; 3];
        sim.model.states(&mut x);
        assert_eq!(x[1], r);
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let p = [0.2, 20.0, 0.002];
        let (mut a, mut b) = (start(p), start(p));
        for k in 0..40 {
            let u = [0.3 - 0.02 * f64::from(k)];
            a.step(&u).expect("step");
            b.step(&u).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 3 * 3 + 3);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[0.1]).expect("step");
        b.step(&[0.1]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_psi)/dr = 1, d(der_r)/dr = -1/T, d(der_r)/ddelta = K/T.
        assert!((j[1] - 1.0).abs() < 1e-6);
        assert!((j[4] + 0.05).abs() < 1e-6);
        assert!((j[5] - 0.01).abs() < 1e-6);
    }
}
