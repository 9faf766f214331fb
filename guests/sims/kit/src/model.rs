//! The glue between a module-run model and the `plimsoll:sim/model` export: the
//! original's `sim_run` loop over an FMU-style [`Model`], and the
//! [`model!`](crate::model) macro that exports a [`TableModel`].

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use crate::fmu::{CoSim, Model};
use crate::model_bindings::exports::plimsoll::sim::model::Description;

/// The `sim_run` failure code for a refused communication step.
pub const STEP_FAILED: i32 = -5;
/// The code a row gets when its parameters do not fit the model.
pub const BAD_PARAMETERS: i32 = -2;

/// A model run once per parameter row.
pub trait TableModel {
    /// The model's static facts.
    fn describe() -> Description;

    /// Runs one row (see `plimsoll:sim/model`).
    ///
    /// # Errors
    ///
    /// The model's negative failure code.
    fn run(parameters: &[f64], end: f64, step: f64, max_steps: u32) -> Result<Vec<f64>, i32>;
}

/// Facts of an FMU-style model run as a table: its parameters are its three
/// scenario parameters and its outputs are its observations.
pub fn describe<M: Model>() -> Description {
    Description {
        name: M::NAME.to_string(),
        parameters: M::PARAMETERS.iter().map(|s| s.to_string()).collect(),
        outputs: M::OBSERVATIONS.iter().map(|s| s.to_string()).collect(),
    }
}

/// The original's `sim_run`: steps of `step` while `(n + 1) * step <= end + 1e-9`
/// and `n < max_steps`, the outputs read after each step (the start state is not
/// written). The guard counts steps instead of summing time, because 6,000 sums of
/// 0.01 land 3.4e-12 short of 60 and would ask for a step past the stop time.
///
/// # Errors
///
/// [`BAD_PARAMETERS`] when the row is not three values, [`STEP_FAILED`] when a
/// communication step is refused.
pub fn run<M: Model>(parameters: &[f64], end: f64, step: f64, max_steps: u32) -> Result<Vec<f64>, i32> {
    let p: [f64; 3] = parameters.try_into().map_err(|_| BAD_PARAMETERS)?;
    let width = M::OBSERVATIONS.len();
    let mut sim = CoSim::<M>::new(p, end);
    let mut out = Vec::new();
    let mut row = vec![0.0; width];
    let mut t = 0.0;
    let mut n: u32 = 0;
    while n < max_steps && f64::from(n + 1) * step <= end + 1e-9 {
        sim.do_step(t, step).map_err(|_| STEP_FAILED)?;
        t += step;
        sim.observe(&mut row);
        out.extend_from_slice(&row);
        n += 1;
    }
    Ok(out)
}

/// The table form of an FMU-style model `M`: [`describe`] and [`run`] over it.
#[derive(Debug)]
pub struct Fmu<M>(core::marker::PhantomData<M>);

impl<M: Model> TableModel for Fmu<M> {
    fn describe() -> Description {
        describe::<M>()
    }

    fn run(parameters: &[f64], end: f64, step: f64, max_steps: u32) -> Result<Vec<f64>, i32> {
        run::<M>(parameters, end, step, max_steps)
    }
}

/// The record the original's reference checksums hash, for a model's host tests:
/// `rows` rows with p0 spread evenly from `p0.0` to `p0.1` and p1, p2 fixed, a step
/// of 0.01 to `end`; per row the LE i32 step count, then the LE f64 outputs.
///
/// # Panics
///
/// When a row fails: a sweep is the reference's, and every row of it completes.
#[cfg(not(target_arch = "wasm32"))]
pub fn sweep<T: TableModel>(rows: u32, end: f64, p0: (f64, f64), p1: f64, p2: f64) -> Vec<u8> {
    let h = 0.01;
    let max_steps = (end / h) as u32 + 2;
    let width = T::describe().outputs.len();
    let mut record = Vec::new();
    for i in 0..rows {
        let p = p0.0 + (p0.1 - p0.0) * f64::from(i) / f64::from(rows - 1);
        let out = T::run(&[p, p1, p2], end, h, max_steps).expect("every row of a reference sweep runs");
        record.extend_from_slice(&((out.len() / width) as i32).to_le_bytes());
        for v in &out {
            record.extend_from_slice(&v.to_le_bytes());
        }
    }
    record
}

/// Exports a [`TableModel`] as the component's `plimsoll:sim/model`.
#[macro_export]
macro_rules! model {
    ($model:ty) => {
        #[cfg(target_arch = "wasm32")]
        struct ModelComponent;

        #[cfg(target_arch = "wasm32")]
        impl $crate::model_bindings::exports::plimsoll::sim::model::Guest for ModelComponent {
            fn describe() -> $crate::model_bindings::exports::plimsoll::sim::model::Description {
                <$model as $crate::model::TableModel>::describe()
            }

            fn run(
                parameters: $crate::alloc::vec::Vec<f64>,
                end_time: f64,
                step: f64,
                max_steps: u32,
            ) -> Result<$crate::alloc::vec::Vec<f64>, i32> {
                <$model as $crate::model::TableModel>::run(&parameters, end_time, step, max_steps)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::model_bindings::export_model!(ModelComponent with_types_in $crate::model_bindings);
    };
}
