//! A controller compiled to a core wasm module (C for wasm32, as the original's
//! examples build it): it exports `double control(double o1, ..., double on, int k)`
//! and imports nothing. The judge calls it directly with each tick's observations
//! and the tick index; a module that imports anything is refused before tick 0,
//! naming every import.

use std::time::Duration;

use wasmtime::{Engine, ExternType, Func, Module, Store, Val, ValType};

use super::{Ask, Controller, Fault};
use crate::walls::{Cap, Stopped, Walls};

/// One running module controller.
pub struct ModuleController {
    store: Store<Cap>,
    control: Func,
    args: Vec<Val>,
}

impl std::fmt::Debug for ModuleController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleController").finish_non_exhaustive()
    }
}

/// What a wasm value type is called in a C signature.
fn c_type(t: &ValType) -> &'static str {
    match t {
        ValType::F64 => "double",
        ValType::F32 => "float",
        ValType::I32 => "int",
        ValType::I64 => "long long",
        _ => "a reference",
    }
}

impl ModuleController {
    /// Checks a compiled `module`'s contract against a plant that observes `width`
    /// values and takes `inputs`, and instantiates it in a fresh store under
    /// `walls`, running its `_initialize` within `budget`.
    ///
    /// # Errors
    ///
    /// [`Fault::Unusable`] naming what is wrong (imports, the `control` export's
    /// signature, a plant with more than one input), or what stopped `_initialize`.
    pub fn start(
        engine: &Engine,
        walls: &Walls,
        budget: Duration,
        module: Result<Module, String>,
        width: usize,
        inputs: usize,
    ) -> Result<ModuleController, Fault> {
        let module = module.map_err(|e| Fault::Unusable(format!("the controller module does not compile: {e}")))?;
        let imports: Vec<String> = module
            .imports()
            .map(|i| {
                let kind = match i.ty() {
                    ExternType::Func(_) => "function",
                    ExternType::Global(_) => "global",
                    ExternType::Table(_) => "table",
                    ExternType::Memory(_) => "memory",
                    ExternType::Tag(_) => "tag",
                };
                format!("{}.{} ({kind})", i.module(), i.name())
            })
            .collect();
        if !imports.is_empty() {
            return Err(Fault::Unusable(format!(
                "the controller module imports {}; a controller module must import nothing (link its maths in, \
                 e.g. clang --target=wasm32-wasip1 -mexec-model=reactor with wasi-libc)",
                imports.join(", ")
            )));
        }
        if inputs != 1 {
            return Err(Fault::Unusable(format!(
                "a controller module answers one value from control(), but this plant takes {inputs} inputs; \
                 use a JavaScript controller or a controller component"
            )));
        }
        let want = format!("double control({}int k)", "double, ".repeat(width));
        let Some(ExternType::Func(ty)) = module.get_export("control") else {
            return Err(Fault::Unusable(format!("the controller module does not export a function {want}")));
        };
        let params: Vec<ValType> = ty.params().collect();
        let results: Vec<ValType> = ty.results().collect();
        let fits = params.len() == width + 1
            && params[..width].iter().all(|t| matches!(t, ValType::F64))
            && matches!(params[width], ValType::I32)
            && matches!(results.as_slice(), [ValType::F64]);
        if !fits {
            let got_params: Vec<&str> = params.iter().map(c_type).collect();
            let got_result = results.first().map(c_type).unwrap_or("void");
            return Err(Fault::Unusable(format!(
                "the controller module's control is {got_result} control({}), but this plant needs {want}",
                got_params.join(", ")
            )));
        }
        let mut store = walls.store(engine, budget);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).map_err(|e| stopped(&e, &store, budget))?;
        if let Some(init) = instance.get_func(&mut store, "_initialize") {
            init.call(&mut store, &[], &mut []).map_err(|e| stopped(&e, &store, budget))?;
        }
        let control = instance
            .get_func(&mut store, "control")
            .ok_or_else(|| Fault::Unusable(format!("the controller module does not export a function {want}")))?;
        Ok(ModuleController { store, control, args: vec![Val::F64(0); width + 1] })
    }
}

fn stopped(e: &wasmtime::Error, store: &Store<Cap>, budget: Duration) -> Fault {
    match Stopped::of(e, store) {
        Stopped::Deadline => Fault::Late(budget.as_millis() as u64),
        other => Fault::Stopped(other),
    }
}

impl Controller for ModuleController {
    fn answer(&mut self, ask: &Ask<'_>, budget: Duration) -> Result<Vec<f64>, Fault> {
        let width = self.args.len() - 1;
        for (slot, v) in self.args.iter_mut().zip(ask.observation.iter().take(width)) {
            *slot = Val::F64(v.to_bits());
        }
        // The original shim passed the tick as a JavaScript number, converted to
        // i32 by ToInt32; ticks are far below 2^31.
        self.args[width] = Val::I32(ask.tick as i32);
        Walls::set_deadline(&mut self.store, budget);
        let mut out = [Val::F64(0)];
        self.control.call(&mut self.store, &self.args, &mut out).map_err(|e| stopped(&e, &self.store, budget))?;
        let u = out[0].unwrap_f64();
        // The original shim printed the value and the judge read it back, which
        // keeps every finite double and turns -0 into 0.
        if !u.is_finite() {
            return Err(Fault::NotFinite(crate::number::js(u)));
        }
        Ok(vec![if u == 0.0 { 0.0 } else { u }])
    }

    fn finish(&mut self, _budget: Duration) {}

    fn stderr(&self) -> &[u8] {
        &[]
    }
}
