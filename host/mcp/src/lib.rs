//! `plimsoll-host mcp`: a Model Context Protocol server for AI assistants, over
//! stdio for one local client, or over HTTPS (`serve-http`) for connections the
//! owner signed in with a passkey approves one by one. It talks to a plimsoll
//! daemon only through the Rust client, so every answer it passes on was
//! checked (digests, evidence, the floor), and every failure says whether code ran.

pub mod config;
pub mod http;
pub mod passkey;
pub mod private_file;
pub mod rate;
pub mod schema;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt as _};

pub use config::{Config, ConfigError};
/// The authorization server and the request gate: pure rules, in a crate of
/// their own so the fuzz targets need none of the server.
pub use plimsoll_mcp_auth::{gate, oauth};
use tools::{Scope, Tools};

/// Whose calls a [`Server`] serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The one client on stdin and stdout.
    Stdio,
    /// HTTPS: each request carries the [`Scope`] of the approval its bearer
    /// token belongs to, put there by the endpoint after checking the token.
    Http,
}

/// The MCP handler.
#[derive(Clone)]
pub struct Server {
    tools: Arc<Tools>,
    mode: Mode,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

fn listed() -> Vec<Tool> {
    schema::tools()
        .into_iter()
        .filter_map(|t| {
            let (serde_json::Value::Object(input), serde_json::Value::Object(output)) = (t.input, t.output) else {
                return None;
            };
            let hints = ToolAnnotations::new()
                .read_only(t.hints[0])
                .destructive(t.hints[1])
                .idempotent(t.hints[2])
                .open_world(t.hints[3]);
            Some(
                Tool::new(t.name, t.description, Arc::new(input))
                    .with_raw_output_schema(Arc::new(output))
                    .with_annotations(hints),
            )
        })
        .collect()
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("plimsoll", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Run code in a sandbox whose isolation tier is stated on every result. Failures say whether code ran.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(listed()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let scope = match self.mode {
            Mode::Stdio => Scope::local(),
            // Never a shared scope by default: a request that reached the
            // handler without its approval is refused.
            Mode::Http => context
                .extensions
                .get::<::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Scope>())
                .cloned()
                .ok_or_else(|| McpError::internal_error("the request carries no approval", None))?,
        };
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let answer = self.tools.call(&scope, &request.name, arguments).await;
        let text = ContentBlock::text(answer.value.to_string());
        let mut result =
            if answer.error { CallToolResult::error(vec![text]) } else { CallToolResult::success(vec![text]) };
        result.structured_content = Some(answer.value);
        Ok(result.into())
    }
}

/// Serves MCP on stdin and stdout until the client closes them.
///
/// # Errors
///
/// The client to the daemon could not be made, or the transport failed.
pub async fn serve(config: Config) -> Result<(), String> {
    let tools = Tools::new(config)?;
    let server = Server { tools: Arc::new(tools), mode: Mode::Stdio };
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| format!("starting MCP on stdio: {e}"))?;
    running.waiting().await.map_err(|e| format!("MCP on stdio: {e}"))?;
    Ok(())
}
