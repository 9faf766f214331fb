//! Bit-equality with wasi-libc: every vector in `vectors.txt` (results that wasi-libc's
//! musl libm gave, recorded as its header says) must come out of this crate unchanged.

use std::collections::BTreeMap;

use plimsoll_libm as m;

/// The recorded vectors: `<function> <argument bits>... <result bits>` per line.
const VECTORS: &str = include_str!("vectors.txt");

/// Every public function, with how many arguments it takes.
const FUNCTIONS: [(&str, usize); 17] = [
    ("sin", 1),
    ("cos", 1),
    ("exp", 1),
    ("expm1", 1),
    ("tanh", 1),
    ("sinh", 1),
    ("cosh", 1),
    ("sqrt", 1),
    ("fabs", 1),
    ("fmod", 2),
    ("atan2", 2),
    ("atan", 1),
    ("asin", 1),
    ("acos", 1),
    ("log", 1),
    ("pow", 2),
    ("floor", 1),
];

/// Fewer vectors than this for a function means the file was cut short.
const MIN_VECTORS_PER_FUNCTION: usize = 250;

/// The named function of this crate applied to `args`, or `None` for an unknown name
/// or the wrong number of arguments.
fn call(name: &str, args: &[f64]) -> Option<f64> {
    Some(match (name, args) {
        ("sin", &[x]) => m::sin(x),
        ("cos", &[x]) => m::cos(x),
        ("exp", &[x]) => m::exp(x),
        ("expm1", &[x]) => m::expm1(x),
        ("tanh", &[x]) => m::tanh(x),
        ("sinh", &[x]) => m::sinh(x),
        ("cosh", &[x]) => m::cosh(x),
        ("sqrt", &[x]) => m::sqrt(x),
        ("fabs", &[x]) => m::fabs(x),
        ("fmod", &[x, y]) => m::fmod(x, y),
        ("atan2", &[y, x]) => m::atan2(y, x),
        ("atan", &[x]) => m::atan(x),
        ("asin", &[x]) => m::asin(x),
        ("acos", &[x]) => m::acos(x),
        ("log", &[x]) => m::log(x),
        ("pow", &[x, y]) => m::pow(x, y),
        ("floor", &[x]) => m::floor(x),
        _ => return None,
    })
}

/// Equal bits, or both NaN (wasi-libc's NaN payloads and signs are not part of the
/// contract, and wasm does not make them deterministic).
fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_vector_has_wasi_libc_bits() {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut mismatches = Vec::new();
    for (number, line) in VECTORS.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let name = fields.next().unwrap_or_default();
        let bits: Vec<u64> = fields
            .map(|f| u64::from_str_radix(f, 16).unwrap_or_else(|e| panic!("vectors.txt:{number}: {f:?}: {e}")))
            .collect();
        let Some((&expected, args)) = bits.split_last() else {
            panic!("vectors.txt:{number}: no result in {line:?}");
        };
        let args: Vec<f64> = args.iter().map(|&b| f64::from_bits(b)).collect();
        let expected = f64::from_bits(expected);
        let got = call(name, &args).unwrap_or_else(|| panic!("vectors.txt:{number}: cannot call {line:?}"));
        *counts.entry(name).or_default() += 1;
        if !same(got, expected) {
            mismatches.push(format!(
                "vectors.txt:{number}: {name}{args:?} = {:#018x}, wasi-libc gives {:#018x}",
                got.to_bits(),
                expected.to_bits()
            ));
        }
    }
    for (name, _) in FUNCTIONS {
        let n = counts.get(name).copied().unwrap_or(0);
        assert!(n >= MIN_VECTORS_PER_FUNCTION, "{name} has only {n} vectors");
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}

#[test]
fn every_function_takes_its_arity() {
    for (name, arity) in FUNCTIONS {
        assert!(call(name, &vec![0.5; arity]).is_some(), "{name}");
        assert!(call(name, &vec![0.5; arity + 1]).is_none(), "{name}");
    }
}
