//! The exec wrapper of the plugins whose vendor runs one command and hands back
//! its output at once (dockercloud, openshell): the kill timeout and the stream
//! caps are kept in the guest, and the wrapper's trailer says what the vendor's
//! answer cannot (the streams' whole sizes, an OOM kill).

use std::time::{Duration, Instant};

use crate::{Output, Ran};

/// Exit code of a command its deadline ended.
pub const EXIT_TIMEOUT: i32 = 124;

/// The trailer the wrapper writes last on stderr: the command's status and the
/// sizes of its two streams.
const TRAILER: &str = "\nplimsoll-exec ";

/// Runs a command in the guest: in `$3` (made if missing), `sh -c "$4"` with
/// nothing on stdin, killed with its process group after `$1` seconds; its
/// streams go to files, of which the first `$2` bytes come back, then the
/// trailer: the command's status, the streams' whole sizes, and the kernel's
/// count of OOM kills before and after it (`-` where it has none). The command's
/// pipes are never the vendor's, so its output cannot outgrow the caps. The files
/// go in `/dev/shm` where there is one, apart from the work directory's disk, so
/// a command that fills that disk still reports.
const WRAPPER: &str = r#"d=$(mktemp -d /dev/shm/plimsoll-exec.XXXXXX 2>/dev/null || mktemp -d /tmp/plimsoll-exec.XXXXXX) || exit 125
mkdir -p "$3" && cd "$3" || exit 126
o1=$(sed -n 's/^oom_kill //p' /proc/vmstat 2>/dev/null)
timeout -s KILL "$1" sh -c "$4" >"$d/o" 2>"$d/e" </dev/null
rc=$?
o2=$(sed -n 's/^oom_kill //p' /proc/vmstat 2>/dev/null)
head -c "$2" "$d/o"
head -c "$2" "$d/e" >&2
printf '\nplimsoll-exec %s %s %s %s %s\n' "$rc" "$(wc -c <"$d/o")" "$(wc -c <"$d/e")" "${o1:--}" "${o2:--}" >&2
rm -rf "$d"
exit "$rc""#;

/// The note a command SIGKILLed while the kernel's OOM kills rose gets.
const OOM_NOTE: &str = "\nplimsoll: the step ran out of memory: the sandbox's kernel's OOM killer ended it\n";

/// One wrapped command: the argv to run, and what reading its answer needs.
#[derive(Debug)]
pub struct Wrapped {
    /// `sh -c WRAPPER sh SECONDS CAP CWD SCRIPT`.
    pub argv: Vec<String>,
    /// The whole seconds the guest's `timeout` allows.
    pub seconds: u64,
    started: Instant,
    max_output: usize,
}

/// Wraps `script`, to run with `sh -c` in `cwd` until `deadline` (then the guest
/// kills it with its process group), each stream kept to `max_output` bytes.
pub fn wrap(script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Wrapped {
    let started = Instant::now();
    let left = deadline.saturating_duration_since(started);
    let seconds = left.as_secs_f64().ceil().max(1.0) as u64;
    let argv = ["sh", "-c", WRAPPER, "sh"]
        .into_iter()
        .map(String::from)
        .chain([seconds.to_string(), (max_output + 1).to_string(), cwd.to_string(), script.to_string()])
        .collect();
    Wrapped { argv, seconds, started, max_output }
}

impl Wrapped {
    /// The command's result from what the vendor returned: its exit status, its
    /// streams (the trailer still on stderr) and whether the vendor said it cut
    /// them.
    pub fn result(&self, exit_code: i32, stdout: Vec<u8>, stderr: Vec<u8>, incomplete: bool) -> Ran {
        let max_output = self.max_output;
        let elapsed = self.started.elapsed();
        let (stderr, trailer) = split_trailer(stderr);
        let sizes = trailer.as_ref().map(|t| t.sizes);
        let cut = |mut bytes: Vec<u8>, whole: Option<u64>| {
            let over = bytes.len() > max_output || whole.is_none_or(|w| w > max_output as u64);
            bytes.truncate(max_output);
            Output { bytes, truncated: over || incomplete }
        };
        let timed_out = exit_code == 137 && elapsed + Duration::from_millis(500) >= Duration::from_secs(self.seconds);
        let mut stderr = cut(stderr, sizes.map(|s| s.1));
        if exit_code == 137 && !timed_out && trailer.is_some_and(|t| t.oom_killed) {
            stderr.bytes.extend_from_slice(OOM_NOTE.as_bytes());
        }
        Ran {
            exit_code: if timed_out { EXIT_TIMEOUT } else { exit_code },
            timed_out,
            stdout: cut(stdout, sizes.map(|s| s.0)),
            stderr,
            duration_ms: u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX),
        }
    }
}

/// What the wrapper's trailer says.
#[derive(Debug, PartialEq, Eq)]
struct Trailer {
    /// The whole sizes of stdout and stderr.
    sizes: (u64, u64),
    /// Whether the kernel's count of OOM kills rose while the command ran.
    oom_killed: bool,
}

/// Splits the wrapper's trailer off the end of stderr: the stderr before it, and
/// the trailer (None when it is missing, as when the vendor's capture limit cut it).
fn split_trailer(stderr: Vec<u8>) -> (Vec<u8>, Option<Trailer>) {
    let marker = TRAILER.as_bytes();
    let Some(at) = stderr.windows(marker.len()).rposition(|w| w == marker) else { return (stderr, None) };
    let tail = String::from_utf8_lossy(&stderr[at + marker.len()..]).into_owned();
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let trailer = match fields.as_slice() {
        [_, out, err, before, after] if tail.ends_with('\n') => out.parse().ok().zip(err.parse().ok()).map(|sizes| {
            let count = |c: &str| c.parse::<u64>().ok();
            Trailer { sizes, oom_killed: matches!((count(before), count(after)), (Some(b), Some(a)) if a > b) }
        }),
        _ => None,
    };
    match trailer {
        Some(t) => (stderr[..at].to_vec(), Some(t)),
        None => (stderr, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_gives_the_sizes_and_the_oom_kills_and_leaves_the_rest() {
        let t = |out, err, oom_killed| Some(Trailer { sizes: (out, err), oom_killed });
        let (err, trailer) = split_trailer(b"oops\nplimsoll-exec 3 10 5 7 7\n".to_vec());
        assert_eq!((err, trailer), (b"oops".to_vec(), t(10, 5, false)));
        let (_, trailer) = split_trailer(b"\nplimsoll-exec 137 0 0 7 8\n".to_vec());
        assert_eq!(trailer, t(0, 0, true));
        let (_, trailer) = split_trailer(b"\nplimsoll-exec 137 0 0 - -\n".to_vec());
        assert_eq!(trailer, t(0, 0, false), "a kernel that does not count OOM kills names none");
        // A guest's fake trailer earlier on is the guest's text; the last one counts.
        let (err, trailer) = split_trailer(b"\nplimsoll-exec 0 1 1 0 9\nx\nplimsoll-exec 0 7 9 1 1\n".to_vec());
        assert_eq!((err, trailer), (b"\nplimsoll-exec 0 1 1 0 9\nx".to_vec(), t(7, 9, false)));
        let (err, trailer) = split_trailer(b"cut short\nplimsoll-exec 0 1".to_vec());
        assert_eq!((err, trailer), (b"cut short\nplimsoll-exec 0 1".to_vec(), None));
    }

    #[test]
    fn a_result_is_cut_to_its_cap_by_the_trailer_sizes_and_names_an_oom_kill() {
        let w = wrap("true", "/w", Instant::now() + Duration::from_secs(30), 4);
        assert_eq!(&w.argv[4..], ["30", "5", "/w", "true"]);
        let ran = w.result(0, b"12345".to_vec(), b"ab\nplimsoll-exec 0 9 2 - -\n".to_vec(), false);
        assert_eq!((ran.stdout.bytes.as_slice(), ran.stdout.truncated), (&b"1234"[..], true));
        assert_eq!((ran.stderr.bytes.as_slice(), ran.stderr.truncated), (&b"ab"[..], false));
        // No trailer: the sizes are unknown, so the streams are said to be cut.
        let ran = w.result(0, b"1".to_vec(), vec![], false);
        assert!(ran.stdout.truncated && ran.stderr.truncated);
        let ran = w.result(137, vec![], b"\nplimsoll-exec 137 0 0 3 4\n".to_vec(), false);
        assert_eq!((ran.exit_code, ran.timed_out), (137, false));
        assert_eq!(ran.stderr.bytes, OOM_NOTE.as_bytes());
    }
}
