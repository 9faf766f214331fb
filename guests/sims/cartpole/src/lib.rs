//! The cart-pole: a cart on a frictionless rail with a pole hinged on it, pushed by
//! a force the plant clamps to ±20 N. The angle is measured from upright (π is
//! hanging) and is not wrapped. Nothing terminates it: a pole that falls keeps
//! falling, and the judge decides what a fall means. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

use plimsoll_libm::{cos, sin};
use plimsoll_sim_kit::{FmuPlant, Model, clamp_seq};

/// The cart-pole's states, parameters and input.
#[derive(Debug, Clone)]
pub struct CartPole {
    x: f64,
    v: f64,
    theta: f64,
    omega: f64,
    force: f64,
    /// Half the pole's length, m.
    l: f64,
    /// The cart's mass, kg.
    cart: f64,
    /// The pole's mass, kg.
    pole: f64,
    g: f64,
    force_max: f64,
}

impl Model for CartPole {
    const NAME: &'static str = "CartPole";
    const PARAMETERS: [&'static str; 3] = ["theta0", "half_length", "cart_mass"];
    const OBSERVATIONS: &'static [&'static str] = &["x", "v", "theta", "omega"];
    const INPUTS: &'static [&'static str] = &["force"];
    const SOLVER_STEP: f64 = 1e-3;
    const STATES: usize = 4;

    fn new([theta0, half_length, cart_mass]: [f64; 3]) -> CartPole {
        CartPole {
            x: 0.0,
            v: 0.0,
            theta: theta0,
            omega: 0.0,
            force: 0.0,
            l: half_length,
            cart: cart_mass,
            pole: 0.1,
            g: 9.81,
            force_max: 20.0,
        }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.x, self.v, self.theta, self.omega]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.x, self.v, self.theta, self.omega] = [x[0], x[1], x[2], x[3]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        let f = clamp_seq(self.force, self.force_max);
        let (m, l) = (self.pole, self.l);
        let s = sin(self.theta);
        let c = cos(self.theta);
        let total = self.cart + m;
        let temp = (f + m * l * self.omega * self.omega * s) / total;
        let der_omega = (self.g * s - c * temp) / (l * (4.0 / 3.0 - m * c * c / total));
        let der_v = temp - m * l * der_omega * c / total;
        dx.copy_from_slice(&[self.v, der_v, self.omega, der_omega]);
    }

    fn set_inputs(&mut self, u: &[f64]) {
        self.force = u[0];
    }

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.states(out);
    }
}

plimsoll_sim_kit::plant!(FmuPlant<CartPole>);
