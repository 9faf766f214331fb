//! The tool list: each tool's description (written for a model), its input and
//! output JSON schemas (`additionalProperties: false`) and its four hints, and the
//! SHA-256 of the whole list, so a host showing a stale list can be caught.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// One tool as the server lists it.
#[derive(Clone, Debug)]
pub struct ToolDef {
    /// Its name.
    pub name: &'static str,
    /// What it does, for a model.
    pub description: &'static str,
    /// The input schema.
    pub input: Value,
    /// The output schema.
    pub output: Value,
    /// read-only, destructive, idempotent, open-world.
    pub hints: [bool; 4],
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// What every failure carries.
fn failure_properties() -> Value {
    json!({
        "ran": {"type": "string", "enum": ["yes", "no", "maybe"], "description": "no: refused before any code was sent; maybe: the code may have run without a checked answer; yes: it ran"},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "open": {"type": "array", "items": {"type": "object"}},
    })
}

fn with_failure(mut properties: Value) -> Value {
    if let (Some(p), Value::Object(f)) = (properties.as_object_mut(), failure_properties()) {
        for (k, v) in f {
            p.entry(k).or_insert(v);
        }
    }
    json!({"type": "object", "properties": properties, "additionalProperties": false})
}

/// The five tools.
pub fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "run_code",
            description: "Run Python or JavaScript in a sandbox and get its exit code, stdout and stderr. Without a handle the code runs in a fresh sandbox and nothing is kept. With a handle from open_sandbox it runs as a cell in that kept sandbox: files written by one call are there for the next, and one interpreter per language stays alive, so a variable defined in one call exists in the next (a traceback names <cell N>). Files are written into the working directory before the code runs. The flags stateKept, filesPersist, freshSandbox and freshInterpreter say what this call could see; sandboxReplaced says why an earlier sandbox ended; with receipts on, receipt names the signed line that proves this exchange. A loop that never ends is stopped at the run budget (exit 124, timedOut) and its interpreter is lost. A failure says ran: no (nothing ran; fix and send again) or ran: maybe (it may have run; do not assume it did not).",
            input: object(
                json!({
                    "language": {"type": "string", "enum": ["python", "javascript"]},
                    "code": {"type": "string", "minLength": 1},
                    "files": {"type": "array", "maxItems": crate::tools::MAX_FILES, "items": object(json!({"path": {"type": "string"}, "content": {"type": "string"}}), &["path", "content"])},
                    "timeout_ms": {"type": "integer", "minimum": 1},
                    "handle": {"type": "string"},
                }),
                &["language", "code"],
            ),
            output: with_failure(json!({
                "exitCode": {"type": "integer"},
                "stdout": {"type": "string"},
                "stderr": {"type": "string"},
                "timedOut": {"type": "boolean"},
                "truncated": {"type": "boolean"},
                "isolation": {"type": "string"},
                "recordSha256": {"type": "string"},
                "stateKept": {"type": "boolean"},
                "filesPersist": {"type": "boolean"},
                "freshSandbox": {"type": "boolean"},
                "freshInterpreter": {"type": "boolean"},
                "sandboxReplaced": {"type": "string"},
                "receipt": object(json!({"file": {"type": "string"}, "line": {"type": "integer"}}), &["file", "line"]),
                "receiptError": {"type": "string"},
            })),
            hints: [false, false, false, false],
        },
        ToolDef {
            name: "open_sandbox",
            description: "Open a kept sandbox and get its handle for run_code. Only a few may be open at once; past that the open is refused, nothing is deleted, and the answer lists the open handles with their idle times so you can choose which to close. A sandbox lives for a bounded time.",
            input: object(json!({}), &[]),
            output: with_failure(json!({
                "handle": {"type": "string"},
                "isolation": {"type": "string"},
                "lifetimeSeconds": {"type": "integer"},
            })),
            hints: [false, false, false, false],
        },
        ToolDef {
            name: "close_sandbox",
            description: "Close the sandbox with this handle and delete its files and interpreters. Closing a handle that is not open does nothing.",
            input: object(json!({"handle": {"type": "string"}}), &["handle"]),
            output: with_failure(json!({"handle": {"type": "string"}, "closed": {"type": "boolean"}})),
            hints: [false, true, true, false],
        },
        ToolDef {
            name: "get_record",
            description: "Get the checked run record of an earlier call by its recordSha256, while this server runs.",
            input: object(json!({"sha256": {"type": "string"}}), &["sha256"]),
            output: with_failure(json!({"record": {"type": "object"}})),
            hints: [true, false, true, false],
        },
        ToolDef {
            name: "server_info",
            description: "Describe the sandbox behind this server: its provider and isolation tier, the floor every run must meet, the limits, whether receipts are on, and the SHA-256 of this tool list.",
            input: object(json!({}), &[]),
            output: with_failure(json!({
                "provider": {"type": "string"},
                "isolation": {"type": "string"},
                "floor": {"type": "string"},
                "maxSandboxes": {"type": "integer"},
                "sandboxLifetimeSeconds": {"type": "integer"},
                "runTimeoutMs": {"type": "integer"},
                "receipts": {"type": "boolean"},
                "softwareIdentity": {"type": "string"},
                "toolsSha256": {"type": "string"},
            })),
            hints: [true, false, true, false],
        },
    ]
}

/// The tool list as JSON, in the shape `tools/list` answers (the canonical form the
/// digest covers).
pub fn tools_json() -> Value {
    Value::Array(
        tools()
            .into_iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": t.input,
                    "outputSchema": t.output,
                    "annotations": {
                        "readOnlyHint": t.hints[0],
                        "destructiveHint": t.hints[1],
                        "idempotentHint": t.hints[2],
                        "openWorldHint": t.hints[3],
                    },
                })
            })
            .collect(),
    )
}

/// SHA-256 of the canonical tool list (keys sorted, no whitespace).
pub fn tools_digest() -> String {
    hex::encode(Sha256::digest(canonical(&tools_json()).as_bytes()))
}

/// JSON with every object's keys sorted and no whitespace.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let inner: Vec<String> =
                keys.into_iter().map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k]))).collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}
