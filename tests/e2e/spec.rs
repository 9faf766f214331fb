//! `plimsoll-host spec import` end to end: the demo inventory API's OpenAPI
//! document becomes a grant profile (routes, health check, batch routes) and two
//! clients, and the generated JavaScript (in QuickJS) and Python (in CPython)
//! clients call the live demo API through the broker on the wasm provider.

use super::grants::{DemoApi, JWT_SECRET};
use super::python::run_script;
use super::{Daemon, callers, host, scratch};

const DOCUMENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/broker-demo/openapi.yaml");

fn emit(args: &[&str]) -> String {
    let o = host().args(["spec", "import", DOCUMENT]).args(args).output().expect("spec import");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("UTF-8")
}

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
js = '''
(async () => {
  const one = await inventory.getItem(2);
  const all = await inventory.listItems();
  console.log(one.name, all.items.length >= 6, inventory.getItem.summary);
  const made = await inventory.createItem({ name: "generated-js" });
  console.log(made.created_by, Object.isFrozen(inventory));
})();
'''
r = alice.run_javascript(js, grant_profile="inventory")
assert (r.exit_code, r.isolation) == (0, "process"), (r.stdout, r.stderr)
assert r.stdout == b"nut true One item\nalice true\n", (r.stdout, r.stderr)
py = """
import inventory_client as c
print(c.get_item(3)["name"])
print(c.create_item({"name": "generated-py"})["created_by"])
print(c.get_item.__doc__)
"""
r = alice.run_project({"main.py": py, "inventory_client.py": os.environ["PYCLIENT"]}, ["python3 main.py"],
                      minimum_isolation="process", grant_profile="inventory")
step = r.steps[0]
assert (r.outcome, step.exit_code) == ("completed", 0), step.stderr
assert step.stdout.decode().splitlines() == ["washer", "alice", "One item: GET /items/{id}"], step.stdout
print("generated clients ok")
"#;

#[test]
fn the_clients_generated_from_an_openapi_document_call_the_api_from_quickjs_and_cpython() {
    let dir = scratch("spec-import");
    let allow: serde_json::Value = serde_json::from_str(&emit(&["--emit", "profile"])).expect("profile JSON");
    let batch: serde_json::Value = serde_json::from_str(&emit(&["--emit", "batch"])).expect("batch JSON");
    let health = emit(&["--emit", "health"]);
    std::fs::write(dir.join("inventory.js"), emit(&["--emit", "client", "--sdk", "inventory"])).expect("write");
    let python_client = emit(&["--emit", "client", "--language", "python"]);
    let tool = emit(&["--emit", "tool", "--sdk", "inventory", "--module", "inventory_client"]);
    assert!(
        tool.contains("- inventory.createItem(body) / inventory_client.create_item(body) -> POST /items"),
        "{tool}"
    );

    let api = DemoApi::start(&[]);
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = serde_json::json!({"profiles": {"inventory": {
        "base_url": api.url, "allow": allow["allow"], "allowed_callers": ["alice"],
        "token": {"type": "jwt", "secret_env": "DEMO_JWT_SECRET", "audience": "inventory"},
        "preamble_file": "inventory.js", "health_check": health.trim(), "batch_of": batch
    }}});
    std::fs::write(dir.join("grants.json"), grants.to_string()).expect("grants");
    let d = Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE", &dir.join("grants.json").display().to_string()),
        ("DEMO_JWT_SECRET", JWT_SECRET),
    ]);
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("ALICE", &tokens[0]), ("PYCLIENT", &python_client)]);
    assert_eq!(out, "generated clients ok\n");
    let seen = api.seen();
    assert!(seen.iter().any(|s| s.0 == "POST" && s.2 == "alice"), "{seen:?}");
}

#[test]
fn a_refused_document_prints_nothing_and_says_why() {
    let swagger = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/openapi/petstore-swagger-2.0.yaml");
    let o = host().args(["spec", "import", swagger]).output().expect("spec import");
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "not an OpenAPI 3.x document: it has no `openapi` field (a Swagger 2.0 document? convert it to OpenAPI 3 first)"
        ),
        "{o:?}"
    );
    let petstore = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/openapi/petstore.yaml");
    let o = host().args(["spec", "import", petstore, "--emit", "health"]).output().expect("spec import");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no operation is marked x-plimsoll-health-check: true"));
    let o = host().args(["spec", "import", petstore, "--sdk", "host"]).output().expect("spec import");
    assert_eq!(o.status.code(), Some(1), "the SDK cannot take the grant client's own global");
}
