//! The bounds every request and result is held to. Each constant that caps a
//! caller-driven allocation says what it protects against.

use std::time::Duration;

/// Source code per snippet or cell. Bounds what one request makes the daemon hold,
/// parse and hash.
pub const MAX_CODE_BYTES: usize = 256 << 10;

/// Files per project or cell. Bounds per-file work (paths, writes, hashing).
pub const MAX_PROJECT_FILES: usize = 200;

/// All file contents of one project or cell together.
pub const MAX_PROJECT_BYTES: usize = 4 << 20;

/// Steps per project.
pub const MAX_PROJECT_STEPS: usize = 20;

/// One step's command.
pub const MAX_STEP_BYTES: usize = 16 << 10;

/// Artifacts a project may ask back.
pub const MAX_PROJECT_ARTIFACTS: usize = 100;

/// One file or artifact path.
pub const MAX_PATH_BYTES: usize = 1024;

/// A grant profile's name.
pub const MAX_GRANT_PROFILE_BYTES: usize = 128;

/// Rows per module table.
pub const MAX_MODULE_ROWS: usize = 100_000;

/// Values per module row.
pub const MAX_MODULE_ROW_WIDTH: usize = 64;

/// `end_time / step` of a module table.
pub const MAX_MODULE_STEPS: f64 = 1_000_000.0;

/// The worst-case encoded result of a module table; larger tables are refused before
/// anything runs, since results are never truncated.
pub const MAX_MODULE_RESULT_BYTES: u64 = 8 << 20;

/// Identities in an `approved` software rule (about 8 KiB at 256 bytes each).
pub const MAX_RULE_IDENTITIES: usize = 32;

/// Bytes per software identity.
pub const MAX_IDENTITY_BYTES: usize = 256;

/// A trace ID's length; longer ones are dropped, not refused.
pub const MAX_TRACE_ID_BYTES: usize = 64;

/// Bytes kept per snippet output stream; the rest is dropped and flagged.
pub const OUTPUT_CAP_BYTES: usize = 64 << 10;

/// The daemon's ceiling on any one run, whatever the provider allows.
pub const MAX_RUN_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A decoded request body. Bounds what one request makes the daemon buffer.
pub const MAX_REQUEST_BYTES: usize = 8 << 20;
