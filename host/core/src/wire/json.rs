//! Protobuf's JSON mapping, for the few field types that need more than serde's
//! defaults: 64-bit integers as strings, `bytes` as base64, doubles that may be
//! `"NaN"`, and `null` for any field meaning its zero value.
//!
//! Reading is as lenient as protobuf's own parser (numbers or decimal strings;
//! standard or URL-safe base64, padded or not). Writing is what Connect's Go server
//! writes: int64 as strings, padded standard base64, `"NaN"`/`"Infinity"`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde::de::{self, Deserialize, Deserializer};
use serde::ser::{SerializeSeq, Serializer};

/// A JSON scalar that protobuf accepts for a numeric field.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Num {
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(String),
}

fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i128>, D::Error> {
    let Some(n) = Option::<Num>::deserialize(d)? else {
        return Ok(None);
    };
    let v = match n {
        Num::Int(i) => i128::from(i),
        Num::Uint(u) => i128::from(u),
        Num::Float(f) => {
            if !f.is_finite() || f.fract() != 0.0 || f.abs() > 1.9e19 {
                return Err(de::Error::custom(format!("{f} is not an integer")));
            }
            f as i128
        }
        Num::Text(s) => {
            let digits = s.strip_prefix('-').unwrap_or(&s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 20 {
                return Err(de::Error::custom(format!("{s:?} is not an integer")));
            }
            s.parse::<i128>().map_err(|_| de::Error::custom(format!("{s:?} is not an integer")))?
        }
    };
    Ok(Some(v))
}

fn ranged<'de, D: Deserializer<'de>, T: TryFrom<i128> + Default>(d: D, what: &str) -> Result<T, D::Error> {
    match integer(d)? {
        None => Ok(T::default()),
        Some(v) => T::try_from(v).map_err(|_| de::Error::custom(format!("{v} is out of range for {what}"))),
    }
}

/// Reads an `int32` (number or decimal string; `null` is 0).
pub fn de_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    ranged(d, "int32")
}

/// Reads a `uint32`.
pub fn de_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    ranged(d, "uint32")
}

/// Reads an `int64`.
pub fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    ranged(d, "int64")
}

/// Reads a `uint64`.
pub fn de_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    ranged(d, "uint64")
}

/// Writes an `int64` as a decimal string, as protobuf's JSON writer does.
pub fn ser_i64<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Writes a `uint64` as a decimal string.
pub fn ser_u64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Reads a string field; `null` is the empty string.
pub fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// Reads a `bool` field; `null` is false.
pub fn de_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or_default())
}

/// Reads a repeated field; `null` is the empty list.
pub fn de_vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// Decodes base64 as protobuf JSON and Connect error details may carry it: standard
/// or URL-safe alphabet, padded or not.
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let url = s.contains(['-', '_']);
    let padded = s.ends_with('=');
    let engine = match (url, padded) {
        (false, true) => &STANDARD,
        (false, false) => &STANDARD_NO_PAD,
        (true, true) => &URL_SAFE,
        (true, false) => &URL_SAFE_NO_PAD,
    };
    engine.decode(s).ok()
}

/// Encodes bytes as padded standard base64.
pub fn encode_base64(b: &[u8]) -> String {
    STANDARD.encode(b)
}

/// Reads a `bytes` field.
pub fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(Vec::new()),
        Some(s) => decode_base64(&s).ok_or_else(|| de::Error::custom("invalid base64 in a bytes field")),
    }
}

/// Writes a `bytes` field.
pub fn ser_bytes<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&encode_base64(v))
}

fn float_from(n: Num) -> Result<f64, String> {
    match n {
        Num::Int(i) => Ok(i as f64),
        Num::Uint(u) => Ok(u as f64),
        Num::Float(f) => Ok(f),
        Num::Text(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => s.parse::<f64>().map_err(|_| format!("{s:?} is not a number")),
        },
    }
}

/// Reads a `double` (number, decimal string, `"NaN"`, `"Infinity"`, `"-Infinity"`).
pub fn de_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match Option::<Num>::deserialize(d)? {
        None => Ok(0.0),
        Some(n) => float_from(n).map_err(de::Error::custom),
    }
}

/// Reads a repeated `double`.
pub fn de_f64_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Option::<Vec<Num>>::deserialize(d)?
        .unwrap_or_default()
        .into_iter()
        .map(|n| float_from(n).map_err(de::Error::custom))
        .collect()
}

fn write_f64<S: Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_nan() {
        s.serialize_str("NaN")
    } else if v == f64::INFINITY {
        s.serialize_str("Infinity")
    } else if v == f64::NEG_INFINITY {
        s.serialize_str("-Infinity")
    } else {
        s.serialize_f64(v)
    }
}

/// Writes a `double`.
pub fn ser_f64<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    write_f64(*v, s)
}

struct F64(f64);

impl serde::Serialize for F64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        write_f64(self.0, s)
    }
}

/// Writes a repeated `double`.
pub fn ser_f64_vec<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for x in v {
        seq.serialize_element(&F64(*x))?;
    }
    seq.end()
}

/// Whether a value is its type's zero (proto3 JSON omits such fields).
pub fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Whether a double is +0.0 (a -0.0 keeps its sign on the wire).
pub fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0 && v.is_sign_positive()
}
