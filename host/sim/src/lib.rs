//! Simulation runs: a controller judged against a simulated plant.
//!
//! The plants and the module-run models are guest components (`guests/sims`, no
//! imports, so nothing but their inputs decides their bits); controllers are
//! JavaScript on our QuickJS engine, core wasm modules (C), or components (Rust).
//! The judge drives them tick by tick, records the trajectory and fingerprints it.
//!
//! 1. Make a [`Library`] on a wasmtime engine (the runtime's, or
//!    [`standalone::engine`] in a process of its own) with the walls of [`Settings`].
//! 2. Parse a command line with [`args::parse`] into a [`Trial`].
//! 3. Read the controller file with [`Source::read`] and call [`judge::judge`]: the
//!    result carries the exit code, the summary line and the files to write.
//! 4. Module tables go through [`model::run_table`], their results through the PLSM
//!    record of [`model::encode`] and [`model::decode`].
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use plimsoll_sim::{args, standalone, Library, Settings, Source};
//!
//! let engine = standalone::engine()?;
//! let library = Library::new(&engine, Settings::new(256, standalone::EPOCH_TICK), QUICKJS, standalone::loader(&engine, None, |_| None));
//! let argv: Vec<String> = ["--plant", "cartpole", "--controller", "accepted.js"].map(String::from).into();
//! let args::Command::Run(trial) = args::parse(&argv)? else { unreachable!() };
//! let source = Source::read(&trial.controller, std::fs::read("accepted.js").map_err(|e| e.to_string())?)?;
//! let judged = plimsoll_sim::judge::judge(&library, &trial, source, Instant::now() + Duration::from_secs(30));
//! assert_eq!(judged.exit, 0);
//! # const QUICKJS: &[u8] = &[];
//! # Ok::<(), String>(())
//! ```

#![deny(missing_docs)]

pub mod args;
pub mod catalogue;
pub mod controller;
pub mod judge;
pub mod library;
pub mod model;
pub mod number;
pub mod plant;
pub mod score;
pub mod standalone;
pub mod summary;
pub mod walls;

pub use catalogue::{ModelName, PlantName};
pub use controller::Source;
pub use judge::{Judged, Trial};
pub use library::{Library, Settings};
