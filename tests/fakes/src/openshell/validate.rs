//! What the gateway accepts in a request, checked as it checks (its
//! `grpc/validation.rs` and `openshell-policy`'s safety checks), with its codes
//! and messages: the fake refuses what the real gateway refuses, in the same
//! words. The docker driver's own rules are in `docker.rs`.

use std::collections::BTreeMap;

use prost::Message as _;
use prost_types::Struct;

use super::grpc::Status;
use super::proto::{ExecSandboxRequest, SandboxPolicy, SandboxSpec, SandboxTemplate};

/// A sandbox name is one of three DNS labels joined into a 63-character one.
const MAX_NAME: usize = 19;
const MAX_PROVIDERS: usize = 32;
const MAX_LOG_LEVEL: usize = 32;
const MAX_ENV_ENTRIES: usize = 128;
const MAX_KEY: usize = 256;
const MAX_VALUE: usize = 8192;
const MAX_TEMPLATE_STRING: usize = 1024;
const MAX_TEMPLATE_ENTRIES: usize = 128;
const MAX_ANNOTATIONS: usize = 128;
const MAX_TEMPLATE_STRUCT: usize = 65_536;
const MAX_POLICY: usize = 262_144;
const MAX_ENV_BYTES: usize = 256 * 1024;
const MAX_MAIN_ARGS: usize = 256;
const MAX_MAIN_ARGV_BYTES: usize = 256 * 1024;
const MAX_ARG: usize = 32 * 1024;
const MAX_EXEC_ARGS: usize = 1024;
const MAX_WORKDIR: usize = 4096;
const MAX_SELECTOR_PAIRS: usize = 64;
const MAX_POLICY_PATHS: usize = 256;
const MAX_POLICY_PATH: usize = 4096;
/// The one exec variable the gateway lets through with the reserved prefix.
const EXEC_OPENSHELL_KEYS: [&str; 1] = ["OPENSHELL_PYFUNC_B64"];
fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

/// A DNS-1123 label (lowercase alphanumerics and single inner hyphens); empty passes.
fn dns_label(name: &str, field: &str) -> Result<(), Status> {
    if name.is_empty() {
        return Ok(());
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Err(invalid(format!("{field} must contain only lowercase alphanumeric characters or hyphens")));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(invalid(format!("{field} must not start or end with a hyphen")));
    }
    if name.contains("--") {
        return Err(invalid(format!("{field} must not contain consecutive hyphens")));
    }
    Ok(())
}

/// A sandbox name: at most 19 characters, one DNS-1123 label (empty: the
/// gateway makes one).
pub fn name(name: &str) -> Result<(), Status> {
    if name.len() > MAX_NAME {
        return Err(invalid(format!("name exceeds maximum length ({} > {MAX_NAME})", name.len())));
    }
    dns_label(name, "name")
}

fn alphanumeric_ends(s: &str) -> (bool, bool) {
    (s.chars().next().is_some_and(char::is_alphanumeric), s.chars().last().is_some_and(char::is_alphanumeric))
}

/// A label key by Kubernetes' rules: an optional DNS-subdomain prefix and `/`,
/// then a name of at most 63 characters.
pub fn label_key(key: &str) -> Result<(), Status> {
    if key.is_empty() {
        return Err(invalid("label key cannot be empty".into()));
    }
    if key.len() > 253 {
        return Err(invalid(format!("label key exceeds 253 characters: '{key}'")));
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        return Err(invalid(format!("label key name segment cannot be empty: '{key}'")));
    }
    if name.len() > 63 {
        return Err(invalid(format!("label key name segment exceeds 63 characters: '{key}'")));
    }
    if !name.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c)) {
        return Err(invalid(format!(
            "label key name segment contains invalid characters (must be alphanumeric, '-', '_', or '.'): '{key}'"
        )));
    }
    match alphanumeric_ends(name) {
        (false, _) => {
            return Err(invalid(format!("label key name segment must start with alphanumeric character: '{key}'")));
        }
        (_, false) => {
            return Err(invalid(format!("label key name segment must end with alphanumeric character: '{key}'")));
        }
        _ => {}
    }
    let Some(prefix) = prefix else { return Ok(()) };
    if prefix.is_empty() {
        return Err(invalid(format!("label key prefix cannot be empty when '/' is present: '{key}'")));
    }
    if !prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.') {
        return Err(invalid(format!(
            "label key prefix must be a DNS subdomain (lowercase alphanumeric, '-', '.'): '{key}'"
        )));
    }
    if prefix.starts_with(['-', '.']) || prefix.ends_with(['-', '.']) {
        return Err(invalid(format!("label key prefix cannot start or end with '-' or '.': '{key}'")));
    }
    if prefix.contains("..") {
        return Err(invalid(format!("label key prefix cannot contain consecutive dots: '{key}'")));
    }
    Ok(())
}

/// A label value by Kubernetes' rules: empty, or at most 63 of alphanumerics,
/// `-`, `_` and `.`, starting and ending alphanumeric.
pub fn label_value(value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(invalid(format!("label value exceeds 63 characters: '{value}'")));
    }
    if !value.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c)) {
        return Err(invalid(format!(
            "label value contains invalid characters (must be alphanumeric, '-', '_', or '.'): '{value}'"
        )));
    }
    match alphanumeric_ends(value) {
        (false, _) => Err(invalid(format!("label value must start with alphanumeric character: '{value}'"))),
        (_, false) => Err(invalid(format!("label value must end with alphanumeric character: '{value}'"))),
        _ => Ok(()),
    }
}

/// A label selector's `key=value` pairs (AND): at most 64, spaces around each
/// trimmed, empty entries (a trailing comma) skipped.
pub fn selector(selector: &str) -> Result<Vec<(String, String)>, Status> {
    let mut pairs = Vec::new();
    for pair in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if pairs.len() == MAX_SELECTOR_PAIRS {
            return Err(invalid(format!("label selector exceeds {MAX_SELECTOR_PAIRS} pair limit")));
        }
        let Some((key, value)) = pair.split_once('=') else {
            return Err(invalid(format!("invalid label selector: expected 'key=value', got '{pair}'")));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            return Err(invalid(format!("invalid label selector: key cannot be empty in '{pair}'")));
        }
        label_key(key)?;
        label_value(value)?;
        pairs.push((key.to_string(), value.to_string()));
    }
    Ok(pairs)
}

fn string_map(map: &BTreeMap<String, String>, max_entries: usize, field: &str) -> Result<(), Status> {
    if map.len() > max_entries {
        return Err(invalid(format!("{field} exceeds maximum entries ({} > {max_entries})", map.len())));
    }
    for (k, v) in map {
        if k.len() > MAX_KEY {
            return Err(invalid(format!("{field} key exceeds maximum length ({} > {MAX_KEY})", k.len())));
        }
        if v.len() > MAX_VALUE {
            return Err(invalid(format!("{field} value exceeds maximum length ({} > {MAX_VALUE})", v.len())));
        }
    }
    Ok(())
}

/// Annotations: string-map limits, and keys shaped as label keys.
pub fn annotations(map: &BTreeMap<String, String>) -> Result<(), Status> {
    string_map(map, MAX_ANNOTATIONS, "annotations")?;
    map.keys().try_for_each(|k| label_key(k))
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`.
fn env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn control_chars(value: &str, field: &str) -> Result<(), Status> {
    if value.contains('\0') {
        return Err(invalid(format!("{field} contains null bytes")));
    }
    if value.contains(['\n', '\r']) {
        return Err(invalid(format!("{field} contains newline or carriage return characters")));
    }
    Ok(())
}

fn env_entries(map: &BTreeMap<String, String>, field: &str, allowed: &[&str]) -> Result<(), Status> {
    for (key, value) in map {
        if !env_key(key) {
            return Err(invalid(format!("{field} keys must match ^[A-Za-z_][A-Za-z0-9_]*$; got '{key}'")));
        }
        if key.starts_with("OPENSHELL_") && !allowed.contains(&key.as_str()) {
            return Err(invalid(format!("{field} keys starting with OPENSHELL_ are reserved; got '{key}'")));
        }
        control_chars(value, &format!("{field} value for '{key}'"))?;
    }
    Ok(())
}

fn sandbox_env(map: &BTreeMap<String, String>, field: &str) -> Result<(), Status> {
    let total: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ENV_BYTES {
        return Err(invalid(format!("{field} total size exceeds {MAX_ENV_BYTES} byte limit ({total} bytes)")));
    }
    env_entries(map, field, &[])
}

fn template(t: &SandboxTemplate) -> Result<(), Status> {
    for (field, value) in [
        ("template.image", &t.image),
        ("template.runtime_class_name", &t.runtime_class_name),
        ("template.agent_socket", &t.agent_socket),
    ] {
        if value.len() > MAX_TEMPLATE_STRING {
            return Err(invalid(format!("{field} exceeds maximum length ({} > {MAX_TEMPLATE_STRING})", value.len())));
        }
    }
    string_map(&t.labels, MAX_TEMPLATE_ENTRIES, "template.labels")?;
    string_map(&t.annotations, MAX_TEMPLATE_ENTRIES, "template.annotations")?;
    string_map(&t.environment, MAX_TEMPLATE_ENTRIES, "template.environment")?;
    for (field, s) in [("template.resources", &t.resources), ("template.driver_config", &t.driver_config)] {
        let size = s.as_ref().map_or(0, Struct::encoded_len);
        if size > MAX_TEMPLATE_STRUCT {
            return Err(invalid(format!("{field} serialized size exceeds maximum ({size} > {MAX_TEMPLATE_STRUCT})")));
        }
    }
    sandbox_env(&t.environment, "spec.template.environment")
}

fn main_command(command: &[String]) -> Result<(), Status> {
    if command.len() > MAX_MAIN_ARGS {
        return Err(invalid(format!("spec.command exceeds {MAX_MAIN_ARGS} argument limit")));
    }
    if command.first().is_some_and(String::is_empty) {
        return Err(invalid("spec.command[0] must not be empty".into()));
    }
    if command.iter().map(String::len).sum::<usize>() > MAX_MAIN_ARGV_BYTES {
        return Err(invalid(format!("spec.command total size exceeds {MAX_MAIN_ARGV_BYTES} byte limit")));
    }
    for (i, arg) in command.iter().enumerate() {
        if arg.len() > MAX_ARG {
            return Err(invalid(format!("spec.command[{i}] exceeds {MAX_ARG} byte limit")));
        }
        if arg.contains('\0') {
            return Err(invalid(format!("spec.command[{i}] contains null bytes")));
        }
    }
    Ok(())
}

/// The request's name and (already normalised) spec, field by field, as the
/// gateway checks them before anything else (INVALID_ARGUMENT).
pub fn spec(request_name: &str, spec: &SandboxSpec) -> Result<(), Status> {
    name(request_name)?;
    if spec.providers.len() > MAX_PROVIDERS {
        return Err(invalid(format!("providers list exceeds maximum ({} > {MAX_PROVIDERS})", spec.providers.len())));
    }
    if spec.log_level.len() > MAX_LOG_LEVEL {
        return Err(invalid(format!("log_level exceeds maximum length ({} > {MAX_LOG_LEVEL})", spec.log_level.len())));
    }
    string_map(&spec.environment, MAX_ENV_ENTRIES, "spec.environment")?;
    sandbox_env(&spec.environment, "spec.environment")?;
    if let Some(t) = &spec.template {
        template(t)?;
    }
    if spec.resource_requirements.as_ref().and_then(|r| r.gpu.as_ref()).and_then(|g| g.count) == Some(0) {
        return Err(invalid("gpu count must be greater than 0".into()));
    }
    if !spec.command.is_empty() {
        main_command(&spec.command)?;
    }
    if let Some(p) = &spec.policy
        && p.encoded_len() > MAX_POLICY
    {
        return Err(invalid(format!("policy serialized size exceeds maximum ({} > {MAX_POLICY})", p.encoded_len())));
    }
    Ok(())
}

/// The policy's safety checks that need no provider catalog: process identity,
/// filesystem paths, endpoint hosts and ports, TLD wildcards.
pub fn policy(p: &SandboxPolicy) -> Result<(), Status> {
    let mut violations = Vec::new();
    if let Some(process) = &p.process {
        for (field, value) in [("run_as_user", &process.run_as_user), ("run_as_group", &process.run_as_group)] {
            let valid = value == "sandbox" || value.parse::<u32>().is_ok_and(|id| (1..u32::MAX).contains(&id));
            if !value.is_empty() && !valid {
                violations.push(format!(
                    "{field} must be 'sandbox' or a numeric UID/GID in range [1, {}], got '{value}'",
                    u32::MAX - 1
                ));
            }
        }
    }
    if let Some(fs) = &p.filesystem {
        let count = fs.read_only.len() + fs.read_write.len();
        if count > MAX_POLICY_PATHS {
            violations.push(format!("too many filesystem paths ({count} > {MAX_POLICY_PATHS})"));
        }
        for path in fs.read_only.iter().chain(&fs.read_write) {
            if path.len() > MAX_POLICY_PATH {
                let shown: String = path.chars().take(64).collect();
                violations.push(format!("path exceeds maximum length ({} > {MAX_POLICY_PATH}): {shown}", path.len()));
                continue;
            }
            if !path.starts_with('/') {
                violations.push(format!("path must be absolute (start with '/'): {path}"));
            }
            if path.split('/').any(|c| c == "..") {
                violations.push(format!("path contains '..' traversal component: {path}"));
            }
        }
        for path in &fs.read_write {
            if path.trim_end_matches('/').is_empty() {
                violations.push(format!("read-write path is overly broad: {path}"));
            }
        }
    }
    for (key, rule) in &p.network_policies {
        let name = if rule.name.is_empty() { key } else { &rule.name };
        for ep in &rule.endpoints {
            if ep.host.trim().is_empty() && ep.allowed_ips.is_empty() {
                violations.push(format!(
                    "network policy '{name}': endpoint host must not be empty unless allowed_ips constrains a non-TCP proxy endpoint"
                ));
            }
            let ports: Vec<u32> = if ep.ports.is_empty() {
                (ep.port != 0).then_some(ep.port).into_iter().collect()
            } else {
                ep.ports.clone()
            };
            if ports.is_empty() {
                violations
                    .push(format!("network policy '{name}': endpoint '{}' must declare at least one port", ep.host));
            }
            for port in ports.into_iter().filter(|p| !(1..=65_535).contains(p)) {
                violations.push(format!(
                    "network policy '{name}': endpoint '{}' has invalid port {port}; expected 1..=65535",
                    ep.host
                ));
            }
            if (ep.host.starts_with("*.") || ep.host.starts_with("**.")) && ep.host.split('.').count() <= 2 {
                violations.push(format!(
                    "network policy '{name}': TLD wildcard '{}' is not allowed; use subdomain wildcards like '*.example.com' instead",
                    ep.host
                ));
            }
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(invalid(format!("policy contains unsafe content: {}", violations.join("; "))))
    }
}

/// An ExecSandbox request's fields (INVALID_ARGUMENT).
pub fn exec(req: &ExecSandboxRequest) -> Result<(), Status> {
    if req.sandbox_id.is_empty() {
        return Err(invalid("sandbox_id is required".into()));
    }
    if req.command.is_empty() {
        return Err(invalid("command is required".into()));
    }
    if req.environment.keys().any(|k| !env_key(k)) {
        return Err(invalid("environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$".into()));
    }
    if req.command.len() > MAX_EXEC_ARGS {
        return Err(invalid(format!("command array exceeds {MAX_EXEC_ARGS} argument limit")));
    }
    for (i, arg) in req.command.iter().enumerate() {
        if arg.len() > MAX_ARG {
            return Err(invalid(format!("command argument {i} exceeds {MAX_ARG} byte limit")));
        }
        if arg.contains('\0') {
            return Err(invalid(format!("command argument {i} contains null bytes")));
        }
    }
    for (key, value) in &req.environment {
        if value.len() > MAX_ARG {
            return Err(invalid(format!("environment value for '{key}' exceeds {MAX_ARG} byte limit")));
        }
    }
    env_entries(&req.environment, "environment", &EXEC_OPENSHELL_KEYS)?;
    if !req.workdir.is_empty() {
        if req.workdir.len() > MAX_WORKDIR {
            return Err(invalid(format!("workdir exceeds {MAX_WORKDIR} byte limit")));
        }
        control_chars(&req.workdir, "workdir")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::grpc::Code;
    use super::super::proto::{ExecSandboxRequest, GpuResourceRequirements, ResourceRequirements};
    use super::*;

    #[test]
    fn names_are_short_dns_labels() {
        assert!(name("").is_ok() && name("my-box-2").is_ok() && name(&"a".repeat(19)).is_ok());
        assert_eq!(name(&"a".repeat(20)).expect_err("refused").message, "name exceeds maximum length (20 > 19)");
        assert!(name("My-box").expect_err("refused").message.contains("lowercase"));
        assert!(name("-box").expect_err("refused").message.contains("start or end"));
        assert!(name("a--b").expect_err("refused").message.contains("consecutive"));
    }

    #[test]
    fn labels_follow_kubernetes_rules() {
        assert!(label_key("app").is_ok() && label_key("example.com/my-label").is_ok());
        let long = "k".repeat(64);
        for (bad, why) in [
            ("", "label key cannot be empty".to_string()),
            ("/x", "label key prefix cannot be empty when '/' is present: '/x'".into()),
            (
                "Ex.com/x",
                "label key prefix must be a DNS subdomain (lowercase alphanumeric, '-', '.'): 'Ex.com/x'".into(),
            ),
            (long.as_str(), format!("label key name segment exceeds 63 characters: '{long}'")),
            ("-k", "label key name segment must start with alphanumeric character: '-k'".into()),
            ("a..b/k", "label key prefix cannot contain consecutive dots: 'a..b/k'".into()),
        ] {
            assert_eq!(label_key(bad).expect_err(bad).message, why);
        }
        assert!(label_value("").is_ok() && label_value("v1.2_x-y").is_ok());
        let long = "v".repeat(64);
        for (bad, why) in [
            ("-v", "label value must start with alphanumeric character: '-v'".to_string()),
            ("v-", "label value must end with alphanumeric character: 'v-'".into()),
            ("a b", "label value contains invalid characters (must be alphanumeric, '-', '_', or '.'): 'a b'".into()),
            (long.as_str(), format!("label value exceeds 63 characters: '{long}'")),
        ] {
            assert_eq!(label_value(bad).expect_err(bad).message, why);
        }
    }

    #[test]
    fn selectors_are_anded_equalities() {
        assert_eq!(
            selector(" app = web , tier=db,").expect("parses"),
            vec![("app".to_string(), "web".to_string()), ("tier".to_string(), "db".to_string())]
        );
        assert!(selector("").expect("empty").is_empty());
        assert_eq!(selector("app!=web").expect_err("refused").code, Code::InvalidArgument);
        assert!(selector("app").expect_err("refused").message.contains("expected 'key=value'"));
        assert!(selector("=web").expect_err("refused").message.contains("key cannot be empty"));
        let many: Vec<String> = (0..65).map(|i| format!("k{i}=v")).collect();
        assert!(selector(&many.join(",")).expect_err("refused").message.contains("64 pair limit"));
    }

    #[test]
    fn spec_fields_are_bounded() {
        let mut sp = SandboxSpec::default();
        sp.environment.insert("1BAD".into(), "x".into());
        assert!(spec("", &sp).expect_err("refused").message.contains("keys must match"));
        sp.environment = [("OPENSHELL_X".to_string(), "x".to_string())].into();
        assert!(spec("", &sp).expect_err("refused").message.contains("reserved"));
        sp.environment = [("OK".to_string(), "a\nb".to_string())].into();
        assert!(spec("", &sp).expect_err("refused").message.contains("newline"));
        sp.environment.clear();
        sp.command = vec![String::new()];
        assert_eq!(spec("", &sp).expect_err("refused").message, "spec.command[0] must not be empty");
        sp.command = vec!["sh".into(), "a\0b".into()];
        assert_eq!(spec("", &sp).expect_err("refused").message, "spec.command[1] contains null bytes");
        sp.command.clear();
        sp.log_level = "x".repeat(33);
        assert!(spec("", &sp).expect_err("refused").message.starts_with("log_level exceeds"));
        sp.log_level.clear();
        sp.resource_requirements = Some(ResourceRequirements { gpu: Some(GpuResourceRequirements { count: Some(0) }) });
        assert_eq!(spec("", &sp).expect_err("refused").message, "gpu count must be greater than 0");
    }

    #[test]
    fn unsafe_policies_are_refused() {
        let mut p = SandboxPolicy { version: 1, ..SandboxPolicy::default() };
        assert!(policy(&p).is_ok());
        p.filesystem = Some(super::super::proto::FilesystemPolicy {
            read_write: vec!["/".into(), "rel".into()],
            ..Default::default()
        });
        let e = policy(&p).expect_err("refused");
        assert!(e.message.contains("overly broad") && e.message.contains("must be absolute"), "{}", e.message);
        p.filesystem = None;
        p.process =
            Some(super::super::proto::ProcessPolicy { run_as_user: "root".into(), run_as_group: String::new() });
        assert!(policy(&p).expect_err("refused").message.contains("run_as_user"));
        p.process = None;
        let ep = super::super::proto::NetworkEndpoint { host: "*.com".into(), port: 443, ..Default::default() };
        p.network_policies
            .insert("web".into(), super::super::proto::NetworkPolicyRule { endpoints: vec![ep], ..Default::default() });
        assert!(policy(&p).expect_err("refused").message.contains("TLD wildcard"));
    }

    #[test]
    fn exec_requests_are_checked() {
        let ok = ExecSandboxRequest { sandbox_id: "x".into(), command: vec!["true".into()], ..Default::default() };
        assert!(exec(&ok).is_ok());
        let empty = ExecSandboxRequest { command: vec![], ..ok.clone() };
        assert_eq!(exec(&empty).expect_err("refused").message, "command is required");
        let nul = ExecSandboxRequest { command: vec!["a\0".into()], ..ok.clone() };
        assert_eq!(exec(&nul).expect_err("refused").message, "command argument 0 contains null bytes");
        let mut env = ok.clone();
        env.environment.insert("A-B".into(), "x".into());
        assert_eq!(exec(&env).expect_err("refused").message, "environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$");
        let mut reserved = ok.clone();
        reserved.environment.insert("OPENSHELL_PYFUNC_B64".into(), "x".into());
        assert!(exec(&reserved).is_ok());
        reserved.environment.insert("OPENSHELL_SANDBOX".into(), "x".into());
        assert!(exec(&reserved).expect_err("refused").message.contains("reserved"));
        let workdir = ExecSandboxRequest { workdir: "/tmp\n".into(), ..ok.clone() };
        assert!(exec(&workdir).expect_err("refused").message.contains("workdir contains newline"));
        let no_id = ExecSandboxRequest { sandbox_id: String::new(), ..ok };
        assert_eq!(exec(&no_id).expect_err("refused").message, "sandbox_id is required");
    }
}
