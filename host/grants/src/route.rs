//! Routes: an HTTP method and an exact path template, matched byte for byte.
//!
//! A template is already in its canonical wire form: absolute, no query or
//! fragment, no percent-encoding, no `;`, no empty or all-dot segment, and only
//! bytes that travel unescaped in a URL path. `*` stands for exactly one non-empty
//! segment, and never one holding `:` (a custom method such as `/items/7:undo`).
//! A request path obeys the same rules (with no `*` at all), so what is matched is
//! what goes on the wire.

use std::fmt;

/// The methods a grant can open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// `GET`
    Get,
    /// `PUT`
    Put,
    /// `POST`
    Post,
    /// `DELETE`
    Delete,
    /// `PATCH`
    Patch,
}

impl Method {
    /// Reads an upper-case method name exactly.
    pub fn parse(s: &str) -> Option<Method> {
        Some(match s {
            "GET" => Method::Get,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Patch => "PATCH",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a path (a template or a request's) is not in canonical wire form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Empty, or not starting with `/`.
    #[error("the path must be absolute (start with /)")]
    NotAbsolute,
    /// Holds a query.
    #[error("a query (?) is not allowed")]
    Query,
    /// Holds a fragment.
    #[error("a fragment (#) is not allowed")]
    Fragment,
    /// Holds percent-encoding.
    #[error("percent-encoding (%) is not allowed; send the path decoded")]
    Percent,
    /// Holds a backslash.
    #[error("a backslash is not allowed")]
    Backslash,
    /// Holds a control character.
    #[error("a control character is not allowed")]
    Control,
    /// Holds a byte a URL path would carry escaped (a space, non-ASCII, quotes...).
    #[error("a character that would be percent-encoded on the wire is not allowed")]
    Escaped,
    /// A segment holds `;` (a matrix parameter some servers strip).
    #[error("a ; in a segment is not allowed")]
    Semicolon,
    /// An empty segment (`//`, or a trailing `/`).
    #[error("an empty segment (// or a trailing /) is not allowed")]
    EmptySegment,
    /// A segment of dots only (`.`, `..`, `...`).
    #[error("a dot segment (. or ..) is not allowed")]
    DotSegment,
    /// A `*` that is not a whole template segment, or any `*` in a request path.
    #[error("* stands only for a whole segment of a route template")]
    Wildcard,
}

/// Bytes a URL path carries unescaped, less `;` and `%` (refused on their own).
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b'='
                | b':'
                | b'@'
        )
}

/// Checks `path` is canonical; `template` allows `*` as a whole segment.
fn check(path: &str, template: bool) -> Result<(), PathError> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    for b in path.bytes() {
        match b {
            b'?' => return Err(PathError::Query),
            b'#' => return Err(PathError::Fragment),
            b'%' => return Err(PathError::Percent),
            b'\\' => return Err(PathError::Backslash),
            0..=0x1f | 0x7f => return Err(PathError::Control),
            _ => {}
        }
    }
    if rest.is_empty() {
        return Ok(());
    }
    for segment in rest.split('/') {
        if segment.is_empty() {
            return Err(PathError::EmptySegment);
        }
        if segment.contains(';') {
            return Err(PathError::Semicolon);
        }
        if segment.bytes().all(|b| b == b'.') {
            return Err(PathError::DotSegment);
        }
        if segment.bytes().any(|b| !plain(b) && b != b'/') {
            return Err(PathError::Escaped);
        }
        if segment.contains('*') && !(template && segment == "*") {
            return Err(PathError::Wildcard);
        }
    }
    Ok(())
}

/// Checks a request path: canonical, and without `*`.
///
/// # Errors
///
/// The first rule it breaks.
pub fn check_request_path(path: &str) -> Result<(), PathError> {
    check(path, false)
}

/// Why a route line does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Not `METHOD /path`.
    #[error("route {0:?} must be \"METHOD /path\", with one space")]
    Shape(String),
    /// An unknown method.
    #[error("route {0:?}: the method must be one of GET, PUT, POST, DELETE, PATCH")]
    Method(String),
    /// A path breaking a rule.
    #[error("route {line:?}: {error}")]
    Path {
        /// The line.
        line: String,
        /// The rule.
        error: PathError,
    },
}

/// One route: a method and a path template.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    method: Method,
    template: String,
}

impl Route {
    /// Parses `"METHOD /path"`; the method is upper-cased first, as profiles allow.
    ///
    /// # Errors
    ///
    /// [`RouteError`] naming the rule the line breaks.
    pub fn parse(line: &str) -> Result<Route, RouteError> {
        let Some((method, path)) = line.split_once(' ') else {
            return Err(RouteError::Shape(line.to_string()));
        };
        if method.is_empty() || path.starts_with(' ') || path.ends_with(' ') {
            return Err(RouteError::Shape(line.to_string()));
        }
        let method = Method::parse(&method.to_ascii_uppercase()).ok_or_else(|| RouteError::Method(line.to_string()))?;
        check(path, true).map_err(|error| RouteError::Path { line: line.to_string(), error })?;
        Ok(Route { method, template: path.to_string() })
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The template.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Whether the template has no `*`.
    pub fn is_concrete(&self) -> bool {
        !self.template.split('/').any(|s| s == "*")
    }

    /// Whether a canonical request `path` (see [`check_request_path`]) matches:
    /// segment by segment, `*` binding one non-empty segment without `:`.
    pub fn matches(&self, method: Method, path: &str) -> bool {
        if method != self.method {
            return false;
        }
        let mut want = self.template.split('/');
        let mut got = path.split('/');
        loop {
            match (want.next(), got.next()) {
                (None, None) => return true,
                (Some("*"), Some(seg)) if !seg.is_empty() && !seg.contains(':') => {}
                (Some(w), Some(g)) if w == g => {}
                _ => return false,
            }
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.template)
    }
}

/// Why a call matched no route.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unmatched {
    /// The method is not one a grant can open.
    #[error("{0:?} is not a method a grant can open")]
    Method(String),
    /// The path is not canonical.
    #[error("{0}")]
    Path(PathError),
    /// Canonical, but not granted.
    #[error("it is not a granted route")]
    NotGranted,
}

/// Finds the route `method path` matches among `routes`, after checking the path
/// is canonical. The match is the template, which is all a trace records.
///
/// # Errors
///
/// [`Unmatched`] saying why nothing matched.
pub fn find<'r>(routes: &'r [Route], method: &str, path: &str) -> Result<&'r Route, Unmatched> {
    let m = Method::parse(method).ok_or_else(|| Unmatched::Method(method.chars().take(16).collect()))?;
    check_request_path(path).map_err(Unmatched::Path)?;
    routes.iter().find(|r| r.matches(m, path)).ok_or(Unmatched::NotGranted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(lines: &[&str]) -> Vec<Route> {
        lines.iter().map(|l| Route::parse(l).expect("a valid route")).collect()
    }

    #[test]
    fn templates_parse_and_bad_ones_name_the_rule() {
        assert_eq!(Route::parse("get /items/*").expect("ok").to_string(), "GET /items/*");
        assert_eq!(Route::parse("GET /").expect("ok").template(), "/");
        let cases: &[(&str, &str)] = &[
            ("GET", "route \"GET\" must be \"METHOD /path\", with one space"),
            ("GET  /a", "route \"GET  /a\" must be \"METHOD /path\", with one space"),
            ("GET /a ", "route \"GET /a \" must be \"METHOD /path\", with one space"),
            ("HEAD /a", "route \"HEAD /a\": the method must be one of GET, PUT, POST, DELETE, PATCH"),
            ("GET a", "route \"GET a\": the path must be absolute (start with /)"),
            ("GET /a?b=1", "route \"GET /a?b=1\": a query (?) is not allowed"),
            ("GET /a#b", "route \"GET /a#b\": a fragment (#) is not allowed"),
            ("GET /a%2Fb", "route \"GET /a%2Fb\": percent-encoding (%) is not allowed; send the path decoded"),
            ("GET /a\\b", "route \"GET /a\\\\b\": a backslash is not allowed"),
            ("GET /a;v=1", "route \"GET /a;v=1\": a ; in a segment is not allowed"),
            ("GET /a//b", "route \"GET /a//b\": an empty segment (// or a trailing /) is not allowed"),
            ("GET /a/", "route \"GET /a/\": an empty segment (// or a trailing /) is not allowed"),
            ("GET /a/../b", "route \"GET /a/../b\": a dot segment (. or ..) is not allowed"),
            ("GET /a/./b", "route \"GET /a/./b\": a dot segment (. or ..) is not allowed"),
            ("GET /a b", "route \"GET /a b\": a character that would be percent-encoded on the wire is not allowed"),
            (
                "GET /caf\u{e9}",
                "route \"GET /café\": a character that would be percent-encoded on the wire is not allowed",
            ),
            ("GET /a*", "route \"GET /a*\": * stands only for a whole segment of a route template"),
        ];
        for (line, want) in cases {
            assert_eq!(Route::parse(line).expect_err(line).to_string(), *want, "{line}");
        }
    }

    #[test]
    fn the_route_table_allows_exact_matches_and_refuses_everything_else() {
        let r = routes(&["GET /items", "GET /items/*", "POST /items", "GET /items/*/notes/*"]);
        let allowed: &[(&str, &str, &str)] = &[
            ("GET", "/items", "/items"),
            ("GET", "/items/42", "/items/*"),
            ("GET", "/items/a-b_c.d~e", "/items/*"),
            ("POST", "/items", "/items"),
            ("GET", "/items/7/notes/x", "/items/*/notes/*"),
        ];
        for (m, p, template) in allowed {
            assert_eq!(find(&r, m, p).map(Route::template), Ok(*template), "{m} {p}");
        }
        let refused: &[(&str, &str, Unmatched)] = &[
            ("DELETE", "/items/1", Unmatched::NotGranted),
            ("POST", "/items/1", Unmatched::NotGranted),
            ("GET", "/items/1/2", Unmatched::NotGranted),
            ("GET", "/itemsx", Unmatched::NotGranted),
            ("GET", "/Items", Unmatched::NotGranted),
            ("get", "/items", Unmatched::Method("get".into())),
            ("HEAD", "/items", Unmatched::Method("HEAD".into())),
            ("GET", "items", Unmatched::Path(PathError::NotAbsolute)),
            ("GET", "", Unmatched::Path(PathError::NotAbsolute)),
            ("GET", "/items/", Unmatched::Path(PathError::EmptySegment)),
            ("GET", "//items", Unmatched::Path(PathError::EmptySegment)),
            ("GET", "/items/../admin", Unmatched::Path(PathError::DotSegment)),
            ("GET", "/items/..", Unmatched::Path(PathError::DotSegment)),
            ("GET", "/items/.", Unmatched::Path(PathError::DotSegment)),
            ("GET", "/items/%2e%2e", Unmatched::Path(PathError::Percent)),
            ("GET", "/items/1%2F..%2Fadmin", Unmatched::Path(PathError::Percent)),
            ("GET", "/items/1;jsessionid=x", Unmatched::Path(PathError::Semicolon)),
            ("GET", "/items?limit=1", Unmatched::Path(PathError::Query)),
            ("GET", "/items#x", Unmatched::Path(PathError::Fragment)),
            ("GET", "/items\\1", Unmatched::Path(PathError::Backslash)),
            ("GET", "/items/1\n", Unmatched::Path(PathError::Control)),
            ("GET", "/items/\u{0}", Unmatched::Path(PathError::Control)),
            ("GET", "/items/a b", Unmatched::Path(PathError::Escaped)),
            ("GET", "/items/\u{ff0e}\u{ff0e}", Unmatched::Path(PathError::Escaped)),
            ("GET", "/items/*", Unmatched::Path(PathError::Wildcard)),
            ("GET", "/items/7:undo", Unmatched::NotGranted),
        ];
        for (m, p, want) in refused {
            assert_eq!(find(&r, m, p), Err(want.clone()), "{m} {p:?}");
        }
    }

    #[test]
    fn a_wildcard_never_binds_a_custom_method_segment_but_a_literal_can_name_one() {
        let r = routes(&["POST /items/*", "POST /items/7:undo"]);
        assert_eq!(find(&r, "POST", "/items/7").map(Route::template), Ok("/items/*"));
        assert_eq!(find(&r, "POST", "/items/7:undo").map(Route::template), Ok("/items/7:undo"));
        assert_eq!(find(&r, "POST", "/items/8:undo"), Err(Unmatched::NotGranted));
    }
}
