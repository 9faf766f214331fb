//! The operator's SandboxTemplate (`plimsoll-fake kubernetes --template FILE`),
//! written by hand in YAML or JSON, as `kubectl apply` would take it: its two
//! placeholders filled (what an operator's deployment tooling fills on a real
//! cluster: `${SANDBOX_IMAGE}`, the sandbox image by digest, and
//! `${SANDBOXD_TOKEN_SHA256}`, the SHA-256 of the sandboxd token the fake
//! prints), then checked as agent-sandbox's CRD schema checks it (the kind, the
//! group and version, a name, this namespace, a pod template with containers,
//! each resource amount a quantity) and stored as written: a custom resource
//! keeps `cpu: 1` a number. Only the pods made from it come back canonical.

use serde_json::Value;

use super::objects::NAMESPACE;
use super::quantity;

/// What the fake fills in a template: the placeholder and its value.
pub fn placeholders(image: &str, token_sha256: &str) -> [(&'static str, String); 2] {
    [("${SANDBOX_IMAGE}", image.to_string()), ("${SANDBOXD_TOKEN_SHA256}", token_sha256.to_string())]
}

/// Reads the template in `text` (YAML, or JSON, a subset of YAML) with
/// `fill`'s placeholders filled.
///
/// # Errors
///
/// What `kubectl apply` would answer, in its words where it has them.
pub fn read(text: &str, fill: &[(&str, String)]) -> Result<Value, String> {
    let mut text = text.to_string();
    for (placeholder, value) in fill {
        text = text.replace(placeholder, value);
    }
    if let Some(at) = text.find("${") {
        let name: String = text[at..].chars().take_while(|c| *c != '}').chain(std::iter::once('}')).collect();
        return Err(format!(
            "the template names {name}, which the fake does not fill (it fills ${{SANDBOX_IMAGE}} and ${{SANDBOXD_TOKEN_SHA256}})"
        ));
    }
    let v: Value = yaml_serde::from_str(&text).map_err(|e| format!("the template is not YAML or JSON: {e}"))?;
    let field = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if field("/apiVersion") != "extensions.agents.x-k8s.io/v1beta1" || field("/kind") != "SandboxTemplate" {
        return Err(format!(
            "the template is a {} of {:?}, not a SandboxTemplate of extensions.agents.x-k8s.io/v1beta1",
            if field("/kind").is_empty() { "document with no kind" } else { field("/kind") },
            field("/apiVersion")
        ));
    }
    let name = field("/metadata/name");
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !label(name) {
        return Err(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
        ));
    }
    let namespace = field("/metadata/namespace");
    if !namespace.is_empty() && namespace != NAMESPACE {
        return Err(format!("the template is in namespace {namespace:?}; the fake's one namespace is {NAMESPACE:?}"));
    }
    let containers = v.pointer("/spec/podTemplate/spec/containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        return Err("spec.podTemplate.spec.containers: Required value".into());
    }
    // The CRD's schema takes an amount as an integer or a string of a quantity's pattern.
    let mut spec = v.pointer("/spec/podTemplate/spec").cloned().unwrap_or(Value::Null);
    quantity::pod_defaults(&mut spec).map_err(|e| {
        format!("SandboxTemplate.extensions.agents.x-k8s.io \"{name}\" is invalid: spec.podTemplate.{e}")
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const YAML: &str = "
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: plimsoll-runc, namespace: plimsoll}
spec:
  podTemplate:
    spec:
      runtimeClassName: runc
      containers:
        - name: sandbox
          image: ${SANDBOX_IMAGE}
          args: [sandboxd, --token-sha256, '${SANDBOXD_TOKEN_SHA256}']
          resources:
            limits: {cpu: 1, memory: 0.5Gi}
";

    fn fill() -> [(&'static str, String); 2] {
        placeholders("plimsoll-sandbox@sha256:ab", "11")
    }

    #[test]
    fn a_yaml_template_is_read_as_written_with_its_placeholders_filled() {
        let t = read(YAML, &fill()).expect("read");
        let c = &t["spec"]["podTemplate"]["spec"]["containers"][0];
        assert_eq!(c["image"], "plimsoll-sandbox@sha256:ab");
        assert_eq!(c["args"][2], "11");
        assert_eq!(c["resources"]["limits"], json!({"cpu": 1, "memory": "0.5Gi"}), "stored as written");
        let json_text = serde_json::to_string(&t).expect("json");
        assert_eq!(read(&json_text, &fill()).expect("json read"), t);
    }

    #[test]
    fn what_the_api_server_would_refuse_is_named() {
        let cases = [
            (YAML.replace("kind: SandboxTemplate", "kind: Pod"), "the template is a Pod of \"extensions.agents.x-k8s.io/v1beta1\", not a SandboxTemplate of extensions.agents.x-k8s.io/v1beta1".to_string()),
            (YAML.replace("name: plimsoll-runc", "name: Plimsoll"), "metadata.name: Invalid value: \"Plimsoll\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'".to_string()),
            (YAML.replace("namespace: plimsoll}", "namespace: other}"), "the template is in namespace \"other\"; the fake's one namespace is \"plimsoll\"".to_string()),
            (YAML.replace("cpu: 1,", "cpu: lots,"), "SandboxTemplate.extensions.agents.x-k8s.io \"plimsoll-runc\" is invalid: spec.podTemplate.spec.containers[0].resources.limits[cpu]: Invalid value: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (\"lots\")".to_string()),
            (YAML.replace("${SANDBOX_IMAGE}", "${REGISTRY}/sandbox"), "the template names ${REGISTRY}, which the fake does not fill (it fills ${SANDBOX_IMAGE} and ${SANDBOXD_TOKEN_SHA256})".to_string()),
        ];
        for (text, want) in cases {
            assert_eq!(read(&text, &fill()), Err(want.clone()), "{want}");
        }
        let none = YAML.replace("      containers:\n        - name: sandbox\n          image: ${SANDBOX_IMAGE}\n          args: [sandboxd, --token-sha256, '${SANDBOXD_TOKEN_SHA256}']\n          resources:\n            limits: {cpu: 1, memory: 0.5Gi}\n", "      containers: []\n");
        assert_eq!(read(&none, &fill()), Err("spec.podTemplate.spec.containers: Required value".into()));
        assert!(read("a: [", &fill()).is_err_and(|e| e.starts_with("the template is not YAML or JSON: ")));
    }
}
