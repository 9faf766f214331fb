//! `plimsoll-host mcp serve-http`: the MCP server over HTTPS for connections the
//! owner approves one by one. It serves TLS itself with the operator's
//! certificate, or plain HTTP on loopback behind a TLS reverse proxy the
//! operator names; either way every URL it states comes from `--public-url`,
//! and a request naming another host is refused (DNS rebinding).
//!
//! The pieces: [`crate::oauth`] is the authorization server, [`crate::passkey`]
//! the owner's sign-in, [`crate::gate`] the checks before the MCP transport;
//! [`App`] routes requests among them and the pages.

mod app;
mod endpoint;
mod pages;
mod start;
#[cfg(test)]
mod tests;

pub use app::App;
pub use start::{Options, StartError, serve_http};
