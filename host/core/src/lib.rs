//! The vocabulary of plimsoll, with no I/O: isolation tiers and floors, refusals,
//! the protocol's messages, request limits and validation, run-record digests, and
//! the provider contract.
//!
//! How the pieces fit, in the order the daemon uses them:
//!
//! 1. Read a request ([`wire::RunRequest`]) and check its number ([`protocol::check`]).
//! 2. Validate it ([`validate`]); every failure is a [`Refusal`] marked `request`.
//! 3. Check its floor against the provider's evidence ([`provider::check_floor`]).
//! 4. Run it on a [`provider::Provider`], then digest the exchange ([`record`]).
//!
//! ```
//! use plimsoll_core::{record, wire::RunRequest};
//!
//! let req: RunRequest = serde_json::from_str(
//!     r#"{"protocol":1,"minimumIsolation":"container","traceId":"t-1","timeoutMs":5000,
//!         "javascript":{"code":"console.log(1+1)"}}"#,
//! ).unwrap();
//! assert_eq!(
//!     record::request_digest(&req),
//!     "585a1b46c55ebacc1dfdd4336e302328c32ed3e2e7e8a8b460d252d0454be8fc",
//! );
//! ```

#![deny(missing_docs)]

pub mod date;
pub mod dispatch;
pub mod duration;
pub mod html;
pub mod limits;
pub mod protocol;
pub mod provider;
pub mod record;
pub mod refusal;
pub mod session;
pub mod tier;
pub mod validate;
pub mod wire;

pub use refusal::{Reason, Refusal};
pub use tier::{Floor, Tier};
