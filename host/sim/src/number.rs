//! Numbers on the controller line protocol, exactly as JavaScript writes and reads
//! them: a state line is what `String(x)` gives for each value, and an answer token
//! is read as `Number(token)` would. A controller written for node therefore sees
//! the same text here as under the original judge.

/// Appends `x` as JavaScript's `Number.prototype.toString()` writes it: the
/// shortest digits that read back to the same double (the nearest, ties to even),
/// positional for exponents from -7 to 20 and `1.5e-7` / `1e+21` style outside
/// that range. `plimsoll-jsnum` does it, the code the QuickJS guest prints with.
pub fn push_js(out: &mut String, x: f64) {
    let mut text = [0u8; plimsoll_jsnum::MAX];
    let len = plimsoll_jsnum::write(x, &mut text);
    // jsnum writes ASCII only.
    out.push_str(std::str::from_utf8(&text[..len]).unwrap_or("NaN"));
}

/// `x` as JavaScript's `String(x)` writes it.
pub fn js(x: f64) -> String {
    let mut s = String::new();
    push_js(&mut s, x);
    s
}

/// Whitespace as JavaScript's `String.prototype.trim` and `/\s+/` know it.
pub fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// Reads one token as JavaScript's `Number(token)` does: a decimal literal with an
/// optional sign and exponent, `Infinity` with an optional sign, or an unsigned
/// `0x`, `0o` or `0b` integer. Anything else is NaN.
pub fn parse_js(token: &str) -> f64 {
    let t = token.trim_matches(is_js_space);
    if t.is_empty() {
        return 0.0;
    }
    let radix = match t.get(..2) {
        Some("0x" | "0X") => Some(16),
        Some("0o" | "0O") => Some(8),
        Some("0b" | "0B") => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        let body = &t[2..];
        if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
            return f64::NAN;
        }
        // Exact for what fits 53 bits; beyond that JavaScript rounds the same way
        // a left-to-right accumulation into a double does for these radices only
        // approximately, and no controller answers a 54-bit hexadecimal force.
        return body.chars().fold(0.0, |acc, c| acc * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0)));
    }
    let (sign, unsigned) = match t.as_bytes()[0] {
        b'+' => (1.0, &t[1..]),
        b'-' => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    if unsigned == "Infinity" {
        return sign * f64::INFINITY;
    }
    // One sign only; the rest is a plain decimal, read as the QuickJS guest reads it.
    if unsigned.starts_with('-') {
        return f64::NAN;
    }
    plimsoll_jsnum::parse_decimal(unsigned.as_bytes()).map_or(f64::NAN, |v| sign * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_numbers_as_javascript_does() {
        // Each pair is what node prints for the value.
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789.0, "123456789"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123e18, "123000000000000000000"),
            (1.5e21, "1.5e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (0.000123, "0.000123"),
            (3.25159, "3.25159"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (2.0f64.powi(53), "9007199254740992"),
            (-2.5e-10, "-2.5e-10"),
            // 1394865425023536.25, halfway between two 17-digit strings: node takes the even one.
            (f64::from_bits(0x4313_d27d_a8ac_08c1), "1394865425023536.2"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (x, want) in cases {
            assert_eq!(js(*x), *want, "{x:e}");
        }
    }

    #[test]
    fn every_written_number_reads_back_to_the_same_bits() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if v.is_finite() {
                assert_eq!(parse_js(&js(v)).to_bits(), v.to_bits(), "{v:e}");
            }
        }
    }

    #[test]
    fn reads_tokens_as_javascript_number_does() {
        let cases: &[(&str, f64)] = &[
            ("1", 1.0),
            ("-2.5", -2.5),
            ("+3", 3.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-3", 0.001),
            ("0x1f", 31.0),
            ("0b101", 5.0),
            ("0o17", 15.0),
            ("Infinity", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
        ];
        for (t, want) in cases {
            assert_eq!(parse_js(t), *want, "{t}");
        }
        for nan in
            ["abc", "1.2.3", "e5", "1e", ".", "-0x10", "inf", "nan", "infinity", "1_0", "0x", "--1", "+-1", "1,5"]
        {
            assert!(parse_js(nan).is_nan(), "{nan} should be NaN");
        }
    }
}
