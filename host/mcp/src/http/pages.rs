//! The owner's pages: set up a passkey, sign in, approve or deny a connection,
//! list and revoke connections. Plain HTML with one script from this origin;
//! everything a client chose (its name, its redirect URI) is escaped.

use std::fmt::Write as _;
use std::time::SystemTime;

use plimsoll_core::html::escape;

use crate::oauth::{Approval, Held};

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · plimsoll</title><link rel=\"stylesheet\" href=\"/plimsoll.css\">\
         <script src=\"/plimsoll.js\" defer></script></head>\n<body><main>\n<h1>{}</h1>\n{body}\n\
         <p id=\"status\" role=\"status\"></p>\n</main></body></html>\n",
        escape(title),
        escape(title)
    )
}

/// A page that says one thing.
pub fn message(title: &str, text: &str) -> String {
    page(title, &format!("<p>{}</p>\n<p><a href=\"/\">Back to the server's page</a></p>", escape(text)))
}

/// First run: register the owner's passkey with the code on the server's console.
pub fn setup() -> String {
    page(
        "Set up the owner's passkey",
        "<p>This MCP server has no owner yet. The server printed a one-time setup code on its console \
         when it started; enter it here, then create a passkey. Only the holder of that passkey can \
         approve connections.</p>\n\
         <p><label for=\"setup-code\">Setup code</label> \
         <input id=\"setup-code\" name=\"code\" autocomplete=\"off\" spellcheck=\"false\"></p>\n\
         <p><button id=\"register\" type=\"button\">Create the owner's passkey</button></p>",
    )
}

/// Sign in with the owner's passkey; `why` says what the sign-in is for.
pub fn sign_in(why: &str) -> String {
    page(
        "Sign in",
        &format!(
            "<p>{}</p>\n<p><button id=\"signin\" type=\"button\">Sign in with the owner's passkey</button></p>",
            escape(why)
        ),
    )
}

fn when(t: Option<SystemTime>) -> String {
    match t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        Some(d) => format!("{}", d.as_secs()),
        None => "never".into(),
    }
}

/// The signed-in owner's page: every approved connection, each revocable.
pub fn dashboard(approvals: &[Approval], csrf: &str, passkeys: usize) -> String {
    let mut rows = String::new();
    for a in approvals {
        let _ = writeln!(
            rows,
            "<tr data-approval=\"{id}\"><td class=\"client\">{name}</td><td class=\"redirect\">{redirect}</td>\
             <td><time data-unix=\"{approved}\">{approved}</time></td><td><time data-unix=\"{used}\">{used}</time></td>\
             <td><form method=\"post\" action=\"/approvals/{id}/revoke\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button class=\"revoke\" type=\"submit\">Revoke</button></form></td></tr>",
            id = escape(&a.id),
            name = escape(&a.client_name),
            redirect = escape(&a.redirect_uri),
            approved = when(Some(a.approved_at)),
            used = when(a.last_used),
            csrf = escape(csrf),
        );
    }
    let table = if approvals.is_empty() {
        "<p id=\"none\">No connection is approved. A client that connects asks here first.</p>".to_string()
    } else {
        format!(
            "<table id=\"approvals\"><thead><tr><th>Client</th><th>Redirect URI</th><th>Approved (Unix time)</th>\
             <th>Last used</th><th></th></tr></thead>\n<tbody>\n{rows}</tbody></table>"
        )
    };
    page(
        "Connections",
        &format!(
            "<p>Each approved connection may run code in its own sandboxes and read its own records; \
             revoking one refuses its next call and closes its sandboxes.</p>\n{table}\n\
             <p id=\"passkeys\">The owner has {passkeys} passkey{s}. \
             <button id=\"add-passkey\" type=\"button\">Add a passkey on another device</button></p>\n\
             <form method=\"post\" action=\"/signout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button id=\"signout\" type=\"submit\">Sign out</button></form>",
            escape(csrf),
            s = if passkeys == 1 { "" } else { "s" },
        ),
    )
}

/// A held connection request: who asks, where the answer goes, what it may do.
pub fn approve(held: &Held, csrf: &str) -> String {
    let form = |decision: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/approve/{id}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"decision\" value=\"{decision}\">\
             <button id=\"{decision}\" type=\"submit\">{label}</button></form>",
            id = escape(&held.id),
            csrf = escape(csrf),
        )
    };
    page(
        "Approve a connection?",
        &format!(
            "<dl id=\"client\"><dt>Client (its own name for itself)</dt><dd class=\"client\">{name}</dd>\
             <dt>Answer goes to</dt><dd class=\"redirect\"><strong>{host}</strong> ({uri})</dd>\
             <dt>It may</dt><dd class=\"scope\">use the five tools ({scope}): run code in sandboxes it opens, \
             close them, and read the records of its own runs; it cannot see or close another connection's</dd></dl>\n\
             <p>Approve only a client you just started connecting. {deny} {approve}</p>",
            name = escape(&held.client_name),
            host = escape(&held.redirect_host),
            uri = escape(&held.redirect_uri),
            scope = escape(&held.scope),
            deny = form("deny", "Deny"),
            approve = form("approve", "Approve"),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_names_is_escaped() {
        let held = Held {
            id: "i".into(),
            client_id: "c".into(),
            client_name: "<script>alert(1)</script>\"".into(),
            redirect_uri: "https://a.example/cb?x=\"><img>".into(),
            redirect_host: "a.example".into(),
            scope: "mcp:tools".into(),
        };
        let html = approve(&held, "tok");
        assert!(!html.contains("<script>alert") && !html.contains("\"><img>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;"));
        assert!(html.contains("id=\"approve\"") && html.contains("id=\"deny\"") && html.contains("value=\"tok\""));
    }
}
