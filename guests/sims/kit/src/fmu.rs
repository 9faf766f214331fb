//! The fixed-step co-simulation every FMU-style model steps by: one communication
//! step of `h` runs forward-Euler substeps of the model's fixed solver step while the
//! next substep would not pass the communication point, by the same closeness test,
//! time arithmetic and order as the Modelica Reference FMUs' co-simulation loop
//! (tag v0.0.41) the original plants were compiled against. The arithmetic is kept
//! exactly: derivatives from the old state at the substep's start time, then one
//! simultaneous update `x + h_s * dx`; time recomputed as `n * h_s`, never summed.

use alloc::vec;
use alloc::vec::Vec;

/// A model with continuous states stepped by forward Euler.
pub trait Model: Sized {
    /// The model's name (`CartPole`).
    const NAME: &'static str;
    /// The three parameter names, in the order the scenario gives them.
    const PARAMETERS: [&'static str; 3];
    /// The observation names, in the order [`Model::observe`] writes them.
    const OBSERVATIONS: &'static [&'static str];
    /// The input names, in the order [`Model::set_inputs`] takes them.
    const INPUTS: &'static [&'static str];
    /// The fixed Euler substep, in seconds (or the model's time unit).
    const SOLVER_STEP: f64;
    /// Continuous states.
    const STATES: usize;
    /// Event indicators (state events); 0 for a model without events.
    const EVENT_INDICATORS: usize = 0;

    /// The model with its start values and the parameters applied in order p0, p1,
    /// p2, as setting them one by one would.
    fn new(parameters: [f64; 3]) -> Self;

    /// The continuous states, in order.
    fn states(&self, x: &mut [f64]);

    /// Sets the continuous states.
    fn set_states(&mut self, x: &[f64]);

    /// The derivatives at the current states, inputs and `time` (the model's
    /// `calculateValues`: inputs are clamped here, derived values updated).
    fn derivatives(&mut self, time: f64, dx: &mut [f64]);

    /// Stores the inputs as given; clamping belongs to [`Model::derivatives`].
    fn set_inputs(&mut self, u: &[f64]);

    /// The observations at the current state and `time` (derived values
    /// recomputed first, as reading an FMU's outputs does).
    fn observe(&mut self, time: f64, out: &mut [f64]);

    /// The event indicators at the current state.
    fn event_indicators(&self, z: &mut [f64]) {
        let _ = z;
    }

    /// Handles a state event (the model's `eventUpdate`).
    fn event_update(&mut self) {}
}

/// The closeness test of the co-simulation loop: within 1e-5 absolutely, or within
/// 1e-5 of the larger magnitude.
pub fn is_close(a: f64, b: f64) -> bool {
    const EPSILON: f64 = 1.0e-5;
    let abs = |v: f64| if v >= 0.0 { v } else { -v };
    let d = abs(a - b);
    if d <= EPSILON {
        return true;
    }
    let (aa, bb) = (abs(a), abs(b));
    d <= EPSILON * (if aa < bb { bb } else { aa })
}

/// Why a communication step was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum StepError {
    /// The communication point is not where the last step ended.
    OutOfStep,
    /// The step size is not positive.
    NonPositiveStep,
    /// The step would end past the stop time.
    PastStop,
    /// An earlier step failed; the instance takes no more steps.
    Terminated,
}

impl StepError {
    /// The words a judge shows for it.
    pub fn text(&self) -> &'static str {
        match self {
            StepError::OutOfStep => "the communication point is not where the last step ended",
            StepError::NonPositiveStep => "the step size must be positive",
            StepError::PastStop => "the step would end past the stop time",
            StepError::Terminated => "an earlier step failed, so the simulation takes no more steps",
        }
    }
}

/// One instance of a model in step mode: the co-simulation state around it.
#[derive(Debug)]
pub struct CoSim<M: Model> {
    /// The model.
    pub model: M,
    stop_time: f64,
    next_point: f64,
    substeps: u64,
    time: f64,
    x: Vec<f64>,
    dx: Vec<f64>,
    previous_z: Vec<f64>,
    z: Vec<f64>,
    terminated: bool,
}

impl<M: Model> CoSim<M> {
    /// Instantiates the model with `parameters`, enters and leaves initialisation
    /// with start time 0 and `stop_time`, and stands ready for the first step.
    pub fn new(parameters: [f64; 3], stop_time: f64) -> CoSim<M> {
        let mut model = M::new(parameters);
        // Leaving initialisation computes the derived values once.
        let mut dx = vec![0.0; M::STATES];
        model.derivatives(0.0, &mut dx);
        let mut previous_z = vec![0.0; M::EVENT_INDICATORS];
        model.event_indicators(&mut previous_z);
        CoSim {
            model,
            stop_time,
            next_point: 0.0,
            substeps: 0,
            time: 0.0,
            x: vec![0.0; M::STATES],
            dx,
            previous_z,
            z: vec![0.0; M::EVENT_INDICATORS],
            terminated: false,
        }
    }

    /// The model's own time: the end of its last substep.
    pub fn time(&self) -> f64 {
        self.time
    }

    /// Advances from communication point `tc` by `hc`.
    ///
    /// # Errors
    ///
    /// The [`StepError`] that refused the step; after one, every later step is
    /// refused with [`StepError::Terminated`].
    pub fn do_step(&mut self, tc: f64, hc: f64) -> Result<(), StepError> {
        if self.terminated {
            return Err(StepError::Terminated);
        }
        let refused = |s: &mut Self, e: StepError| {
            s.terminated = true;
            Err(e)
        };
        if !is_close(tc, self.next_point) {
            return refused(self, StepError::OutOfStep);
        }
        if hc <= 0.0 {
            return refused(self, StepError::NonPositiveStep);
        }
        let point = tc + hc;
        if point > self.stop_time && !is_close(point, self.stop_time) {
            return refused(self, StepError::PastStop);
        }
        loop {
            let next = self.time + M::SOLVER_STEP;
            if next > point && !is_close(next, point) {
                break;
            }
            self.substep();
        }
        self.next_point = tc + hc;
        Ok(())
    }

    /// One forward-Euler substep, then the event check.
    fn substep(&mut self) {
        self.model.states(&mut self.x);
        self.model.derivatives(self.time, &mut self.dx);
        for (x, dx) in self.x.iter_mut().zip(&self.dx) {
            *x += M::SOLVER_STEP * *dx;
        }
        self.model.set_states(&self.x);
        self.substeps += 1;
        self.time = 0.0 + self.substeps as f64 * M::SOLVER_STEP;
        if M::EVENT_INDICATORS > 0 {
            self.model.event_indicators(&mut self.z);
            let mut event = false;
            for (p, z) in self.previous_z.iter_mut().zip(&self.z) {
                event |= (*p <= 0.0 && *z > 0.0) || (*p > 0.0 && *z <= 0.0);
                *p = *z;
            }
            if event {
                self.model.event_update();
                self.model.event_indicators(&mut self.previous_z);
            }
        }
    }

    /// The observations now.
    pub fn observe(&mut self, out: &mut [f64]) {
        self.model.observe(self.time, out);
    }

    /// The state Jacobian at the current state, inputs `u` (the last ones set) and
    /// time: `a` (states x states, row-major, d(dx_i/dt)/dx_j) then `b` (states x
    /// inputs), by central differences with a step of `1e-6 * max(|v|, 1)`. Every
    /// perturbed value is put back exactly, so stepping afterwards gives the same
    /// bits as stepping without it.
    pub fn jacobian(&mut self, u: &[f64]) -> Vec<f64> {
        let n = M::STATES;
        let nin = u.len();
        let mut out = vec![0.0; n * n + n * nin];
        let mut x0 = vec![0.0; n];
        self.model.states(&mut x0);
        let mut x = x0.clone();
        let mut plus = vec![0.0; n];
        let mut minus = vec![0.0; n];
        for j in 0..n {
            let eps = 1e-6 * scale(x0[j]);
            x[j] = x0[j] + eps;
            self.model.set_states(&x);
            self.model.derivatives(self.time, &mut plus);
            x[j] = x0[j] - eps;
            self.model.set_states(&x);
            self.model.derivatives(self.time, &mut minus);
            x[j] = x0[j];
            self.model.set_states(&x);
            for i in 0..n {
                out[i * n + j] = (plus[i] - minus[i]) / (2.0 * eps);
            }
        }
        let mut v = u.to_vec();
        for k in 0..nin {
            let eps = 1e-6 * scale(u[k]);
            v[k] = u[k] + eps;
            self.model.set_inputs(&v);
            self.model.derivatives(self.time, &mut plus);
            v[k] = u[k] - eps;
            self.model.set_inputs(&v);
            self.model.derivatives(self.time, &mut minus);
            v[k] = u[k];
            self.model.set_inputs(&v);
            for i in 0..n {
                out[n * n + i * nin + k] = (plus[i] - minus[i]) / (2.0 * eps);
            }
        }
        out
    }
}

fn scale(v: f64) -> f64 {
    let a = if v >= 0.0 { v } else { -v };
    if a > 1.0 { a } else { 1.0 }
}

/// The original's early-return clamp to `[-limit, limit]` (NaN passes through).
pub fn clamp_abs(v: f64, limit: f64) -> f64 {
    if v > limit {
        return limit;
    }
    if v < -limit {
        return -limit;
    }
    v
}

/// The original's clamp to `[0, 1]` (NaN passes through, -0 stays -0).
pub fn clamp01(v: f64) -> f64 {
    if v < 0.0 {
        return 0.0;
    }
    if v > 1.0 {
        return 1.0;
    }
    v
}

/// The original's two sequential tests clamping to `[-limit, limit]`: the second
/// sees the result of the first.
pub fn clamp_seq(v: f64, limit: f64) -> f64 {
    let mut v = v;
    if v > limit {
        v = limit;
    }
    if v < -limit {
        v = -limit;
    }
    v
}
