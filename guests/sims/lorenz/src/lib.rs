//! The Lorenz system (the original plimsoll model), run as a module-run model: one row
//! is rho, sigma, beta, from the fixed start x = y = z = 1; each step of the caller's
//! step writes x, y, z. Forward Euler with a fixed 1 ms substep. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use plimsoll_sim_kit::Model;

/// The system's states and parameters.
#[derive(Debug, Clone)]
pub struct Lorenz {
    x: f64,
    y: f64,
    z: f64,
    sigma: f64,
    rho: f64,
    beta: f64,
}

impl Model for Lorenz {
    const NAME: &'static str = "Lorenz";
    const PARAMETERS: [&'static str; 3] = ["rho", "sigma", "beta"];
    const OBSERVATIONS: &'static [&'static str] = &["x", "y", "z"];
    const INPUTS: &'static [&'static str] = &[];
    const SOLVER_STEP: f64 = 1e-3;
    const STATES: usize = 3;

    fn new([rho, sigma, beta]: [f64; 3]) -> Lorenz {
        // Start values x = y = z = 1, sigma 10, rho 28, beta 8/3; the row sets rho,
        // sigma, beta.
        Lorenz { x: 1.0, y: 1.0, z: 1.0, sigma, rho, beta }
    }

    fn states(&self, x: &mut [f64]) {
        x.copy_from_slice(&[self.x, self.y, self.z]);
    }

    fn set_states(&mut self, x: &[f64]) {
        [self.x, self.y, self.z] = [x[0], x[1], x[2]];
    }

    fn derivatives(&mut self, _time: f64, dx: &mut [f64]) {
        let (x, y, z) = (self.x, self.y, self.z);
        dx.copy_from_slice(&[self.sigma * (y - x), x * (self.rho - z) - y, x * y - self.beta * z]);
    }

    fn set_inputs(&mut self, _u: &[f64]) {}

    fn observe(&mut self, _time: f64, out: &mut [f64]) {
        self.states(out);
    }
}

/// The module-run export: the original's `sim_run` over [`Lorenz`].
pub type LorenzRun = plimsoll_sim_kit::model::Fmu<Lorenz>;

plimsoll_sim_kit::model!(LorenzRun);

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
        let record = sweep::<LorenzRun>(50, 60.0, (20.0, 40.0), 10.0, 8.0 / 3.0);
        assert_eq!(record.len(), 7_200_200);
        assert_eq!(hex(&Sha256::digest(&record)), "70f1e8e657d804e176f18bf7afb01811a4b0b5f41d4609b74184ab2a6ab6a67e");
    }

    #[test]
    fn samples_of_rho_20() {
        assert_eq!(8.0 / 3.0, 2.6666666666666665);
        let out = LorenzRun::run(&[20.0, 10.0, 8.0 / 3.0], 60.0, 0.01, 6002).expect("the row runs");
        assert_eq!(out.len(), 3 * 6000);
        assert_eq!(out[..3], [1.0078754612465082, 1.1796665979964323, 0.9843587884061912]);
        assert_eq!(out[17997..], [-7.123093871880948, -7.124155076011152, 19.003780729200763]);
    }

    #[test]
    fn describes_itself() {
        let d = LorenzRun::describe();
        assert_eq!(d.name, "Lorenz");
        assert_eq!(d.parameters, ["rho", "sigma", "beta"]);
        assert_eq!(d.outputs, ["x", "y", "z"]);
    }
}
