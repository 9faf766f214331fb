//! The buck converter's accepted law in Rust, the same arithmetic in the same order
//! as `examples/sims/buck/accepted.c` and `accepted.js`: a voltage PI loop sets a
//! current reference limited to -2..6 A, a current PI loop sets the duty cycle, and
//! the reference ramps to 5 V over 3 ms. No library call, so all three forms give
//! the same trajectory bit for bit. It imports nothing.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

const REFERENCE: f64 = 5.0;
const TICK: f64 = 1e-5;
const RAMP: f64 = 0.003;
const CURRENT_MAX: f64 = 6.0;
const CURRENT_MIN: f64 = -2.0;
const VOLTAGE_P: f64 = 1.0;
const VOLTAGE_I: f64 = 5000.0;
const CURRENT_P: f64 = 0.2;
const CURRENT_I: f64 = 2000.0;

/// The law's state between ticks: its own clock and the two integrators.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Law {
    t: f64,
    voltage_integral: f64,
    duty_integral: f64,
}

impl Law {
    /// The duty cycle for output voltage `v` and inductor current `i`.
    #[allow(clippy::manual_clamp, reason = "the C and JavaScript forms' two tests, kept in the same order")]
    pub fn control(&mut self, v: f64, i: f64) -> f64 {
        let target = if self.t < RAMP { REFERENCE * (self.t / RAMP) } else { REFERENCE };
        let e = target - v;
        let mut current_ref = VOLTAGE_P * e + VOLTAGE_I * self.voltage_integral;
        if current_ref > CURRENT_MIN && current_ref < CURRENT_MAX {
            self.voltage_integral += e * TICK;
        }
        if current_ref > CURRENT_MAX {
            current_ref = CURRENT_MAX;
        }
        if current_ref < CURRENT_MIN {
            current_ref = CURRENT_MIN;
        }
        let ei = current_ref - i;
        let mut u = CURRENT_P * ei + self.duty_integral;
        if (0.0..=1.0).contains(&u) {
            self.duty_integral += CURRENT_I * ei * TICK;
        }
        if u < 0.0 {
            u = 0.0;
        }
        if u > 1.0 {
            u = 1.0;
        }
        self.t += TICK;
        u
    }
}

// One component instance is one controller run, so the law's state lives in it,
// held as bits in atomics (the instance is single-threaded; they only avoid `unsafe`).
static T: AtomicU64 = AtomicU64::new(0);
static VOLTAGE_INTEGRAL: AtomicU64 = AtomicU64::new(0);
static DUTY_INTEGRAL: AtomicU64 = AtomicU64::new(0);

/// Answers one tick: the observations are v and i.
pub fn control(observation: &[f64], _tick: u32) -> Vec<f64> {
    let load = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Relaxed));
    let mut law = Law { t: load(&T), voltage_integral: load(&VOLTAGE_INTEGRAL), duty_integral: load(&DUTY_INTEGRAL) };
    let at = |i: usize| observation.get(i).copied().unwrap_or(f64::NAN);
    let u = law.control(at(0), at(1));
    T.store(law.t.to_bits(), Ordering::Relaxed);
    VOLTAGE_INTEGRAL.store(law.voltage_integral.to_bits(), Ordering::Relaxed);
    DUTY_INTEGRAL.store(law.duty_integral.to_bits(), Ordering::Relaxed);
    vec![u]
}

plimsoll_sim_kit::controller!(control);
