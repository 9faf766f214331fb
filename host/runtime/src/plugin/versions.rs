//! Which versions of this host's WIT packages a plugin may be built against.
//!
//! A component names the version of every `plimsoll:` interface it imports or
//! exports (`plimsoll:provider/provider@0.2.0`). The host accepts a version
//! compatible with its own by Cargo's rule (the same major version, or for
//! `0.x` the same minor one) and refuses any other by name after compiling the
//! component and before linking or instantiating it, so a plugin built against
//! another contract never runs half-understood.

use plimsoll_plugin_trust::manifest::PluginKind;
use wasmtime::component::Component;

/// This host's WIT packages and their versions (`wit/<package>/*.wit`).
pub const PACKAGES: [(&str, &str); 5] = [
    ("plimsoll:types", "0.1.0"),
    ("plimsoll:host", "0.1.1"),
    ("plimsoll:provider", "0.2.0"),
    ("plimsoll:broker", "0.1.0"),
    ("plimsoll:signer", "0.1.0"),
];

/// The package a plugin of `kind` exports.
pub fn world_package(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::Provider => "plimsoll:provider",
        PluginKind::Broker => "plimsoll:broker",
        PluginKind::Signer => "plimsoll:signer",
    }
}

/// The versions a host at `version` accepts, as a reader says them (`0.1.0 to 0.1.1`).
pub fn accepted(version: &str) -> String {
    match triple(version) {
        Some((0, minor, _)) => format!("0.{minor}.0 to {version}"),
        Some((major, _, _)) => format!("{major}.0.0 to {version}"),
        None => version.to_string(),
    }
}

/// A version's numbers; a missing patch is 0, anything after `-` or `+` ignored.
fn triple(v: &str) -> Option<(u64, u64, u64)> {
    let mut p = v.split(['-', '+']).next()?.split('.');
    let major = p.next()?.parse().ok()?;
    let minor = p.next()?.parse().ok()?;
    let patch = p.next().map_or(Some(0), |x| x.parse().ok())?;
    Some((major, minor, patch))
}

/// Whether a plugin built against `theirs` works with a host at `ours`: the
/// same series by Cargo's rule (the same major version, or for `0.x` the same
/// minor one), and no newer than ours, since a newer one may import what this
/// host does not define.
pub fn compatible(ours: &str, theirs: &str) -> bool {
    match (triple(ours), triple(theirs)) {
        (Some(o @ (0, a, _)), Some(t @ (0, b, _))) => a == b && t <= o,
        (Some(o @ (a, _, _)), Some(t @ (b, _, _))) => a == b && a != 0 && t <= o,
        _ => false,
    }
}

/// Checks every `plimsoll:` name a component imports and exports (`name@version`)
/// against [`PACKAGES`], and that it exports the package of its `kind`.
///
/// # Errors
///
/// The first name this host does not define or accept, or the missing export.
pub fn check_names<'a>(
    kind: PluginKind,
    imports: impl Iterator<Item = &'a str>,
    exports: impl Iterator<Item = &'a str>,
) -> Result<(), String> {
    let exports: Vec<&str> = exports.collect();
    for (way, name) in imports.map(|n| ("imports", n)).chain(exports.iter().map(|n| ("exports", *n))) {
        let Some(rest) = name.strip_prefix("plimsoll:") else { continue };
        let (path, version) = rest.split_once('@').ok_or_else(|| {
            format!("it {way} {name} without a version; rebuild it against this host's wit/ packages")
        })?;
        let package = format!("plimsoll:{}", path.split('/').next().unwrap_or_default());
        let Some((_, ours)) = PACKAGES.iter().find(|(p, _)| *p == package) else {
            return Err(format!("it {way} {name}, from a package this host does not define"));
        };
        if !compatible(ours, version) {
            return Err(format!(
                "it was built against {package}@{version}, and this host accepts {package} {} only; rebuild it against this host's wit/ packages",
                accepted(ours)
            ));
        }
    }
    let want = world_package(kind);
    if !exports.iter().any(|n| n.starts_with(&format!("{want}/"))) {
        return Err(format!("its manifest says {kind}, but its component exports no {want} interface"));
    }
    Ok(())
}

/// [`check_names`] over a compiled component.
///
/// # Errors
///
/// As [`check_names`].
pub fn check(kind: PluginKind, component: &Component, engine: &wasmtime::Engine) -> Result<(), String> {
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    check_names(kind, imports.iter().map(String::as_str), exports.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepted_versions_are_the_ones_in_wit() {
        let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
        for (package, version) in PACKAGES {
            let dir = wit.join(package.trim_start_matches("plimsoll:"));
            let mut found = None;
            for f in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
                let text = std::fs::read_to_string(f.expect("entry").path()).expect("read");
                if let Some(line) = text.lines().find(|l| l.starts_with("package ")) {
                    found = Some(line.trim_start_matches("package ").trim_end_matches(';').to_string());
                }
            }
            assert_eq!(found, Some(format!("{package}@{version}")), "{}", dir.display());
        }
    }

    #[test]
    fn versions_are_compatible_by_cargos_rule() {
        assert!(compatible("0.1.7", "0.1.0"));
        assert!(compatible("0.1.1", "0.1.1"));
        assert!(!compatible("0.1.0", "0.1.1"), "a newer plugin may import what the host lacks");
        assert!(!compatible("0.1.0", "0.2.0"));
        assert!(compatible("1.2.0", "1.0.3"));
        assert!(!compatible("1.2.0", "1.3.0"));
        assert!(!compatible("1.2.0", "2.0.0"));
        assert!(!compatible("0.1.0", "one"));
        assert_eq!(
            (accepted("0.1.1"), accepted("2.3.1")),
            ("0.1.0 to 0.1.1".to_string(), "2.0.0 to 2.3.1".to_string())
        );
    }

    #[test]
    fn another_major_version_is_refused_by_name() {
        let exports = ["plimsoll:provider/provider@0.2.0"];
        let ok = check_names(
            PluginKind::Provider,
            ["plimsoll:host/http@0.1.0", "wasi:io/streams@0.2.6"].into_iter(),
            exports.into_iter(),
        );
        assert_eq!(ok, Ok(()));
        let e = check_names(PluginKind::Provider, ["plimsoll:host/http@0.2.0"].into_iter(), exports.into_iter());
        assert_eq!(
            e,
            Err("it was built against plimsoll:host@0.2.0, and this host accepts plimsoll:host 0.1.0 to 0.1.1 only; rebuild it against this host's wit/ packages".into())
        );
        let e = check_names(PluginKind::Provider, std::iter::empty(), ["plimsoll:provider/provider@1.0.0"].into_iter());
        assert!(e.is_err_and(|e| e.contains("plimsoll:provider@1.0.0")));
        let e = check_names(PluginKind::Provider, ["plimsoll:vm/boot@0.1.0"].into_iter(), exports.into_iter());
        assert_eq!(e, Err("it imports plimsoll:vm/boot@0.1.0, from a package this host does not define".into()));
        let e = check_names(PluginKind::Broker, std::iter::empty(), exports.into_iter());
        assert_eq!(e, Err("its manifest says broker, but its component exports no plimsoll:broker interface".into()));
    }
}
