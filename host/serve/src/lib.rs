//! Serving HTTP for the daemon, `mcp serve-http` and the guard.
//!
//! 1. Wrap each request in [`answer`]: the handler gets the request with a
//!    [`RequestBody`], and whatever it answers reaches the client on HTTP/1.1 and
//!    on HTTP/2, even when it answered before reading the body (a refusal).
//! 2. Build the TLS side from PEM files with [`tls::acceptor`] (ALPN `h2`, then
//!    `http/1.1`).
//!
//! Why [`answer`] exists: over HTTP/2 an answer written while the client is still
//! sending its body ends the stream with a reset, and some clients (curl among
//! them) then drop the answer they were sent, so a refusal reached the caller as a
//! transport error without its not-dispatched mark. [`answer`] reads what is left
//! of the body (up to [`DRAIN_BYTES`], for at most [`DRAIN_TIME`]) before the
//! answer goes out, so the stream closes in both directions without a reset. A
//! body past those bounds is not read further: the answer goes out complete and
//! the stream is closed after it with `NO_ERROR`, as RFC 9113 §8.1 allows.

#![deny(missing_docs)]

mod body;
pub mod tls;

pub use body::{DRAIN_BYTES, DRAIN_TIME, RequestBody, answer};
