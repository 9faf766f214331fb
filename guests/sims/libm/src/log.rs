//! Ported from musl's `src/math/log.c` (Arm optimized-routines, MIT; README.md).

use crate::hexf::hexf;
use crate::log_data::{A, B, LN2_HI, LN2_LO, N, TAB, TAB2, TABLE_BITS};
use crate::support::{divzero, invalid};

/// The bits of 0x1.6p-1: z = x / 2^k is brought into [OFF, 2*OFF).
const OFF: u64 = 0x3fe6_0000_0000_0000;

/// The natural logarithm of x: musl's `log` (Arm optimized-routines, 128-entry table,
/// its own polynomial near 1).
pub fn log(x: f64) -> f64 {
    let mut ix = x.to_bits();
    let top = (ix >> 48) as u32;

    let lo_bound = (1.0 - hexf("0x1p-4")).to_bits();
    let hi_bound = (1.0 + hexf("0x1.09p-4")).to_bits();
    if ix.wrapping_sub(lo_bound) < hi_bound - lo_bound {
        // x close to 1: a longer polynomial in r = x - 1 with r^2/2 split exactly. (musl
        // returns 0 for x == 1 first only when WANT_ROUNDING, which wasi-libc builds as 0;
        // the polynomial gives +0 there too.)
        let r = x - 1.0;
        let r2 = r * r;
        let r3 = r * r2;
        let mut y = r3
            * (B[1]
                + r * B[2]
                + r2 * B[3]
                + r3 * (B[4] + r * B[5] + r2 * B[6] + r3 * (B[7] + r * B[8] + r2 * B[9] + r3 * B[10])));
        let w = r * hexf("0x1p27");
        let rhi = r + w - w;
        let rlo = r - rhi;
        let w = rhi * rhi * B[0]; // B[0] == -0.5
        let hi = r + w;
        let mut lo = r - hi + w;
        lo += B[0] * rlo * (rhi + r);
        y += lo;
        y += hi;
        return y;
    }
    if top.wrapping_sub(0x0010) >= 0x7ff0 - 0x0010 {
        // x < 0x1p-1022, inf or NaN.
        if ix << 1 == 0 {
            return divzero(true);
        }
        if ix == f64::INFINITY.to_bits() {
            return x;
        }
        if top & 0x8000 != 0 || top & 0x7ff0 == 0x7ff0 {
            return invalid(x);
        }
        // Subnormal: normalise it.
        ix = (x * hexf("0x1p52")).to_bits();
        ix = ix.wrapping_sub(52 << 52);
    }

    // x = 2^k z with z in [OFF, 2*OFF) exact; i picks z's subinterval.
    let tmp = ix.wrapping_sub(OFF);
    let i = ((tmp >> (52 - TABLE_BITS)) % N) as usize;
    let k = (tmp as i64) >> 52; // arithmetic shift
    let iz = ix.wrapping_sub(tmp & (0xfff << 52));
    let (invc, logc) = TAB[i];
    let z = f64::from_bits(iz);

    // log(x) = log1p(z/c - 1) + log(c) + k*ln2, with r ~= z/c - 1 and |r| < 1/(2N).
    let (chi, clo) = TAB2[i];
    let r = (z - chi - clo) * invc;
    let kd = k as f64;

    // hi + lo = r + log(c) + k*ln2.
    let w = kd * LN2_HI + logc;
    let hi = w + r;
    let lo = w - hi + r + kd * LN2_LO;

    // log(x) = lo + (log1p(r) - r) + hi.
    let r2 = r * r;
    lo + r2 * A[0] + r * r2 * (A[1] + r * A[2] + r2 * (A[3] + r * A[4])) + hi
}
