//! The shower, delay-chain version: a valve mixes hot and cold water, the mix reaches
//! the head through a hot pipe modelled as six first-order lags (the pipe delay split
//! in six), and a toilet flush raises the hot fraction by 15 % for 12 s. The valve
//! follows the commanded hot fraction (clamped to [0, 1]) with a 0.5 s lag and the
//! head follows the pipe with a 1 s lag. Nothing terminates it. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_sim_kit::{FmuPlant, Model, clamp01};

/// The cold supply temperature, °C.
pub const T_COLD: f64 = 12.0;
/// How much a flush raises the valve's hot fraction (relative).
pub const FLUSH_GAIN: f64 = 0.15;
/// How long a flush lasts, s.
pub const FLUSH_LEN: f64 = 12.0;
/// The valve's time constant, s.
pub const TAU_V: f64 = 0.5;
/// The head's time constant, s.
pub const TAU_H: f64 = 1.0;

/// The shower's states, parameters and input.
#[derive(Debug, Clone)]
pub struct Shower {
    /// The head temperature, °C.
    t_head: f64,
    /// The valve position (hot fraction).
    a: f64,
    /// The six pipe lags, °C, from the valve to the head.
    pipe: [f64; 6],
    /// The commanded hot fraction, as sent (clamped when used).
    u: f64,
    /// The pipe delay, s.
    delay: f64,
    /// The hot supply temperature, °C.
    t_hot: f64,
    /// When the flush starts, s.
    t_flush: f64,
    /// The valve outlet temperature, °C (derived).
    t_mix: f64,
}

impl Shower {
    /// The original's `calculateValues`: the derivatives in state order, with `t_mix`
    /// updated, at FMU time `time`.
    fn calculate(&mut self, time: f64) -> [f64; 8] {
        let u = clamp01(self.u);
        let flushing = if time >= self.t_flush && time < self.t_flush + FLUSH_LEN { FLUSH_GAIN } else { 0.0 };
        let a_eff = clamp01(self.a * (1.0 + flushing));
        self.t_mix = a_eff * self.t_hot + (1.0 - a_eff) * T_COLD;
        let der_a = (u - self.a) / TAU_V;
        let k = 6.0 / self.delay;
        let p = &self.pipe;
        [
            (p[5] - self.t_head) / TAU_H,
            der_a,
            k * (self.t_mix - p[0]),
            k * (p[0] - p[1]),
            k * (p[1] - p[2]),
            k * (p[2] - p[3]),
            k * (p[3] - p[4]),
            k * (p[4] - p[5]),
        ]
    }
}

impl Model for Shower {
    const NAME: &'static str = "Shower";
    const PARAMETERS: [&'static str; 3] = ["pipe_delay", "t_hot", "t_flush"];
    const OBSERVATIONS: &'static [&'static str] = &["t_head", "valve"];
    const INPUTS: &'static [&'static str] = &["hot_fraction"];
    const SOLVER_STEP: f64 = 1e-2;
    const STATES: usize = 8;

    fn new([delay, t_hot, t_flush]: [f64; 3]) -> Shower {
        Shower { t_head: 12.0, a: 0.0, pipe: [12.0; 6], u: 0.0, delay, t_hot, t_flush, t_mix: 12.0 }
    }

    fn states(&self, x: &mut [f64]) {
        x[0] = self.t_head;
        x[1] = self.a;
        x[2..8].copy_from_slice(&self.pipe);
    }

    fn set_states(&mut self, x: &[f64]) {
        self.t_head = x[0];
        self.a = x[1];
        self.pipe.copy_from_slice(&x[2..8]);
    }

    fn derivatives(&mut self, time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&self.calculate(time));
    }

    fn set_inputs(&mut self, u: &[f64]) {
        self.u = u[0];
    }

    fn observe(&mut self, time: f64, out: &mut [f64]) {
        self.calculate(time);
        out.copy_from_slice(&[self.t_head, self.a]);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<Shower>);

/// The plant the component exports.
pub type ShowerPlant = FmuPlant<Shower>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::{CoSim, Plant};

    fn start() -> ShowerPlant {
        ShowerPlant::start([3.0, 60.0, 40.0], 0.1, 90.0).expect("the shower starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn starts_at_the_start_values() {
        assert_eq!(start().observe(), [12.0, 0.0]);
    }

    #[test]
    fn first_tick_runs_ten_substeps_by_hand() {
        let mut sim = CoSim::<Shower>::new([3.0, 60.0, 40.0], 90.0);
        sim.model.set_inputs(&[1.0]);
        sim.do_step(0.0, 0.1).expect("the step runs");
        assert_eq!(sim.time(), 10.0 * 1e-2);
        // The valve by hand: a += 0.01 * ((1 - a) / 0.5), ten times.
        let mut a = 0.0_f64;
        let mut t = [12.0_f64; 6];
        let mut head = 12.0_f64;
        for _ in 0..10 {
            let t_mix = a * 60.0 + (1.0 - a) * 12.0;
            let k = 6.0 / 3.0;
            let d = [
                (t[5] - head) / 1.0,
                (1.0 - a) / 0.5,
                k * (t_mix - t[0]),
                k * (t[0] - t[1]),
                k * (t[1] - t[2]),
                k * (t[2] - t[3]),
                k * (t[3] - t[4]),
                k * (t[4] - t[5]),
            ];
            head += 0.01 * d[0];
            a += 0.01 * d[1];
            for i in 0..6 {
                t[i] += 0.01 * d[i + 2];
            }
        }
        let mut x = [0.0; 8];
        sim.model.states(&mut x);
        assert_eq!(x[1], a);
        assert_eq!(x[0], head);
        assert_eq!(&x[2..], &t);
        // The head warms only from the eighth substep: the lags pass one stage a substep.
        assert!(head > 12.0);
    }

    #[test]
    fn input_is_clamped_to_zero_one() {
        let (mut hi, mut one, mut lo, mut zero) = (start(), start(), start(), start());
        for _ in 0..50 {
            hi.step(&[5.0]).expect("step");
            one.step(&[1.0]).expect("step");
            lo.step(&[-3.0]).expect("step");
            zero.step(&[0.0]).expect("step");
        }
        assert_eq!(bits(&hi.observe()), bits(&one.observe()));
        assert_eq!(bits(&lo.observe()), bits(&zero.observe()));
        assert_eq!(zero.observe(), [12.0, 0.0]);
    }

    #[test]
    fn flush_window_is_half_open_in_fmu_time() {
        let mut m = Shower::new([3.0, 60.0, 40.0]);
        m.a = 0.5;
        m.calculate(39.99);
        assert_eq!(m.t_mix, 0.5 * 60.0 + 0.5 * 12.0);
        m.calculate(40.0);
        let a_eff = 0.5 * 1.15;
        assert_eq!(m.t_mix, a_eff * 60.0 + (1.0 - a_eff) * 12.0);
        m.calculate(52.0);
        assert_eq!(m.t_mix, 0.5 * 60.0 + 0.5 * 12.0);
        m.a = 0.95;
        m.calculate(45.0);
        assert_eq!(m.t_mix, 60.0);
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let (mut a, mut b) = (start(), start());
        for k in 0..30 {
            let u = [0.3 + 0.01 * f64::from(k)];
            a.step(&u).expect("step");
            b.step(&u).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 8 * 8 + 8);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[0.7]).expect("step");
        b.step(&[0.7]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_a)/da = -1/tau_v, d(der_a)/du = 1/tau_v, d(der_T_head)/dT_head = -1.
        assert!((j[8 + 1] + 2.0).abs() < 1e-6);
        assert!((j[64 + 1] - 2.0).abs() < 1e-6);
        assert!((j[0] + 1.0).abs() < 1e-6);
    }
}
