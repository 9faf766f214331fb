//! The provider-facing half of sessions: one sandbox kept for many calls.
//!
//! The host owns everything a session's caller sees (ownership, turns, chains,
//! lifetimes, caps); a provider's [`Session`] only runs calls in its sandbox and
//! says when that sandbox can no longer be trusted or reached. Calls arrive
//! validated, floor-checked and bounded, one at a time.

use std::time::Duration;

use crate::provider::{Evidence, Grant, Snippet};
use crate::refusal::Refusal;
use crate::tier::Floor;
use crate::validate::Language;
use crate::wire::{CellResult, JavaScriptResult, ProjectFile, ProjectResult, ProjectRun, SessionEnd};

/// A cell for the session's kept interpreter of `language`.
#[derive(Clone, Copy, Debug)]
pub struct Cell<'a> {
    /// The language (validated, and one the session states).
    pub language: Language,
    /// The source.
    pub code: &'a str,
    /// Files written into the session's work directory before the code runs.
    pub files: &'a [ProjectFile],
    /// The cell's budget.
    pub timeout: Duration,
    /// The call's floor.
    pub floor: Option<Floor>,
}

/// One call of a session.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// A snippet in the session's sandbox, sharing its files.
    Snippet(Snippet<'a>),
    /// A project whose files land in the session's work directory.
    Project {
        /// The project.
        project: &'a ProjectRun,
        /// Its budget.
        timeout: Duration,
        /// The call's floor.
        floor: Option<Floor>,
        /// The call's grant: its steps reach the broker while the call runs.
        grant: Option<&'a Grant>,
    },
    /// A cell.
    Cell(Cell<'a>),
}

/// What a call produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A snippet's result.
    JavaScript(JavaScriptResult),
    /// A project's result.
    Project(ProjectResult),
    /// A cell's result.
    Cell(CellResult),
}

/// Why a session ended, in the provider's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// The reason, as the protocol names it.
    pub end: SessionEnd,
    /// Plimsoll's words for the caller (never a secret, never the session ID).
    pub detail: String,
}

impl Ending {
    /// An ending with its detail.
    pub fn new(end: SessionEnd, detail: impl Into<String>) -> Ending {
        Ending { end, detail: detail.into() }
    }
}

/// A call's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    /// The result.
    pub output: Output,
    /// What it ran behind.
    pub evidence: Evidence,
    /// Set when the sandbox cannot take another call (its disk budget is spent, its
    /// main process ended): the session ends with this call.
    pub ended: Option<Ending>,
}

/// Why a call produced no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Nothing ran; the session goes on.
    #[error("{0}")]
    Refused(Refusal),
    /// Nothing ran, and the session is over: its sandbox changed or is gone.
    #[error("the session ended: {}", .0.detail)]
    Ended(Ending),
    /// The call may have run; the detail is for the log. `ended` is set when the
    /// sandbox went with it.
    #[error("the call failed after it may have started: {detail}")]
    MayHaveRun {
        /// For the log only.
        detail: String,
        /// The session's end, if the failure took the sandbox.
        ended: Option<Ending>,
    },
}

impl From<Refusal> for CallError {
    fn from(r: Refusal) -> CallError {
        CallError::Refused(r)
    }
}

/// A provider's live session: its sandbox and kept interpreters.
///
/// The host calls it from one thread at a time and never concurrently; methods
/// block. Dropping a session must delete its sandbox, as [`Session::close`] does.
pub trait Session: Send {
    /// Runs one call in the session's sandbox.
    ///
    /// # Errors
    ///
    /// [`CallError`]: refused (the session goes on), ended, or may have run.
    fn call(&mut self, call: Call<'_>) -> Result<Answered, CallError>;

    /// The session has been idle for its idle timeout: release what can be released
    /// while keeping files and interpreters (docker pauses its container).
    ///
    /// # Errors
    ///
    /// Why it could not; the host ends the session as `boundary_failed`.
    fn suspend(&mut self) -> Result<Suspension, String> {
        Ok(Suspension::Released)
    }

    /// Deletes the sandbox. Called once; a session that ended by itself is closed too.
    fn close(&mut self);
}

/// What a session's [`Session::suspend`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspension {
    /// What could be released was: nothing of the session runs until its next
    /// call (docker pauses its container; a wasm session runs nothing between calls).
    Released,
    /// The provider cannot suspend its sandbox: it keeps running, and billing, until
    /// the session's next call, its close or its lifetime (a remote backend's).
    KeptRunning,
}

/// A session the provider opened, with what it stands behind.
pub struct Opened {
    /// The session.
    pub session: Box<dyn Session>,
    /// The evidence measured at open; every call's must match it.
    pub evidence: Evidence,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("evidence", &self.evidence).finish_non_exhaustive()
    }
}
