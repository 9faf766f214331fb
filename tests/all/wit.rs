//! Every WIT package in `wit/` parses with the others it uses, and every world,
//! interface, function and type in it says what it is for.

use std::path::{Path, PathBuf};

use wit_parser::{Resolve, TypeOwner, WorldItem};

/// Our packages, dependencies first (a package may only use those before it).
const PACKAGES: [&str; 7] = ["types", "host", "engine", "provider", "broker", "signer", "sim"];

fn wit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")
}

fn resolve() -> Resolve {
    let mut r = Resolve::new();
    for p in PACKAGES {
        r.push_dir(wit_dir().join(p)).unwrap_or_else(|e| panic!("wit/{p} does not parse: {e:?}"));
    }
    r
}

#[test]
fn every_package_parses_at_its_version() {
    let r = resolve();
    let mut names: Vec<String> = r.packages.iter().map(|(_, p)| p.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "plimsoll:broker@0.1.0",
            "plimsoll:engine@0.1.0",
            "plimsoll:host@0.1.1",
            "plimsoll:provider@0.2.0",
            "plimsoll:signer@0.1.0",
            "plimsoll:sim@0.1.0",
            "plimsoll:types@0.1.0",
        ]
    );
}

#[test]
fn the_worlds_later_issues_implement_exist() {
    let r = resolve();
    let mut worlds: Vec<String> = r
        .worlds
        .iter()
        .map(|(_, w)| {
            let pkg = w.package.map(|p| r.packages[p].name.to_string()).unwrap_or_default();
            format!("{pkg}/{}", w.name)
        })
        .collect();
    worlds.sort();
    assert_eq!(
        worlds,
        [
            "plimsoll:broker@0.1.0/broker-plugin",
            "plimsoll:engine@0.1.0/engine",
            "plimsoll:engine@0.1.0/python-engine",
            "plimsoll:provider@0.2.0/provider-plugin",
            "plimsoll:signer@0.1.0/signer-plugin",
            "plimsoll:sim@0.1.0/controller-guest",
            "plimsoll:sim@0.1.0/model-guest",
            "plimsoll:sim@0.1.0/plant-guest",
        ]
    );
}

#[test]
fn every_item_has_a_doc_comment() {
    let r = resolve();
    let mut missing = Vec::new();
    for (_, w) in &r.worlds {
        if w.docs.contents.as_deref().unwrap_or("").trim().is_empty() {
            missing.push(format!("world {}", w.name));
        }
        for (key, item) in w.imports.iter().chain(&w.exports) {
            if let WorldItem::Function(f) = item
                && f.docs.contents.is_none()
            {
                missing.push(format!("world {} function {}", w.name, r.name_world_key(key)));
            }
        }
    }
    for (_, i) in &r.interfaces {
        let name = i.name.clone().unwrap_or_default();
        if i.docs.contents.as_deref().unwrap_or("").trim().is_empty() {
            missing.push(format!("interface {name}"));
        }
        for (fname, f) in &i.functions {
            if f.docs.contents.as_deref().unwrap_or("").trim().is_empty() {
                missing.push(format!("{name}.{fname}"));
            }
        }
    }
    for (_, t) in &r.types {
        let Some(tname) = &t.name else { continue };
        // `use` re-exports point at a documented original.
        if matches!(t.kind, wit_parser::TypeDefKind::Type(wit_parser::Type::Id(_))) {
            continue;
        }
        let owner = match t.owner {
            TypeOwner::Interface(i) => r.interfaces[i].name.clone().unwrap_or_default(),
            TypeOwner::World(w) => r.worlds[w].name.clone(),
            TypeOwner::None => String::new(),
        };
        if t.docs.contents.as_deref().unwrap_or("").trim().is_empty() {
            missing.push(format!("{owner}.{tname}"));
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "items without a doc comment:\n{}", missing.join("\n"));
}

#[test]
fn the_engine_world_imports_nothing_but_console_and_the_host_api() {
    let r = resolve();
    let (_, w) = r.worlds.iter().find(|(_, w)| w.name == "engine").expect("engine world");
    let mut imports: Vec<String> = w.imports.keys().map(|k| r.name_world_key(k)).collect();
    imports.sort();
    assert_eq!(imports, ["plimsoll:engine/console@0.1.0", "plimsoll:engine/host-api@0.1.0"]);
}
