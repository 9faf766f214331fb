//! `plimsoll-host serve`: the daemon. It speaks the original system's Connect/JSON
//! protocol (number 4) at `/plimsoll.v1.SandboxService/{Describe,Run,OpenSession,
//! SessionRun,CloseSession}`, authenticates callers, admits runs, dispatches them to
//! one provider, and answers with a run record.
//!
//! Usage:
//!
//! 1. [`config::Config::load`] reads `plimsoll.toml` and the environment, strictly.
//! 2. [`server::Server::start`] checks callers, builds and proves the provider,
//!    checks the startup floor and hardened rules, and binds the listeners.
//! 3. [`server::Server::serve`] serves until a signal, then drains.
//!
//! The HTTP layer ([`http`]) only parses and bounds; [`service`] decides, without
//! HTTP types.

#![deny(missing_docs)]

pub mod admission;
pub mod auth;
pub mod callers;
pub mod config;
pub mod grants;
pub mod http;
pub mod log;
pub mod metrics;
pub mod outbound;
pub mod providers;
pub mod server;
pub mod service;
pub mod sessions;
