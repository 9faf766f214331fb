//! Capability grants: an operator's named profiles, exact route matching, the
//! host's API broker (credentials attached by the host, never by the sandbox),
//! metadata-only call traces, and the efficiency advisor over them.

pub mod advice;
pub mod breaker;
pub mod broker;
pub mod profile;
pub mod route;
pub mod schema;
pub mod token;
pub mod trace;
pub mod upstream;

pub use broker::{Broker, HeldCredential, RunGrant, Spent};
pub use profile::{LoadContext, Profile, Profiles};
pub use trace::CallTrace;
