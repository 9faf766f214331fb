//! The guest components a simulation run uses, compiled once per engine and linked
//! on first use: the plants and models (embedded in this crate), and the QuickJS
//! engine for JavaScript controllers (handed in by the caller, who owns it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::catalogue::{ModelName, PlantComponentName};
use crate::controller::js::JsEngine;
use crate::model::ModelComponent;
use crate::plant::PlantComponent;
use crate::walls::Walls;

/// The bytes of a plant component, built by `guests/build.sh` and checked in.
pub fn plant_bytes(name: PlantComponentName) -> &'static [u8] {
    match name {
        PlantComponentName::CartPole => include_bytes!("../../../guests/sims/cartpole/cartpole.wasm"),
        PlantComponentName::Shower => include_bytes!("../../../guests/sims/shower/shower.wasm"),
        PlantComponentName::Ship => include_bytes!("../../../guests/sims/ship/ship.wasm"),
        PlantComponentName::Buck => include_bytes!("../../../guests/sims/buck/buck.wasm"),
        PlantComponentName::BlackHole => include_bytes!("../../../guests/sims/blackhole/blackhole.wasm"),
        PlantComponentName::Rocket => include_bytes!("../../../guests/sims/rocket/rocket.wasm"),
        PlantComponentName::SatClock => include_bytes!("../../../guests/sims/satclock/satclock.wasm"),
        PlantComponentName::Slits => include_bytes!("../../../guests/sims/slits/slits.wasm"),
    }
}

/// The bytes of a module-run model component, built by `guests/build.sh` and checked in.
pub fn model_bytes(name: ModelName) -> &'static [u8] {
    match name {
        ModelName::VanDerPol => include_bytes!("../../../guests/sims/vanderpol/vanderpol.wasm"),
        ModelName::BouncingBall => include_bytes!("../../../guests/sims/bouncingball/bouncingball.wasm"),
        ModelName::Lorenz => include_bytes!("../../../guests/sims/lorenz/lorenz.wasm"),
        ModelName::Greedy => include_bytes!("../../../guests/sims/greedy/greedy.wasm"),
    }
}

/// The name a plant component is loaded (and precompiled) under: `plant-cartpole`.
pub fn plant_load_name(name: PlantComponentName) -> String {
    format!("plant-{name:?}").to_ascii_lowercase()
}

/// The name a model component is loaded (and precompiled) under: `model-vanderpol`.
pub fn model_load_name(name: ModelName) -> String {
    format!("model-{name}")
}

/// `sim-wasm:sha256:<hex>` of a component's bytes: its identity in evidence and pages.
pub fn identity(bytes: &[u8]) -> String {
    format!("sim-wasm:sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// How the caller compiles a component: from its cache, or by compiling now.
pub type Load = dyn Fn(&str, &[u8]) -> Result<Component, String> + Send + Sync;

/// The walls of every store a simulation run makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A plant's or model's store (the original worker capped each instance at 16 MiB;
    /// plants are given more room, models exactly that).
    pub plant: Walls,
    /// A module-run row's store.
    pub model: Walls,
    /// A controller's store (the same memory as any run on the provider).
    pub controller: Walls,
}

impl Settings {
    /// Plants 64 MiB, model rows 16 MiB (the original worker's cap), controllers
    /// `controller_mb`, all at `epoch_tick`.
    pub fn new(controller_mb: u32, epoch_tick: Duration) -> Settings {
        let walls = |memory_bytes| Walls { memory_bytes, epoch_tick };
        Settings {
            plant: walls(64 << 20),
            model: walls(crate::model::ROW_MEMORY_BYTES),
            controller: walls((controller_mb as usize) << 20),
        }
    }
}

/// Controllers compiled for this library's engine, by the SHA-256 of their bytes:
/// an agent iterating on one controller pays for compiling it once. Bounded, so a
/// stream of distinct controllers cannot grow it.
#[derive(Default)]
struct Compiled {
    modules: Vec<([u8; 32], wasmtime::Module)>,
    components: Vec<([u8; 32], Component)>,
}

/// Controllers kept compiled, most recent last.
const COMPILED_KEPT: usize = 16;

fn remember<T: Clone>(
    list: &mut Vec<([u8; 32], T)>,
    key: [u8; 32],
    make: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    if let Some(i) = list.iter().position(|(k, _)| *k == key) {
        let hit = list.remove(i);
        let value = hit.1.clone();
        list.push(hit);
        return Ok(value);
    }
    let value = make()?;
    if list.len() >= COMPILED_KEPT {
        list.remove(0);
    }
    list.push((key, value.clone()));
    Ok(value)
}

/// The components, linked on first use.
pub struct Library {
    engine: Engine,
    settings: Settings,
    load: Arc<Load>,
    quickjs: &'static [u8],
    plants: Mutex<HashMap<PlantComponentName, PlantComponent>>,
    models: Mutex<HashMap<ModelName, ModelComponent>>,
    js: OnceLock<Result<JsEngine, String>>,
    compiled: Mutex<Compiled>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Library {
    /// A library on `engine` (which must have epoch interruption on), compiling with
    /// `load`; `quickjs` is the QuickJS component for JavaScript controllers.
    pub fn new(engine: &Engine, settings: Settings, quickjs: &'static [u8], load: Arc<Load>) -> Library {
        Library {
            engine: engine.clone(),
            settings,
            load,
            quickjs,
            plants: Mutex::default(),
            models: Mutex::default(),
            js: OnceLock::new(),
            compiled: Mutex::default(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The walls.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The QuickJS component's identity (`quickjs-wasm:sha256:<hex>`).
    pub fn quickjs_identity(&self) -> String {
        format!("quickjs-wasm:sha256:{}", hex::encode(Sha256::digest(self.quickjs)))
    }

    /// The plant component `name`, linked.
    ///
    /// # Errors
    ///
    /// Why it does not compile or link (a build fault, not the caller's).
    pub fn plant(&self, name: PlantComponentName) -> Result<PlantComponent, String> {
        let mut plants = self.plants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = plants.get(&name) {
            return Ok(p.clone());
        }
        let component = (self.load)(&plant_load_name(name), plant_bytes(name))?;
        let plant = PlantComponent::new(&self.engine, &component)?;
        plants.insert(name, plant.clone());
        Ok(plant)
    }

    /// The model component `name`, linked.
    ///
    /// # Errors
    ///
    /// Why it does not compile or link.
    pub fn model(&self, name: ModelName) -> Result<ModelComponent, String> {
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = models.get(&name) {
            return Ok(m.clone());
        }
        let component = (self.load)(&model_load_name(name), model_bytes(name))?;
        let model = ModelComponent::new(&self.engine, &component, &self.settings.model)?;
        models.insert(name, model.clone());
        Ok(model)
    }

    /// A controller module (binary or text) compiled for this engine, from the
    /// cache when the same bytes came before.
    ///
    /// # Errors
    ///
    /// The compiler's first line.
    pub fn module(&self, bytes: &[u8]) -> Result<wasmtime::Module, String> {
        let key: [u8; 32] = Sha256::digest(bytes).into();
        let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        remember(&mut compiled.modules, key, || wasmtime::Module::new(&self.engine, bytes).map_err(|e| first_line(&e)))
    }

    /// A controller component compiled for this engine, from the cache when the
    /// same bytes came before.
    ///
    /// # Errors
    ///
    /// The compiler's first line.
    pub fn component(&self, bytes: &[u8]) -> Result<Component, String> {
        let key: [u8; 32] = Sha256::digest(bytes).into();
        let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        remember(&mut compiled.components, key, || Component::new(&self.engine, bytes).map_err(|e| first_line(&e)))
    }

    /// Loads and links every plant, every model and the JavaScript controllers'
    /// engine now, so no later run needs the file system (the jailed engine worker
    /// cannot open a file once it serves).
    ///
    /// # Errors
    ///
    /// The first component that does not compile or link.
    pub fn preload(&self) -> Result<(), String> {
        for plant in crate::catalogue::PlantName::ALL {
            self.plant(plant.component())?;
        }
        for model in ModelName::ALL {
            self.model(model)?;
        }
        crate::model::cores();
        // Compiling starts the compiler's thread pool, which reads the cgroup
        // files for its size: once, here, and the controllers sent later reuse it.
        self.module(b"(module (func (export \"warm\")))")?;
        self.js().map(drop)
    }

    /// The QuickJS engine for JavaScript controllers, linked.
    ///
    /// # Errors
    ///
    /// Why it does not compile or link.
    pub fn js(&self) -> Result<JsEngine, String> {
        self.js
            .get_or_init(|| {
                let component = (self.load)("quickjs", self.quickjs)?;
                JsEngine::new(&self.engine, &component)
            })
            .clone()
    }
}

fn first_line(e: &wasmtime::Error) -> String {
    format!("{e:#}").lines().next().unwrap_or_default().to_string()
}
