//! The relativistic rocket: rapidity η driven by the proper acceleration (clamped to
//! ±a_max, and 0 once the fuel spent reaches the budget), position and Earth time from
//! sinh η and cosh η, in light-years and years against the ship's proper time (the FMU
//! time). The target Earth time is only reported. Nothing terminates. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_libm::{cosh, fabs, sinh, tanh};
use plimsoll_sim_kit::{FmuPlant, Model, clamp_seq};

/// The rocket's states, parameters and input.
#[derive(Debug, Clone)]
pub struct Rocket {
    /// The rapidity.
    eta: f64,
    /// The position, ly.
    x: f64,
    /// The Earth time, yr.
    t: f64,
    /// The fuel spent (integral of |a|).
    fuel: f64,
    /// The proper acceleration, as sent (clamped when used).
    a: f64,
    /// The Earth time to arrive at, yr (p0; reported only).
    t_target: f64,
    /// The fuel budget (p1).
    fuel_budget: f64,
    /// The acceleration limit (p2).
    a_max: f64,
    /// The speed as a fraction of c, tanh η (derived).
    beta: f64,
}

impl Rocket {
    /// The original's `calculateValues`: the derivatives in state order, with `beta`
    /// updated.
    fn calculate(&mut self) -> [f64; 4] {
        let mut a = clamp_seq(self.a, self.a_max);
        if self.fuel >= self.fuel_budget {
            a = 0.0;
        }
        let d = [a, sinh(self.eta), cosh(self.eta), fabs(a)];
        self.beta = tanh(self.eta);
        d
    }
}

impl Model for Rocket {
    const NAME: &'static str = "Rocket";
    const PARAMETERS: [&'static str; 3] = ["t_target", "fuel_budget", "a_max"];
    const OBSERVATIONS: &'static [&'static str] = &["x", "beta", "t", "time", "fuel", "t_target"];
    const INPUTS: &'static [&'static str] = &["acceleration"];
    const SOLVER_STEP: f64 = 5e-3;
    const STATES: usize = 4;

    fn new([t_target, fuel_budget, a_max]: [f64; 3]) -> Rocket {
        Rocket { eta: 0.0, x: 0.0, t: 0.0, fuel: 0.0, a: 0.0, t_target, fuel_budget, a_max, beta: 0.0 }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.eta, self.x, self.t, self.fuel]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.eta, self.x, self.t, self.fuel] = [x[0], x[1], x[2], x[3]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&self.calculate());
    }

    fn set_inputs(&mut self, u: &[f64]) {
        self.a = u[0];
    }

    fn observe(&mut self, time: f64, out: &mut [f64]) {
        self.calculate();
        out.copy_from_slice(&[self.x, self.beta, self.t, time, self.fuel, self.t_target]);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<Rocket>);

/// The plant the component exports.
pub type RocketPlant = FmuPlant<Rocket>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::Plant;

    fn start(p: [f64; 3]) -> RocketPlant {
        RocketPlant::start(p, 0.05, 30.0).expect("the rocket starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn starts_at_rest() {
        assert_eq!(start([40.0, 14.0, 1.0]).observe(), [0.0, 0.0, 0.0, 0.0, 0.0, 40.0]);
    }

    #[test]
    fn first_tick_by_hand() {
        let mut p = start([40.0, 14.0, 1.0]);
        p.step(&[1.0]).expect("step");
        let (mut eta, mut x, mut t, mut fuel) = (0.0_f64, 0.0_f64, 0.0_f64, 0.0_f64);
        for n in 0..10 {
            let d = [1.0, sinh(eta), cosh(eta), 1.0];
            eta += 5e-3 * d[0];
            x += 5e-3 * d[1];
            t += 5e-3 * d[2];
            fuel += 5e-3 * d[3];
            if n == 0 {
                assert_eq!((eta, x, t, fuel), (5e-3, 0.0, 5e-3, 5e-3));
            }
        }
        // The time output is the product 10 * 5e-3, not a sum of ten 5e-3.
        let want = [x, tanh(eta), t, 0.0 + 10.0 * 5e-3, fuel, 40.0];
        assert_eq!(bits(&p.observe()), bits(&want));
    }

    #[test]
    fn acceleration_is_clamped_to_a_max() {
        let p = [40.0, 14.0, 1.0];
        let (mut big, mut lim, mut neg, mut neg_lim) = (start(p), start(p), start(p), start(p));
        for _ in 0..40 {
            big.step(&[5.0]).expect("step");
            lim.step(&[1.0]).expect("step");
            neg.step(&[-5.0]).expect("step");
            neg_lim.step(&[-1.0]).expect("step");
        }
        assert_eq!(bits(&big.observe()), bits(&lim.observe()));
        assert_eq!(bits(&neg.observe()), bits(&neg_lim.observe()));
    }

    #[test]
    fn empty_tanks_stop_the_thrust() {
        let budget = 0.2;
        let mut p = start([40.0, budget, 1.0]);
        for _ in 0..10 {
            p.step(&[1.0]).expect("step");
        }
        let spent = p.observe()[4];
        assert!(spent >= budget && spent <= budget + 5e-3, "{spent}");
        let beta = p.observe()[1];
        for _ in 0..10 {
            p.step(&[1.0]).expect("step");
        }
        assert_eq!(p.observe()[4], spent);
        assert_eq!(p.observe()[1], beta);
    }

    #[test]
    fn cosh_past_ln2_uses_musl_exp() {
        // Past |eta| = ln 2 cosh goes through exp; the Earth clock runs at cosh eta.
        let mut m = Rocket::new([40.0, 14.0, 1.0]);
        m.set_states(&[1.5, 0.0, 0.0, 0.0]);
        let mut dx = [0.0; 4];
        m.derivatives(0.0, &mut dx);
        let e = plimsoll_libm::exp(1.5);
        assert_eq!(dx[2], 0.5 * (e + 1.0 / e));
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let p = [40.0, 14.0, 1.0];
        let (mut a, mut b) = (start(p), start(p));
        for k in 0..30 {
            let u = [0.9 - 0.01 * f64::from(k)];
            a.step(&u).expect("step");
            b.step(&u).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 4 * 4 + 4);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[0.5]).expect("step");
        b.step(&[0.5]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_x)/d(eta) = cosh eta, d(der_eta)/da = 1, d(der_fuel)/da = sign(a).
        assert!((j[16] - 1.0).abs() < 1e-9);
        assert!((j[16 + 3] - 1.0).abs() < 1e-9);
        assert!(j[4] > 1.0);
    }
}
