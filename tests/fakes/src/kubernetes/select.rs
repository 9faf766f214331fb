//! Label and field selectors, as a LIST or watch takes them in its query.
//!
//! Labels: the equality-based grammar (`k=v`, `k==v`, `k!=v`) and existence
//! (`k`, `!k`), comma-separated, all of which must hold. Set-based
//! requirements (`k in (a,b)`) are refused as unsupported rather than
//! misread. Fields: `metadata.name` and `metadata.namespace`, the two every
//! custom resource supports, with `=`, `==` or `!=`.

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Label {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed `labelSelector`: every requirement must hold (none: everything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Vec<Label>);

/// A label key: an optional DNS-subdomain prefix and `/`, then a name.
fn valid_key(k: &str) -> bool {
    let name = k.rsplit_once('/').map_or(k, |(_, n)| n);
    !name.is_empty()
        && k.len() <= 316
        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// A label value: empty, or up to 63 of `[A-Za-z0-9._-]` starting and ending alphanumeric.
fn valid_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && v.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && v.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric()))
}

impl Labels {
    /// Parses a `labelSelector`; the error is kube-apiserver's wording.
    pub fn parse(s: &str) -> Result<Labels, String> {
        let mut out = Vec::new();
        if s.contains('(') {
            return Err(format!("unable to parse requirement: set-based selectors are not supported here: {s:?}"));
        }
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("unable to parse requirement: {part:?}");
            let req = if let Some((k, v)) = part.split_once("!=") {
                Label::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Label::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Label::Absent(k.trim().into())
            } else if part.contains(' ') {
                return Err(bad());
            } else {
                Label::Exists(part.into())
            };
            let ok = match &req {
                Label::Equals(k, v) | Label::NotEquals(k, v) => valid_key(k) && valid_value(v),
                Label::Exists(k) | Label::Absent(k) => valid_key(k),
            };
            if !ok {
                return Err(bad());
            }
            out.push(req);
        }
        Ok(Labels(out))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let label = |k: &str| object.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Label::Equals(k, v) => label(k) == Some(v.as_str()),
            Label::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Label::Exists(k) => label(k).is_some(),
            Label::Absent(k) => label(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields(Vec<(&'static str, bool, String)>);

impl Fields {
    /// Parses a `fieldSelector`; the error is kube-apiserver's wording.
    pub fn parse(s: &str) -> Result<Fields, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            };
            let field = match field.trim() {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => {
                    return Err(format!(
                        "\"{other}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    ));
                }
            };
            out.push((field, equal, value.trim().to_string()));
        }
        Ok(Fields(out))
    }

    /// Whether `object` satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(pointer, equal, value)| {
            let actual = object.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
            (actual == value) == *equal
        })
    }

    /// The one name the selector pins (`metadata.name=X`), if it does.
    pub fn name(&self) -> Option<&str> {
        self.0.iter().find(|(p, equal, _)| *p == "/metadata/name" && *equal).map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "plimsoll", "labels": labels}})
    }

    #[test]
    fn equality_and_existence_requirements_all_hold() {
        let o = obj("a", json!({"plimsoll.dev/instance": "i1", "plimsoll.dev/run": "r"}));
        let yes =
            ["", "plimsoll.dev/instance=i1", "plimsoll.dev/instance==i1,plimsoll.dev/run=r", "plimsoll.dev/run", "!x"];
        for s in yes {
            assert!(Labels::parse(s).expect(s).matches(&o), "{s}");
        }
        let no = [
            "plimsoll.dev/instance=i2",
            "plimsoll.dev/instance!=i1",
            "plimsoll.dev/instance=i1,x=y",
            "x",
            "!plimsoll.dev/run",
        ];
        for s in no {
            assert!(!Labels::parse(s).expect(s).matches(&o), "{s}");
        }
        assert!(Labels::parse("x!=y").expect("ne").matches(&obj("b", json!({}))));
    }

    #[test]
    fn malformed_or_set_based_label_selectors_are_refused() {
        for s in ["a in (b,c)", "a=b c", "=v", "a=-b", "a b", "a=b=c/"] {
            assert!(Labels::parse(s).is_err(), "{s}");
        }
        assert_eq!(Labels::parse(" a = b ,").expect("spaces"), Labels(vec![Label::Equals("a".into(), "b".into())]));
    }

    #[test]
    fn field_selectors_take_name_and_namespace_only() {
        let o = obj("plimsoll-1", json!({}));
        let f = Fields::parse("metadata.name=plimsoll-1").expect("name");
        assert!(f.matches(&o));
        assert_eq!(f.name(), Some("plimsoll-1"));
        assert!(!Fields::parse("metadata.name=other").expect("other").matches(&o));
        assert!(Fields::parse("metadata.name!=other,metadata.namespace==plimsoll").expect("both").matches(&o));
        assert_eq!(Fields::parse("metadata.name!=x").expect("ne").name(), None);
        let e = Fields::parse("spec.nodeName=n").expect_err("unknown field");
        assert!(e.contains("is not a known field selector"), "{e}");
        let e = Fields::parse("metadata.name").expect_err("no operator");
        assert_eq!(e, "invalid selector: 'metadata.name'; can't understand 'metadata.name'");
    }
}
