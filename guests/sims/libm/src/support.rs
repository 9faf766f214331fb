//! Ported from musl's `src/math/__math_*.c` and `src/internal/libm.h` (MIT; README.md):
//! the small helpers the Arm routines return through.
//!
//! musl computes these results with real arithmetic so the floating-point flags are
//! raised; Rust has no flags to observe, but the same arithmetic keeps the values the same.

use crate::hexf::hexf;

/// The top 12 bits of a double: its sign and biased exponent.
pub(crate) const fn top12(x: f64) -> u32 {
    (x.to_bits() >> 52) as u32
}

/// `y * y` with the sign applied first: `__math_xflow`.
fn xflow(negative: bool, y: f64) -> f64 {
    (if negative { -y } else { y }) * y
}

/// A result too large for a double: ±inf (`__math_oflow`).
pub(crate) fn oflow(negative: bool) -> f64 {
    xflow(negative, hexf("0x1p769"))
}

/// A result too small for a double: ±0 (`__math_uflow`).
pub(crate) fn uflow(negative: bool) -> f64 {
    xflow(negative, hexf("0x1p-767"))
}

/// A result that is not a number: NaN (`__math_invalid`).
#[expect(clippy::eq_op, reason = "musl makes its NaN as (x - x) / (x - x), x itself when x is NaN")]
pub(crate) fn invalid(x: f64) -> f64 {
    (x - x) / (x - x)
}

/// A pole: ±inf (`__math_divzero`).
pub(crate) fn divzero(negative: bool) -> f64 {
    (if negative { -1.0 } else { 1.0 }) / 0.0
}
