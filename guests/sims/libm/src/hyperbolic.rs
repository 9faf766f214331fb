//! Ported from musl's `src/math/cosh.c`, `sinh.c` and `__expo2.c` (MIT; README.md), in
//! the form wasi-libc compiles them, calling our port of musl's `exp` where musl calls
//! `exp`.
//!
//! musl 1.2.1 gave `__expo2` a sign argument, applied before the final multiply, for
//! directed rounding; wasi-libc keeps the older `2*h*__expo2(|x|)` because wasm only
//! rounds to nearest, where the two agree (multiplying by ±1 is exact either way).

use crate::exp::exp;
use crate::hexf::hexf;

/// The high word of |x| for log(DBL_MAX) ~= 709.78: beyond it, `expo2` takes over.
const LOG_DBL_MAX_HIGH: u32 = 0x4086_2e42;

/// The bits of |x| (sign cleared) and their high 32 bits.
fn abs_and_high_word(x: f64) -> (f64, u32) {
    let bits = x.to_bits() & (u64::MAX >> 1);
    (f64::from_bits(bits), (bits >> 32) as u32)
}

/// The hyperbolic cosine of x: musl's `cosh` (expm1 below ln2, musl's `exp` below
/// log(DBL_MAX), `__expo2` beyond).
pub fn cosh(x: f64) -> f64 {
    let (x, w) = abs_and_high_word(x);

    // |x| < ln2
    if w < 0x3fe6_2e42 {
        if w < 0x3ff0_0000 - (26 << 20) {
            return 1.0;
        }
        let t = crate::expm1(x);
        return 1.0 + t * t / (2.0 * (1.0 + t));
    }

    // |x| < log(DBL_MAX)
    if w < LOG_DBL_MAX_HIGH {
        let t = exp(x);
        return 0.5 * (t + 1.0 / t);
    }

    // |x| > log(DBL_MAX), or NaN
    expo2(x)
}

/// The hyperbolic sine of x: musl's `sinh` (expm1 below log(DBL_MAX), then `__expo2`,
/// which calls musl's `exp`).
pub fn sinh(x: f64) -> f64 {
    let h = if x.is_sign_negative() { -0.5 } else { 0.5 };
    let (absx, w) = abs_and_high_word(x);

    // |x| < log(DBL_MAX)
    if w < LOG_DBL_MAX_HIGH {
        let t = crate::expm1(absx);
        if w < 0x3ff0_0000 {
            if w < 0x3ff0_0000 - (26 << 20) {
                return x;
            }
            return h * (2.0 * t - t * t / (t + 1.0));
        }
        return h * (t + t / (t + 1.0));
    }

    // |x| > log(DBL_MAX), or NaN
    2.0 * h * expo2(absx)
}

/// exp(x)/2 for x >= log(DBL_MAX): musl's `__expo2` as wasi-libc compiles it,
/// exp(x - k ln2) * 2^(k-1) with k = 2043, a little better than exp(x/2)^2 / 2.
fn expo2(x: f64) -> f64 {
    /// k*ln2 for k = 2043, which has a minimal relative error and x - k ln2 > log(DBL_MIN).
    const KLN2: f64 = hexf("0x1.62066151add8bp+10");
    /// 2^(k/2 rounded down) = 2^1021; k is odd, so scale * scale = 2^(k-1) overflows
    /// and the two multiplies stay separate.
    const SCALE: f64 = f64::from_bits(((0x3ff + 2043 / 2) as u64) << 52);
    exp(x - KLN2) * SCALE * SCALE
}
