//! The rules of `plimsoll-host mcp serve-http` that decide who may connect and
//! what a request must be, kept apart from the server so they carry no I/O and
//! no network stack: [`oauth`], the authorization server for the one owner,
//! and [`gate`], the checks before the MCP transport. What depends on the time
//! takes it as an argument, so every expiry is tested, and the fuzz targets
//! build on this crate alone.

pub mod gate;
pub mod oauth;
