//! The plants' one software libm: musl's algorithms, so every result has the bits that
//! wasi-libc (musl 1.2.x) gives the original C plants.
//!
//! Determinism is the product: a plant must reproduce the C build bit for bit on any
//! host. So every function here is pure software over IEEE-754 binary64 in
//! round-to-nearest: no fused multiply-add (Rust never contracts `a * b + c`, and
//! nothing here calls `mul_add`), no host libm, nothing that depends on the CPU.
//!
//! Where the [`libm`] crate (rust-lang's port of musl) is bit-equal to wasi-libc, the
//! function wraps it, built without its `arch` feature so it is pure software on every
//! target. Where it is not, the function is our own port of musl's code as wasi-libc
//! builds it: musl replaced `exp`, `log` and `pow` with the Arm optimized-routines
//! algorithms, whose last bit can differ from the older fdlibm ones the crate keeps, and
//! `cosh` and `sinh` call `exp`. README.md lists which is which and how the bit-equality
//! to wasi-libc is proven (`tests/vectors.rs`).
//!
//! Usage:
//! 1. Depend on `plimsoll-libm` from a plant.
//! 2. Call its functions where the C plant calls `<math.h>`; never `f64::sin` and
//!    friends from std (they call the host's libm).
//!
//! ```
//! // musl's exp (the Arm algorithm), which the older fdlibm exp misses by one ulp here.
//! let y = plimsoll_libm::exp(-19.9);
//! assert_eq!(y.to_bits(), 0x3e23_9136_ebf7_6555);
//! ```

#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod exp;
mod exp_data;
mod hexf;
mod hyperbolic;
mod log;
mod log_data;
mod pow;
mod pow_data;
mod support;

pub use exp::exp;
pub use hyperbolic::{cosh, sinh};
pub use log::log;
pub use pow::pow;

/// The sine of x (radians): musl's `sin` (fdlibm `__sin`/`__cos` kernels after
/// `__rem_pio2` reduction), through the `libm` crate.
#[inline]
pub fn sin(x: f64) -> f64 {
    libm::sin(x)
}

/// The cosine of x (radians): musl's `cos` (fdlibm `__cos`/`__sin` kernels after
/// `__rem_pio2` reduction), through the `libm` crate.
#[inline]
pub fn cos(x: f64) -> f64 {
    libm::cos(x)
}

/// e^x - 1, accurate near 0: musl's `expm1` (fdlibm), through the `libm` crate.
#[inline]
pub fn expm1(x: f64) -> f64 {
    libm::expm1(x)
}

/// The hyperbolic tangent of x: musl's `tanh` (from `expm1`), through the `libm` crate.
#[inline]
pub fn tanh(x: f64) -> f64 {
    libm::tanh(x)
}

/// The arc tangent of x, in [-pi/2, pi/2]: musl's `atan` (fdlibm), through the `libm`
/// crate.
#[inline]
pub fn atan(x: f64) -> f64 {
    libm::atan(x)
}

/// The angle of the point (x, y) from the positive x axis, in [-pi, pi]: musl's
/// `atan2(y, x)` (fdlibm), through the `libm` crate.
#[inline]
pub fn atan2(y: f64, x: f64) -> f64 {
    libm::atan2(y, x)
}

/// The arc sine of x, in [-pi/2, pi/2]: musl's `asin` (fdlibm), through the `libm`
/// crate.
#[inline]
pub fn asin(x: f64) -> f64 {
    libm::asin(x)
}

/// The arc cosine of x, in [0, pi]: musl's `acos` (fdlibm), through the `libm` crate.
#[inline]
pub fn acos(x: f64) -> f64 {
    libm::acos(x)
}

/// The remainder of x / y truncated toward zero, signed like x and exact (C's `fmod`,
/// JS's `%`), through the `libm` crate.
#[inline]
pub fn fmod(x: f64, y: f64) -> f64 {
    libm::fmod(x, y)
}

/// The correctly rounded square root of x (IEEE-754 `squareRoot`, what wasm's
/// `f64.sqrt` gives C's `sqrt`), by the `libm` crate's software square root.
#[inline]
pub fn sqrt(x: f64) -> f64 {
    libm::sqrt(x)
}

/// The largest integer not above x, exactly (what wasm's `f64.floor` gives C's
/// `floor`), by the `libm` crate's software floor.
#[inline]
pub fn floor(x: f64) -> f64 {
    libm::floor(x)
}

/// |x|: x with its sign bit cleared (C's `fabs`, wasm's `f64.abs`).
#[inline]
pub fn fabs(x: f64) -> f64 {
    f64::from_bits(x.to_bits() & !(1 << 63))
}
