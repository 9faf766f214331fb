//! What an import prints: JSON for profiles, code for the clients, text for an
//! agent. Every string taken from the document is written as a JSON string
//! literal (valid in JavaScript and Python alike); every name is checked first.

use plimsoll_grants::route::Method;
use serde_json::json;

use crate::{Import, Operation};

/// The language of a generated client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// A preamble (`preamble_file`) that installs one method per operation, over
    /// the grant's client `globalThis[global]`, as its own global.
    JavaScript,
    /// A module of one function per operation over `plimsoll_host`.
    Python,
}

/// Names no generated parameter takes (JavaScript's reserved words and Python's
/// keywords), besides `body`, which carries the request body.
const UNSAFE_PARAMS: [&str; 59] = [
    "arguments",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "eval",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "and",
    "as",
    "assert",
    "async",
    "def",
    "del",
    "elif",
    "except",
    "from",
    "global",
    "body",
];
const UNSAFE_PYTHON: [&str; 11] =
    ["lambda", "nonlocal", "not", "or", "pass", "raise", "is", "None", "True", "False", "type"];

/// `listPets` -> `list_pets`, `getHTTPStatus` -> `get_http_status`.
pub(crate) fn snake_case(id: &str) -> String {
    let chars: Vec<char> = id.chars().collect();
    let mut out = String::with_capacity(id.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1);
            let boundary = prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
                || (prev.is_some_and(|p| p.is_ascii_uppercase()) && next.is_some_and(char::is_ascii_lowercase));
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON string literal, also valid in JavaScript and Python; the line and
/// paragraph separators escaped too, since older JavaScript ends a line at them.
fn literal(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

/// The operation's positional parameter names: the document's when they are safe
/// in both languages and distinct, else `arg1`, `arg2`, ...
fn param_names(op: &Operation) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, p) in op.params.iter().enumerate() {
        let name = snake_case(p);
        let safe = name.starts_with(|c: char| c.is_ascii_lowercase())
            && !UNSAFE_PARAMS.contains(&name.as_str())
            && !UNSAFE_PYTHON.contains(&name.as_str())
            && !out.contains(&name);
        out.push(if safe { name } else { format!("arg{}", i + 1) });
    }
    out
}

/// One operation's parameters and its call over `client`: GET and DELETE (named
/// `delete` in this client) take the path parameters, the others `body` after them.
fn call_of(op: &Operation, client: &str, delete: &str, body: &str) -> (Vec<String>, String) {
    let names = param_names(op);
    let list = if names.is_empty() { String::new() } else { format!(", [{}]", names.join(", ")) };
    let route = literal(op.route.template());
    let mut args = names;
    let call = match op.route.method() {
        Method::Get => format!("{client}.get({route}{list})"),
        Method::Delete => format!("{client}.{delete}({route}{list})"),
        m => {
            args.push(body.to_string());
            format!("{client}.{}({route}, body{list})", m.as_str().to_ascii_lowercase())
        }
    };
    (args, call)
}

fn header(import: &Import) -> String {
    format!("{} {}", import.title, import.version)
}

/// `{"allow": [...]}`: the routes of the operations kept.
pub fn profile(import: &Import) -> String {
    let mut allow: Vec<String> = import.operations.iter().map(|o| o.route.to_string()).collect();
    allow.sort();
    pretty(&json!({ "allow": allow }))
}

/// Every route the document names that a profile could list: a profile's `catalog`.
pub fn catalog(import: &Import) -> String {
    pretty(&json!(import.catalog.iter().map(ToString::to_string).collect::<Vec<_>>()))
}

/// The route marked as the health check (`"GET /path"`), if one is.
pub fn health(import: &Import) -> Option<String> {
    import.health.as_ref().map(ToString::to_string)
}

/// A profile's `batch_of`: each batch route and the per-item routes it answers.
pub fn batch(import: &Import) -> String {
    let map: serde_json::Map<String, serde_json::Value> = import
        .batch_of
        .iter()
        .map(|(batch, items)| (batch.to_string(), json!(items.iter().map(ToString::to_string).collect::<Vec<_>>())))
        .collect();
    pretty(&serde_json::Value::Object(map))
}

fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// The client in `language`. The JavaScript one calls through the grant's client
/// `globalThis[global]` and installs itself, frozen, as `globalThis[sdk]`.
pub fn client(import: &Import, language: Language, global: &str, sdk: &str) -> String {
    match language {
        Language::JavaScript => javascript(import, global, sdk),
        Language::Python => python(import),
    }
}

fn javascript(import: &Import, global: &str, sdk: &str) -> String {
    let mut out = String::new();
    out.push_str("// Generated by `plimsoll-host spec import`: one method per operation, over the grant's\n");
    out.push_str("// client. Load it as the profile's preamble_file; the broker still decides every call.\n");
    out.push_str("(function (client, clientName, sdkName, title) {\n  'use strict';\n");
    out.push_str(
        "  if (!client) throw new Error('no grant client is installed as ' + clientName + ' for ' + title);\n",
    );
    out.push_str("  if (Object.prototype.hasOwnProperty.call(globalThis, sdkName)) {\n");
    out.push_str(
        "    throw new Error(sdkName + ' is already defined; generate the client with another --sdk');\n  }\n",
    );
    out.push_str("  const sdk = {};\n  const define = (name, summary, fn) =>\n");
    out.push_str(
        "    Object.defineProperty(sdk, name, { value: Object.assign(fn, { summary }), enumerable: true });\n",
    );
    for op in &import.operations {
        let (args, call) = call_of(op, "client", "del", "body");
        out.push_str(&format!(
            "  define({}, {}, ({}) => {call});\n",
            literal(&op.id),
            literal(&op.summary),
            args.join(", ")
        ));
    }
    out.push_str("  Object.defineProperty(globalThis, sdkName, { value: Object.freeze(sdk), writable: false, configurable: false });\n");
    out.push_str(&format!(
        "}})(globalThis[{g}], {g}, {s}, {t});\n",
        g = literal(global),
        s = literal(sdk),
        t = literal(&header(import))
    ));
    out
}

fn python(import: &Import) -> String {
    let mut out = String::new();
    out.push_str("# Generated by `plimsoll-host spec import`: one function per operation over the grant's\n");
    out.push_str("# client (plimsoll_host). Each returns the parsed answer or raises\n");
    out.push_str("# plimsoll_host.HostApiError; the broker still decides every call.\n");
    out.push_str("import plimsoll_host as _host\n\n");
    out.push_str(&format!("TITLE = {}\n", literal(&header(import))));
    for op in &import.operations {
        let (args, call) = call_of(op, "_host", "delete", "body=None");
        let name = snake_case(&op.id);
        out.push_str(&format!(
            "\n\ndef {name}({}):\n    return {call}\n\n\n{name}.__doc__ = {}\n",
            args.join(", "),
            literal(&format!("{}: {} {}", op.summary, op.route.method().as_str(), op.path))
        ));
    }
    out
}

/// A description an agent can read: what the client offers, one line per method.
pub fn tool(import: &Import, sdk: &str, module: &str) -> String {
    let mut out =
        format!("The {} API, through `{sdk}` (JavaScript, a global) or `import {module}` (Python).\n", header(import));
    out.push_str("The host's broker holds the credential and decides every call; nothing else is reachable.\n");
    for op in &import.operations {
        let (args, _) = call_of(op, "", "", "body");
        let summary = if op.summary.is_empty() { String::new() } else { format!(": {}", op.summary) };
        out.push_str(&format!(
            "- {sdk}.{}({}) / {module}.{}({}) -> {} {}{summary}\n",
            op.id,
            args.join(", "),
            snake_case(&op.id),
            args.join(", "),
            op.route.method().as_str(),
            op.path
        ));
    }
    out
}
