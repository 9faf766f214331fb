//! The buck converter, averaged: the duty cycle (clamped to [0, 1]) scales the supply
//! into an LC filter feeding a resistive load that halves at `t_step` (FMU time).
//! Nothing terminates. The co-simulation loop's absolute 1e-5 closeness slack is ten
//! 1 µs substeps wide, so the first 10 µs tick runs 20 substeps and the FMU time
//! stays about one tick ahead of the communication time. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_sim_kit::{FmuPlant, Model, clamp01};

/// The inductance, H (the original's `100e-6`).
pub const L: f64 = 100e-6;
/// The capacitance, F (the original's `100e-6`).
pub const C: f64 = 100e-6;

/// The converter's states, parameters and input.
#[derive(Debug, Clone)]
pub struct Buck {
    /// The output voltage, V.
    v: f64,
    /// The inductor current, A.
    i: f64,
    /// The duty cycle, as sent (clamped when used).
    u: f64,
    /// The supply voltage, V.
    v_in: f64,
    /// The load before the step, Ω.
    r0: f64,
    /// When the load halves, s (FMU time).
    t_step: f64,
    /// The load now, Ω (derived).
    r: f64,
}

impl Buck {
    /// The original's `calculateValues`: the derivatives in state order, with the
    /// load updated, at FMU time `time`.
    fn calculate(&mut self, time: f64) -> [f64; 2] {
        let d = clamp01(self.u);
        self.r = if time >= self.t_step { self.r0 * 0.5 } else { self.r0 };
        let der_i = (d * self.v_in - self.v) / L;
        let der_v = (self.i - self.v / self.r) / C;
        [der_v, der_i]
    }
}

impl Model for Buck {
    const NAME: &'static str = "Buck";
    const PARAMETERS: [&'static str; 3] = ["v_in", "r_load", "t_step"];
    const OBSERVATIONS: &'static [&'static str] = &["v", "i"];
    const INPUTS: &'static [&'static str] = &["duty"];
    const SOLVER_STEP: f64 = 1e-6;
    const STATES: usize = 2;

    fn new([v_in, r0, t_step]: [f64; 3]) -> Buck {
        Buck { v: 0.0, i: 0.0, u: 0.0, v_in, r0, t_step, r: 4.0 }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.v, self.i]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.v, self.i] = [x[0], x[1]];
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

plimsoll_sim_kit::plant!(FmuPlant<Buck>);

/// The plant the component exports.
pub type BuckPlant = FmuPlant<Buck>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::{CoSim, Plant};

    fn start(p: [f64; 3]) -> BuckPlant {
        BuckPlant::start(p, 1e-5, 0.02).expect("the buck starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn first_substeps_by_hand() {
        let mut m = Buck::new([12.0, 4.0, 0.01]);
        m.set_inputs(&[0.5]);
        let mut dx = [0.0; 2];
        m.derivatives(0.0, &mut dx);
        assert_eq!(dx, [0.0, 6.0 / 1e-4]);
        m.set_states(&[0.0, 1e-6 * dx[1]]);
        m.derivatives(1e-6, &mut dx);
        let i1 = 1e-6 * (6.0 / 1e-4);
        assert_eq!(dx[0], i1 / 1e-4);
    }

    #[test]
    fn substeps_per_tick_follow_the_closeness_slack() {
        // Tick 0 runs 20 substeps, ticks 24 and 413 run 9, tick 25 runs 11, the others
        // 10; 20009 in all to 0.02 s.
        let mut sim = CoSim::<Buck>::new([12.0, 4.0, 0.01], 0.02);
        sim.model.set_inputs(&[0.5]);
        let mut point = 0.0;
        let mut before = 0.0_f64;
        for tick in 0..2000 {
            sim.do_step(point, 1e-5).expect("the step runs");
            point += 1e-5;
            let n = (sim.time() / 1e-6 + 0.5) as u64;
            assert_eq!(sim.time(), 0.0 + n as f64 * 1e-6);
            let substeps = n - (before / 1e-6 + 0.5) as u64;
            let want = match tick {
                0 => 20,
                24 | 413 => 9,
                25 => 11,
                _ => 10,
            };
            assert_eq!(substeps, want, "tick {tick}");
            before = sim.time();
        }
        assert_eq!((sim.time() / 1e-6 + 0.5) as u64, 20009);
        // Nine substeps (9 µs) ahead of the communication time at the end.
        assert!((sim.time() - 0.020009).abs() < 1e-12);
    }

    #[test]
    fn first_tick_reaches_two_ticks_of_fmu_time() {
        let mut sim = CoSim::<Buck>::new([12.0, 4.0, 0.01], 0.02);
        sim.do_step(0.0, 1e-5).expect("the step runs");
        assert_eq!(sim.time(), 0.0 + 20.0 * 1e-6);
        assert!((sim.time() - 2e-5).abs() < 1e-18);
    }

    #[test]
    fn load_halves_at_fmu_time() {
        let mut m = Buck::new([12.0, 4.0, 0.01]);
        let mut dx = [0.0; 2];
        m.derivatives(0.009_999, &mut dx);
        assert_eq!(m.r, 4.0);
        m.derivatives(0.01, &mut dx);
        assert_eq!(m.r, 2.0);
    }

    #[test]
    fn duty_is_clamped_to_zero_one() {
        let p = [12.0, 4.0, 0.01];
        let (mut hi, mut one, mut lo, mut zero) = (start(p), start(p), start(p), start(p));
        for _ in 0..200 {
            hi.step(&[1.5]).expect("step");
            one.step(&[1.0]).expect("step");
            lo.step(&[-0.5]).expect("step");
            zero.step(&[0.0]).expect("step");
        }
        assert_eq!(bits(&hi.observe()), bits(&one.observe()));
        assert_eq!(bits(&lo.observe()), bits(&zero.observe()));
        assert_eq!(zero.observe(), [0.0, 0.0]);
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let p = [12.0, 4.0, 0.01];
        let (mut a, mut b) = (start(p), start(p));
        for _ in 0..100 {
            a.step(&[0.4]).expect("step");
            b.step(&[0.4]).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 2 * 2 + 2);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[0.6]).expect("step");
        b.step(&[0.6]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_v)/dv = -1/(R C), d(der_v)/di = 1/C, d(der_i)/dv = -1/L, d(der_i)/du = Vin/L.
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * y.abs();
        assert!(close(j[0], -1.0 / (4.0 * 1e-4)));
        assert!(close(j[1], 1e4));
        assert!(close(j[2], -1e4));
        assert!(close(j[5], 12.0 / 1e-4));
    }
}
