//! A plant component driven from the host: one fresh store and instance per run,
//! a memory cap, and an epoch deadline the judge moves forward as the run goes.

use std::time::Duration;

use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Engine, Store};

use crate::walls::{Cap, Stopped, Walls};

#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
mod generated {
    wasmtime::component::bindgen!({
        world: "plant-guest",
        path: "../../wit/sim",
    });
}

pub use generated::exports::plimsoll::sim::plant::{Description, JacobianKind, StepStatus, Stepped};
use generated::{PlantGuest, PlantGuestPre};

/// A plant component compiled and linked once; each [`PlantComponent::start`] makes a
/// fresh instance.
#[derive(Clone)]
pub struct PlantComponent {
    pre: PlantGuestPre<Cap>,
    description: Description,
}

impl std::fmt::Debug for PlantComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlantComponent").field("name", &self.description.name).finish()
    }
}

impl PlantComponent {
    /// Links `component` (which must import nothing) and reads its description once.
    ///
    /// # Errors
    ///
    /// A text naming what failed: an import (a plant may import nothing), a missing
    /// export, or a trap while describing itself.
    pub fn new(engine: &Engine, component: &Component) -> Result<PlantComponent, String> {
        let linker = Linker::<Cap>::new(engine);
        let pre = linker.instantiate_pre(component).map_err(|e| format!("the plant does not link: {e:#}"))?;
        let pre =
            PlantGuestPre::new(pre).map_err(|e| format!("the plant does not export plimsoll:sim/plant: {e:#}"))?;
        let mut store = Walls::PLANT.store(engine, Duration::from_secs(5));
        let instance = pre.instantiate(&mut store).map_err(|e| format!("the plant does not start: {e:#}"))?;
        let description = instance
            .plimsoll_sim_plant()
            .call_describe(&mut store)
            .map_err(|e| format!("the plant could not describe itself: {e:#}"))?;
        Ok(PlantComponent { pre, description })
    }

    /// What the plant says of itself.
    pub fn description(&self) -> &Description {
        &self.description
    }

    /// Starts one simulation in a fresh instance, with `walls` and a deadline
    /// `budget` from now.
    ///
    /// # Errors
    ///
    /// [`PlantError::Refused`] when the plant refuses the parameters, tick or end
    /// time; [`PlantError::Stopped`] when the instance could not be made or trapped.
    pub fn start(
        &self,
        engine: &Engine,
        walls: &Walls,
        budget: Duration,
        parameters: &[f64],
        tick: f64,
        end: f64,
    ) -> Result<LivePlant, PlantError> {
        let mut store = walls.store(engine, budget);
        let instance = self.pre.instantiate(&mut store).map_err(|e| PlantError::Stopped(Stopped::of(&e, &store)))?;
        let started = instance.plimsoll_sim_plant().simulation().call_start(&mut store, parameters, tick, end);
        match started {
            Ok(Ok(sim)) => Ok(LivePlant { store, instance, sim }),
            Ok(Err(why)) => Err(PlantError::Refused(why)),
            Err(e) => Err(PlantError::Stopped(Stopped::of(&e, &store))),
        }
    }
}

/// Why a plant call gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlantError {
    /// The plant refused, in its own words.
    #[error("{0}")]
    Refused(String),
    /// The call trapped or ran out of time or memory.
    #[error("{0}")]
    Stopped(Stopped),
}

/// One running simulation.
pub struct LivePlant {
    store: Store<Cap>,
    instance: PlantGuest,
    sim: ResourceAny,
}

impl std::fmt::Debug for LivePlant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LivePlant").finish_non_exhaustive()
    }
}

impl LivePlant {
    /// The current observations.
    ///
    /// # Errors
    ///
    /// The trap, deadline or memory cap that stopped the call.
    pub fn observe(&mut self) -> Result<Vec<f64>, PlantError> {
        let api = self.instance.plimsoll_sim_plant().simulation();
        api.call_observe(&mut self.store, self.sim).map_err(|e| PlantError::Stopped(Stopped::of(&e, &self.store)))
    }

    /// Applies `inputs`, advances one tick, and returns the observations after it.
    ///
    /// # Errors
    ///
    /// The plant's refusal, or what stopped the call.
    pub fn step(&mut self, inputs: &[f64]) -> Result<Stepped, PlantError> {
        let api = self.instance.plimsoll_sim_plant().simulation();
        match api.call_step(&mut self.store, self.sim, inputs) {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(why)) => Err(PlantError::Refused(why)),
            Err(e) => Err(PlantError::Stopped(Stopped::of(&e, &self.store))),
        }
    }

    /// The linearisation at the current state, as the description's kind says.
    ///
    /// # Errors
    ///
    /// The plant's refusal, or what stopped the call.
    pub fn jacobian(&mut self) -> Result<Vec<f64>, PlantError> {
        let api = self.instance.plimsoll_sim_plant().simulation();
        match api.call_jacobian(&mut self.store, self.sim) {
            Ok(Ok(j)) => Ok(j),
            Ok(Err(why)) => Err(PlantError::Refused(why)),
            Err(e) => Err(PlantError::Stopped(Stopped::of(&e, &self.store))),
        }
    }

    /// Moves the deadline to `budget` from now.
    pub fn set_budget(&mut self, budget: Duration) {
        Walls::set_deadline(&mut self.store, budget);
    }
}
