//! `plimsoll-preinit IN OUT`: pre-initialises the QuickJS guest component.
//!
//! Instantiates the instrumented component (component-init-transform), calls its
//! `prepare` export, which builds a context with the prelude installed, and writes a
//! component whose memory and globals start as that instance's ended: a fresh run
//! then starts from the snapshot by copy-on-write instead of building the context.
//!
//! The instance runs with fixed clocks and fixed random streams, so the snapshot,
//! and with it the component's SHA-256 (its identity), is the same on every build.
//! The guest draws fresh randomness at each run itself.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use component_init_transform::Invoker;
use wasmtime::component::{Component, ComponentNamedList, Instance, Lift, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The interface whose `prepare` builds the context.
const EVALUATE: &str = "plimsoll:engine/evaluate@0.1.0";

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A clock that always reads the same time.
struct Fixed;

impl HostWallClock for Fixed {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Fixed {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A random stream that is the same on every build.
struct Repeatable(u64);

impl rand_core::TryRng for Repeatable {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.try_next_u64()? >> 32) as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Ok(z ^ (z >> 31))
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dest.chunks_mut(8) {
            let v = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

fn wt(e: wasmtime::Error) -> anyhow::Error {
    anyhow!("{e:#}")
}

/// The instrumented component, instantiated, with `prepare` called.
struct Prepared {
    instance: Instance,
    store: Store<State>,
}

impl Prepared {
    fn new(component: &[u8]) -> anyhow::Result<Prepared> {
        let engine = Engine::new(&Config::new()).map_err(wt)?;
        let component =
            Component::new(&engine, component).map_err(wt).context("compiling the instrumented component")?;
        let mut linker = Linker::<State>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(wt)?;
        // The console and host API are never called while preparing; a call traps.
        // (`define_unknown_imports_as_traps` would also shadow WASI interfaces whose
        // version differs from the linker's, with resource types of its own.)
        for (interface, func) in
            [("plimsoll:engine/console@0.1.0", "write"), ("plimsoll:engine/host-api@0.1.0", "call")]
        {
            linker
                .instance(interface)
                .map_err(wt)?
                .func_new(func, move |_, _, _, _| {
                    Err(wasmtime::format_err!("{interface}#{func} called while preparing"))
                })
                .map_err(wt)?;
        }
        let wasi = WasiCtxBuilder::new()
            .wall_clock(Fixed)
            .monotonic_clock(Fixed)
            .secure_random(Repeatable(1))
            .insecure_random(Repeatable(2))
            .insecure_random_seed(3)
            .build();
        let mut store = Store::new(&engine, State { wasi, table: ResourceTable::new() });
        let instance = linker.instantiate(&mut store, &component).map_err(wt).context("instantiating")?;
        let mut this = Prepared { instance, store };
        this.call::<()>(Some(EVALUATE), "prepare").context("calling prepare")?;
        Ok(this)
    }

    fn call<T: ComponentNamedList + Lift + Send + Sync>(
        &mut self,
        interface: Option<&str>,
        name: &str,
    ) -> anyhow::Result<T> {
        let parent = match interface {
            Some(i) => Some(
                self.instance
                    .get_export_index(&mut self.store, None, i)
                    .ok_or_else(|| anyhow!("the component exports no {i}"))?,
            ),
            None => None,
        };
        let index = self
            .instance
            .get_export_index(&mut self.store, parent.as_ref(), name)
            .ok_or_else(|| anyhow!("the component exports no function {name}"))?;
        let func = self.instance.get_func(&mut self.store, index).ok_or_else(|| anyhow!("{name} is not a function"))?;
        let func = func.typed::<(), T>(&self.store).map_err(wt).with_context(|| format!("the type of {name}"))?;
        let out = func.call(&mut self.store, ()).map_err(wt).with_context(|| format!("calling {name}"))?;
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Invoker for Prepared {
    async fn call_s32(&mut self, name: &str) -> anyhow::Result<i32> {
        Ok(self.call::<(i32,)>(None, name)?.0)
    }
    async fn call_s64(&mut self, name: &str) -> anyhow::Result<i64> {
        Ok(self.call::<(i64,)>(None, name)?.0)
    }
    async fn call_f32(&mut self, name: &str) -> anyhow::Result<f32> {
        Ok(self.call::<(f32,)>(None, name)?.0)
    }
    async fn call_f64(&mut self, name: &str) -> anyhow::Result<f64> {
        Ok(self.call::<(f64,)>(None, name)?.0)
    }
    async fn call_list_u8(&mut self, name: &str) -> anyhow::Result<Vec<u8>> {
        Ok(self.call::<(Vec<u8>,)>(None, name)?.0)
    }
}

fn run(input: &str, output: &str) -> anyhow::Result<()> {
    let raw = std::fs::read(input).with_context(|| format!("reading {input}"))?;

    let out = futures::executor::block_on(component_init_transform::initialize(&raw, |instrumented| {
        Box::pin(async move {
            let prepared: Box<dyn Invoker> = Box::new(Prepared::new(&instrumented)?);
            Ok(prepared)
        })
    }))
    .context("pre-initialising")?;
    std::fs::write(output, &out).with_context(|| format!("writing {output}"))?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: plimsoll-preinit IN.wasm OUT.wasm");
        return ExitCode::from(2);
    };
    match run(input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plimsoll-preinit: {e:#}");
            ExitCode::FAILURE
        }
    }
}
