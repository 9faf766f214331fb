//! Ported from musl's `src/math/exp.c` and the `exp_inline` of `src/math/pow.c` (Arm
//! optimized-routines, MIT; README.md).

use crate::exp_data::{C2, C3, C4, C5, INV_LN2_N, N, NEG_LN2_HI_N, NEG_LN2_LO_N, SHIFT, TAB, TABLE_BITS};
use crate::hexf::hexf;
use crate::support::{oflow, top12, uflow};

/// Added to the table index to flip the sign of the result: `0x800 << TABLE_BITS`
/// shifted by `52 - TABLE_BITS` lands on the sign bit.
pub(crate) const SIGN_BIAS: u64 = 0x800 << TABLE_BITS;

/// e^x: musl's `exp` (Arm optimized-routines, 128-entry table, degree-5 polynomial).
pub fn exp(x: f64) -> f64 {
    // musl tests for inf and NaN inside its large-|x| branch; taking them first leaves
    // only finite x for the shared core, which is musl's `exp` from there on.
    if top12(x) & 0x7ff >= top12(f64::INFINITY) {
        if x.to_bits() == f64::NEG_INFINITY.to_bits() {
            return 0.0;
        }
        return 1.0 + x;
    }
    exp_inline(x, 0.0, 0)
}

/// e^(x + xtail) for finite x, negated when `sign_bias` is [`SIGN_BIAS`]: pow.c's
/// `exp_inline`, where |xtail| < 2^-8/N and |xtail| <= |x|.
///
/// With `xtail = 0` and `sign_bias = 0` this is musl's `exp` for finite x: adding a zero
/// tail changes no bits (the reduced argument is never -0, as x + k*(-ln2/N) only rounds
/// to zero by exact cancellation), and pow's sign-aware `specialcase` is exp's when the
/// scale is positive (its zero is then +0, which is what exp's gives in round-to-nearest).
pub(crate) fn exp_inline(x: f64, xtail: f64, sign_bias: u64) -> f64 {
    let mut abstop = top12(x) & 0x7ff;
    let tiny = top12(hexf("0x1p-54"));
    if abstop.wrapping_sub(tiny) >= top12(512.0) - tiny {
        if abstop.wrapping_sub(tiny) >= 0x8000_0000 {
            // |x| < 2^-54 (0 is a common input). wasi-libc builds musl with
            // WANT_ROUNDING 0, so this is ±1 rather than ±(1 + x): the same in
            // round-to-nearest.
            return if sign_bias != 0 { -1.0 } else { 1.0 };
        }
        if abstop >= top12(1024.0) {
            return if x.is_sign_negative() { uflow(sign_bias != 0) } else { oflow(sign_bias != 0) };
        }
        // 512 <= |x| < 1024: may over- or underflow, handled by `specialcase` below.
        abstop = 0;
    }

    // exp(x) = 2^(k/N) * exp(r), with exp(r) in [2^(-1/2N), 2^(1/2N)];
    // x = ln2/N * k + r, with integer k and r in [-ln2/2N, ln2/2N].
    let z = INV_LN2_N * x;
    let kd = z + SHIFT;
    let ki = kd.to_bits();
    let kd = kd - SHIFT;
    let mut r = x + kd * NEG_LN2_HI_N + kd * NEG_LN2_LO_N;
    r += xtail;
    // 2^(k/N) ~= scale * (1 + tail).
    let idx = 2 * (ki % N) as usize;
    let top = ki.wrapping_add(sign_bias) << (52 - TABLE_BITS);
    let tail = f64::from_bits(TAB[idx]);
    // Only a valid scale when -1023*N < k < 1024*N.
    let sbits = TAB[idx + 1].wrapping_add(top);
    // exp(x) = 2^(k/N) * exp(r) ~= scale + scale * (tail + exp(r) - 1).
    let r2 = r * r;
    let tmp = tail + r + r2 * (C2 + r * C3) + r2 * r2 * (C4 + r * C5);
    if abstop == 0 {
        return specialcase(tmp, sbits, ki);
    }
    let scale = f64::from_bits(sbits);
    scale + scale * tmp
}

/// scale * (1 + tmp) without intermediate overflow or double rounding, where `sbits`
/// holds scale's bits with an exponent that may have wrapped into the sign bit and the
/// low 32 bits of `ki` are the k of the reduction (k > 0 may overflow, k < 0 underflow).
fn specialcase(tmp: f64, sbits: u64, ki: u64) -> f64 {
    if ki & 0x8000_0000 == 0 {
        // k > 0: the exponent of scale may have overflowed by up to 460.
        let scale = f64::from_bits(sbits.wrapping_sub(1009 << 52));
        return hexf("0x1p1009") * (scale + scale * tmp);
    }
    // k < 0: take care in the subnormal range. sbits is the signed scale.
    let sbits = sbits.wrapping_add(1022 << 52);
    let scale = f64::from_bits(sbits);
    let mut y = scale + scale * tmp;
    if y.abs() < 1.0 {
        // Round y to the final precision before scaling it into the subnormal range,
        // which avoids double rounding.
        let one = if y < 0.0 { -1.0 } else { 1.0 };
        let lo = scale - y + scale * tmp;
        let hi = one + y;
        let lo = one - hi + y + lo;
        y = (hi + lo) - one;
        // Fix the sign of zero.
        if y == 0.0 {
            y = f64::from_bits(sbits & 0x8000_0000_0000_0000);
        }
    }
    hexf("0x1p-1022") * y
}
