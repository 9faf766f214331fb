//! The worker protocol's frames: a little-endian `u32` length, then that many bytes
//! of JSON. Each side refuses a frame over [`MAX_FRAME`] before reading it.

use std::io::{Read, Write};

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

/// One snippet run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// The JavaScript source.
    pub code: String,
    /// The run's budget, in milliseconds.
    pub timeout_ms: u64,
}

/// A run's answer: the result as the protocol writes it, or why nothing ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Answer {
    /// The run's result.
    Ran(plimsoll_core::wire::JavaScriptResult),
    /// Refused before anything ran: the reason's wire name and the message.
    Refused {
        /// `capacity`, `environment`, ...
        reason: String,
        /// The refusal's text.
        message: String,
    },
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
        let run = Run { code: "console.log(1)".into(), timeout_ms: 5000 };
        write(&mut buf, &run).expect("write");
        assert_eq!(read::<Run>(&mut buf.as_slice()).expect("read"), run);

        let mut huge = (MAX_FRAME + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(read::<Run>(&mut huge.as_slice()), Err(FrameError::TooLarge(n)) if n == MAX_FRAME + 1));
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        let err = read::<Run>(&mut garbage.as_slice()).expect_err("garbage");
        assert!(err.to_string().starts_with("not a frame of the protocol: "), "{err}");
        let cut = &buf[..buf.len() - 1];
        assert!(matches!(read::<Run>(&mut &cut[..]), Err(FrameError::Io(_))));
    }
}
