//! Hashes the guest components the judge embeds (QuickJS, every plant and model)
//! while it is built, so a judge started for one run finds its precompiled files
//! without hashing 2 MB of components first (about a millisecond a run).

use std::fmt::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let guests = Path::new(&manifest).join("../../guests");
    let mut files = vec!["quickjs/quickjs.wasm".to_string()];
    let sims = guests.join("sims");
    let mut dirs: Vec<String> = std::fs::read_dir(&sims)
        .expect("guests/sims is readable")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    dirs.sort();
    for dir in dirs {
        if sims.join(&dir).join(format!("{dir}.wasm")).is_file() {
            files.push(format!("sims/{dir}/{dir}.wasm"));
        }
    }
    println!("cargo::rerun-if-changed={}", sims.display());
    let mut out = String::from("/// The SHA-256 of each embedded guest, by its path under `guests/`.\n");
    out.push_str("const EMBEDDED: &[(&str, [u8; 32])] = &[\n");
    for file in &files {
        let path = guests.join(file);
        println!("cargo::rerun-if-changed={}", path.display());
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let digest = Sha256::digest(&bytes);
        let _ = writeln!(out, "    ({file:?}, {:?}),", digest.as_slice());
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("embedded.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
