use super::*;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../../tests/fixtures/openapi/{name}", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture")
}

/// A document around `paths` (YAML, indented under `paths:`).
fn doc(paths: &str) -> String {
    format!("openapi: 3.0.3\ninfo:\n  title: Inventory\n  version: '2'\npaths:\n{paths}")
}

fn skips(i: &Import) -> Vec<(String, String)> {
    i.skips.iter().map(|s| (s.what.clone(), s.reason.clone())).collect()
}

#[test]
fn the_petstore_gives_its_routes_and_says_what_it_drops() {
    let i = import(&fixture("petstore.yaml")).expect("imports");
    assert_eq!((i.title.as_str(), i.version.as_str()), ("Swagger Petstore", "1.0.0"));
    assert_eq!(
        profile(&i),
        "{\n  \"allow\": [\n    \"GET /pets\",\n    \"GET /pets/*\",\n    \"POST /pets\"\n  ]\n}\n"
    );
    let ids: Vec<&str> = i.operations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ids, ["listPets", "createPets", "showPetById"]);
    assert_eq!(i.operations[2].params, ["petId"]);
    assert_eq!(i.warnings, ["GET /pets: the optional query parameter \"limit\" is never sent"]);
    assert!(i.skips.is_empty());
    let again = import(&fixture("petstore.yaml")).expect("again");
    assert_eq!(client(&i, Language::JavaScript, "host", "api"), client(&again, Language::JavaScript, "host", "api"));
    assert_eq!(client(&i, Language::Python, "host", "api"), client(&again, Language::Python, "host", "api"));
}

#[test]
fn documents_that_are_not_openapi_3_or_too_big_are_refused_whole() {
    let swagger = import(&fixture("petstore-swagger-2.0.yaml")).expect_err("refused");
    assert_eq!(
        swagger.to_string(),
        "not an OpenAPI 3.x document: it has no `openapi` field (a Swagger 2.0 document? convert it to OpenAPI 3 first)"
    );
    let four = import("openapi: 4.0.0\ninfo: {title: x, version: '1'}\npaths: {}\n").expect_err("refused");
    assert_eq!(four, ImportError::NotOpenApi3("it says openapi \"4.0.0\"".into()));
    let huge = format!("{}#{}", doc(""), "x".repeat(MAX_DOCUMENT_BYTES));
    assert_eq!(import(&huge).expect_err("refused"), ImportError::TooLarge(huge.len()));
    let many: String = (0..=MAX_OPERATIONS).map(|n| format!("  /items{n}:\n    get: {{}}\n")).collect();
    assert_eq!(import(&doc(&many)).expect_err("refused"), ImportError::TooManyOperations(MAX_OPERATIONS + 1));
    let title = "openapi: 3.0.0\ninfo: {title: \"bad\\u0007title\", version: '1'}\npaths: {}\n";
    assert_eq!(import(title).expect_err("refused"), ImportError::ControlInTitle);
    assert!(matches!(import("openapi: 3.0.0\ninfo: [1, 2]\n").expect_err("refused"), ImportError::Parse(_)));
}

#[test]
fn what_a_grant_cannot_carry_is_skipped_with_its_reason() {
    let i = import(&doc(concat!(
        "  /shared:\n    $ref: '#/components/pathItems/x'\n",
        "  /files/{name}.json:\n    get: {operationId: getFile}\n",
        "  /search:\n    get:\n      operationId: search\n      parameters:\n",
        "        - {name: q, in: query, required: true, schema: {type: string}}\n",
        "  /auth:\n    get:\n      operationId: whoami\n      parameters:\n",
        "        - {name: X-Key, in: header, required: true, schema: {type: string}}\n",
        "  /refd:\n    get:\n      operationId: refd\n      parameters:\n        - $ref: '#/components/parameters/p'\n",
        "  /items:\n    head: {operationId: headItems}\n    get: {operationId: listItems}\n",
        "  /noid:\n    get: {summary: nameless}\n",
        "  /a/{id}:\n    get: {operationId: toString}\n",
        "  /b:\n    get: {operationId: \"x'); evil(); //\"}\n",
        "  /c:\n    get: {operationId: import}\n",
        "  /d:\n    get: {operationId: getItem}\n",
        "  /e:\n    get: {operationId: get_item}\n",
        "  /f:\n    get: {operationId: twice}\n",
        "  /g:\n    get: {operationId: twice}\n",
        "  /h:\n    post: {operationId: call}\n",
        "  /items/{a}:\n    delete: {operationId: dropItem}\n",
        "  /items/{b}:\n    delete: {operationId: dropOther}\n",
    )))
    .expect("imports");
    let want = [
        ("/shared", "a $ref path item: resolve references before importing"),
        (
            "/files/{name}.json",
            "the segment \"{name}.json\" mixes text and a parameter; a grant matches whole segments",
        ),
        (
            "GET /search",
            "it needs the query parameter \"q\", which the broker cannot carry (no query strings, headers or cookies)",
        ),
        (
            "GET /auth",
            "it needs the header parameter \"X-Key\", which the broker cannot carry (no query strings, headers or cookies)",
        ),
        ("GET /refd", "a $ref parameter (#/components/parameters/p): resolve references before importing"),
        ("HEAD /items", "HEAD cannot be granted (GET, PUT, POST, DELETE and PATCH can)"),
        ("GET /noid", "no operationId to name its client method"),
        ("GET /a/{id}", "operationId \"toString\" is a name every JavaScript object already has"),
        ("GET /b", "operationId \"x'); evil(); //\" is not a plain identifier (a letter, then letters, digits or _)"),
        ("GET /c", "operationId \"import\" is a Python keyword"),
        ("POST /h", "operationId \"call\" is one of the grant client's own methods (get, put, post, patch, del, call)"),
        ("DELETE /items/{b}", "the same route (DELETE /items/*) as DELETE /items/{a}"),
        ("GET /d", "operationId \"getItem\" collides with another operation's"),
        ("GET /e", "operationId \"get_item\" collides with another operation's"),
        ("GET /f", "operationId \"twice\" collides with another operation's"),
        ("GET /g", "operationId \"twice\" collides with another operation's"),
    ];
    let mut got = skips(&i);
    got.sort();
    let mut want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    want.sort();
    assert_eq!(got, want);
    let kept: Vec<&str> = i.operations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(kept, ["listItems", "dropItem"], "by path, then method");
    let catalog: Vec<String> = i.catalog.iter().map(ToString::to_string).collect();
    assert!(catalog.contains(&"GET /search".to_string()), "the catalog names routes a client cannot call: {catalog:?}");
}

#[test]
fn hostile_text_reaches_generated_code_only_as_string_literals() {
    let summary = "ends */ here\u{2028}then \"\"\" and '); process.exit(1); //";
    let i = import(&format!(
        "{{\"openapi\": \"3.1.0\", \"info\": {{\"title\": \"T */ \\\"\\\"\\\" \\u2028\", \"version\": \"1\"}},
          \"paths\": {{\"/items/{{class}}\": {{\"post\": {{\"operationId\": \"makeItem\", \"summary\": {},
          \"requestBody\": {{\"content\": {{}}}}}}}}}}}}",
        serde_json::Value::String(summary.into())
    ))
    .expect("imports");
    let js = client(&i, Language::JavaScript, "host", "api");
    let py = client(&i, Language::Python, "host", "api");
    assert!(js.contains(r#"define("makeItem", "ends */ here then \"\"\" and '); process.exit(1); //", (arg1, body) => client.post("/items/*", body, [arg1]));"#), "{js}");
    assert!(py.contains("def make_item(arg1, body=None):\n    return _host.post(\"/items/*\", body, [arg1])"), "{py}");
    for line in js.lines().chain(py.lines()) {
        assert!(!line.contains('\u{2028}'), "a line separator would end a comment: {line:?}");
    }
    assert!(
        !js.lines().any(|l| l.trim_start().starts_with("//") && l.contains("T */")),
        "the title is never in a comment"
    );
}

#[test]
fn cycles_are_not_followed_and_marks_become_health_and_batch_routes() {
    let i = import(&doc(concat!(
        "  /health:\n    get: {operationId: health, x-plimsoll-health-check: true}\n",
        "  /items:\n    get: {operationId: listItems, x-plimsoll-batch-of: ['GET /items/{id}']}\n",
        "  /items/{id}:\n    get:\n      operationId: getItem\n      responses:\n        '200':\n",
        "          description: an item\n          content:\n            application/json:\n",
        "              schema: {$ref: '#/components/schemas/Node'}\n",
        "components:\n  schemas:\n    Node:\n      type: object\n      properties:\n",
        "        next: {$ref: '#/components/schemas/Node'}\n",
    )))
    .expect("a self-referencing schema is never followed");
    assert_eq!(health(&i).as_deref(), Some("GET /health"));
    assert_eq!(batch(&i), "{\n  \"GET /items\": [\n    \"GET /items/*\"\n  ]\n}\n");
    assert_eq!(emit::snake_case("getHTTPStatus"), "get_http_status");
    let tool_text = tool(&i, "inventory", "inventory_client");
    assert!(
        tool_text.contains("- inventory.getItem(id) / inventory_client.get_item(id) -> GET /items/{id}\n"),
        "{tool_text}"
    );
}
