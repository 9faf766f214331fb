//! What every plant and model component shares.
//!
//! 1. An FMU-style model implements [`fmu::Model`]: start values, parameters,
//!    derivatives, observations.
//! 2. [`plant::FmuPlant`] steps it as a plant, by the fixed-step co-simulation loop
//!    of [`fmu::CoSim`]; a plant of another shape implements [`plant::Plant`] itself.
//! 3. [`plant!`] exports it as `plimsoll:sim/plant`; [`model!`] exports a
//!    [`model::TableModel`] as `plimsoll:sim/model`; [`controller!`] exports a
//!    control function as `plimsoll:sim/controller` (the Rust controller form).
//!
//! On wasm32 the crate is `no_std` with its own allocator, panic handler and
//! canonical-ABI `cabi_realloc`, so a component built on it imports nothing: no
//! clock, no randomness, no output. Its results depend only on its inputs.

#![cfg_attr(target_arch = "wasm32", no_std)]
#![deny(missing_docs)]

pub extern crate alloc;

pub mod fmu;
pub mod model;
pub mod plant;

pub use fmu::{CoSim, Model, clamp_abs, clamp_seq, clamp01, is_close};
pub use plant::{FmuPlant, Plant};

/// The `plant-guest` world's bindings.
#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
pub mod plant_bindings {
    wit_bindgen::generate!({
        world: "plant-guest",
        path: "../../../wit/sim",
        pub_export_macro: true,
        export_macro_name: "export_plant",
        default_bindings_module: "plimsoll_sim_kit::plant_bindings",
    });
}

/// The `model-guest` world's bindings.
#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
pub mod model_bindings {
    wit_bindgen::generate!({
        world: "model-guest",
        path: "../../../wit/sim",
        pub_export_macro: true,
        export_macro_name: "export_model",
        default_bindings_module: "plimsoll_sim_kit::model_bindings",
    });
}

/// The `controller-guest` world's bindings.
#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
pub mod controller_bindings {
    wit_bindgen::generate!({
        world: "controller-guest",
        path: "../../../wit/sim",
        pub_export_macro: true,
        export_macro_name: "export_controller",
        default_bindings_module: "plimsoll_sim_kit::controller_bindings",
    });
}

/// Exports `fn(&[f64], u32) -> Vec<f64>` as the component's `plimsoll:sim/controller`.
#[macro_export]
macro_rules! controller {
    ($control:path) => {
        #[cfg(target_arch = "wasm32")]
        struct ControllerComponent;

        #[cfg(target_arch = "wasm32")]
        impl $crate::controller_bindings::exports::plimsoll::sim::controller::Guest for ControllerComponent {
            fn control(observation: $crate::alloc::vec::Vec<f64>, tick: u32) -> $crate::alloc::vec::Vec<f64> {
                $control(&observation, tick)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::controller_bindings::export_controller!(ControllerComponent with_types_in $crate::controller_bindings);
    };
}

#[cfg(target_arch = "wasm32")]
mod runtime {
    #[global_allocator]
    static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
        core::arch::wasm32::unreachable()
    }

    /// The canonical ABI's allocator, which the component model calls to hand the
    /// guest its arguments. Without `std` nothing else provides it.
    ///
    /// # Safety
    ///
    /// Called only by the canonical ABI, with `old_ptr`/`old_len`/`align` describing
    /// a block this allocator gave out (or `old_len` 0) and `align` a power of two.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cabi_realloc(old_ptr: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
        use alloc::alloc::{Layout, alloc, handle_alloc_error, realloc};
        if new_len == 0 {
            return align as *mut u8;
        }
        // SAFETY: the canonical ABI passes a power-of-two alignment and a length
        // that fits its 32-bit address space, so the layout is valid.
        let layout = unsafe { Layout::from_size_align_unchecked(new_len, align) };
        let ptr = if old_len == 0 {
            // SAFETY: `new_len` is not zero.
            unsafe { alloc(layout) }
        } else {
            // SAFETY: the caller guarantees `old_ptr` came from this allocator
            // with this alignment and `old_len`.
            unsafe { realloc(old_ptr, Layout::from_size_align_unchecked(old_len, align), new_len) }
        };
        if ptr.is_null() {
            handle_alloc_error(layout);
        }
        ptr
    }
}
