//! Ported from musl's `src/math/pow.c` (Arm optimized-routines, MIT; README.md).

use crate::exp::{SIGN_BIAS, exp_inline};
use crate::hexf::hexf;
use crate::pow_data::{A, LN2_HI, LN2_LO, N, TAB, TABLE_BITS};
use crate::support::{invalid, oflow, top12, uflow};

/// The bits of 0x1.69555p-1: z = x / 2^k is brought into [OFF, 2*OFF).
const OFF: u64 = 0x3fe6_9555_0000_0000;

/// x raised to the power y: musl's `pow` (Arm optimized-routines: a log with about 15
/// extra bits, then the table-driven exp; C99 Annex F special cases).
pub fn pow(x: f64, y: f64) -> f64 {
    let mut sign_bias = 0;
    let mut ix = x.to_bits();
    let iy = y.to_bits();
    let mut topx = top12(x);
    let topy = top12(y);
    if topx.wrapping_sub(0x001) >= 0x7ff - 0x001 || (topy & 0x7ff).wrapping_sub(0x3be) >= 0x43e - 0x3be {
        // x < 0x1p-1022 (or negative), inf or NaN; or |y| < 0x1p-65, |y| >= 0x1p63 or
        // NaN. If |y| > 1075 * ln2 * 2^53 the result is inf or 0, and if
        // |y| < 2^-54 / 1075 it is ±1.
        if zero_inf_nan(iy) {
            if iy << 1 == 0 {
                return 1.0;
            }
            if ix == 1.0f64.to_bits() {
                return 1.0;
            }
            if ix << 1 > f64::INFINITY.to_bits() << 1 || iy << 1 > f64::INFINITY.to_bits() << 1 {
                return x + y;
            }
            if ix << 1 == 1.0f64.to_bits() << 1 {
                return 1.0;
            }
            if (ix << 1 < 1.0f64.to_bits() << 1) == (iy >> 63 == 0) {
                return 0.0; // |x| < 1 && y == inf, or |x| > 1 && y == -inf
            }
            return y * y;
        }
        if zero_inf_nan(ix) {
            let mut x2 = x * x;
            if ix >> 63 != 0 && check_int(iy) == IntKind::Odd {
                x2 = -x2;
            }
            return if iy >> 63 != 0 { 1.0 / x2 } else { x2 };
        }
        // x and y are finite and non-zero.
        if ix >> 63 != 0 {
            // x < 0.
            match check_int(iy) {
                IntKind::NotInt => return invalid(x),
                IntKind::Odd => sign_bias = SIGN_BIAS,
                IntKind::Even => {}
            }
            ix &= 0x7fff_ffff_ffff_ffff;
            topx &= 0x7ff;
        }
        if (topy & 0x7ff).wrapping_sub(0x3be) >= 0x43e - 0x3be {
            // sign_bias == 0 here: y is too small or too large to be odd.
            if ix == 1.0f64.to_bits() {
                return 1.0;
            }
            if topy & 0x7ff < 0x3be {
                // |y| < 2^-65: x^y ~= 1 + y*log(x), which rounds to 1 (musl returns
                // 1 + y or 1 - y only when WANT_ROUNDING, which wasi-libc builds as 0).
                return 1.0;
            }
            return if (ix > 1.0f64.to_bits()) == (topy < 0x800) { oflow(false) } else { uflow(false) };
        }
        if topx == 0 {
            // Subnormal x: normalise it so the exponent becomes negative.
            ix = (x * hexf("0x1p52")).to_bits();
            ix &= 0x7fff_ffff_ffff_ffff;
            ix = ix.wrapping_sub(52 << 52);
        }
    }

    let (hi, lo) = log_inline(ix);
    // y * (hi + lo) as ehi + elo, with the products split into 26-bit halves so they
    // are exact without a fused multiply-add.
    let yhi = f64::from_bits(iy & (u64::MAX << 27));
    let ylo = y - yhi;
    let lhi = f64::from_bits(hi.to_bits() & (u64::MAX << 27));
    let llo = hi - lhi + lo;
    let ehi = yhi * lhi;
    let elo = ylo * lhi + y * llo; // |elo| < |ehi| * 2^-25
    exp_inline(ehi, elo, sign_bias)
}

/// log(x) as (y, tail) with about 15 bits beyond y's precision. `ix` is x's bits, with
/// subnormals normalised using the sign bit for the exponent.
fn log_inline(ix: u64) -> (f64, f64) {
    // x = 2^k z with z in [OFF, 2*OFF) exact; i picks z's subinterval.
    let tmp = ix.wrapping_sub(OFF);
    let i = ((tmp >> (52 - TABLE_BITS)) % N) as usize;
    let k = (tmp as i64) >> 52; // arithmetic shift
    let iz = ix.wrapping_sub(tmp & (0xfff << 52));
    let z = f64::from_bits(iz);
    let kd = k as f64;

    // log(x) = k*ln2 + log(c) + log1p(z/c - 1).
    let (invc, logc, logctail) = TAB[i];

    // r = z/c - 1 is exact; split z so that rhi, rlo and rhi*rhi are exact and
    // |rlo| <= |r| (there is no fused multiply-add).
    let zhi = f64::from_bits(iz.wrapping_add(1 << 31) & (u64::MAX << 32));
    let zlo = z - zhi;
    let rhi = zhi * invc - 1.0;
    let rlo = zlo * invc;
    let r = rhi + rlo;

    // k*ln2 + log(c) + r.
    let t1 = kd * LN2_HI + logc;
    let t2 = t1 + r;
    let lo1 = kd * LN2_LO + logctail;
    let lo2 = t1 - t2 + r;

    // k*ln2 + log(c) + r + A[0]*r*r, A[0] = -0.5.
    let ar = A[0] * r;
    let ar2 = r * ar;
    let ar3 = r * ar2;
    let arhi = A[0] * rhi;
    let arhi2 = rhi * arhi;
    let hi = t2 + arhi2;
    let lo3 = rlo * (ar + arhi);
    let lo4 = t2 - hi + arhi2;
    // p = log1p(r) - r - A[0]*r*r.
    let p = ar3 * (A[1] + r * A[2] + ar2 * (A[3] + r * A[4] + ar2 * (A[5] + r * A[6])));
    let lo = lo1 + lo2 + lo3 + lo4 + p;
    let y = hi + lo;
    let tail = hi - y + lo;
    (y, tail)
}

/// What kind of number a finite, non-zero double is, as pow's `checkint` tells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IntKind {
    /// Not an integer.
    NotInt,
    /// An odd integer.
    Odd,
    /// An even integer.
    Even,
}

/// Whether the finite, non-zero double with bits `iy` is an odd, even or no integer.
fn check_int(iy: u64) -> IntKind {
    let e = (iy >> 52 & 0x7ff) as i32;
    if e < 0x3ff {
        return IntKind::NotInt;
    }
    if e > 0x3ff + 52 {
        return IntKind::Even;
    }
    let unit = 1u64 << (0x3ff + 52 - e);
    if iy & (unit - 1) != 0 {
        return IntKind::NotInt;
    }
    if iy & unit != 0 {
        return IntKind::Odd;
    }
    IntKind::Even
}

/// Whether the bits `i` are those of ±0, ±inf or NaN.
fn zero_inf_nan(i: u64) -> bool {
    (i << 1).wrapping_sub(1) >= (f64::INFINITY.to_bits() << 1) - 1
}
