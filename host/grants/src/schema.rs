//! Request body schemas a broker plugin declares: a JSON Schema subset the host
//! checks before a body leaves for the vendor's API. Anything outside the subset is
//! refused when the plugin loads, so a schema never means less than it says.

use serde_json::{Map, Value};

/// The keywords the host checks.
const KEYWORDS: [&str; 11] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "maxItems",
];
/// Keywords that only document.
const NOTES: [&str; 4] = ["$schema", "title", "description", "examples"];

/// A checked schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema(Value);

fn check_keywords(v: &Value, at: &str) -> Result<(), String> {
    let Some(obj) = v.as_object() else {
        return Err(format!("{at}: a schema must be a JSON object"));
    };
    for (k, sub) in obj {
        if NOTES.contains(&k.as_str()) {
            continue;
        }
        if !KEYWORDS.contains(&k.as_str()) {
            return Err(format!("{at}: keyword {k:?} is not one the host checks; use {}", KEYWORDS.join(", ")));
        }
        match k.as_str() {
            "properties" => {
                let props = sub.as_object().ok_or_else(|| format!("{at}.properties must be an object"))?;
                for (name, p) in props {
                    check_keywords(p, &format!("{at}.{name}"))?;
                }
            }
            "items" => check_keywords(sub, &format!("{at}[]"))?,
            "additionalProperties" if sub != &Value::Bool(false) && sub != &Value::Bool(true) => {
                return Err(format!("{at}.additionalProperties must be true or false"));
            }
            "type"
                if !matches!(
                    sub.as_str(),
                    Some("object" | "array" | "string" | "integer" | "number" | "boolean" | "null")
                ) =>
            {
                return Err(format!("{at}.type must be one JSON type name"));
            }
            _ => {}
        }
    }
    Ok(())
}

impl Schema {
    /// Parses and checks a schema's text.
    ///
    /// # Errors
    ///
    /// Not JSON, or a keyword outside the subset.
    pub fn parse(text: &str) -> Result<Schema, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        check_keywords(&v, "$")?;
        Ok(Schema(v))
    }

    /// Checks a request body.
    ///
    /// # Errors
    ///
    /// Where the body breaks the schema, as `$.path: rule`.
    pub fn check(&self, body: Option<&[u8]>) -> Result<(), String> {
        let value: Value = match body {
            None => Value::Null,
            Some(b) => serde_json::from_slice(b).map_err(|_| "$: the body is not JSON".to_string())?,
        };
        check_value(&self.0, &value, "$")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check_value(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let empty = Map::new();
    let s = schema.as_object().unwrap_or(&empty);
    if let Some(want) = s.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        if got != want && !(want == "number" && got == "integer") {
            return Err(format!("{at}: must be {want}, not {got}"));
        }
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        return Err(format!("{at}: must be one of the schema's enum values"));
    }
    match v {
        Value::String(text) => {
            let n = text.chars().count() as u64;
            if s.get("minLength").and_then(Value::as_u64).is_some_and(|m| n < m) {
                return Err(format!("{at}: is shorter than minLength"));
            }
            if s.get("maxLength").and_then(Value::as_u64).is_some_and(|m| n > m) {
                return Err(format!("{at}: is longer than maxLength"));
            }
        }
        Value::Number(num) => {
            let x = num.as_f64().unwrap_or(f64::NAN);
            if s.get("minimum").and_then(Value::as_f64).is_some_and(|m| x < m) {
                return Err(format!("{at}: is below minimum"));
            }
            if s.get("maximum").and_then(Value::as_f64).is_some_and(|m| x > m) {
                return Err(format!("{at}: is above maximum"));
            }
        }
        Value::Array(items) => {
            if s.get("maxItems").and_then(Value::as_u64).is_some_and(|m| items.len() as u64 > m) {
                return Err(format!("{at}: has more items than maxItems"));
            }
            if let Some(item) = s.get("items") {
                for (i, x) in items.iter().enumerate() {
                    check_value(item, x, &format!("{at}[{i}]"))?;
                }
            }
        }
        Value::Object(fields) => {
            let props = s.get("properties").and_then(Value::as_object).unwrap_or(&empty);
            for name in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if !fields.contains_key(name) {
                    return Err(format!("{at}.{name}: is required"));
                }
            }
            for (name, x) in fields {
                match props.get(name) {
                    Some(p) => check_value(p, x, &format!("{at}.{name}"))?,
                    None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{at}: property {name:?} is not allowed"));
                    }
                    None => {}
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ITEM: &str = r#"{"type": "object", "required": ["name"], "additionalProperties": false,
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                       "stock": {"type": "integer", "minimum": 0}, "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["a", "b"]}}}}"#;

    #[test]
    fn bodies_are_checked_and_the_failure_names_where() {
        let s = Schema::parse(ITEM).expect("a schema");
        assert_eq!(s.check(Some(br#"{"name": "bolt", "stock": 3, "tags": ["a"]}"#)), Ok(()));
        for (body, want) in [
            (&b"not json"[..], "$: the body is not JSON"),
            (br#"[]"#, "$: must be object, not array"),
            (br#"{}"#, "$.name: is required"),
            (br#"{"name": 7}"#, "$.name: must be string, not integer"),
            (br#"{"name": ""}"#, "$.name: is shorter than minLength"),
            (br#"{"name": "123456789"}"#, "$.name: is longer than maxLength"),
            (br#"{"name": "x", "stock": -1}"#, "$.stock: is below minimum"),
            (br#"{"name": "x", "stock": 1.5}"#, "$.stock: must be integer, not number"),
            (br#"{"name": "x", "tags": ["a", "b", "a"]}"#, "$.tags: has more items than maxItems"),
            (br#"{"name": "x", "tags": ["c"]}"#, "$.tags[0]: must be one of the schema's enum values"),
            (br#"{"name": "x", "admin": true}"#, "$: property \"admin\" is not allowed"),
        ] {
            assert_eq!(s.check(Some(body)), Err(want.to_string()), "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(s.check(None), Err("$: must be object, not null".into()));
    }

    #[test]
    fn a_schema_outside_the_checked_subset_is_refused_at_load() {
        assert!(
            Schema::parse(r#"{"type": "object", "pattern": "^a"}"#)
                .expect_err("refused")
                .contains("keyword \"pattern\"")
        );
        assert!(
            Schema::parse(r#"{"properties": {"a": {"oneOf": []}}}"#)
                .expect_err("refused")
                .starts_with("$.a: keyword \"oneOf\"")
        );
        assert_eq!(
            Schema::parse(r#"{"additionalProperties": {"type": "string"}}"#).expect_err("s1"),
            "$.additionalProperties must be true or false"
        );
        assert_eq!(Schema::parse("[]").expect_err("s2"), "$: a schema must be a JSON object");
        assert!(Schema::parse(r#"{"title": "documents only", "type": "string"}"#).is_ok());
    }
}
