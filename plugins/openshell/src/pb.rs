//! The protocol-buffers wire format, as much as the gateway's messages need:
//! a writer, and a reader that hands out fields by number so a caller can tell
//! what it did not take. The read-back's settings are read strictly (a field
//! plimsoll does not know is refused, since it may weaken the sandbox); the rest
//! leniently, as protobuf readers do.

use std::collections::BTreeMap;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// The most fields one message may carry: far more than any the gateway sends.
const MAX_FIELDS: usize = 1 << 16;
/// How deep `Struct` values may nest.
const MAX_DEPTH: usize = 32;

/// A message being written. Zero values are left out, as proto3 writes them.
#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    /// An unsigned or a non-negative integer field.
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
        self
    }

    /// A bool field.
    pub fn boolean(&mut self, field: u32, v: bool) -> &mut Self {
        self.uint(field, u64::from(v))
    }

    /// An `optional bool` field: written whenever present, false too.
    pub fn present_bool(&mut self, field: u32, v: bool) -> &mut Self {
        self.key(field, VARINT);
        self.varint(u64::from(v));
        self
    }

    /// A string field.
    pub fn string(&mut self, field: u32, v: &str) -> &mut Self {
        self.bytes(field, v.as_bytes())
    }

    /// A bytes field.
    pub fn bytes(&mut self, field: u32, v: &[u8]) -> &mut Self {
        if !v.is_empty() {
            self.always(field, v);
        }
        self
    }

    /// A length-delimited field written even when empty (a message's presence).
    fn always(&mut self, field: u32, v: &[u8]) {
        self.key(field, LEN);
        self.varint(v.len() as u64);
        self.0.extend_from_slice(v);
    }

    /// An embedded message.
    pub fn message(&mut self, field: u32, m: &Writer) -> &mut Self {
        self.always(field, &m.0);
        self
    }

    /// A repeated string field.
    pub fn strings(&mut self, field: u32, v: &[String]) -> &mut Self {
        for s in v {
            self.always(field, s.as_bytes());
        }
        self
    }

    /// A `map<string, string>` field.
    pub fn map(&mut self, field: u32, m: &BTreeMap<String, String>) -> &mut Self {
        for (k, v) in m {
            let mut entry = Writer::default();
            entry.string(1, k).string(2, v);
            self.message(field, &entry);
        }
        self
    }

    /// A double field.
    pub fn double(&mut self, field: u32, v: f64) -> &mut Self {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// One field's value as the wire carries it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

/// A message read into its fields, handed out by number.
#[derive(Debug)]
pub struct Fields<'a> {
    what: &'static str,
    items: Vec<(u32, Wire<'a>)>,
}

fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Reads `bytes` as the message `what` names (for errors).
pub fn parse<'a>(bytes: &'a [u8], what: &'static str) -> Result<Fields<'a>, String> {
    let bad = || format!("the gateway's {what} is not a protocol-buffers message");
    let mut items = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let key = read_varint(bytes, &mut at).ok_or_else(bad)?;
        let field = u32::try_from(key >> 3).ok().filter(|f| *f != 0).ok_or_else(bad)?;
        let value = match (key & 7) as u8 {
            VARINT => Wire::Varint(read_varint(bytes, &mut at).ok_or_else(bad)?),
            FIXED64 => {
                let b = bytes.get(at..at + 8).ok_or_else(bad)?;
                at += 8;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().map_err(|_| bad())?))
            }
            LEN => {
                let n = usize::try_from(read_varint(bytes, &mut at).ok_or_else(bad)?).map_err(|_| bad())?;
                let b = bytes.get(at..at.checked_add(n).ok_or_else(bad)?).ok_or_else(bad)?;
                at += n;
                Wire::Len(b)
            }
            FIXED32 => {
                let b = bytes.get(at..at + 4).ok_or_else(bad)?;
                at += 4;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().map_err(|_| bad())?))
            }
            _ => return Err(bad()),
        };
        if items.len() == MAX_FIELDS {
            return Err(format!("the gateway's {what} has more than {MAX_FIELDS} fields"));
        }
        items.push((field, value));
    }
    Ok(Fields { what, items })
}

impl<'a> Fields<'a> {
    /// Every value of field `n`, taken out.
    fn take(&mut self, n: u32) -> Vec<Wire<'a>> {
        let mut taken = Vec::new();
        self.items.retain(|(f, v)| {
            if *f == n {
                taken.push(*v);
                false
            } else {
                true
            }
        });
        taken
    }

    fn wrong(&self, n: u32) -> String {
        format!("the gateway's {} has field {n} of the wrong type", self.what)
    }

    fn last_len(&mut self, n: u32) -> Result<Option<&'a [u8]>, String> {
        match self.take(n).last() {
            None => Ok(None),
            Some(Wire::Len(b)) => Ok(Some(b)),
            Some(_) => Err(self.wrong(n)),
        }
    }

    fn lens(&mut self, n: u32) -> Result<Vec<&'a [u8]>, String> {
        let taken = self.take(n);
        taken.into_iter().map(|v| if let Wire::Len(b) = v { Ok(b) } else { Err(self.wrong(n)) }).collect()
    }

    /// A varint field (0 when absent; the last value wins, as protobuf reads it).
    pub fn uint(&mut self, n: u32) -> Result<u64, String> {
        match self.take(n).last() {
            None => Ok(0),
            Some(Wire::Varint(v)) => Ok(*v),
            Some(_) => Err(self.wrong(n)),
        }
    }

    /// An `int32` or an enum field.
    pub fn int32(&mut self, n: u32) -> Result<i32, String> {
        Ok(self.uint(n)? as i32)
    }

    /// A `bool` field.
    pub fn boolean(&mut self, n: u32) -> Result<bool, String> {
        Ok(self.uint(n)? != 0)
    }

    /// An `optional` varint field: None when absent.
    pub fn present_uint(&mut self, n: u32) -> Result<Option<u64>, String> {
        if self.items.iter().any(|(f, _)| *f == n) { self.uint(n).map(Some) } else { Ok(None) }
    }

    /// A bytes field.
    pub fn bytes(&mut self, n: u32) -> Result<Vec<u8>, String> {
        Ok(self.last_len(n)?.map(<[u8]>::to_vec).unwrap_or_default())
    }

    /// A string field.
    pub fn string(&mut self, n: u32) -> Result<String, String> {
        let b = self.last_len(n)?.unwrap_or_default();
        String::from_utf8(b.to_vec()).map_err(|_| format!("the gateway's {} has field {n} not UTF-8", self.what))
    }

    /// A repeated string field.
    pub fn strings(&mut self, n: u32) -> Result<Vec<String>, String> {
        let what = self.what;
        self.lens(n)?
            .into_iter()
            .map(|b| String::from_utf8(b.to_vec()).map_err(|_| format!("the gateway's {what} has field {n} not UTF-8")))
            .collect()
    }

    /// An embedded message's bytes, if present. One sent in pieces (which
    /// protobuf merges) is refused: the gateway never sends one so.
    pub fn message(&mut self, n: u32) -> Result<Option<&'a [u8]>, String> {
        let all = self.lens(n)?;
        if all.len() > 1 {
            return Err(format!("the gateway's {} has field {n} more than once", self.what));
        }
        Ok(all.first().copied())
    }

    /// A repeated message field's bytes.
    pub fn messages(&mut self, n: u32) -> Result<Vec<&'a [u8]>, String> {
        self.lens(n)
    }

    /// A `map<string, V>` field as its keys and each value's bytes.
    pub fn map_entries(&mut self, n: u32, what: &'static str) -> Result<BTreeMap<String, &'a [u8]>, String> {
        let mut out = BTreeMap::new();
        for entry in self.lens(n)? {
            let mut e = parse(entry, what)?;
            let key = e.string(1)?;
            let value = e.last_len(2)?.unwrap_or_default();
            e.done()?;
            out.insert(key, value);
        }
        Ok(out)
    }

    /// A `map<string, string>` field.
    pub fn map(&mut self, n: u32, what: &'static str) -> Result<BTreeMap<String, String>, String> {
        self.map_entries(n, what)?
            .into_iter()
            .map(|(k, v)| {
                String::from_utf8(v.to_vec()).map(|v| (k, v)).map_err(|_| format!("the gateway's {what} is not UTF-8"))
            })
            .collect()
    }

    /// A double field.
    fn double(&mut self, n: u32) -> Result<f64, String> {
        match self.take(n).last() {
            None => Ok(0.0),
            Some(Wire::Fixed64(v)) => Ok(f64::from_bits(*v)),
            Some(_) => Err(self.wrong(n)),
        }
    }

    /// Ends a strict read: a field not taken is one plimsoll does not know.
    pub fn done(self) -> Result<(), String> {
        match self.items.first() {
            None => Ok(()),
            Some((n, _)) => Err(format!(
                "the gateway's {} carries field {n}, which plimsoll does not know (it may weaken the sandbox)",
                self.what
            )),
        }
    }
}

/// A `google.protobuf.Struct` value, as JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Number(f64),
    String(String),
    Bool(bool),
    Object(BTreeMap<String, Json>),
    List(Vec<Json>),
}

impl Json {
    /// An object of `pairs`.
    pub fn object<const N: usize>(pairs: [(&str, Json); N]) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// Writes this object as a `Struct` (fields = 1); any other value as a `Value`.
    pub fn write_struct(&self) -> Writer {
        let mut w = Writer::default();
        if let Json::Object(m) = self {
            for (k, v) in m {
                let mut entry = Writer::default();
                entry.string(1, k).message(2, &v.write_value());
                w.message(1, &entry);
            }
        }
        w
    }

    fn write_value(&self) -> Writer {
        let mut w = Writer::default();
        match self {
            Json::Null => {
                w.key(1, VARINT);
                w.varint(0);
            }
            Json::Number(n) => {
                w.double(2, *n);
            }
            Json::String(s) => w.always(3, s.as_bytes()),
            Json::Bool(b) => {
                w.key(4, VARINT);
                w.varint(u64::from(*b));
            }
            Json::Object(_) => {
                w.message(5, &self.write_struct());
            }
            Json::List(items) => {
                let mut list = Writer::default();
                for i in items {
                    list.message(1, &i.write_value());
                }
                w.message(6, &list);
            }
        }
        w
    }

    /// Reads a `Struct`, strictly.
    pub fn read_struct(bytes: &[u8]) -> Result<Json, String> {
        Json::struct_at(bytes, 0)
    }

    fn struct_at(bytes: &[u8], depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(format!("the gateway's Struct nests deeper than {MAX_DEPTH}"));
        }
        let mut f = parse(bytes, "Struct")?;
        let mut out = BTreeMap::new();
        for (k, v) in f.map_entries(1, "Struct field")? {
            out.insert(k, Json::value_at(v, depth + 1)?);
        }
        f.done()?;
        Ok(Json::Object(out))
    }

    fn value_at(bytes: &[u8], depth: usize) -> Result<Json, String> {
        let mut f = parse(bytes, "Struct value")?;
        let kinds = [1, 2, 3, 4, 5, 6].into_iter().filter(|n| f.items.iter().any(|(x, _)| x == n)).count();
        if kinds != 1 {
            return Err("the gateway's Struct value is not exactly one kind".into());
        }
        let v = if f.present_uint(1)?.is_some() {
            Json::Null
        } else if f.items.iter().any(|(n, _)| *n == 2) {
            Json::Number(f.double(2)?)
        } else if f.items.iter().any(|(n, _)| *n == 3) {
            Json::String(f.string(3)?)
        } else if let Some(b) = f.present_uint(4)? {
            Json::Bool(b != 0)
        } else if let Some(s) = f.message(5)? {
            Json::struct_at(s, depth + 1)?
        } else {
            let list = f.message(6)?.unwrap_or_default();
            let mut l = parse(list, "Struct list")?;
            let items = l.messages(1)?.into_iter().map(|i| Json::value_at(i, depth + 1)).collect::<Result<_, _>>()?;
            l.done()?;
            Json::List(items)
        };
        f.done()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_written_and_zero_values_are_left_out() {
        let mut inner = Writer::default();
        inner.string(1, "x");
        let mut w = Writer::default();
        w.uint(1, 300).string(2, "héllo").boolean(3, false).message(4, &inner).strings(5, &["a".into(), "b".into()]);
        w.map(6, &BTreeMap::from([("k".to_string(), "v".to_string())]));
        let bytes = w.into_bytes();
        let mut f = parse(&bytes, "test").expect("parse");
        assert_eq!(f.uint(1), Ok(300));
        assert_eq!(f.string(2).as_deref(), Ok("héllo"));
        assert_eq!(f.boolean(3), Ok(false));
        let mut m = parse(f.message(4).expect("ok").expect("present"), "inner").expect("inner");
        assert_eq!(m.string(1).as_deref(), Ok("x"));
        assert_eq!(f.strings(5), Ok(vec!["a".to_string(), "b".into()]));
        assert_eq!(f.map(6, "map").expect("map").get("k").map(String::as_str), Some("v"));
        f.done().expect("all taken");
    }

    #[test]
    fn a_field_not_taken_fails_a_strict_read_and_bad_bytes_are_named() {
        let mut w = Writer::default();
        w.string(1, "image").uint(99, 1);
        let bytes = w.into_bytes();
        let mut f = parse(&bytes, "template").expect("parse");
        f.string(1).expect("image");
        assert_eq!(
            f.done(),
            Err("the gateway's template carries field 99, which plimsoll does not know (it may weaken the sandbox)"
                .into())
        );
        // A truncated varint, a length past the end, a wrong wire type.
        for bad in [&[0x08, 0x80][..], &[0x0a, 0x05, b'a'], &[0x0f]] {
            assert_eq!(
                parse(bad, "sandbox").err(),
                Some("the gateway's sandbox is not a protocol-buffers message".into())
            );
        }
        let mut f = parse(&[0x08, 0x01], "x").expect("varint");
        assert_eq!(f.string(1), Err("the gateway's x has field 1 of the wrong type".into()));
    }

    #[test]
    fn a_struct_round_trips_and_its_unknown_parts_are_refused() {
        let j = Json::object([
            ("limits", Json::object([("cpu", Json::String("1".into())), ("memory", Json::String("256Mi".into()))])),
            ("n", Json::Number(1.5)),
            ("b", Json::Bool(false)),
            ("z", Json::Null),
            ("l", Json::List(vec![Json::String("noexec".into())])),
        ]);
        let bytes = j.write_struct().into_bytes();
        assert_eq!(Json::read_struct(&bytes), Ok(j));
        let mut w = Writer::default();
        w.uint(2, 7);
        assert!(Json::read_struct(&w.into_bytes()).is_err_and(|e| e.contains("field 2")));
    }
}
