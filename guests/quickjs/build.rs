//! Puts `plimsoll-jsnum` in front of QuickJS's decimal conversions: QuickJS does
//! them exactly with multi-precision arithmetic at every call, about a sixth of a
//! JavaScript controller's time. Linked with `--wrap`, QuickJS's calls to `js_atod`
//! and `js_dtoa` reach `__wrap_js_atod` and `__wrap_js_dtoa` in `src/lib.rs`, which
//! hand what jsnum does not take, unchanged, to the originals (renamed
//! `__real_js_atod` and `__real_js_dtoa`). jsnum's tests hold its answers to
//! QuickJS's own (and say where, following ECMAScript, they differ).
fn main() {
    if std::env::var("CARGO_CFG_TARGET_FAMILY").as_deref() == Ok("wasm") {
        for symbol in ["js_atod", "js_dtoa"] {
            println!("cargo::rustc-link-arg-cdylib=--wrap={symbol}");
        }
    }
}
