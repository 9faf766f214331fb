//! The worker protocol's frames: a little-endian `u32` length, then that many bytes
//! of JSON. Each side refuses a frame over [`MAX_FRAME`] before reading it.
//!
//! The daemon opens with [`Hello`]; the worker answers [`Ready`] once confined.
//! Then the daemon sends [`Down::Job`]s, up to the hello's `slots` at once, each
//! with an ID of its own, and the worker runs each on a thread of its own and
//! answers it with an [`Up::Answer`] of the same ID. A granted job's guest calls
//! its API through the worker's [`Up::Call`], which the daemon checks and serves
//! (its broker holds every credential) and answers with one [`Down::Reply`] of the
//! job's ID. A worker given [`Job::OpenSession`] belongs to that session until the
//! daemon hangs up.

use std::io::{Read, Write};

use plimsoll_core::wire::json::{de_bytes, ser_bytes};
use plimsoll_core::wire::{CellResult, JavaScriptResult, ModuleResult, ModuleRun, ProjectResult, ProjectRun};
use serde::{Deserialize, Serialize};

/// The largest frame: a run's code or result with room to spare.
pub const MAX_FRAME: u32 = 16 << 20;

/// The daemon's first frame: how the worker's engine is set up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Linear memory per run, in MiB.
    pub memory_mb: u32,
    /// Bytes kept per output stream.
    pub output_cap: u64,
    /// The component cache the worker reads (and writes on its first start).
    pub cache_dir: Option<String>,
    /// The CPython component to load, when the daemon's provider runs Python.
    #[serde(default)]
    pub python: Option<String>,
    /// The SHA-256 (hex) of that component as the daemon read it: its identity and
    /// its cache key, so the worker need not hash 38 MB again.
    #[serde(default)]
    pub python_sha256: Option<String>,
    /// How many jobs the daemon may have in flight in this worker at once.
    pub slots: u32,
}

/// The worker's answer to [`Hello`], once confined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    /// The QuickJS component's identity, as the in-process provider states it.
    pub identity: String,
    /// The walls the worker stands behind, in words (`seccomp`, `landlock`, ...).
    pub walls: Vec<String>,
}

/// A grant's client as the guest sees it; its calls come back to the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantClient {
    /// The global the client is installed as.
    pub global: String,
    /// "METHOD /path" lines.
    pub routes: Vec<String>,
    /// JavaScript evaluated after the client is installed.
    pub preamble: String,
}

/// A file written into a session before a cell runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionFile {
    /// Its path in the session's work directory.
    pub path: String,
    /// Its bytes.
    #[serde(deserialize_with = "de_bytes", serialize_with = "ser_bytes")]
    pub content: Vec<u8>,
}

/// One piece of work for a worker. Budgets are in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Job {
    /// A JavaScript snippet in a fresh store (in a session's worker: with the
    /// session's held grant when it has one and the snippet none).
    Snippet {
        /// The source.
        code: String,
        /// The budget.
        timeout_ms: u64,
        /// The snippet's grant.
        grant: Option<GrantClient>,
    },
    /// A project: Python steps, or judge steps (a simulation run).
    Project {
        /// The project.
        project: ProjectRun,
        /// The budget.
        timeout_ms: u64,
        /// The project's grant.
        grant: Option<GrantClient>,
    },
    /// A module table.
    Module {
        /// The table.
        module: ModuleRun,
        /// The budget.
        timeout_ms: u64,
    },
    /// From now on this worker keeps one session (its interpreters and files).
    OpenSession {
        /// The grant every call of the session holds.
        held: Option<GrantClient>,
    },
    /// A Python project in the worker's session, over the session's files: with
    /// its own grant, else the session's held grant.
    SessionProject {
        /// The project.
        project: ProjectRun,
        /// The budget.
        timeout_ms: u64,
        /// The call's grant.
        grant: Option<GrantClient>,
    },
    /// A cell of the worker's session.
    Cell {
        /// `javascript` or `python`.
        python: bool,
        /// The source.
        code: String,
        /// Files written before it runs.
        files: Vec<SessionFile>,
        /// The budget.
        timeout_ms: u64,
    },
}

/// The daemon's frames after [`Hello`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Down {
    /// Work to do.
    Job {
        /// The job's ID, unique among the worker's jobs.
        id: u64,
        /// The job.
        job: Job,
    },
    /// The answer to the last [`Up::Call`] of job `id`.
    Reply {
        /// The job.
        id: u64,
        /// The HTTP status the broker answered (403 when it refused the call).
        status: u16,
        /// Its content type.
        content_type: String,
        /// Its body.
        #[serde(deserialize_with = "de_bytes", serialize_with = "ser_bytes")]
        body: Vec<u8>,
    },
}

/// The worker's frames after [`Ready`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Up {
    /// The guest of job `id` calls its grant's API; the daemon answers with
    /// [`Down::Reply`].
    Call {
        /// The job.
        id: u64,
        /// The method.
        method: String,
        /// The concrete path.
        path: String,
        /// The JSON body, if any.
        #[serde(default, deserialize_with = "de_opt_bytes", serialize_with = "ser_opt_bytes")]
        body: Option<Vec<u8>>,
    },
    /// Job `id`'s answer.
    Answer {
        /// The job.
        id: u64,
        /// What it came to.
        answer: Answer,
    },
}

/// A job's answer: its result as the protocol writes it, or why it has none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Answer {
    /// A snippet's result.
    Ran(JavaScriptResult),
    /// A project's result.
    Project(ProjectResult),
    /// A module table's result.
    Module(ModuleResult),
    /// A cell's result.
    Cell(CellResult),
    /// The session is open in this worker.
    Opened,
    /// Refused before anything ran: the reason's wire name and the message.
    Refused {
        /// `capacity`, `environment`, ...
        reason: String,
        /// The refusal's text.
        message: String,
    },
    /// The job failed after it may have started (for the daemon's log).
    MayHaveRun {
        /// What the worker knows.
        detail: String,
    },
}

fn de_opt_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| plimsoll_core::wire::json::decode_base64(&s).ok_or_else(|| serde::de::Error::custom("not base64")))
        .transpose()
}

fn ser_opt_bytes<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(b) => s.serialize_some(&plimsoll_core::wire::json::encode_base64(b)),
        None => s.serialize_none(),
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed or ended.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A frame over [`MAX_FRAME`].
    #[error("a frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(u32),
    /// Not the JSON the protocol expects.
    #[error("not a frame of the protocol: {0}")]
    Garbage(String),
}

/// Writes `message` as one frame.
///
/// # Errors
///
/// The stream failed, or the message is over [`MAX_FRAME`].
pub fn write<T: Serialize>(out: &mut impl Write, message: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(message).map_err(|e| FrameError::Garbage(e.to_string()))?;
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&body)?;
    out.flush()?;
    Ok(())
}

/// Reads one frame as `T`.
///
/// # Errors
///
/// The stream failed or ended, the frame is too large, or it is not a `T`.
pub fn read<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Garbage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_bad_frames_are_named() {
        let mut buf = Vec::new();
        let job =
            Down::Job { id: 7, job: Job::Snippet { code: "console.log(1)".into(), timeout_ms: 5000, grant: None } };
        write(&mut buf, &job).expect("write");
        assert_eq!(read::<Down>(&mut buf.as_slice()).expect("read"), job);

        let mut huge = (MAX_FRAME + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(read::<Down>(&mut huge.as_slice()), Err(FrameError::TooLarge(n)) if n == MAX_FRAME + 1));
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        let err = read::<Down>(&mut garbage.as_slice()).expect_err("garbage");
        assert!(err.to_string().starts_with("not a frame of the protocol: "), "{err}");
        let cut = &buf[..buf.len() - 1];
        assert!(matches!(read::<Down>(&mut &cut[..]), Err(FrameError::Io(_))));
    }

    #[test]
    fn bodies_and_files_travel_as_bytes_and_unknown_fields_are_refused() {
        let call = Up::Call { id: 1, method: "POST".into(), path: "/v1/x".into(), body: Some(vec![0, 255, b'{']) };
        let mut buf = Vec::new();
        write(&mut buf, &call).expect("write");
        assert_eq!(read::<Up>(&mut buf.as_slice()).expect("read"), call);
        let none = Up::Call { id: 2, method: "GET".into(), path: "/".into(), body: None };
        buf.clear();
        write(&mut buf, &none).expect("write");
        assert_eq!(read::<Up>(&mut buf.as_slice()).expect("read"), none);

        let cell = Down::Job {
            id: 3,
            job: Job::Cell {
                python: true,
                code: "1".into(),
                files: vec![SessionFile { path: "a.bin".into(), content: vec![1, 2, 3] }],
                timeout_ms: 10,
            },
        };
        buf.clear();
        write(&mut buf, &cell).expect("write");
        assert_eq!(read::<Down>(&mut buf.as_slice()).expect("read"), cell);

        let extra = br#"{"job":{"id":4,"job":{"snippet":{"code":"1","timeout_ms":1,"grant":null,"shell":"sh"}}}}"#;
        let mut framed = u32::try_from(extra.len()).expect("len").to_le_bytes().to_vec();
        framed.extend_from_slice(extra);
        let err = read::<Down>(&mut framed.as_slice()).expect_err("unknown field");
        assert!(err.to_string().contains("unknown field `shell`"), "{err}");
    }
}
