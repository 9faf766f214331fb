//! Request validation: the checks made before anything is admitted or dispatched.
//!
//! Every failure is a [`Refusal`] with reason `request`: nothing ran, and the same
//! request is refused the same way by every daemon. The rules match the original
//! system's `ValidateRequest` family, which the published clients mirror.

use crate::limits::{
    MAX_CODE_BYTES, MAX_GRANT_PROFILE_BYTES, MAX_IDENTITY_BYTES, MAX_MODULE_RESULT_BYTES, MAX_MODULE_ROW_WIDTH,
    MAX_MODULE_ROWS, MAX_MODULE_STEPS, MAX_PATH_BYTES, MAX_PROJECT_ARTIFACTS, MAX_PROJECT_BYTES, MAX_PROJECT_FILES,
    MAX_PROJECT_STEPS, MAX_RULE_IDENTITIES, MAX_STEP_BYTES, MAX_TRACE_ID_BYTES,
};
use crate::refusal::Refusal;
use crate::tier::Floor;
use crate::wire::{CellRun, JavaScriptRun, ModuleRun, ProjectFile, ProjectRun, SoftwareRule};

/// A language plimsoll keeps an interpreter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    /// `javascript`
    JavaScript,
    /// `python`
    Python,
}

impl Language {
    /// Every language, in the order `Describe` lists them.
    pub const ALL: [Language; 2] = [Language::JavaScript, Language::Python];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::Python => "python",
        }
    }

    /// Reads a wire name.
    ///
    /// # Errors
    ///
    /// A `request` refusal naming the languages there are.
    pub fn parse(s: &str) -> Result<Language, Refusal> {
        match s {
            "javascript" => Ok(Language::JavaScript),
            "python" => Ok(Language::Python),
            other => Err(invalid(format!("unknown language {other:?} (want javascript or python)"))),
        }
    }
}

fn invalid(message: impl std::fmt::Display) -> Refusal {
    Refusal::request(format!("invalid request: {message}"))
}

/// Checks a snippet's or cell's source: non-empty, no NUL, at most 256 KiB.
/// (A `&str` is valid UTF-8 already; readers of raw bytes check that first.)
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn code(code: &str) -> Result<(), Refusal> {
    if code.is_empty() {
        return Err(invalid("code is required"));
    }
    if code.contains('\0') {
        return Err(invalid("code must be valid UTF-8 without NUL bytes"));
    }
    if code.len() > MAX_CODE_BYTES {
        return Err(invalid(format!("code is {} bytes, over the {MAX_CODE_BYTES} byte (256 KiB) limit", code.len())));
    }
    Ok(())
}

/// Decodes source bytes (a file, stdin) and checks them as [`code`].
///
/// # Errors
///
/// A `request` refusal for invalid UTF-8 or any [`code`] rule.
pub fn code_bytes(bytes: Vec<u8>) -> Result<String, Refusal> {
    let text = String::from_utf8(bytes).map_err(|e| {
        invalid(format!("code must be valid UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })?;
    code(&text)?;
    Ok(text)
}

/// Whether a trace ID is acceptable; the daemon drops (never refuses) any other.
pub fn trace_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_TRACE_ID_BYTES
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Reads a request's floor; `none` and non-tiers are refused.
///
/// # Errors
///
/// A `request` refusal naming the bad value.
pub fn floor(s: &str) -> Result<Option<Floor>, Refusal> {
    Floor::parse_optional(s).map_err(invalid)
}

/// Checks a software rule: `exact` with one identity or `approved` with 1 to 32,
/// each 1 to 256 bytes of `[A-Za-z0-9._:/@+-]`, no duplicates. An empty rule (no
/// mode, no identities) imposes nothing.
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn software_rule(rule: &SoftwareRule) -> Result<(), Refusal> {
    if rule.mode.is_empty() && rule.identities.is_empty() {
        return Ok(());
    }
    let n = rule.identities.len();
    let shape_ok = match rule.mode.as_str() {
        "exact" => n == 1,
        "approved" => (1..=MAX_RULE_IDENTITIES).contains(&n),
        _ => false,
    };
    if !shape_ok {
        return Err(invalid("software rule needs mode exact with one identity, or approved with 1 to 32 identities"));
    }
    for (i, id) in rule.identities.iter().enumerate() {
        if id.is_empty() || id.len() > MAX_IDENTITY_BYTES {
            return Err(invalid(format!("software identity {i} must be 1 to {MAX_IDENTITY_BYTES} bytes")));
        }
        if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:/@+-".contains(&b)) {
            return Err(invalid(format!("software identity {i} has a character outside [A-Za-z0-9._:/@+-]")));
        }
        if rule.identities[..i].contains(id) {
            return Err(invalid(format!("software identity {i} repeats an earlier one")));
        }
    }
    Ok(())
}

/// Checks a grant profile's name (its existence is the daemon's to check).
///
/// # Errors
///
/// A `request` refusal when it is over 128 bytes.
pub fn grant_profile(name: &str) -> Result<(), Refusal> {
    if name.len() > MAX_GRANT_PROFILE_BYTES {
        return Err(invalid(format!("grant_profile exceeds {MAX_GRANT_PROFILE_BYTES} bytes")));
    }
    Ok(())
}

/// Checks a relative path: clean (no empty, `.` or `..` segment), not absolute, no
/// backslash, no control character, at most 1024 bytes.
///
/// # Errors
///
/// A `request` refusal naming the path.
pub fn path(kind: &str, p: &str) -> Result<(), Refusal> {
    if p.len() > MAX_PATH_BYTES {
        return Err(invalid(format!("{kind} path exceeds {MAX_PATH_BYTES} bytes")));
    }
    let unsafe_path = p.is_empty()
        || p.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
        || p.contains('\\')
        || p.chars().any(|c| (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)));
    if unsafe_path {
        return Err(invalid(format!(
            "unsafe {kind} path {p:?}: paths are relative, with no empty, \".\" or \"..\" segment, no backslash and no control character"
        )));
    }
    Ok(())
}

/// Checks files written into a work directory: at most 200, 4 MiB in all, safe and
/// unique paths.
///
/// # Errors
///
/// A `request` refusal naming the file.
pub fn files(files: &[ProjectFile]) -> Result<(), Refusal> {
    if files.len() > MAX_PROJECT_FILES {
        return Err(invalid(format!("{} files, over the limit of {MAX_PROJECT_FILES}", files.len())));
    }
    let mut total = 0usize;
    for (i, f) in files.iter().enumerate() {
        path("file", &f.path)?;
        if files[..i].iter().any(|g| g.path == f.path) {
            return Err(invalid(format!("duplicate file path {:?}", f.path)));
        }
        total = total.saturating_add(f.content.len());
        if total > MAX_PROJECT_BYTES {
            return Err(invalid(format!("file contents exceed {MAX_PROJECT_BYTES} bytes (4 MiB) in all")));
        }
    }
    Ok(())
}

/// Checks a snippet payload.
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn javascript(js: &JavaScriptRun) -> Result<(), Refusal> {
    code(&js.code)?;
    grant_profile(&js.grant_profile)
}

/// Checks a project payload: 1 to 20 steps of at most 16 KiB without NUL, the files,
/// and at most 100 unique, safe artifact paths.
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn project(p: &ProjectRun) -> Result<(), Refusal> {
    if p.steps.is_empty() {
        return Err(invalid("at least one step is required"));
    }
    if p.steps.len() > MAX_PROJECT_STEPS {
        return Err(invalid(format!("{} steps, over the limit of {MAX_PROJECT_STEPS}", p.steps.len())));
    }
    for (i, s) in p.steps.iter().enumerate() {
        if s.contains('\0') {
            return Err(invalid(format!("step {i} must be valid UTF-8 without NUL bytes")));
        }
        if s.len() > MAX_STEP_BYTES {
            return Err(invalid(format!("step {i} is {} bytes, over the {MAX_STEP_BYTES} byte limit", s.len())));
        }
    }
    files(&p.files)?;
    if p.artifacts.len() > MAX_PROJECT_ARTIFACTS {
        return Err(invalid(format!("{} artifacts, over the limit of {MAX_PROJECT_ARTIFACTS}", p.artifacts.len())));
    }
    for (i, a) in p.artifacts.iter().enumerate() {
        path("artifact", a)?;
        if p.artifacts[..i].contains(a) {
            return Err(invalid(format!("duplicate artifact path {a:?}")));
        }
    }
    grant_profile(&p.grant_profile)
}

/// Checks a cell payload: a known language, the code and the files.
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn cell(c: &CellRun) -> Result<Language, Refusal> {
    let language = Language::parse(&c.language)?;
    code(&c.code)?;
    files(&c.files)?;
    Ok(language)
}

/// Checks a module table, including that its worst-case result fits the budget
/// (results are never truncated, so a table that could overflow is refused first).
///
/// # Errors
///
/// A `request` refusal saying which rule failed.
pub fn module(m: &ModuleRun) -> Result<(), Refusal> {
    let id_ok = !m.model.is_empty()
        && m.model.len() <= 64
        && m.model.as_bytes()[0].is_ascii_alphanumeric()
        && m.model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !id_ok {
        return Err(invalid("model must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"));
    }
    if m.rows.is_empty() {
        return Err(invalid("at least one row is required"));
    }
    if m.rows.len() > MAX_MODULE_ROWS {
        return Err(invalid(format!("{} rows, over the limit of {MAX_MODULE_ROWS}", m.rows.len())));
    }
    let width = m.rows[0].values.len();
    if width == 0 || width > MAX_MODULE_ROW_WIDTH {
        return Err(invalid(format!("rows must carry 1 to {MAX_MODULE_ROW_WIDTH} values")));
    }
    for (i, row) in m.rows.iter().enumerate() {
        if row.values.len() != width {
            return Err(invalid(format!("row {i} has {} values, row 0 has {width}", row.values.len())));
        }
        if let Some(j) = row.values.iter().position(|v| !v.is_finite()) {
            return Err(invalid(format!("row {i} value {j} is not finite")));
        }
    }
    for (name, v) in [("end_time", m.end_time), ("step", m.step)] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(invalid(format!("{name} must be positive and finite")));
        }
    }
    if m.end_time / m.step > MAX_MODULE_STEPS {
        return Err(invalid(format!("end_time/step exceeds {MAX_MODULE_STEPS} steps")));
    }
    let max_steps = (m.end_time / m.step) as u64 + 2;
    let worst = 20 + m.rows.len() as u64 * (4 + 8 * max_steps);
    if worst > MAX_MODULE_RESULT_BYTES {
        return Err(invalid(format!(
            "results could reach at least {worst} bytes for {} rows of up to {max_steps} steps, over the {MAX_MODULE_RESULT_BYTES} byte budget; send fewer rows or a shorter horizon",
            m.rows.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusal::Reason;

    fn refused(r: Result<impl std::fmt::Debug, Refusal>) -> String {
        let e = r.expect_err("refused");
        assert_eq!(e.reason, Reason::Request);
        e.message
    }

    #[test]
    fn code_rules() {
        assert_eq!(refused(code("")), "invalid request: code is required");
        assert_eq!(refused(code("a\0b")), "invalid request: code must be valid UTF-8 without NUL bytes");
        assert!(code(&"x".repeat(MAX_CODE_BYTES)).is_ok());
        assert_eq!(
            refused(code(&"x".repeat(MAX_CODE_BYTES + 1))),
            "invalid request: code is 262145 bytes, over the 262144 byte (256 KiB) limit"
        );
        assert_eq!(
            refused(code_bytes(vec![b'o', b'k', 0xff])),
            "invalid request: code must be valid UTF-8 (invalid byte at offset 2)"
        );
    }

    #[test]
    fn floors_refuse_none_and_junk() {
        assert_eq!(floor(""), Ok(None));
        assert_eq!(floor("vm"), Ok(Some(Floor::Vm)));
        assert!(refused(floor("none")).contains("\"none\" is not a floor"));
        assert!(refused(floor("hypervisor")).contains("\"hypervisor\" is not a tier"));
    }

    #[test]
    fn trace_ids() {
        assert!(trace_id_ok("t-1.a:b_c"));
        assert!(!trace_id_ok(""));
        assert!(!trace_id_ok("has space"));
        assert!(!trace_id_ok(&"a".repeat(65)));
    }

    #[test]
    fn paths() {
        for bad in ["", "/abs", "a//b", "./a", "a/..", "../x", "a\\b", "a\nb", "a\u{85}b", "a/"] {
            assert!(path("file", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a", "a/b.txt", ".hidden", "a..b", "dir/sub/file"] {
            assert!(path("file", good).is_ok(), "{good:?} refused");
        }
        assert_eq!(refused(path("file", &"a".repeat(1025))), "invalid request: file path exceeds 1024 bytes");
    }

    fn file(p: &str, n: usize) -> ProjectFile {
        ProjectFile { path: p.into(), content: "x".repeat(n) }
    }

    #[test]
    fn file_limits() {
        let many: Vec<ProjectFile> = (0..201).map(|i| file(&format!("f{i}"), 1)).collect();
        assert_eq!(refused(files(&many)), "invalid request: 201 files, over the limit of 200");
        assert!(files(&many[..200]).is_ok());
        assert_eq!(refused(files(&[file("a", 1), file("a", 1)])), "invalid request: duplicate file path \"a\"");
        assert!(files(&[file("a", MAX_PROJECT_BYTES)]).is_ok());
        assert_eq!(
            refused(files(&[file("a", MAX_PROJECT_BYTES), file("b", 1)])),
            "invalid request: file contents exceed 4194304 bytes (4 MiB) in all"
        );
    }

    #[test]
    fn project_limits() {
        let ok = ProjectRun { steps: vec!["true".into()], ..Default::default() };
        assert!(project(&ok).is_ok());
        assert_eq!(refused(project(&ProjectRun::default())), "invalid request: at least one step is required");
        let long = ProjectRun { steps: vec!["x".repeat(MAX_STEP_BYTES + 1)], ..Default::default() };
        assert_eq!(refused(project(&long)), "invalid request: step 0 is 16385 bytes, over the 16384 byte limit");
        let dup =
            ProjectRun { steps: vec!["true".into()], artifacts: vec!["a".into(), "a".into()], ..Default::default() };
        assert_eq!(refused(project(&dup)), "invalid request: duplicate artifact path \"a\"");
    }

    #[test]
    fn rules() {
        let r = |mode: &str, ids: &[&str]| SoftwareRule {
            mode: mode.into(),
            identities: ids.iter().map(|s| s.to_string()).collect(),
        };
        assert!(software_rule(&r("", &[])).is_ok());
        assert!(software_rule(&r("exact", &["a:b"])).is_ok());
        let shape =
            "invalid request: software rule needs mode exact with one identity, or approved with 1 to 32 identities";
        assert_eq!(refused(software_rule(&r("exact", &["a", "b"]))), shape);
        assert_eq!(refused(software_rule(&r("approved", &[]))), shape);
        assert_eq!(
            refused(software_rule(&r("approved", &["a", "a"]))),
            "invalid request: software identity 1 repeats an earlier one"
        );
        assert_eq!(
            refused(software_rule(&r("approved", &["a b"]))),
            "invalid request: software identity 0 has a character outside [A-Za-z0-9._:/@+-]"
        );
        assert_eq!(refused(software_rule(&r("loose", &["a"]))), shape);
    }

    #[test]
    fn modules() {
        use crate::wire::ModuleRow;
        let m = |rows: Vec<Vec<f64>>, end: f64, step: f64| ModuleRun {
            model: "VanDerPol".into(),
            rows: rows.into_iter().map(|values| ModuleRow { values }).collect(),
            end_time: end,
            step,
        };
        assert!(module(&m(vec![vec![1.0, 2.0]], 1.0, 0.1)).is_ok());
        assert_eq!(
            refused(module(&m(vec![vec![1.0], vec![1.0, 2.0]], 1.0, 0.1))),
            "invalid request: row 1 has 2 values, row 0 has 1"
        );
        assert_eq!(refused(module(&m(vec![vec![f64::NAN]], 1.0, 0.1))), "invalid request: row 0 value 0 is not finite");
        assert_eq!(
            refused(module(&m(vec![vec![1.0]], 0.0, 0.1))),
            "invalid request: end_time must be positive and finite"
        );
        assert!(refused(module(&m(vec![vec![1.0]; 1000], 100.0, 0.01))).contains("send fewer rows"));
    }

    #[test]
    fn a_module_table_past_any_limit_is_refused_naming_it() {
        use crate::wire::ModuleRow;
        let m = |rows: usize, width: usize, end: f64, step: f64| ModuleRun {
            model: "vanderpol".into(),
            rows: vec![ModuleRow { values: vec![1.0; width] }; rows],
            end_time: end,
            step,
        };
        assert_eq!(
            refused(module(&m(MAX_MODULE_ROWS + 1, 3, 1.0, 1.0))),
            "invalid request: 100001 rows, over the limit of 100000"
        );
        assert!(module(&m(MAX_MODULE_ROWS, 3, 1.0, 1.0)).is_ok());
        assert_eq!(
            refused(module(&m(1, MAX_MODULE_ROW_WIDTH + 1, 1.0, 1.0))),
            "invalid request: rows must carry 1 to 64 values"
        );
        assert_eq!(refused(module(&m(1, 0, 1.0, 1.0))), "invalid request: rows must carry 1 to 64 values");
        assert!(module(&m(1, MAX_MODULE_ROW_WIDTH, 1.0, 1.0)).is_ok());
        assert_eq!(refused(module(&m(1, 3, 1_000_001.0, 1.0))), "invalid request: end_time/step exceeds 1000000 steps");
        assert!(module(&m(1, 3, 1_000_000.0, 1.0)).is_ok());
        assert_eq!(
            refused(module(&m(1, 3, f64::INFINITY, 1.0))),
            "invalid request: end_time must be positive and finite"
        );
        assert_eq!(refused(module(&m(1, 3, 1.0, -0.1))), "invalid request: step must be positive and finite");
        assert_eq!(
            refused(module(&m(2, 3, 1_000_000.0, 1.0))),
            "invalid request: results could reach at least 16000060 bytes for 2 rows of up to 1000002 steps, over the 8388608 byte \
             budget; send fewer rows or a shorter horizon"
        );
    }
}
