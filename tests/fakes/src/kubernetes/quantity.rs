//! Resource quantities as the API server writes a Pod: every amount parsed
//! (a string, or a bare number as YAML's `cpu: 1` sends it) and written back in
//! canonical form, and each container's `requests` filled from its `limits`.
//! Read from kubernetes/apimachinery `pkg/api/resource/quantity.go`
//! (`ParseQuantity`, `CanonicalizeBytes`) and kubernetes
//! `pkg/apis/core/v1/defaults.go` (`SetDefaults_Pod`). A SandboxTemplate is a
//! custom resource, stored as written; only the pods the controller makes from
//! it come back canonical.

use serde_json::{Value, json};

/// How a quantity was written, which decides how it is written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `1`, `500m`, `2k`.
    DecimalSi,
    /// `1Ki`, `64Mi`.
    BinarySi,
    /// `1e3`.
    DecimalExponent,
}

/// A parsed quantity: billionths of its unit, rounded up, and its format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Amount {
    nanos: i128,
    format: Format,
}

fn parse(s: &str) -> Result<Amount, String> {
    let bad = || {
        format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' ({s:?})")
    };
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (number, suffix) = body.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(bad());
    }
    let (exp10, exp2, format): (i32, u32, Format) = match suffix {
        "" => (0, 0, Format::DecimalSi),
        "n" => (-9, 0, Format::DecimalSi),
        "u" => (-6, 0, Format::DecimalSi),
        "m" => (-3, 0, Format::DecimalSi),
        "k" => (3, 0, Format::DecimalSi),
        "M" => (6, 0, Format::DecimalSi),
        "G" => (9, 0, Format::DecimalSi),
        "T" => (12, 0, Format::DecimalSi),
        "P" => (15, 0, Format::DecimalSi),
        "E" => (18, 0, Format::DecimalSi),
        "Ki" => (0, 10, Format::BinarySi),
        "Mi" => (0, 20, Format::BinarySi),
        "Gi" => (0, 30, Format::BinarySi),
        "Ti" => (0, 40, Format::BinarySi),
        "Pi" => (0, 50, Format::BinarySi),
        "Ei" => (0, 60, Format::BinarySi),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| bad())?;
            if !(-30..=30).contains(&exp) {
                return Err(bad());
            }
            (exp, 0, Format::DecimalExponent)
        }
        _ => return Err(bad()),
    };
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(bad());
    }
    let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| bad())? };
    let shift = 9 + exp10 - i32::try_from(fraction.len()).map_err(|_| bad())?;
    let mut nanos = mantissa;
    if shift >= 0 {
        for _ in 0..shift {
            nanos = nanos.checked_mul(10).ok_or_else(bad)?;
        }
    } else {
        let divisor = (0..-shift).try_fold(1i128, |d, _| d.checked_mul(10)).ok_or_else(bad)?;
        nanos = nanos / divisor + i128::from(nanos % divisor != 0);
    }
    nanos = nanos.checked_mul(1i128 << exp2).ok_or_else(bad)?;
    // A binary amount under one is written as a decimal one.
    let format =
        if format == Format::BinarySi && nanos < 1_000_000_000 && nanos > 0 { Format::DecimalSi } else { format };
    Ok(Amount { nanos: if negative { -nanos } else { nanos }, format })
}

/// The canonical form of `v`, a quantity as JSON carries it.
///
/// # Errors
///
/// The API server's refusal of what is no quantity.
pub fn canonical(v: &Value) -> Result<String, String> {
    let text = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("{other} is not a quantity")),
    };
    let a = parse(&text)?;
    if a.nanos == 0 {
        return Ok("0".into());
    }
    let sign = if a.nanos < 0 { "-" } else { "" };
    let magnitude = a.nanos.unsigned_abs();
    const UNIT: u128 = 1_000_000_000;
    let format = match a.format {
        // Under 1024, or not whole units, a binary amount is written as decimal.
        Format::BinarySi if magnitude < 1024 * UNIT || magnitude % UNIT != 0 => Format::DecimalSi,
        f => f,
    };
    if format == Format::BinarySi {
        let mut units = magnitude / UNIT;
        let mut k = 0;
        while k < 6 && units.is_multiple_of(1024) {
            units /= 1024;
            k += 1;
        }
        return Ok(format!("{sign}{units}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k]));
    }
    // The mantissa with trailing zeros taken off in threes, from billionths up.
    let (mut mantissa, mut exponent) = (magnitude, -9i32);
    while mantissa.is_multiple_of(1000) {
        mantissa /= 1000;
        exponent += 3;
    }
    let suffix = match (format, exponent) {
        (Format::DecimalSi, -9) => "n".to_string(),
        (Format::DecimalSi, -6) => "u".to_string(),
        (Format::DecimalSi, -3) => "m".to_string(),
        (_, 0) => String::new(),
        (Format::DecimalSi, 3) => "k".to_string(),
        (Format::DecimalSi, 6) => "M".to_string(),
        (Format::DecimalSi, 9) => "G".to_string(),
        (Format::DecimalSi, 12) => "T".to_string(),
        (Format::DecimalSi, 15) => "P".to_string(),
        (Format::DecimalSi, 18) => "E".to_string(),
        (_, e) => format!("e{e}"),
    };
    Ok(format!("{sign}{mantissa}{suffix}"))
}

/// Canonicalises every amount of a resource table in place.
fn table(t: &mut Value, at: &str) -> Result<(), String> {
    let Some(map) = t.as_object_mut() else { return Ok(()) };
    for (resource, amount) in map.iter_mut() {
        *amount = json!(canonical(amount).map_err(|e| format!("{at}[{resource}]: Invalid value: {e}"))?);
    }
    Ok(())
}

/// A pod's spec as the API server keeps it (`SetDefaults_Pod` and the typed
/// round trip): each container's and init container's limits and requests
/// canonical, requests filled from limits, each `emptyDir`'s `sizeLimit` and
/// the `overhead` canonical.
///
/// # Errors
///
/// The 422 the API server would answer for an amount that is no quantity.
pub fn pod_defaults(spec: &mut Value) -> Result<(), String> {
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else { continue };
        for (i, c) in cs.iter_mut().enumerate() {
            let Some(resources) = c.get_mut("resources").filter(|r| r.is_object()) else { continue };
            let at = format!("spec.{list}[{i}].resources");
            table(&mut resources["limits"], &format!("{at}.limits"))?;
            table(&mut resources["requests"], &format!("{at}.requests"))?;
            if let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() {
                if !resources["requests"].is_object() {
                    resources["requests"] = json!({});
                }
                for (resource, amount) in limits {
                    if resources["requests"].get(&resource).is_none() {
                        resources["requests"][resource] = amount;
                    }
                }
            }
            if let Some(m) = resources.as_object_mut() {
                m.retain(|_, v| !v.is_null());
            }
        }
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for (i, v) in volumes.iter_mut().enumerate() {
            if let Some(size) = v.pointer_mut("/emptyDir/sizeLimit") {
                *size = json!(canonical(size).map_err(|e| format!("spec.volumes[{i}].emptyDir.sizeLimit: {e}"))?);
            }
        }
    }
    if spec.get("overhead").is_some() {
        table(&mut spec["overhead"], "spec.overhead")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: Value) -> String {
        canonical(&v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn quantities_come_back_as_the_api_server_writes_them() {
        for (given, want) in [
            (json!(1), "1"),
            (json!("1000m"), "1"),
            (json!(0.5), "500m"),
            (json!("0.5"), "500m"),
            (json!("1500m"), "1500m"),
            (json!("1000"), "1k"),
            (json!("1500"), "1500"),
            (json!("512Mi"), "512Mi"),
            (json!("0.5Gi"), "512Mi"),
            (json!("1024Mi"), "1Gi"),
            (json!("1.5Gi"), "1536Mi"),
            (json!("1000Mi"), "1000Mi"),
            (json!("100Ki"), "100Ki"),
            (json!("512"), "512"),
            (json!("1e3"), "1e3"),
            (json!("1.5e3"), "1500"),
            (json!("1G"), "1G"),
            (json!("0"), "0"),
            (json!("0.1"), "100m"),
            (json!("-2"), "-2"),
        ] {
            assert_eq!(c(given.clone()), want, "{given}");
        }
    }

    #[test]
    fn what_is_not_a_quantity_is_refused_as_the_api_server_refuses_it() {
        let e = canonical(&json!("lots")).expect_err("refused");
        assert_eq!(
            e,
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (\"lots\")"
        );
        assert_eq!(canonical(&json!(true)), Err("true is not a quantity".into()));
    }

    #[test]
    fn a_pods_requests_are_filled_from_its_limits_and_every_amount_is_canonical() {
        let mut spec = json!({
            "containers": [{"name": "a", "resources": {"limits": {"cpu": 1, "memory": "0.5Gi"}}},
                           {"name": "b", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": 0.25}}},
                           {"name": "c"}],
            "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": 67108864}}],
        });
        pod_defaults(&mut spec).expect("defaulted");
        assert_eq!(
            spec["containers"][0]["resources"],
            json!({"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}})
        );
        assert_eq!(spec["containers"][1]["resources"], json!({"limits": {"cpu": "2"}, "requests": {"cpu": "250m"}}));
        assert_eq!(spec["containers"][2].get("resources"), None);
        assert_eq!(spec["volumes"][0]["emptyDir"]["sizeLimit"], json!("67108864"));
        let mut bad = json!({"containers": [{"resources": {"limits": {"cpu": "x"}}}]});
        let e = pod_defaults(&mut bad).expect_err("refused");
        assert!(e.starts_with("spec.containers[0].resources.limits[cpu]: Invalid value: quantities must match"), "{e}");
    }
}
