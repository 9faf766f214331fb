//! A controller component of the `controller-guest` world (the Rust form): it
//! exports `control(observation, tick) -> inputs` and imports nothing, so its
//! answers depend only on what the judge passes in.

use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

use super::{Ask, Controller, Fault};
use crate::walls::{Cap, Stopped, Walls};

#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
mod generated {
    wasmtime::component::bindgen!({
        world: "controller-guest",
        path: "../../wit/sim",
    });
}

use generated::ControllerGuest;

/// One running controller component.
pub struct ComponentController {
    store: Store<Cap>,
    instance: ControllerGuest,
}

impl std::fmt::Debug for ComponentController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentController").finish_non_exhaustive()
    }
}

impl ComponentController {
    /// Refuses a compiled `component` that imports anything (naming the imports),
    /// and instantiates it in a fresh store under `walls`.
    ///
    /// # Errors
    ///
    /// [`Fault::Unusable`] naming what is wrong, or what stopped the start.
    pub fn start(
        engine: &Engine,
        walls: &Walls,
        budget: Duration,
        component: Result<Component, String>,
    ) -> Result<ComponentController, Fault> {
        let component =
            component.map_err(|e| Fault::Unusable(format!("the controller component does not compile: {e}")))?;
        let imports: Vec<String> =
            component.component_type().imports(engine).map(|(name, _)| name.to_string()).collect();
        if !imports.is_empty() {
            return Err(Fault::Unusable(format!(
                "the controller component imports {}; a controller component must import nothing \
                 (build it for the plimsoll:sim controller-guest world without std's WASI, as guests/sims/controllers do)",
                imports.join(", ")
            )));
        }
        let linker = Linker::<Cap>::new(engine);
        let mut store = walls.store(engine, budget);
        let instance = ControllerGuest::instantiate(&mut store, &component, &linker).map_err(|e| {
            let text = format!("{e:#}");
            if text.contains("plimsoll:sim/controller") {
                Fault::Unusable(format!("the controller component does not export plimsoll:sim/controller: {text}"))
            } else {
                Fault::Stopped(Stopped::of(&e, &store))
            }
        })?;
        Ok(ComponentController { store, instance })
    }
}

impl Controller for ComponentController {
    fn answer(&mut self, ask: &Ask<'_>, budget: Duration) -> Result<Vec<f64>, Fault> {
        Walls::set_deadline(&mut self.store, budget);
        let answer =
            self.instance.plimsoll_sim_controller().call_control(&mut self.store, ask.observation, ask.tick).map_err(
                |e| match Stopped::of(&e, &self.store) {
                    Stopped::Deadline => Fault::Late(budget.as_millis() as u64),
                    other => Fault::Stopped(other),
                },
            )?;
        if answer.len() != ask.inputs {
            return Err(Fault::Count { got: answer.len(), want: ask.inputs });
        }
        if let Some(bad) = answer.iter().find(|v| !v.is_finite()) {
            return Err(Fault::NotFinite(crate::number::js(*bad)));
        }
        // Every form records what the line protocol would: `String(-0)` is "0".
        Ok(answer.into_iter().map(|v| if v == 0.0 { 0.0 } else { v }).collect())
    }

    fn finish(&mut self, _budget: Duration) {}

    fn stderr(&self) -> &[u8] {
        &[]
    }
}
