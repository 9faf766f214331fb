//! The black hole: a probe on a Schwarzschild geodesic (units G = c = M = 1, proper
//! time τ as the independent variable), starting on the circular orbit at the target
//! radius (no closer than 3.05) with radial speed v0, steered by radial and tangential
//! thrust each clamped to ±a_max. Inside r = 2.05 it is captured: the derivatives
//! freeze, so the state stops changing, but the simulation does not terminate. The
//! co-simulation loop's relative closeness slack reaches the 1e-3 substep at τ = 100,
//! so from there every hundredth tick of 1 runs 1001 substeps. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_libm::{fabs, sqrt};
use plimsoll_sim_kit::{FmuPlant, Model, clamp_abs};

/// The innermost starting radius (just outside the photon sphere at 3).
pub const R_MIN_START: f64 = 3.05;
/// The capture radius: at or inside it the derivatives freeze.
pub const R_CAPTURE: f64 = 2.05;

/// The probe's states, parameters and inputs.
#[derive(Debug, Clone)]
pub struct BlackHole {
    /// The radius.
    r: f64,
    /// dr/dτ.
    v: f64,
    /// The orbital angle, rad.
    phi: f64,
    /// The specific angular momentum.
    l: f64,
    /// The far-away time.
    t: f64,
    /// The thrust spent (integral of |a_r| + |a_phi|).
    fuel: f64,
    /// The radial thrust, as sent (clamped when used).
    a_r: f64,
    /// The tangential thrust, as sent (clamped when used).
    a_phi: f64,
    /// The target radius (p0).
    r_target: f64,
    /// The initial radial speed (p1).
    v0: f64,
    /// The thrust limit (p2).
    a_max: f64,
    /// dφ/dτ (derived).
    omega: f64,
}

impl BlackHole {
    /// The original's `applyScenario`, run whenever a parameter is set: the circular
    /// orbit at the target radius (no closer than 3.05), with radial speed v0.
    fn apply_scenario(&mut self) {
        let r0 = if self.r_target > R_MIN_START { self.r_target } else { R_MIN_START };
        self.r = r0;
        self.v = self.v0;
        self.phi = 0.0;
        self.l = r0 / sqrt(r0 - 3.0);
        self.t = 0.0;
        self.fuel = 0.0;
    }

    /// The original's `calculateValues`: the derivatives in state order, with `omega`
    /// updated.
    fn calculate(&mut self) -> [f64; 6] {
        let ar = clamp_abs(self.a_r, self.a_max);
        let aphi = clamp_abs(self.a_phi, self.a_max);
        if self.r <= R_CAPTURE {
            self.omega = 0.0;
            return [0.0; 6];
        }
        let (r, l, v) = (self.r, self.l, self.v);
        let r2 = r * r;
        let r3 = r2 * r;
        let r4 = r3 * r;
        let f = 1.0 - 2.0 / r;
        let der_v = -1.0 / r2 + l * l / r3 - 3.0 * l * l / r4 + ar;
        let der_phi = l / r2;
        let der_l = r * aphi;
        let e2 = v * v + f * (1.0 + l * l / r2);
        let der_t = sqrt(if e2 > 0.0 { e2 } else { 0.0 }) / f;
        let der_fuel = fabs(ar) + fabs(aphi);
        self.omega = l / r2;
        [v, der_v, der_phi, der_l, der_t, der_fuel]
    }
}

impl Model for BlackHole {
    const NAME: &'static str = "BlackHole";
    const PARAMETERS: [&'static str; 3] = ["r_target", "v0", "a_max"];
    const OBSERVATIONS: &'static [&'static str] = &["r", "v", "omega", "t", "fuel", "r_target"];
    const INPUTS: &'static [&'static str] = &["a_r", "a_phi"];
    const SOLVER_STEP: f64 = 1e-3;
    const STATES: usize = 6;

    fn new([r_target, v0, a_max]: [f64; 3]) -> BlackHole {
        let l = 5.0 / sqrt(2.0);
        let mut m = BlackHole {
            r: 5.0,
            v: 0.0,
            phi: 0.0,
            l,
            t: 0.0,
            fuel: 0.0,
            a_r: 0.0,
            a_phi: 0.0,
            r_target: 5.0,
            v0: 0.0,
            a_max: 0.02,
            omega: l / 25.0,
        };
        // Setting the three in order runs applyScenario after each.
        m.r_target = r_target;
        m.apply_scenario();
        m.v0 = v0;
        m.apply_scenario();
        m.a_max = a_max;
        m.apply_scenario();
        m
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.r, self.v, self.phi, self.l, self.t, self.fuel]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.r, self.v, self.phi, self.l, self.t, self.fuel] = [x[0], x[1], x[2], x[3], x[4], x[5]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&self.calculate());
    }

    fn set_inputs(&mut self, u: &[f64]) {
        [self.a_r, self.a_phi] = [u[0], u[1]];
    }

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.calculate();
        out.copy_from_slice(&[self.r, self.v, self.omega, self.t, self.fuel, self.r_target]);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<BlackHole>);

/// The plant the component exports.
pub type BlackHolePlant = FmuPlant<BlackHole>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::plant_bindings::exports::plimsoll::sim::plant::StepStatus;
    use plimsoll_sim_kit::{CoSim, Plant};

    fn start(p: [f64; 3]) -> BlackHolePlant {
        BlackHolePlant::start(p, 1.0, 600.0).expect("the black hole starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn apply_scenario_starts_on_the_circular_orbit() {
        let m = BlackHole::new([4.0, 0.1, 0.05]);
        let mut x = [0.0; 6];
        m.states(&mut x);
        assert_eq!(x, [4.0, 0.1, 0.0, 4.0 / sqrt(1.0), 0.0, 0.0]);
        // Below 3.05 (and NaN) the start radius is 3.05.
        for r in [2.0, 3.05, f64::NAN, -7.0] {
            let m = BlackHole::new([r, 0.0, 0.02]);
            m.states(&mut x);
            assert_eq!(x[0], 3.05);
            assert_eq!(x[3], 3.05 / sqrt(3.05 - 3.0));
        }
        // The default scenario gives the start value of L, 5 / sqrt(2).
        let m = BlackHole::new([5.0, 0.0, 0.02]);
        m.states(&mut x);
        assert_eq!(x[3].to_bits(), (5.0 / sqrt(2.0)).to_bits());
        assert_eq!(x[3], 3.5355339059327373);
    }

    #[test]
    fn observes_the_derived_omega() {
        let mut p = start([5.0, 0.0, 0.02]);
        let l = 5.0 / sqrt(2.0);
        assert_eq!(bits(&p.observe()), bits(&[5.0, 0.0, l / 25.0, 0.0, 0.0, 5.0]));
    }

    #[test]
    fn first_substep_by_hand() {
        let mut sim = CoSim::<BlackHole>::new([6.0, 0.0, 0.02], 600.0);
        sim.model.set_inputs(&[0.01, -0.5]);
        let (r, l) = (6.0_f64, 6.0 / sqrt(3.0));
        let dv = -1.0 / (r * r) + l * l / (r * r * r) - 3.0 * l * l / (r * r * r * r) + 0.01;
        let dphi = l / (r * r);
        let dl = r * -0.02;
        let f = 1.0 - 2.0 / r;
        let dt = sqrt(0.0 * 0.0 + f * (1.0 + l * l / (r * r))) / f;
        let mut dx = [0.0; 6];
        sim.model.derivatives(0.0, &mut dx);
        assert_eq!(bits(&dx), bits(&[0.0, dv, dphi, dl, dt, 0.01 + 0.02]));
    }

    #[test]
    fn thrust_is_clamped_to_a_max() {
        let p = [6.0, 0.0, 0.02];
        let (mut big, mut lim) = (start(p), start(p));
        for _ in 0..5 {
            big.step(&[1.0, -3.0]).expect("step");
            lim.step(&[0.02, -0.02]).expect("step");
        }
        assert_eq!(bits(&big.observe()), bits(&lim.observe()));
    }

    #[test]
    fn capture_freezes_without_terminating() {
        // From 3.05 falling inward fast, the probe crosses 2.05 within a few ticks.
        let mut p = start([3.05, -1.0, 0.02]);
        let mut captured = None;
        for k in 0..10 {
            assert!(matches!(p.step(&[0.0, 0.0]), Ok(StepStatus::Running)));
            let o = p.observe();
            if o[0] <= R_CAPTURE {
                captured = Some((k, o));
                break;
            }
        }
        let (_, o) = captured.expect("the probe is captured");
        assert_eq!(o[2], 0.0);
        for _ in 0..3 {
            assert!(matches!(p.step(&[0.02, 0.02]), Ok(StepStatus::Running)));
            assert_eq!(bits(&p.observe()), bits(&o));
        }
    }

    #[test]
    fn ticks_after_time_100_run_1001_substeps() {
        let mut sim = CoSim::<BlackHole>::new([6.0, 0.0, 0.02], 600.0);
        let mut point = 0.0;
        for tick in 0..100 {
            sim.do_step(point, 1.0).expect("the step runs");
            point += 1.0;
            if tick == 98 {
                assert_eq!(sim.time(), 0.0 + 99000.0 * 1e-3);
            }
        }
        assert_eq!(sim.time(), 0.0 + 100_001.0 * 1e-3);
        assert!((sim.time() - 100.001).abs() < 1e-9);
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let p = [6.0, 0.0, 0.02];
        let (mut a, mut b) = (start(p), start(p));
        for k in 0..3 {
            let u = [0.005 * f64::from(k), 0.005];
            a.step(&u).expect("step");
            b.step(&u).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 6 * 6 + 6 * 2);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[0.0, 0.01]).expect("step");
        b.step(&[0.0, 0.01]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_r)/dv = 1, d(der_v)/da_r = 1, d(der_v)/da_phi = 0, d(der_L)/da_phi = r.
        assert!((j[1] - 1.0).abs() < 1e-9);
        assert!((j[36 + 2] - 1.0).abs() < 1e-6, "{}", j[36 + 2]);
        assert_eq!(j[36 + 2 + 1], 0.0);
        assert!((j[36 + 3 * 2 + 1] - before[0]).abs() < 1e-6);
    }
}
