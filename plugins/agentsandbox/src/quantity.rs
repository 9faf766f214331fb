//! Kubernetes resource quantities read by value, so a template written `cpu: 1`
//! and the pod the API server returns with `"1"`, or `1000m` and `"1"`, or
//! `0.5` and `"500m"`, are the same amount (k8s.io/apimachinery's
//! `resource.Quantity`: a decimal number with an optional exponent or SI or
//! binary suffix). A quantity is held exactly, in billionths of its unit, the
//! finest scale Kubernetes keeps; finer digits round up, as Kubernetes rounds.

use serde_json::Value;

/// An amount in billionths of its unit (nano-cores, nano-bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

/// The largest amount kept: past it, a quantity is refused rather than wrapped.
const MAX: i128 = 1 << 100;

impl Quantity {
    /// Reads a quantity as JSON carries it: a string, or a bare number (YAML's `cpu: 1`).
    ///
    /// # Errors
    ///
    /// Why `v` is not a quantity.
    pub fn of(v: &Value) -> Result<Quantity, String> {
        match v {
            Value::String(s) => Quantity::parse(s),
            Value::Number(n) => Quantity::parse(&n.to_string()),
            other => Err(format!("{other} is not a quantity")),
        }
    }

    /// Parses `1`, `0.5`, `500m`, `1Gi`, `1e3`, `+2k`.
    ///
    /// # Errors
    ///
    /// Why `s` is not a quantity.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        let bad = || format!("{s:?} is not a quantity");
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
        let (number, suffix) = body.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(bad());
        }
        // The value is digits × 10^(exp10) × 2^(exp2).
        let (exp10, exp2): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            e if e.starts_with(['e', 'E']) => {
                let exp: i32 = e[1..].parse().map_err(|_| bad())?;
                if !(-30..=30).contains(&exp) {
                    return Err(bad());
                }
                (exp, 0)
            }
            _ => return Err(bad()),
        };
        let digits: String = whole.chars().chain(fraction.chars()).collect();
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(bad());
        }
        let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| bad())? };
        // Into billionths: shift by 9 + exp10 - the fraction's digits.
        let shift = 9 + exp10 - i32::try_from(fraction.len()).map_err(|_| bad())?;
        let mut nanos = mantissa;
        if shift >= 0 {
            for _ in 0..shift {
                nanos = nanos.checked_mul(10).filter(|n| *n <= MAX).ok_or_else(bad)?;
            }
        } else {
            let divisor = (0..-shift).try_fold(1i128, |d, _| d.checked_mul(10)).ok_or_else(bad)?;
            // Finer than a billionth rounds up, as Kubernetes rounds.
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        nanos = nanos.checked_mul(1i128 << exp2).filter(|n| *n <= MAX).ok_or_else(bad)?;
        Ok(Quantity(if negative { -nanos } else { nanos }))
    }

    /// The whole units, rounded down (bytes of a memory quantity).
    pub fn units(self) -> i128 {
        self.0.div_euclid(1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn spellings_kubernetes_canonicalises_are_one_amount() {
        assert_eq!(Quantity::of(&json!(1)), Ok(q("1")));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(Quantity::of(&json!(0.5)), Ok(q("500m")));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1G"), q("1e9"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("+2k"), q("2000"));
        assert_eq!(q("0.1"), q("100m"));
        assert_eq!(q(".5"), q("500m"));
        assert_ne!(q("1"), q("1001m"));
        assert_eq!(q("512Mi").units(), 512 << 20);
        assert_eq!(q("-1").units(), -1);
    }

    #[test]
    fn finer_than_a_billionth_rounds_up() {
        assert_eq!(q("0.0000000001"), q("1n"));
        assert_eq!(q("1.0000000001"), q("1000000001n"));
    }

    #[test]
    fn what_is_not_a_quantity_is_named() {
        for bad in ["", "m", "1x", "1Gb", "1..2", "1e", "1e99", "--1", "ten", "1 Gi"] {
            assert_eq!(Quantity::parse(bad), Err(format!("{bad:?} is not a quantity")), "{bad}");
        }
        assert_eq!(Quantity::of(&json!(true)), Err("true is not a quantity".into()));
        let huge = "9999999999999999999999999999Ei";
        assert_eq!(Quantity::parse(huge), Err(format!("{huge:?} is not a quantity")));
    }
}
