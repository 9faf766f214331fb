//! From one OpenAPI 3.x document, offline and deterministic: a grant profile's
//! allow list (path parameters become whole-segment `*`), the API's catalog, its
//! health check and batch routes, a typed client over the in-sandbox grant client
//! (JavaScript, a profile's preamble installing its own global; Python, a module
//! over `plimsoll_host`), and a description an agent can read.
//!
//! What cannot travel through the broker is skipped with its reason, never
//! guessed at: HEAD, OPTIONS and TRACE; `$ref` path items and parameters (resolve
//! references first); a segment that mixes text and a parameter; an operation with
//! a required query, header or cookie parameter (the broker carries none); an
//! operation ID that is not a plain identifier, is a keyword, is one of the grant
//! client's methods or `Object.prototype`'s names, or is shared. Text from the
//! document reaches generated code only as JSON string literals, so no title,
//! summary or name can break out of them.

mod emit;

use std::collections::{BTreeMap, BTreeSet};

use oas3::spec::{ObjectOrReference, Operation as OasOperation, ParameterIn, PathItem};
use plimsoll_grants::route::{Method, Route};

pub use emit::{Language, batch, catalog, client, health, profile, tool};

/// The largest document read.
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;
/// The most operations one document may declare.
pub const MAX_OPERATIONS: usize = 2_000;
/// The longest summary kept (characters).
const MAX_SUMMARY_CHARS: usize = 200;

/// Why a document is refused as a whole; nothing is generated from it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Over [`MAX_DOCUMENT_BYTES`].
    #[error("the document is {0} bytes, over the {MAX_DOCUMENT_BYTES}-byte cap")]
    TooLarge(usize),
    /// Not OpenAPI 3.x (a Swagger 2.0 document, another `openapi` version).
    #[error("not an OpenAPI 3.x document: {0}")]
    NotOpenApi3(String),
    /// Not a document the parser accepts.
    #[error("the document does not parse as OpenAPI 3.x: {0}")]
    Parse(String),
    /// Over [`MAX_OPERATIONS`].
    #[error("the document declares {0} operations, over the cap of {MAX_OPERATIONS}")]
    TooManyOperations(usize),
    /// A control character in the title, which every output names.
    #[error("the document's title holds a control character")]
    ControlInTitle,
}

/// One operation the import keeps: a route a grant can open and a client method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The operation ID, checked to be a plain identifier unique in the document.
    pub id: String,
    /// The route, as a profile lists it (`GET /pets/*`).
    pub route: Route,
    /// The path as the document writes it (`/pets/{petId}`).
    pub path: String,
    /// The path parameters, in path order: the client's positional arguments.
    pub params: Vec<String>,
    /// Whether it takes a request body.
    pub body: bool,
    /// Its summary (or description), one line, control characters removed.
    pub summary: String,
}

/// What was left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The operation (`GET /pets`) or path item (`/pets`).
    pub what: String,
    /// Why.
    pub reason: String,
}

/// What one document gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// The API's title.
    pub title: String,
    /// The document's version of the API.
    pub version: String,
    /// The operations kept, by path then method.
    pub operations: Vec<Operation>,
    /// Every route the document names that a profile could list (kept or not):
    /// the catalog the advisor reads.
    pub catalog: BTreeSet<Route>,
    /// A GET route marked `x-plimsoll-health-check: true`.
    pub health: Option<Route>,
    /// Batch routes: a collection GET and the per-item GETs it answers
    /// (`x-plimsoll-batch-of`).
    pub batch_of: BTreeMap<Route, Vec<Route>>,
    /// What was left out.
    pub skips: Vec<Skip>,
    /// What was kept with a loss (an optional query parameter dropped, ...).
    pub warnings: Vec<String>,
}

/// The grant client's own methods: a generated method of the same name would read
/// as the raw call.
const CLIENT_METHODS: [&str; 6] = ["get", "put", "post", "patch", "del", "call"];

/// `Object.prototype`'s names: an operation ID equal to one would shadow what
/// every JavaScript object has.
const RESERVED: [&str; 11] = [
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
    "__proto__",
    "__defineGetter__",
    "__lookupGetter__",
    "__defineSetter__",
];

/// Python's keywords (and soft keywords a module may not bind cleanly).
const PYTHON_KEYWORDS: [&str; 38] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "match", "case", "type",
];

/// Reads one document (JSON when it starts with `{`, else YAML).
///
/// # Errors
///
/// [`ImportError`]: the document as a whole is refused.
pub fn import(text: &str) -> Result<Import, ImportError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(ImportError::TooLarge(text.len()));
    }
    let parsed = if text.trim_start().starts_with('{') {
        oas3::from_json(text).map_err(|e| e.to_string())
    } else {
        oas3::from_yaml(text).map_err(|e| e.to_string())
    };
    let spec = match parsed {
        Ok(spec) => spec,
        Err(e) if e.contains("missing field `openapi`") => {
            return Err(ImportError::NotOpenApi3(
                "it has no `openapi` field (a Swagger 2.0 document? convert it to OpenAPI 3 first)".into(),
            ));
        }
        Err(e) => return Err(ImportError::Parse(e)),
    };
    if !spec.openapi.starts_with("3.") {
        return Err(ImportError::NotOpenApi3(format!("it says openapi {:?}", spec.openapi)));
    }
    if spec.info.title.chars().any(char::is_control) {
        return Err(ImportError::ControlInTitle);
    }
    let paths = spec.paths.unwrap_or_default();
    let declared: usize = paths.values().map(|item| item.methods().into_iter().count()).sum();
    if declared > MAX_OPERATIONS {
        return Err(ImportError::TooManyOperations(declared));
    }
    let mut out = Import {
        title: spec.info.title.clone(),
        version: one_line(&spec.info.version),
        operations: Vec::new(),
        catalog: BTreeSet::new(),
        health: None,
        batch_of: BTreeMap::new(),
        skips: Vec::new(),
        warnings: Vec::new(),
    };
    let mut seen_routes: BTreeMap<Route, String> = BTreeMap::new();
    let mut candidates: Vec<(Operation, &OasOperation)> = Vec::new();
    for (path, item) in &paths {
        let skip = |reason: String| Skip { what: path.chars().filter(|c| !c.is_control()).collect(), reason };
        if path.chars().any(char::is_control) {
            out.skips.push(skip("the path holds a control character".into()));
            continue;
        }
        if item.reference.is_some() {
            out.skips.push(skip("a $ref path item: resolve references before importing".into()));
            continue;
        }
        let template = match template(path) {
            Ok(t) => t,
            Err(reason) => {
                out.skips.push(skip(reason));
                continue;
            }
        };
        for (method, op) in item.methods() {
            let what = format!("{method} {path}");
            let mut skip = |reason: String| out.skips.push(Skip { what: what.clone(), reason });
            let Some(method) = Method::parse(method.as_str()) else {
                skip(format!("{method} cannot be granted (GET, PUT, POST, DELETE and PATCH can)"));
                continue;
            };
            let route = match Route::parse(&format!("{} {}", method.as_str(), template.route)) {
                Ok(r) => r,
                Err(e) => {
                    skip(format!("its route cannot be granted: {e}"));
                    continue;
                }
            };
            if let Some(first) = seen_routes.get(&route) {
                skip(format!("the same route ({route}) as {first}"));
                continue;
            }
            seen_routes.insert(route.clone(), what.clone());
            out.catalog.insert(route.clone());
            if let Err(reason) = parameters(item, op, &template.params, &what, &mut out.warnings) {
                skip(reason);
                continue;
            }
            let id = match op.operation_id.as_deref() {
                None => {
                    skip("no operationId to name its client method".into());
                    continue;
                }
                Some(id) => match identifier(id) {
                    Ok(()) => id.to_string(),
                    Err(reason) => {
                        skip(reason);
                        continue;
                    }
                },
            };
            let summary = one_line(op.summary.as_deref().or(op.description.as_deref()).unwrap_or_default());
            let body = op.request_body.is_some();
            let kept = Operation { id, route, path: path.clone(), params: template.params.clone(), body, summary };
            candidates.push((kept, op));
        }
    }
    keep_unique_names(candidates, &mut out);
    Ok(out)
}

/// Keeps the operations whose IDs (and Python names) no other operation shares,
/// then reads their health and batch marks.
fn keep_unique_names(candidates: Vec<(Operation, &OasOperation)>, out: &mut Import) {
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (op, _) in &candidates {
        *by_name.entry(op.id.clone()).or_default() += 1;
        let snake = emit::snake_case(&op.id);
        if snake != op.id {
            *by_name.entry(snake).or_default() += 1;
        }
    }
    for (op, source) in candidates {
        let what = format!("{} {}", op.route.method().as_str(), op.path);
        let snake = emit::snake_case(&op.id);
        if by_name.get(&op.id).copied().unwrap_or(0) > 1
            || (snake != op.id && by_name.get(&snake).copied().unwrap_or(0) > 1)
        {
            out.skips.push(Skip { what, reason: format!("operationId {:?} collides with another operation's", op.id) });
            continue;
        }
        marks(&op, source, out);
        out.operations.push(op);
    }
}

/// Reads `x-plimsoll-health-check` and `x-plimsoll-batch-of` on a kept operation.
fn marks(op: &Operation, source: &OasOperation, out: &mut Import) {
    let what = format!("{} {}", op.route.method().as_str(), op.path);
    match source.extensions.get("plimsoll-health-check") {
        None | Some(serde_json::Value::Bool(false)) => {}
        Some(serde_json::Value::Bool(true)) if op.route.method() == Method::Get && op.route.is_concrete() => {
            if let Some(earlier) = &out.health {
                out.warnings.push(format!("{what}: a second health check; {earlier} is kept"));
            } else {
                out.health = Some(op.route.clone());
            }
        }
        Some(_) => out.warnings.push(format!(
            "{what}: x-plimsoll-health-check needs true on a GET of a concrete path; not a health check"
        )),
    }
    let Some(batch) = source.extensions.get("plimsoll-batch-of") else { return };
    let lines: Option<Vec<&str>> = batch.as_array().map(|a| a.iter().filter_map(serde_json::Value::as_str).collect());
    let parsed: Option<Vec<Route>> =
        lines.filter(|l| !l.is_empty() && l.len() == batch.as_array().map_or(0, Vec::len)).and_then(|lines| {
            lines
                .iter()
                .map(|l| {
                    let (method, path) = l.split_once(' ')?;
                    let t = template(path).ok()?;
                    Route::parse(&format!("{method} {}", t.route)).ok().filter(|r| r.method() == Method::Get)
                })
                .collect()
        });
    match parsed {
        Some(items) if op.route.method() == Method::Get => {
            out.batch_of.insert(op.route.clone(), items);
        }
        _ => out.warnings.push(format!(
            "{what}: x-plimsoll-batch-of needs a GET answering a list of \"GET /path\" routes; not a batch route"
        )),
    }
}

/// A path template as a route: each `{name}` segment becomes `*`.
struct Template {
    route: String,
    params: Vec<String>,
}

fn template(path: &str) -> Result<Template, String> {
    if !path.starts_with('/') {
        return Err("the path does not start with /".into());
    }
    let mut params = Vec::new();
    let mut segments = Vec::new();
    for segment in path.split('/').skip(1) {
        if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            if name.is_empty() || name.contains(['{', '}']) {
                return Err(format!("the segment {segment:?} is not one parameter"));
            }
            params.push(name.to_string());
            segments.push("*");
        } else if segment.contains(['{', '}']) {
            return Err(format!("the segment {segment:?} mixes text and a parameter; a grant matches whole segments"));
        } else {
            segments.push(segment);
        }
    }
    Ok(Template { route: format!("/{}", segments.join("/")), params })
}

/// Checks an operation's parameters (the path item's, then its own): each path
/// parameter is declared, no `$ref`, nothing required outside the path.
fn parameters(
    item: &PathItem,
    op: &OasOperation,
    path_params: &[String],
    what: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    for p in item.parameters.iter().chain(&op.parameters) {
        let p = match p {
            ObjectOrReference::Ref { ref_path, .. } => {
                return Err(format!("a $ref parameter ({ref_path}): resolve references before importing"));
            }
            ObjectOrReference::Object(p) => p,
        };
        let place = match p.location {
            ParameterIn::Path => continue,
            ParameterIn::Query => "query",
            ParameterIn::Header => "header",
            ParameterIn::Cookie => "cookie",
        };
        let name: String = p.name.chars().filter(|c| !c.is_control()).take(64).collect();
        if p.required == Some(true) {
            return Err(format!(
                "it needs the {place} parameter {name:?}, which the broker cannot carry (no query strings, headers or cookies)"
            ));
        }
        warnings.push(format!("{what}: the optional {place} parameter {name:?} is never sent"));
    }
    if let Some(p) = path_params.iter().find(|p| !identifier_chars(p)) {
        return Err(format!("the path parameter {:?} is not a plain name", p.chars().take(64).collect::<String>()));
    }
    Ok(())
}

/// An operation ID a client method may carry: ASCII letters, digits and `_`,
/// starting with a letter, at most 64; no keyword; none of the client's own names.
fn identifier(id: &str) -> Result<(), String> {
    let shown: String = id.chars().filter(|c| !c.is_control()).take(64).collect();
    if id.len() > 64 || !identifier_chars(id) || !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!("operationId {shown:?} is not a plain identifier (a letter, then letters, digits or _)"));
    }
    if CLIENT_METHODS.contains(&id) {
        return Err(format!(
            "operationId {shown:?} is one of the grant client's own methods ({})",
            CLIENT_METHODS.join(", ")
        ));
    }
    if RESERVED.contains(&id) {
        return Err(format!("operationId {shown:?} is a name every JavaScript object already has"));
    }
    let snake = emit::snake_case(id);
    if PYTHON_KEYWORDS.contains(&id) || PYTHON_KEYWORDS.contains(&snake.as_str()) {
        return Err(format!("operationId {shown:?} is a Python keyword"));
    }
    Ok(())
}

fn identifier_chars(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// One line of at most [`MAX_SUMMARY_CHARS`], control characters as spaces.
fn one_line(s: &str) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    flat.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(MAX_SUMMARY_CHARS).collect()
}

#[cfg(test)]
mod tests;
