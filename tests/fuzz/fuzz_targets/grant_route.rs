//! The grant route matcher: a route line from a profile (first line of the
//! input) and a call's method and path (the second). Whatever the text, parsing
//! never panics; a parsed route prints back to itself; a call is granted only on a
//! canonical path (no dot segment, escape, query or empty segment can reach the
//! upstream); a route without `*` grants exactly its own path; and where `*`
//! matches, it stands for exactly one whole segment, never one holding `:`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plimsoll_grants::route::{self, Method, Route, Unmatched};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (line, call) = text.split_once('\n').unwrap_or((text, ""));
    let (method, path) = call.split_once(' ').unwrap_or((call, ""));

    let parsed = Route::parse(line);
    if let Ok(r) = &parsed {
        assert_eq!(Route::parse(&r.to_string()).as_ref(), Ok(r), "a route prints back to itself");
    }
    let routes: Vec<Route> = parsed.into_iter().collect();
    match route::find(&routes, method, path) {
        Ok(r) => {
            assert!(route::check_request_path(path).is_ok(), "granted a non-canonical path {path:?}");
            assert!(!path.split('/').any(|s| s == "." || s == ".."), "granted a dot segment");
            let m = Method::parse(method).expect("a granted method parses");
            assert!(r.matches(m, path));
            if r.is_concrete() {
                assert_eq!(r.template(), path, "a concrete route granted another path");
            }
            let want: Vec<&str> = r.template().split('/').collect();
            let got: Vec<&str> = path.split('/').collect();
            assert_eq!(want.len(), got.len(), "a * spanned more or less than one segment");
            for (w, g) in want.iter().zip(&got) {
                if *w == "*" {
                    assert!(!g.is_empty() && !g.contains(':'), "* bound {g:?}");
                } else {
                    assert_eq!(w, g);
                }
            }
        }
        Err(Unmatched::Path(e)) => assert_eq!(route::check_request_path(path), Err(e)),
        Err(Unmatched::Method(_)) => assert!(Method::parse(method).is_none()),
        Err(Unmatched::NotGranted) => {
            assert!(route::check_request_path(path).is_ok());
            if let (Some(r), Some(m)) = (routes.first(), Method::parse(method)) {
                assert!(!r.matches(m, path), "find missed a matching route");
            }
        }
    }
});
