//! The glue between a plant and the `plimsoll:sim/plant` export: a [`Plant`] trait a
//! plant implements (or gets from [`FmuPlant`] over an FMU-style [`Model`]), and the
//! [`plant!`](crate::plant) macro that exports it.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

use crate::fmu::{CoSim, Model};
use crate::plant_bindings::exports::plimsoll::sim::plant::{
    Description, GuestSimulation, JacobianKind, StepStatus, Stepped,
};

/// A plant as the judge drives it.
pub trait Plant: Sized + 'static {
    /// The plant's static facts.
    fn describe() -> Description;

    /// Starts a simulation with exactly three parameters, a tick and an end time
    /// (both already checked finite and positive).
    ///
    /// # Errors
    ///
    /// The plant's refusal, in words for the caller.
    fn start(parameters: [f64; 3], tick: f64, end: f64) -> Result<Self, String>;

    /// The current observations.
    fn observe(&mut self) -> Vec<f64>;

    /// Applies one value per input and advances one tick.
    ///
    /// # Errors
    ///
    /// Why the step was refused.
    fn step(&mut self, inputs: &[f64]) -> Result<StepStatus, String>;

    /// The linearisation the description names.
    ///
    /// # Errors
    ///
    /// Why there is none.
    fn jacobian(&mut self) -> Result<Vec<f64>, String>;
}

/// An FMU-style model as a plant: inputs set, one communication step of the tick,
/// observations read; the state Jacobian by central differences.
#[derive(Debug)]
pub struct FmuPlant<M: Model> {
    sim: CoSim<M>,
    point: f64,
    tick: f64,
    last: Vec<f64>,
}

impl<M: Model + 'static> Plant for FmuPlant<M> {
    fn describe() -> Description {
        Description {
            name: M::NAME.to_string(),
            parameters: M::PARAMETERS.iter().map(|s| s.to_string()).collect(),
            observations: M::OBSERVATIONS.iter().map(|s| s.to_string()).collect(),
            inputs: M::INPUTS.iter().map(|s| s.to_string()).collect(),
            solver_step: M::SOLVER_STEP,
            states: M::STATES as u32,
            jacobian: JacobianKind::State,
        }
    }

    fn start(parameters: [f64; 3], tick: f64, end: f64) -> Result<Self, String> {
        Ok(FmuPlant { sim: CoSim::new(parameters, end), point: 0.0, tick, last: vec![0.0; M::INPUTS.len()] })
    }

    fn observe(&mut self) -> Vec<f64> {
        let mut out = vec![0.0; M::OBSERVATIONS.len()];
        self.sim.observe(&mut out);
        out
    }

    fn step(&mut self, inputs: &[f64]) -> Result<StepStatus, String> {
        self.sim.model.set_inputs(inputs);
        self.last.clear();
        self.last.extend_from_slice(inputs);
        self.sim.do_step(self.point, self.tick).map_err(|e| e.text().to_string())?;
        self.point += self.tick;
        Ok(StepStatus::Running)
    }

    fn jacobian(&mut self) -> Result<Vec<f64>, String> {
        let last = self.last.clone();
        Ok(self.sim.jacobian(&last))
    }
}

/// One live simulation behind the `simulation` resource.
#[derive(Debug)]
pub struct Live<P: Plant> {
    plant: RefCell<P>,
    inputs: usize,
}

/// Checks what the caller sent and starts the plant.
///
/// # Errors
///
/// A refusal naming the bad value.
pub fn start<P: Plant>(parameters: Vec<f64>, tick: f64, end: f64) -> Result<Live<P>, String> {
    let description = P::describe();
    let p: [f64; 3] = parameters
        .as_slice()
        .try_into()
        .map_err(|_| alloc::format!("{} takes 3 parameters, not {}", description.name, parameters.len()))?;
    for (name, v) in description.parameters.iter().zip(p) {
        if !v.is_finite() {
            return Err(alloc::format!("parameter {name} must be a finite number, not {v}"));
        }
    }
    if !(tick.is_finite() && tick > 0.0) {
        return Err(alloc::format!("the tick must be a finite positive number, not {tick}"));
    }
    if !(end.is_finite() && end > 0.0) {
        return Err(alloc::format!("the end time must be a finite positive number, not {end}"));
    }
    let plant = P::start(p, tick, end)?;
    Ok(Live { plant: RefCell::new(plant), inputs: description.inputs.len() })
}

impl<P: Plant> GuestSimulation for Live<P> {
    fn start(
        parameters: Vec<f64>,
        tick: f64,
        end_time: f64,
    ) -> Result<crate::plant_bindings::exports::plimsoll::sim::plant::Simulation, String> {
        start::<P>(parameters, tick, end_time)
            .map(crate::plant_bindings::exports::plimsoll::sim::plant::Simulation::new)
    }

    fn observe(&self) -> Vec<f64> {
        self.plant.borrow_mut().observe()
    }

    fn step(&self, inputs: Vec<f64>) -> Result<Stepped, String> {
        if inputs.len() != self.inputs {
            return Err(alloc::format!("the plant takes {} input(s), not {}", self.inputs, inputs.len()));
        }
        let mut plant = self.plant.borrow_mut();
        let status = plant.step(&inputs)?;
        Ok(Stepped { status, observation: plant.observe() })
    }

    fn jacobian(&self) -> Result<Vec<f64>, String> {
        self.plant.borrow_mut().jacobian()
    }
}

/// Exports a [`Plant`] as the component's `plimsoll:sim/plant`.
///
/// ```ignore
/// plimsoll_sim_kit::plant!(plimsoll_sim_kit::FmuPlant<CartPole>);
/// ```
#[macro_export]
macro_rules! plant {
    ($plant:ty) => {
        #[cfg(target_arch = "wasm32")]
        struct PlantComponent;

        #[cfg(target_arch = "wasm32")]
        impl $crate::plant_bindings::exports::plimsoll::sim::plant::Guest for PlantComponent {
            type Simulation = $crate::plant::Live<$plant>;

            fn describe() -> $crate::plant_bindings::exports::plimsoll::sim::plant::Description {
                <$plant as $crate::plant::Plant>::describe()
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::plant_bindings::export_plant!(PlantComponent with_types_in $crate::plant_bindings);
    };
}
