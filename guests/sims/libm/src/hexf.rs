//! C99 hexadecimal floating literals (`-0x1.62e42fefa39efp-1`) evaluated at compile time,
//! so the ported constants and tables read exactly as they do in musl's sources.

/// The double a C99 hexadecimal floating literal denotes, such as `"-0x1.62e42fefa39efp-1"`.
///
/// Only literals that name a normal double (or zero) exactly are accepted: anything else
/// panics, and since every use is in a `const`, that is a compile error rather than a
/// rounded constant.
pub(crate) const fn hexf(literal: &str) -> f64 {
    let s = literal.as_bytes();
    let mut i = 0;
    let negative = !s.is_empty() && s[0] == b'-';
    if negative {
        i += 1;
    }
    assert!(i + 2 < s.len() && s[i] == b'0' && (s[i + 1] == b'x' || s[i + 1] == b'X'), "hexf: expected 0x");
    i += 2;

    // The digits as one integer, and how many of them follow the point.
    let mut digits: u128 = 0;
    let mut fraction_digits: i32 = 0;
    let mut seen_point = false;
    while i < s.len() && s[i] != b'p' && s[i] != b'P' {
        if s[i] == b'.' {
            assert!(!seen_point, "hexf: two points");
            seen_point = true;
        } else {
            assert!(digits >> 120 == 0, "hexf: too many digits");
            digits = (digits << 4) | hex_digit(s[i]) as u128;
            if seen_point {
                fraction_digits += 1;
            }
        }
        i += 1;
    }
    assert!(i < s.len(), "hexf: missing binary exponent");
    i += 1;

    let mut exponent_negative = false;
    if i < s.len() && (s[i] == b'-' || s[i] == b'+') {
        exponent_negative = s[i] == b'-';
        i += 1;
    }
    assert!(i < s.len(), "hexf: empty binary exponent");
    let mut exponent: i32 = 0;
    while i < s.len() {
        assert!(s[i].is_ascii_digit(), "hexf: bad binary exponent");
        exponent = exponent * 10 + (s[i] - b'0') as i32;
        assert!(exponent < 100_000, "hexf: binary exponent out of range");
        i += 1;
    }
    if exponent_negative {
        exponent = -exponent;
    }

    let sign = if negative { 1u64 << 63 } else { 0 };
    if digits == 0 {
        return f64::from_bits(sign);
    }
    // value = digits * 2^(exponent - 4 * fraction_digits); the top set bit of `digits`
    // becomes the implicit leading 1.
    let top = 127 - digits.leading_zeros() as i32;
    let unbiased = top + exponent - 4 * fraction_digits;
    assert!(-1022 <= unbiased && unbiased <= 1023, "hexf: not a normal double");
    let mantissa = if top >= 52 {
        assert!(digits & ((1u128 << (top - 52)) - 1) == 0, "hexf: not exact in 53 bits");
        (digits >> (top - 52)) as u64
    } else {
        (digits << (52 - top)) as u64
    };
    let biased = (unbiased + 1023) as u64;
    f64::from_bits(sign | (biased << 52) | (mantissa & ((1u64 << 52) - 1)))
}

/// The value of one hexadecimal digit.
const fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("hexf: bad hexadecimal digit"),
    }
}

#[cfg(test)]
mod tests {
    use super::hexf;

    #[test]
    fn literals_denote_their_exact_doubles() {
        assert_eq!(hexf("0x1p0"), 1.0);
        assert_eq!(hexf("-0x1p-1"), -0.5);
        assert_eq!(hexf("0x1.8p52"), 6755399441055744.0);
        assert_eq!(hexf("0x1p-1022").to_bits(), 0x0010_0000_0000_0000);
        assert_eq!(hexf("0x1p1023").to_bits(), 0x7fe0_0000_0000_0000);
        assert_eq!(hexf("0x1.62e42fefa39efp-1").to_bits(), 0x3fe6_2e42_fefa_39ef);
        assert_eq!(hexf("-0x1.62e42fefa39efp-1").to_bits(), 0xbfe6_2e42_fefa_39ef);
        assert_eq!(hexf("0x1.24924a344de3p-3").to_bits(), 0x3fc2_4924_a344_de30);
        assert_eq!(hexf("0x1800000000.8p0"), 103079215104.5);
        assert_eq!(hexf("0x0p0").to_bits(), 0);
        assert_eq!(hexf("-0x0.0p0").to_bits(), 1 << 63);
    }
}
