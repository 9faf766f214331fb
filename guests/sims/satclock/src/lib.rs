//! The satellite clock: its error x drifts by the relativistic rate (38.6 µs a day),
//! the orbit's eccentric term, the oscillator's own offset and the commanded frequency
//! correction (clamped to ±1e-8); the controller sees x only through a measurement
//! delay of D seconds, modelled as six first-order lags. Nothing terminates. See
//! README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use core::f64::consts::PI;

use plimsoll_libm::cos;
use plimsoll_sim_kit::{FmuPlant, Model, clamp_seq};

/// The relativistic rate, s/s: 38.6 µs a day.
pub const RATE_GR: f64 = 38.6e-6 / 86400.0;
/// The eccentric term's amplitude per unit eccentricity (dimensionless).
pub const ECC_AMP: f64 = 2.29e-6;
/// The orbital angular frequency, rad/s: one revolution in 12 hours.
pub const OMEGA: f64 = 2.0 * PI / (12.0 * 3600.0);
/// The limit on the frequency correction (fractional).
pub const U_MAX: f64 = 1e-8;

/// The clock's states, parameters and input.
#[derive(Debug, Clone)]
pub struct SatClock {
    /// The clock error, s.
    x: f64,
    /// The delay line, s: `d[5]` is the measurement.
    d: [f64; 6],
    /// The frequency correction, as sent (clamped when used).
    u: f64,
    /// The orbit's eccentricity (p0).
    e: f64,
    /// The oscillator's fractional frequency offset (p1).
    y0: f64,
    /// The measurement delay, s (p2).
    delay: f64,
}

impl SatClock {
    /// The original's `calculateValues`: the derivatives in state order at FMU time
    /// `time`.
    fn calculate(&self, time: f64) -> [f64; 7] {
        let u = clamp_seq(self.u, U_MAX);
        let ecc_rate = self.e * ECC_AMP * OMEGA * cos(OMEGA * time);
        let der_x = RATE_GR + ecc_rate + self.y0 + u;
        let k = 6.0 / self.delay;
        let d = &self.d;
        [
            der_x,
            k * (self.x - d[0]),
            k * (d[0] - d[1]),
            k * (d[1] - d[2]),
            k * (d[2] - d[3]),
            k * (d[3] - d[4]),
            k * (d[4] - d[5]),
        ]
    }
}

impl Model for SatClock {
    const NAME: &'static str = "SatClock";
    const PARAMETERS: [&'static str; 3] = ["eccentricity", "y0", "delay"];
    const OBSERVATIONS: &'static [&'static str] = &["measured_error", "time"];
    const INPUTS: &'static [&'static str] = &["frequency_correction"];
    const SOLVER_STEP: f64 = 3.0;
    const STATES: usize = 7;

    fn new([e, y0, delay]: [f64; 3]) -> SatClock {
        SatClock { x: 0.0, d: [0.0; 6], u: 0.0, e, y0, delay }
    }

    fn states(&self, x: &mut [f64]) {
        x[0] = self.x;
        x[1..7].copy_from_slice(&self.d);
    }

    fn set_states(&mut self, x: &[f64]) {
        self.x = x[0];
        self.d.copy_from_slice(&x[1..7]);
    }

    fn derivatives(&mut self, time: f64, dx: &mut [f64]) {
        dx.copy_from_slice(&self.calculate(time));
    }

    fn set_inputs(&mut self, u: &[f64]) {
        self.u = u[0];
    }

    fn observe(&mut self, time: f64, out: &mut [f64]) {
        out.copy_from_slice(&[self.d[5], time]);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<SatClock>);

/// The plant the component exports.
pub type SatClockPlant = FmuPlant<SatClock>;

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_sim_kit::{CoSim, Plant};

    fn start(p: [f64; 3]) -> SatClockPlant {
        SatClockPlant::start(p, 30.0, 86400.0).expect("the clock starts")
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn constants_have_the_originals_bits() {
        // 0x1.eb378d561d98ap-32 and 0x1.3104b57cf96a3p-13.
        assert_eq!(RATE_GR.to_bits(), 0x3DFE_B378_D561_D98A);
        assert_eq!(RATE_GR, 4.4675925925925927e-10);
        assert_eq!(OMEGA.to_bits(), 0x3F23_104B_57CF_96A3);
        assert_eq!(OMEGA, 0.0001454441043328608);
    }

    #[test]
    fn first_substeps_by_hand() {
        let mut sim = CoSim::<SatClock>::new([0.02, 1e-9, 600.0], 86400.0);
        sim.model.set_inputs(&[-2e-9]);
        sim.do_step(0.0, 30.0).expect("the step runs");
        assert_eq!(sim.time(), 30.0);
        let mut x = 0.0_f64;
        let mut d = [0.0_f64; 6];
        for n in 0..10 {
            let time = f64::from(n) * 3.0;
            let k = 6.0 / 600.0;
            let dd = [
                k * (x - d[0]),
                k * (d[0] - d[1]),
                k * (d[1] - d[2]),
                k * (d[2] - d[3]),
                k * (d[3] - d[4]),
                k * (d[4] - d[5]),
            ];
            let dx = ((RATE_GR + ((0.02 * 2.29e-6) * OMEGA) * cos(OMEGA * time)) + 1e-9) + -2e-9;
            x += 3.0 * dx;
            for i in 0..6 {
                d[i] += 3.0 * dd[i];
            }
            if n == 0 {
                assert_eq!(x, 3.0 * ((RATE_GR + 0.02 * 2.29e-6 * OMEGA) + 1e-9 - 2e-9));
            }
        }
        let mut s = [0.0; 7];
        sim.model.states(&mut s);
        assert_eq!(s[0], x);
        assert_eq!(&s[1..], &d);
        // The measurement moves from the seventh substep on: one stage a substep.
        assert!(d[5] != 0.0);
        assert_eq!(observe_now(&mut sim), [d[5], 30.0]);
    }

    fn observe_now(sim: &mut CoSim<SatClock>) -> [f64; 2] {
        let mut out = [0.0; 2];
        sim.observe(&mut out);
        out
    }

    #[test]
    fn correction_is_clamped() {
        let p = [0.02, 0.0, 600.0];
        let (mut big, mut lim, mut neg, mut neg_lim) = (start(p), start(p), start(p), start(p));
        for _ in 0..40 {
            big.step(&[1.0]).expect("step");
            lim.step(&[1e-8]).expect("step");
            neg.step(&[-1.0]).expect("step");
            neg_lim.step(&[-1e-8]).expect("step");
        }
        assert_eq!(bits(&big.observe()), bits(&lim.observe()));
        assert_eq!(bits(&neg.observe()), bits(&neg_lim.observe()));
    }

    #[test]
    fn a_day_is_2880_ticks_of_ten_substeps() {
        let mut p = start([0.02, 0.0, 600.0]);
        for _ in 0..2880 {
            p.step(&[0.0]).expect("step");
        }
        assert_eq!(p.observe()[1], 86400.0);
        assert!(p.step(&[0.0]).is_err(), "a step past the stop time is refused");
    }

    #[test]
    fn jacobian_leaves_the_state_exactly() {
        let p = [0.02, 1e-9, 600.0];
        let (mut a, mut b) = (start(p), start(p));
        for _ in 0..100 {
            a.step(&[-1e-9]).expect("step");
            b.step(&[-1e-9]).expect("step");
        }
        let before = a.observe();
        let j = a.jacobian().expect("jacobian");
        assert_eq!(j.len(), 7 * 7 + 7);
        assert_eq!(bits(&a.observe()), bits(&before));
        a.step(&[2e-9]).expect("step");
        b.step(&[2e-9]).expect("step");
        assert_eq!(bits(&a.observe()), bits(&b.observe()));
        // d(der_d1)/dx = 6/D; d(der_x)/du = 1 inside the limit (eps = 1e-6 jumps over
        // the 1e-8 limit, so the difference is clamped: (1e-8 - (-1e-8)) / 2e-6).
        assert!((j[7] - 0.01).abs() < 1e-9);
        assert!((j[49] - 2e-8 / 2e-6).abs() < 1e-12);
    }
}
