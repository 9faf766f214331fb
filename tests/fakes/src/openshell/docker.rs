//! The docker compute driver's reading of a sandbox template, as the
//! gateway's driver reads it (`openshell-driver-docker`, and the gateway's
//! `compute/mod.rs` that hands it the template): the base fields it refuses,
//! its CPU and memory limits, and the `driver_config.docker` block with its
//! mounts, with the driver's codes and messages. A mount the real driver takes
//! but this fake cannot give is refused by name.

use prost_types::value::Kind;
use prost_types::{Struct, Value};

use super::grpc::Status;
use super::proto::SandboxSpec;
use crate::backing::Tmpfs;

/// Paths the gateway keeps for itself inside a sandbox.
const CONTROL_ROOTS: [&str; 7] = [
    "/opt/openshell",
    "/etc/openshell",
    "/etc/openshell-tls",
    "/run/openshell",
    "/run/openshell-sidecar",
    "/run/netns",
    "/var/run/netns",
];
/// The sandbox's workspace in the fake: the guest's home, a tmpfs the backing
/// gives it, which a mount may sit below but not replace.
pub const WORKSPACE: &str = "/home/user";
/// Tmpfs flags the fake passes on to docker.
const TMPFS_FLAGS: [&str; 18] = [
    "ro",
    "rw",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "diratime",
    "nodiratime",
    "relatime",
    "norelatime",
    "strictatime",
    "sync",
    "async",
    "dirsync",
];
/// `key=value` tmpfs options the fake passes on (numeric values only).
const TMPFS_KEYS: [&str; 3] = ["uid", "gid", "nr_inodes"];

fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

fn precondition(message: impl Into<String>) -> Status {
    Status::failed_precondition(message)
}

/// What the docker driver makes of a template: the container's limits and
/// mounts.
#[derive(Debug, Default, PartialEq)]
pub struct Docker {
    /// CPU limit in billionths of a core.
    pub nano_cpus: Option<i64>,
    /// Memory limit in bytes.
    pub memory_bytes: Option<i64>,
    /// Tmpfs mounts asked through `driver_config.docker.mounts`.
    pub tmpfs: Vec<Tmpfs>,
}

fn string_of(v: &Value) -> Option<&str> {
    match &v.kind {
        Some(Kind::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn struct_of(v: &Value) -> Option<&Struct> {
    match &v.kind {
        Some(Kind::StructValue(s)) => Some(s),
        _ => None,
    }
}

/// Whether `resources` carries anything beyond string `limits`/`requests`
/// `cpu`/`memory`: the gateway passes the rest to the driver as platform
/// config, which the docker driver refuses.
fn resources_beyond_typed(resources: &Struct) -> bool {
    resources.fields.iter().any(|(section, value)| match struct_of(value) {
        Some(inner) if section == "limits" || section == "requests" => {
            inner.fields.iter().any(|(k, v)| !(matches!(k.as_str(), "cpu" | "memory") && string_of(v).is_some()))
        }
        _ => true,
    })
}

fn quantity<'a>(resources: &'a Struct, section: &str, key: &str) -> &'a str {
    resources.fields.get(section).and_then(struct_of).and_then(|s| s.fields.get(key)).and_then(string_of).unwrap_or("")
}

/// A docker CPU limit: cores (`1`, `0.5`) or millicores (`500m`), in
/// billionths of a core; empty is none.
pub fn cpu(value: &str) -> Result<Option<i64>, Status> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let bad = || precondition(format!("invalid docker cpu_limit '{value}'; expected an integer or millicore quantity"));
    let zero = || precondition("docker cpu_limit must be greater than zero");
    if let Some(milli) = value.strip_suffix('m') {
        let milli = milli.parse::<i64>().map_err(|_| bad())?;
        if milli <= 0 {
            return Err(zero());
        }
        return Ok(Some(milli.saturating_mul(1_000_000)));
    }
    let cores = value.parse::<f64>().map_err(|_| bad())?;
    if !cores.is_finite() || cores <= 0.0 {
        return Err(zero());
    }
    Ok(Some(float_to_i64(cores * 1e9)))
}

/// A docker memory limit: a number and an optional suffix (`Ki`…`Ei` powers of
/// 1024, `K`…`E` powers of 1000), in bytes; empty is none.
pub fn memory(value: &str) -> Result<Option<i64>, Status> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let end = value.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(value.len());
    let (number, suffix) = value.split_at(end);
    let amount = number.parse::<f64>().map_err(|_| {
        precondition(format!("invalid docker memory_limit '{value}'; expected a Kubernetes-style quantity"))
    })?;
    if !amount.is_finite() || amount <= 0.0 {
        return Err(precondition("docker memory_limit must be greater than zero"));
    }
    let power = |base: f64, n: i32| base.powi(n);
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => power(1024.0, 1),
        "Mi" => power(1024.0, 2),
        "Gi" => power(1024.0, 3),
        "Ti" => power(1024.0, 4),
        "Pi" => power(1024.0, 5),
        "Ei" => power(1024.0, 6),
        "K" => power(1000.0, 1),
        "M" => power(1000.0, 2),
        "G" => power(1000.0, 3),
        "T" => power(1000.0, 4),
        "P" => power(1000.0, 5),
        "E" => power(1000.0, 6),
        _ => return Err(precondition(format!("invalid docker memory_limit suffix '{suffix}'"))),
    };
    Ok(Some(float_to_i64(amount * multiplier)))
}

/// `f` rounded, saturating at i64's ends.
fn float_to_i64(f: f64) -> i64 {
    // `as` saturates a float into an integer; the value is finite and positive.
    #[expect(clippy::cast_possible_truncation, reason = "saturating is the intent")]
    let n = f.round() as i64;
    n
}

fn kind_name(v: &Value) -> &'static str {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => "null",
        Some(Kind::NumberValue(_)) => "floating point",
        Some(Kind::StringValue(_)) => "string",
        Some(Kind::BoolValue(_)) => "boolean",
        Some(Kind::StructValue(_)) => "map",
        Some(Kind::ListValue(_)) => "sequence",
    }
}

fn parse_error(message: String) -> Status {
    invalid(format!("invalid docker driver_config: {message}"))
}

fn expect_string(v: &Value, field: &str) -> Result<String, Status> {
    string_of(v)
        .map(str::to_string)
        .ok_or_else(|| parse_error(format!("invalid type: {} for `{field}`, expected a string", kind_name(v))))
}

fn expect_number(v: &Value, field: &str) -> Result<Option<f64>, Status> {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Ok(None),
        Some(Kind::NumberValue(n)) => Ok(Some(*n)),
        _ => Err(parse_error(format!("invalid type: {} for `{field}`, expected f64", kind_name(v)))),
    }
}

fn expect_strings(v: &Value, field: &str) -> Result<Vec<String>, Status> {
    match &v.kind {
        Some(Kind::ListValue(list)) => list.values.iter().map(|v| expect_string(v, field)).collect(),
        _ => Err(parse_error(format!("invalid type: {} for `{field}`, expected a sequence", kind_name(v)))),
    }
}

/// One mount as the driver's schema reads it, before its rules.
#[derive(Debug)]
enum Mount {
    Bind { source: String, target: String },
    Volume { source: String, target: String },
    Tmpfs { target: String, options: Vec<String>, size_bytes: Option<f64>, mode: Option<f64> },
    Image { target: String },
}

fn mount(v: &Value) -> Result<Mount, Status> {
    let Some(m) = struct_of(v) else {
        return Err(parse_error(format!(
            "invalid type: {}, expected internally tagged enum DockerDriverMountConfig",
            kind_name(v)
        )));
    };
    let kind = m.fields.get("type").ok_or_else(|| parse_error("missing field `type`".into()))?;
    let kind = expect_string(kind, "type")?;
    let known: &[&str] = match kind.as_str() {
        "bind" => &["source", "target", "read_only", "selinux_label"],
        "volume" | "image" => &["source", "target", "read_only", "subpath"],
        "tmpfs" => &["target", "options", "size_bytes", "mode"],
        other => {
            return Err(parse_error(format!(
                "unknown variant `{other}`, expected one of `bind`, `volume`, `tmpfs`, `image`"
            )));
        }
    };
    if let Some(k) = m.fields.keys().find(|k| *k != "type" && !known.contains(&k.as_str())) {
        let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
        return Err(parse_error(format!("unknown field `{k}`, expected one of {}", expected.join(", "))));
    }
    let required = |field: &str| -> Result<String, Status> {
        let v = m.fields.get(field).ok_or_else(|| parse_error(format!("missing field `{field}`")))?;
        expect_string(v, field)
    };
    if let Some(v) = m.fields.get("read_only")
        && !matches!(v.kind, Some(Kind::BoolValue(_)))
    {
        return Err(parse_error(format!("invalid type: {} for `read_only`, expected a boolean", kind_name(v))));
    }
    for field in ["subpath", "selinux_label"] {
        if let Some(v) = m.fields.get(field) {
            let s = expect_string(v, field)?;
            if field == "selinux_label" && s != "shared" && s != "private" {
                return Err(parse_error(format!("unknown variant `{s}`, expected `shared` or `private`")));
            }
        }
    }
    Ok(match kind.as_str() {
        "bind" => Mount::Bind { source: required("source")?, target: required("target")? },
        "volume" => Mount::Volume { source: required("source")?, target: required("target")? },
        "image" => {
            required("source")?;
            Mount::Image { target: required("target")? }
        }
        _ => Mount::Tmpfs {
            target: required("target")?,
            options: m.fields.get("options").map(|v| expect_strings(v, "options")).transpose()?.unwrap_or_default(),
            size_bytes: m.fields.get("size_bytes").map(|v| expect_number(v, "size_bytes")).transpose()?.flatten(),
            mode: m.fields.get("mode").map(|v| expect_number(v, "mode")).transpose()?.flatten(),
        },
    })
}

/// A mount target: absolute, normalised, clear of the gateway's own paths and
/// of the workspace; the normalised form.
fn mount_target(target: &str) -> Result<String, Status> {
    let field = "mount target";
    if target.is_empty() {
        return Err(precondition(format!("{field} must not be empty")));
    }
    if target != target.trim() {
        return Err(precondition(format!("{field} must not contain surrounding whitespace")));
    }
    if target.chars().any(char::is_control) {
        return Err(precondition(format!("{field} must not contain control characters")));
    }
    if !target.starts_with('/') {
        return Err(precondition(format!("{field} must be an absolute container path")));
    }
    let segments: Vec<&str> = target.split('/').skip(1).collect();
    let inner_empty = segments.iter().take(segments.len().saturating_sub(1)).any(|s| s.is_empty());
    if inner_empty || segments.contains(&".") || segments.contains(&"..") {
        return Err(precondition(format!("{field} must be normalized without empty, '.', or '..' path segments")));
    }
    let normalized = target.trim_end_matches('/');
    if normalized.is_empty() {
        return Err(precondition(format!("{field} must not be the container root")));
    }
    let under = |path: &str, parent: &str| path == parent || path.starts_with(&format!("{parent}/"));
    if let Some(root) = CONTROL_ROOTS.iter().find(|r| under(normalized, r) || under(r, normalized)) {
        return Err(precondition(format!("mount target '{target}' conflicts with reserved OpenShell path '{root}'")));
    }
    if under(WORKSPACE, normalized) {
        return Err(precondition(format!("mount target '{target}' is reserved for the OpenShell workspace")));
    }
    Ok(normalized.to_string())
}

/// An integral JSON number within i64, else FAILED_PRECONDITION.
fn integral(value: f64, field: &str) -> Result<i64, Status> {
    if !value.is_finite() || value.fract() != 0.0 {
        return Err(precondition(format!("{field} must be an integer")));
    }
    value.to_string().parse::<i64>().map_err(|_| precondition(format!("{field} must be representable as an i64")))
}

/// A tmpfs option as the driver takes it, and then as this fake can hand it to
/// docker's `--tmpfs` (a known flag, or `uid`/`gid`/`nr_inodes` with a number).
fn tmpfs_option(option: &str) -> Result<String, Status> {
    let option = option.trim();
    if option.is_empty() {
        return Err(precondition("tmpfs options must not contain empty values"));
    }
    let passable = match option.split_once('=') {
        Some((k, v)) => {
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || v.is_empty() {
                return Err(precondition("tmpfs key=value options must include both key and value"));
            }
            TMPFS_KEYS.contains(&k) && v.bytes().all(|b| b.is_ascii_digit())
        }
        None => TMPFS_FLAGS.contains(&option),
    };
    if !passable {
        return Err(precondition(format!("tmpfs option '{option}' is not one this fake passes to docker")));
    }
    Ok(option.split('=').map(str::trim).collect::<Vec<_>>().join("="))
}

fn mounts(block: &Struct) -> Result<(Vec<Tmpfs>, bool), Status> {
    if let Some(k) = block.fields.keys().find(|k| *k != "mounts" && *k != "cdi_devices") {
        return Err(parse_error(format!("unknown field `{k}`, expected `cdi_devices` or `mounts`")));
    }
    let cdi = match block.fields.get("cdi_devices") {
        None => false,
        Some(v) if matches!(v.kind, None | Some(Kind::NullValue(_))) => false,
        Some(v) => {
            let devices = expect_strings(v, "cdi_devices")?;
            if devices.iter().any(String::is_empty) {
                return Err(parse_error("cdi_devices entries must not be empty".into()));
            }
            true
        }
    };
    let parsed = match block.fields.get("mounts") {
        None => Vec::new(),
        Some(Value { kind: Some(Kind::ListValue(list)) }) => list.values.iter().map(mount).collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(parse_error(format!("invalid type: {} for `mounts`, expected a sequence", kind_name(v))));
        }
    };
    let mut targets = Vec::new();
    let mut tmpfs = Vec::new();
    for m in parsed {
        let target = match m {
            Mount::Bind { source, target } => {
                let _ = (source, target);
                return Err(precondition(
                    "docker bind mounts require enable_bind_mounts = true in [openshell.drivers.docker]",
                ));
            }
            Mount::Volume { source, target } => {
                if source.is_empty() {
                    return Err(precondition("volume source must not be empty"));
                }
                let _ = mount_target(&target)?;
                // This fake keeps no docker volumes: every named one is absent.
                return Err(precondition(format!("docker volume '{source}' does not exist")));
            }
            Mount::Image { target } => {
                let _ = target;
                return Err(precondition("invalid docker driver_config: docker image mounts are not supported"));
            }
            Mount::Tmpfs { target, options, size_bytes, mode } => {
                let size_bytes = size_bytes.map(|s| integral(s, "tmpfs size_bytes")).transpose()?;
                if size_bytes.is_some_and(|s| s <= 0) {
                    return Err(precondition("tmpfs size_bytes must be positive"));
                }
                let mode = mode.map(|m| integral(m, "tmpfs mode")).transpose()?;
                if mode.is_some_and(|m| m < 0) {
                    return Err(precondition("tmpfs mode must be zero or greater"));
                }
                let options = options.iter().map(|o| tmpfs_option(o)).collect::<Result<Vec<_>, _>>()?;
                let normalized = mount_target(&target)?;
                if normalized.contains([':', ',']) {
                    return Err(precondition(format!("this fake cannot mount a tmpfs at '{target}'")));
                }
                tmpfs.push(Tmpfs {
                    target: normalized.clone(),
                    size_bytes: size_bytes.and_then(|s| u64::try_from(s).ok()),
                    mode: mode.and_then(|m| u32::try_from(m).ok()),
                    options,
                });
                normalized
            }
        };
        if targets.contains(&target) {
            return Err(precondition(format!("duplicate docker driver_config mount target '{target}'")));
        }
        targets.push(target);
    }
    Ok((tmpfs, cdi))
}

/// The docker driver's reading of a spec: its template's base fields, its
/// resources, its `driver_config.docker` block and its GPU request, refused as
/// the driver refuses them.
pub fn read(spec: &SandboxSpec) -> Result<Docker, Status> {
    let t = spec.template.clone().unwrap_or_default();
    let block = match t.driver_config.as_ref().and_then(|c| c.fields.get("docker")) {
        None => None,
        Some(v) => {
            Some(struct_of(v).ok_or_else(|| invalid("template.driver_config.docker must be an object".into()))?.clone())
        }
    };
    if t.image.trim().is_empty() {
        return Err(precondition("docker sandboxes require a template image"));
    }
    if !t.agent_socket.trim().is_empty() {
        return Err(precondition("docker compute driver does not support template.agent_socket_path"));
    }
    let platform = !t.runtime_class_name.is_empty()
        || !t.annotations.is_empty()
        || t.user_namespaces.is_some()
        || t.resources.as_ref().is_some_and(resources_beyond_typed);
    if platform {
        return Err(precondition("docker compute driver does not support template.platform_config"));
    }
    let resources = t.resources.unwrap_or_default();
    for key in ["cpu", "memory"] {
        if !quantity(&resources, "requests", key).trim().is_empty() {
            return Err(precondition(format!("docker compute driver does not support resources.requests.{key}")));
        }
    }
    let nano_cpus = cpu(quantity(&resources, "limits", "cpu"))?;
    let memory_bytes = memory(quantity(&resources, "limits", "memory"))?;
    let (tmpfs, cdi) = match &block {
        Some(b) => mounts(b)?,
        None => (Vec::new(), false),
    };
    if spec.resource_requirements.as_ref().is_some_and(|r| r.gpu.is_some()) {
        return Err(precondition(
            "docker GPU sandboxes require Docker CDI support. Enable CDI on the Docker daemon, then restart the OpenShell gateway/server so GPU capability is detected.",
        ));
    }
    if cdi {
        return Err(invalid("driver_config.cdi_devices requires a GPU request".into()));
    }
    Ok(Docker { nano_cpus, memory_bytes, tmpfs })
}

#[cfg(test)]
mod tests {
    use super::super::grpc::Code;
    use super::super::proto::{GpuResourceRequirements, ResourceRequirements, SandboxTemplate};
    use super::*;
    use prost_types::ListValue;

    fn s(v: &str) -> Value {
        Value { kind: Some(Kind::StringValue(v.into())) }
    }
    fn n(v: f64) -> Value {
        Value { kind: Some(Kind::NumberValue(v)) }
    }
    fn obj(pairs: &[(&str, Value)]) -> Value {
        Value { kind: Some(Kind::StructValue(strukt(pairs))) }
    }
    fn strukt(pairs: &[(&str, Value)]) -> Struct {
        Struct { fields: pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }
    }
    fn list(values: Vec<Value>) -> Value {
        Value { kind: Some(Kind::ListValue(ListValue { values })) }
    }
    fn spec_with(resources: Option<Struct>, driver_config: Option<Struct>) -> SandboxSpec {
        SandboxSpec {
            template: Some(SandboxTemplate {
                image: "plimsoll-sandbox@sha256:00".into(),
                resources,
                driver_config,
                ..SandboxTemplate::default()
            }),
            ..SandboxSpec::default()
        }
    }
    fn refused(r: Result<Docker, Status>) -> (Code, String) {
        let e = r.expect_err("refused");
        (e.code, e.message)
    }

    #[test]
    fn cpu_and_memory_parse_as_the_docker_driver_does() {
        assert_eq!(cpu("1").expect("cores"), Some(1_000_000_000));
        assert_eq!(cpu("0.5").expect("fraction"), Some(500_000_000));
        assert_eq!(cpu("500m").expect("millicores"), Some(500_000_000));
        assert_eq!(cpu("").expect("none"), None);
        assert_eq!(cpu("0").expect_err("refused").code, Code::FailedPrecondition);
        assert_eq!(cpu("0m").expect_err("refused").message, "docker cpu_limit must be greater than zero");
        assert_eq!(cpu("two").expect_err("refused").code, Code::FailedPrecondition);
        assert_eq!(memory("256Mi").expect("Mi"), Some(256 << 20));
        assert_eq!(memory("1Gi").expect("Gi"), Some(1 << 30));
        assert_eq!(memory("1G").expect("G"), Some(1_000_000_000));
        assert_eq!(memory("1048576").expect("bytes"), Some(1 << 20));
        assert!(memory("1Qi").expect_err("refused").message.contains("suffix 'Qi'"));
        assert_eq!(memory("0Mi").expect_err("refused").code, Code::FailedPrecondition);
    }

    #[test]
    fn resources_are_string_limits_only() {
        let limits = strukt(&[("limits", obj(&[("cpu", s("0.5")), ("memory", s("256Mi"))]))]);
        let d = read(&spec_with(Some(limits), None)).expect("accepted");
        assert_eq!((d.nano_cpus, d.memory_bytes), (Some(500_000_000), Some(256 << 20)));
        let requests = strukt(&[("requests", obj(&[("cpu", s("1"))]))]);
        assert_eq!(
            refused(read(&spec_with(Some(requests), None))),
            (Code::FailedPrecondition, "docker compute driver does not support resources.requests.cpu".into())
        );
        let number = strukt(&[("limits", obj(&[("cpu", n(1.0))]))]);
        assert!(refused(read(&spec_with(Some(number), None))).1.contains("platform_config"));
        let other = strukt(&[("limits", obj(&[("nvidia.com/gpu", s("1"))]))]);
        assert_eq!(refused(read(&spec_with(Some(other), None))).0, Code::FailedPrecondition);
    }

    fn tmp_mount(extra: &[(&str, Value)]) -> Struct {
        let mut m = vec![("type", s("tmpfs")), ("target", s("/tmp"))];
        m.extend(extra.iter().cloned());
        strukt(&[("docker", obj(&[("mounts", list(vec![obj(&m)]))]))])
    }

    #[test]
    fn a_tmpfs_mount_is_read_and_checked() {
        let asked = tmp_mount(&[
            ("size_bytes", n(33_554_432.0)),
            ("mode", n(1023.0)),
            ("options", list(vec![s("noexec"), s("nosuid"), s("nodev")])),
        ]);
        let d = read(&spec_with(None, Some(asked))).expect("accepted");
        assert_eq!(
            d.tmpfs,
            vec![Tmpfs {
                target: "/tmp".into(),
                size_bytes: Some(32 << 20),
                mode: Some(0o1777),
                options: vec!["noexec".into(), "nosuid".into(), "nodev".into()],
            }]
        );
        let fractional = tmp_mount(&[("size_bytes", n(1.5))]);
        assert_eq!(refused(read(&spec_with(None, Some(fractional)))).1, "tmpfs size_bytes must be an integer");
        let zero = tmp_mount(&[("size_bytes", n(0.0))]);
        assert_eq!(refused(read(&spec_with(None, Some(zero)))).1, "tmpfs size_bytes must be positive");
        let negative = tmp_mount(&[("mode", n(-1.0))]);
        assert_eq!(refused(read(&spec_with(None, Some(negative)))).0, Code::FailedPrecondition);
        let text = tmp_mount(&[("size_bytes", s("32Mi"))]);
        assert_eq!(refused(read(&spec_with(None, Some(text)))).0, Code::InvalidArgument);
        let unknown = tmp_mount(&[("uid", n(1.0))]);
        assert!(refused(read(&spec_with(None, Some(unknown)))).1.contains("unknown field `uid`"));
        let empty_option = tmp_mount(&[("options", list(vec![s(" ")]))]);
        assert_eq!(refused(read(&spec_with(None, Some(empty_option)))).0, Code::FailedPrecondition);
    }

    #[test]
    fn the_docker_block_is_an_object_of_known_keys() {
        let not_object = strukt(&[("docker", s("x"))]);
        assert_eq!(
            refused(read(&spec_with(None, Some(not_object)))),
            (Code::InvalidArgument, "template.driver_config.docker must be an object".into())
        );
        let unknown = strukt(&[("docker", obj(&[("privileged", Value { kind: Some(Kind::BoolValue(true)) })]))]);
        assert!(refused(read(&spec_with(None, Some(unknown)))).1.contains("unknown field `privileged`"));
        let other_driver = strukt(&[("kubernetes", obj(&[("anything", s("x"))]))]);
        assert!(read(&spec_with(None, Some(other_driver))).is_ok());
        let bind = strukt(&[(
            "docker",
            obj(&[("mounts", list(vec![obj(&[("type", s("bind")), ("source", s("/etc")), ("target", s("/x"))])]))]),
        )]);
        assert!(refused(read(&spec_with(None, Some(bind)))).1.contains("enable_bind_mounts"));
        let nfs = strukt(&[("docker", obj(&[("mounts", list(vec![obj(&[("type", s("nfs"))])]))]))]);
        assert!(refused(read(&spec_with(None, Some(nfs)))).1.contains("unknown variant `nfs`"));
    }

    #[test]
    fn mount_targets_keep_clear_of_the_gateways_paths() {
        assert_eq!(mount_target("/tmp/").expect("normalised"), "/tmp");
        let normalised = "mount target must be normalized without empty, '.', or '..' path segments";
        for (bad, why) in
            [("tmp", "mount target must be an absolute container path"), ("/a//b", normalised), ("/a/../b", normalised)]
        {
            assert_eq!(mount_target(bad).expect_err(bad).message, why);
        }
        assert!(mount_target("/").expect_err("refused").message.contains("container root"));
        assert!(mount_target("/run/openshell/x").expect_err("refused").message.contains("reserved OpenShell path"));
        assert!(mount_target("/etc").expect_err("refused").message.contains("reserved OpenShell path"));
        assert!(mount_target("/home").expect_err("refused").message.contains("workspace"));
        assert!(mount_target("/home/user/cache").is_ok());
        let twice = strukt(&[(
            "docker",
            obj(&[(
                "mounts",
                list(vec![
                    obj(&[("type", s("tmpfs")), ("target", s("/data"))]),
                    obj(&[("type", s("tmpfs")), ("target", s("/data/"))]),
                ]),
            )]),
        )]);
        assert!(refused(read(&spec_with(None, Some(twice)))).1.contains("duplicate"));
    }

    #[test]
    fn the_template_must_be_one_docker_can_run() {
        let mut sp = spec_with(None, None);
        if let Some(t) = sp.template.as_mut() {
            t.runtime_class_name = "gvisor".into();
        }
        assert!(refused(read(&sp)).1.contains("platform_config"));
        let mut gpu = spec_with(None, None);
        gpu.resource_requirements =
            Some(ResourceRequirements { gpu: Some(GpuResourceRequirements { count: Some(1) }) });
        assert_eq!(refused(read(&gpu)).0, Code::FailedPrecondition);
    }
}
