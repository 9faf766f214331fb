//! The slits: a phase mask of 16 cells, each lit by 8 point sources of unit
//! wavelength, shines on a screen of 64 points 2000 units away. The controller sets
//! the 16 cell phases; each cell also carries a hidden phase error (amplitude p2). The
//! plant reports the screen intensity normalised to its maximum and a target pattern
//! (one peak, two peaks or a flat top, chosen by p0 and placed by p1) normalised the
//! same way. It has no ODE state: a tick sets the phases and recomputes the field, and
//! the run terminates at tick `round(t_end / h)`. Its linearisation is the exact
//! Jacobian of the observed intensities by the phases. See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::f64::consts::PI;

use plimsoll_libm::{cos, exp, sin, sqrt, tanh};
use plimsoll_sim_kit::Plant;
use plimsoll_sim_kit::plant_bindings::exports::plimsoll::sim::plant::{Description, JacobianKind, StepStatus};

/// Cells of the mask (the inputs).
pub const NCELL: usize = 16;
/// Point sources per cell.
pub const SUB: usize = 8;
/// Screen points (the intensities observed, then as many targets).
pub const NSCR: usize = 64;
/// The width of a cell.
pub const PITCH: f64 = 4.0;
/// The distance from the mask to the screen.
pub const L: f64 = 2000.0;
/// The screen spans ±SCREEN_HALF.
pub const SCREEN_HALF: f64 = 200.0;
/// The width of the target's peaks or edges.
pub const TARGET_WIDTH: f64 = 15.0;
/// The wavenumber for unit wavelength, 2π.
pub const K: f64 = 2.0 * PI;

/// Where screen point `j` sits: `(j - 31.5) * 6.25`, exact.
fn screen_x(j: usize) -> f64 {
    (j as f64 - (NSCR - 1) as f64 / 2.0) * (2.0 * SCREEN_HALF / NSCR as f64)
}

/// Where source `s` of cell `n` sits: `(n - 7.5) * 4 + (s - 3.5) * 0.5`, exact.
fn source_y(n: usize, s: usize) -> f64 {
    (n as f64 - (NCELL - 1) as f64 / 2.0) * PITCH + (s as f64 - (SUB - 1) as f64 / 2.0) * (PITCH / SUB as f64)
}

/// One live slits simulation.
#[derive(Debug, Clone)]
pub struct Slits {
    phase: [f64; NCELL],
    defect: [f64; NCELL],
    /// The field at screen point j from cell n at zero phase: real parts.
    base_r: [[f64; NCELL]; NSCR],
    /// The same, imaginary parts.
    base_i: [[f64; NCELL]; NSCR],
    er: [f64; NSCR],
    ei: [f64; NSCR],
    intensity: [f64; NSCR],
    target: [f64; NSCR],
    imax: f64,
    ticks: i32,
    tick: i64,
}

impl Slits {
    /// The original's `sim_init` after its checks: the base fields, the hidden phase
    /// errors, the normalised target and the first field.
    pub fn new([p0, p1, p2]: [f64; 3], tick: f64, end: f64) -> Slits {
        let mut base_r = [[0.0; NCELL]; NSCR];
        let mut base_i = [[0.0; NCELL]; NSCR];
        for j in 0..NSCR {
            let x = screen_x(j);
            for n in 0..NCELL {
                let (mut er, mut ei) = (0.0, 0.0);
                for s in 0..SUB {
                    let dx = x - source_y(n, s);
                    let r = sqrt(L * L + dx * dx);
                    let a = 1.0 / sqrt(r);
                    let kr = K * r;
                    er += a * cos(kr);
                    ei += a * sin(kr);
                }
                base_r[j][n] = er;
                base_i[j][n] = ei;
            }
        }
        let mut defect = [0.0; NCELL];
        for (n, d) in defect.iter_mut().enumerate() {
            *d = p2 * sin(2.399 * n as f64 + 0.7);
        }
        let mut slits = Slits {
            phase: [0.0; NCELL],
            defect,
            base_r,
            base_i,
            er: [0.0; NSCR],
            ei: [0.0; NSCR],
            intensity: [0.0; NSCR],
            target: target(p0, p1),
            imax: 0.0,
            ticks: (end / tick + 0.5) as i32,
            tick: 0,
        };
        slits.compute();
        slits
    }

    /// The phases plus the hidden errors, and their cosines and sines.
    fn rotations(&self) -> [(f64, f64); NCELL] {
        let mut cs = [(0.0, 0.0); NCELL];
        for (n, c) in cs.iter_mut().enumerate() {
            let p = self.phase[n] + self.defect[n];
            *c = (cos(p), sin(p));
        }
        cs
    }

    /// The original's `compute`: the field and intensity at every screen point, and
    /// the maximum intensity (1 when none is positive).
    fn compute(&mut self) {
        let cs = self.rotations();
        self.imax = 0.0;
        for j in 0..NSCR {
            let (mut er, mut ei) = (0.0, 0.0);
            for (n, &(c, s)) in cs.iter().enumerate() {
                let (br, bi) = (self.base_r[j][n], self.base_i[j][n]);
                er += br * c - bi * s;
                ei += br * s + bi * c;
            }
            self.er[j] = er;
            self.ei[j] = ei;
            self.intensity[j] = er * er + ei * ei;
            if self.intensity[j] > self.imax {
                self.imax = self.intensity[j];
            }
        }
        if self.imax <= 0.0 {
            self.imax = 1.0;
        }
    }

    /// The observations: 64 intensities over the maximum, then the 64 targets.
    pub fn observations(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(2 * NSCR);
        out.extend(self.intensity.iter().map(|i| i / self.imax));
        out.extend_from_slice(&self.target);
        out
    }

    /// Sets the 16 phases, recomputes the field and counts the tick: `Terminated` when
    /// the count reaches the run's ticks (and on any tick after).
    pub fn advance(&mut self, phases: &[f64; NCELL]) -> StepStatus {
        self.phase = *phases;
        self.compute();
        self.tick += 1;
        if self.tick < i64::from(self.ticks) { StepStatus::Running } else { StepStatus::Terminated }
    }

    /// The original's `sim_jac_out`: d(I_j / Imax)/d(phase_n), 64 x 16 row-major,
    /// exact, with Imax the first maximal intensity's.
    pub fn output_jacobian(&self) -> Vec<f64> {
        let mut jmax = 0;
        for j in 1..NSCR {
            if self.intensity[j] > self.intensity[jmax] {
                jmax = j;
            }
        }
        let cs = self.rotations();
        let d_intensity = |j: usize, n: usize| {
            let (c, s) = cs[n];
            let (br, bi) = (self.base_r[j][n], self.base_i[j][n]);
            let ejr = br * c - bi * s;
            let eji = br * s + bi * c;
            2.0 * (self.er[j] * -eji + self.ei[j] * ejr)
        };
        let mut d_imax = [0.0; NCELL];
        for (n, d) in d_imax.iter_mut().enumerate() {
            *d = d_intensity(jmax, n);
        }
        let mut out = Vec::with_capacity(NSCR * NCELL);
        for j in 0..NSCR {
            for (n, dm) in d_imax.iter().enumerate() {
                let di = d_intensity(j, n);
                out.push((di - self.intensity[j] / self.imax * dm) / self.imax);
            }
        }
        out
    }
}

/// The target pattern, normalised to its maximum: `(int)p0` 2 gives two peaks at ±p1,
/// 3 a flat top over [-p1, p1], anything else one peak at p1.
fn target(p0: f64, p1: f64) -> [f64; NSCR] {
    let family = p0 as i32;
    let mut t = [0.0; NSCR];
    let mut tmax = 0.0;
    for (j, tj) in t.iter_mut().enumerate() {
        let x = screen_x(j);
        *tj = match family {
            2 => {
                let a = (x - p1) / TARGET_WIDTH;
                let b = (x + p1) / TARGET_WIDTH;
                exp(-a * a) + exp(-b * b)
            }
            3 => 0.5 * (tanh((x + p1) / TARGET_WIDTH) - tanh((x - p1) / TARGET_WIDTH)),
            _ => {
                let a = (x - p1) / TARGET_WIDTH;
                exp(-a * a)
            }
        };
        if *tj > tmax {
            tmax = *tj;
        }
    }
    if tmax <= 0.0 {
        tmax = 1.0;
    }
    for tj in &mut t {
        *tj /= tmax;
    }
    t
}

impl Plant for Slits {
    fn describe() -> Description {
        let mut observations: Vec<String> = (0..NSCR).map(|j| format!("intensity_{j}")).collect();
        observations.extend((0..NSCR).map(|j| format!("target_{j}")));
        Description {
            name: "Slits".to_string(),
            parameters: ["target_family", "target_offset", "phase_error"].iter().map(|s| s.to_string()).collect(),
            observations,
            inputs: (0..NCELL).map(|n| format!("phase_{n}")).collect(),
            solver_step: 0.0,
            states: 0,
            jacobian: JacobianKind::Out,
        }
    }

    fn start(parameters: [f64; 3], tick: f64, end: f64) -> Result<Slits, String> {
        // The kit has checked tick and end finite and positive (the original's -1).
        Ok(Slits::new(parameters, tick, end))
    }

    fn observe(&mut self) -> Vec<f64> {
        self.observations()
    }

    fn step(&mut self, inputs: &[f64]) -> Result<StepStatus, String> {
        let phases: &[f64; NCELL] =
            inputs.try_into().map_err(|_| format!("the slits take {NCELL} phases, not {}", inputs.len()))?;
        Ok(self.advance(phases))
    }

    fn jacobian(&mut self) -> Result<Vec<f64>, String> {
        // d(observation)/d(input) over all 128 observations: the intensities' rows,
        // then the targets' rows, which no phase moves (zeros, exactly).
        let mut j = self.output_jacobian();
        j.resize(2 * NSCR * NCELL, 0.0);
        Ok(j)
    }
}

plimsoll_sim_kit::plant!(Slits);

#[cfg(test)]
mod tests {
    use super::*;

    fn start(p: [f64; 3]) -> Slits {
        Slits::start(p, 1.0, 200.0).expect("the slits start")
    }

    fn max(v: &[f64]) -> f64 {
        v.iter().fold(f64::NEG_INFINITY, |m, &x| if x > m { x } else { m })
    }

    #[test]
    fn geometry_is_exact() {
        assert_eq!(screen_x(0), -196.875);
        assert_eq!(screen_x(63), 196.875);
        assert_eq!(screen_x(32) - screen_x(31), 6.25);
        assert_eq!(source_y(0, 0), -30.0 - 1.75);
        assert_eq!(source_y(15, 7), 30.0 + 1.75);
    }

    #[test]
    fn observations_are_normalised() {
        for family in [1.0, 2.0, 3.0, -4.0] {
            let mut s = start([family, 40.0, 0.5]);
            let o = s.observe();
            assert_eq!(o.len(), 128);
            assert_eq!(max(&o[..64]), 1.0);
            assert_eq!(max(&o[64..]), 1.0);
            assert!(o.iter().all(|v| (0.0..=1.0).contains(v)));
        }
    }

    #[test]
    fn targets_follow_the_family() {
        // One peak at p1 = 0: symmetric, largest at the two middle points.
        let one = start([1.0, 0.0, 0.0]).observe();
        assert_eq!(one[64 + 31], 1.0);
        assert_eq!(one[64 + 32], 1.0);
        assert_eq!(one[64], one[64 + 63]);
        // Two peaks at ±100: near x = ±100 high, the middle low.
        let two = start([2.9, 100.0, 0.0]).observe();
        assert!(two[64 + 15] > 0.9 && two[64 + 48] > 0.9 && two[64 + 31] < 0.01);
        // A flat top over ±100: the middle is the plateau.
        let flat = start([3.0, 100.0, 0.0]).observe();
        assert!(flat[64 + 31] > 0.99 && flat[64] < 0.01);
        // The single peak with its exact formula (musl's exp).
        let x = screen_x(40);
        let a = (x - 0.0) / 15.0;
        let t40 = exp(-a * a) / exp(-(screen_x(31) / 15.0) * (screen_x(31) / 15.0));
        assert_eq!(one[64 + 40], t40);
    }

    #[test]
    fn terminates_at_the_tick_count() {
        // round(20.0 / 0.5) = 40 ticks; a third of a tick more rounds down.
        for (end, ticks) in [(20.0, 40), (20.1, 40), (20.3, 41)] {
            let mut s = Slits::start([1.0, 0.0, 0.3], 0.5, end).expect("start");
            for k in 1..=ticks {
                let status = s.step(&[0.1 * f64::from(k); NCELL]).expect("step");
                let want = if k < ticks { StepStatus::Running } else { StepStatus::Terminated };
                assert_eq!(status, want, "tick {k} of {ticks}");
            }
        }
        let mut s = start([1.0, 0.0, 0.3]);
        assert!(s.step(&[0.0; 3]).is_err());
    }

    #[test]
    fn step_applies_phases_and_recomputes() {
        let mut s = start([1.0, 20.0, 0.3]);
        let before = s.observe();
        let phases: Vec<f64> = (0..NCELL).map(|n| 0.2 * n as f64).collect();
        s.step(&phases).expect("step");
        let after = s.observe();
        assert_ne!(before[..64], after[..64]);
        assert_eq!(before[64..], after[64..]);
        let mut again = start([1.0, 20.0, 0.3]);
        again.step(&phases).expect("step");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&again.observe()), bits(&after));
    }

    #[test]
    fn jacobian_matches_central_differences() {
        let mut s = start([2.0, 60.0, 0.4]);
        let phases: [f64; NCELL] = core::array::from_fn(|n| sin(1.3 * n as f64));
        s.step(&phases).expect("step");
        let before = s.observe();
        let j = s.jacobian().expect("jacobian");
        assert_eq!(j.len(), 2 * NSCR * NCELL, "every observation's row, the targets' all zero");
        assert!(j[NSCR * NCELL..].iter().all(|v| *v == 0.0));
        assert_eq!(s.observe(), before, "the jacobian leaves the state alone");
        let h = 1e-6;
        for n in 0..NCELL {
            let mut plus = phases;
            plus[n] += h;
            let mut minus = phases;
            minus[n] -= h;
            let mut sp = s.clone();
            sp.advance(&plus);
            let mut sm = s.clone();
            sm.advance(&minus);
            let (op, om) = (sp.observations(), sm.observations());
            for row in 0..NSCR {
                let fd = (op[row] - om[row]) / (2.0 * h);
                let exact = j[row * NCELL + n];
                assert!((fd - exact).abs() < 1e-5 * (1.0 + exact.abs()), "J[{row}][{n}] = {exact}, differences {fd}");
            }
        }
    }
}
