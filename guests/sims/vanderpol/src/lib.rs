//! The Van der Pol oscillator of the Modelica Reference FMUs (v0.0.41), run as a
//! module-run model: one row is mu, x0, x1; each step of the caller's step writes
//! x0, x1. Forward Euler with a fixed 0.01 substep. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use plimsoll_sim_kit::Model;

/// The oscillator's states and parameter.
#[derive(Debug, Clone)]
pub struct VanDerPol {
    x0: f64,
    x1: f64,
    /// The damping.
    mu: f64,
}

impl Model for VanDerPol {
    const NAME: &'static str = "VanDerPol";
    const PARAMETERS: [&'static str; 3] = ["mu", "x0", "x1"];
    const OBSERVATIONS: &'static [&'static str] = &["x0", "x1"];
    const INPUTS: &'static [&'static str] = &[];
    const SOLVER_STEP: f64 = 1e-2;
    const STATES: usize = 2;

    fn new([mu, x0, x1]: [f64; 3]) -> VanDerPol {
        // Start values x0 = 2, x1 = 0, mu = 1, then the row sets mu, x0, x1.
        VanDerPol { x0, x1, mu }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.x0, self.x1]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.x0, self.x1] = [x[0], x[1]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        let (x0, x1) = (self.x0, self.x1);
        dx.copy_from_slice(&[x1, self.mu * ((1.0 - x0 * x0) * x1) - x0]);
    }

    fn set_inputs(&mut self, _u: &[f64]) {}

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.states(out);
    }
}

/// The module-run export: the original's `sim_run` over [`VanDerPol`].
pub type VanDerPolRun = plimsoll_sim_kit::model::Fmu<VanDerPol>;

plimsoll_sim_kit::model!(VanDerPolRun);

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
        let record = sweep::<VanDerPolRun>(100, 20.0, (0.1, 5.0), 2.0, 0.0);
        assert_eq!(record.len(), 3_200_400);
        assert_eq!(hex(&Sha256::digest(&record)), "d1109d62b94796946a2b5a706d45e6259a005b63ee392fed918f39945c980815");
    }

    #[test]
    fn samples_of_row_zero() {
        let out = VanDerPolRun::run(&[0.1, 2.0, 0.0], 20.0, 0.01, 2002).expect("the row runs");
        assert_eq!(out.len(), 2 * 2000);
        assert_eq!(out[..4], [2.0, -0.02, 1.9998, -0.03994]);
        assert_eq!(out[3998..], [0.9677906246081114, -1.7705243225796057]);
    }

    #[test]
    fn describes_itself() {
        let d = VanDerPolRun::describe();
        assert_eq!(d.name, "VanDerPol");
        assert_eq!(d.parameters, ["mu", "x0", "x1"]);
        assert_eq!(d.outputs, ["x0", "x1"]);
    }

    #[test]
    fn stops_at_max_steps_and_refuses_a_short_row() {
        let out = VanDerPolRun::run(&[1.0, 2.0, 0.0], 20.0, 0.01, 7).expect("the row runs");
        assert_eq!(out.len(), 14);
        assert_eq!(VanDerPolRun::run(&[1.0, 2.0], 20.0, 0.01, 7), Err(-2));
    }
}
