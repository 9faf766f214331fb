//! Which daemon process made a container, so the next daemon can tell a crashed
//! one's leftovers from a live one's containers.
//!
//! Every container carries [`INSTANCE_LABEL`]: the maker's PID namespace, PID and
//! start time (clock ticks since boot, from `/proc/PID/stat`), and the boot ID. A
//! container whose maker shares this daemon's boot and PID namespace and no longer
//! runs (no such PID, or a PID reused by a process that started at another time)
//! is an orphan: the startup sweep removes it at once instead of waiting for its
//! lifetime label. A maker this daemon cannot see (another PID namespace, another
//! boot) is never judged; its containers go when their lifetime ends.

use std::path::{Path, PathBuf};

/// The label naming the daemon process that created a container.
pub const INSTANCE_LABEL: &str = "dev.plimsoll.instance";

/// One daemon process, as seen from `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The boot ID (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
    /// The PID namespace's inode.
    pub pid_ns: u64,
    /// The process ID in that namespace.
    pub pid: u32,
    /// The process's start time, in clock ticks since boot.
    pub started: u64,
}

/// Where the process facts are read: `/proc`, or a test's stand-in.
#[derive(Clone, Debug)]
pub struct Proc(PathBuf);

impl Default for Proc {
    fn default() -> Proc {
        Proc(PathBuf::from("/proc"))
    }
}

impl Proc {
    /// Reads process facts under `root` instead of `/proc`.
    pub fn at(root: &Path) -> Proc {
        Proc(root.to_path_buf())
    }

    fn start_time(&self, pid: &str) -> Option<u64> {
        let stat = std::fs::read_to_string(self.0.join(pid).join("stat")).ok()?;
        // The command name may hold spaces and parentheses; fields resume after the last `)`.
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(19)?.parse().ok()
    }

    fn pid_ns(&self) -> Option<u64> {
        let link = std::fs::read_link(self.0.join("self/ns/pid")).ok()?;
        link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
    }

    fn boot(&self) -> Option<String> {
        let id = std::fs::read_to_string(self.0.join("sys/kernel/random/boot_id")).ok()?;
        Some(id.trim().to_string()).filter(|b| !b.is_empty() && !b.contains(':'))
    }

    /// This process, or None where `/proc` does not say (then no container is
    /// labelled, and the sweep judges by lifetime alone).
    pub fn current(&self) -> Option<Instance> {
        Some(Instance {
            boot: self.boot()?,
            pid_ns: self.pid_ns()?,
            pid: std::process::id(),
            started: self.start_time("self")?,
        })
    }

    /// Whether `maker` has certainly ended, judged from `me`: false unless both
    /// share a boot and PID namespace.
    pub fn has_ended(&self, maker: &Instance, me: &Instance) -> bool {
        if maker.boot != me.boot || maker.pid_ns != me.pid_ns {
            return false;
        }
        if maker == me {
            return false;
        }
        self.start_time(&maker.pid.to_string()) != Some(maker.started)
    }
}

impl Instance {
    /// The label's value: `boot:pidns:pid:started`.
    pub fn label(&self) -> String {
        format!("{}:{}:{}:{}", self.boot, self.pid_ns, self.pid, self.started)
    }

    /// Reads a label's value; None for anything malformed (never judged).
    pub fn parse(label: &str) -> Option<Instance> {
        let mut parts = label.split(':');
        let instance = Instance {
            boot: parts.next().filter(|b| !b.is_empty())?.to_string(),
            pid_ns: parts.next()?.parse().ok()?,
            pid: parts.next()?.parse().ok()?,
            started: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_from_proc_and_its_label_round_trips() {
        let me = Proc::default().current().expect("this machine has /proc");
        assert_eq!(me.pid, std::process::id());
        assert_eq!(Instance::parse(&me.label()), Some(me.clone()));
        assert!(!Proc::default().has_ended(&me, &me), "this process runs");
    }

    #[test]
    fn a_maker_that_ended_or_whose_pid_was_reused_has_ended_and_others_are_not_judged() {
        let proc = Proc::default();
        let me = proc.current().expect("/proc");
        // A child that ran and was reaped: its PID no longer names it.
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        let started = proc.start_time(&pid.to_string());
        child.wait().expect("wait");
        let gone = Instance { pid, started: started.unwrap_or(1), ..me.clone() };
        assert!(proc.has_ended(&gone, &me));
        // A live PID with another start time is a reused PID: its maker ended.
        let reused = Instance { started: me.started + 1, ..me.clone() };
        assert!(proc.has_ended(&reused, &me));
        // Another boot or PID namespace: never judged, whatever its PID.
        assert!(!proc.has_ended(&Instance { boot: "other".into(), ..gone.clone() }, &me));
        assert!(!proc.has_ended(&Instance { pid_ns: me.pid_ns + 1, ..gone }, &me));
    }

    #[test]
    fn malformed_labels_are_never_judged() {
        for bad in ["", "a:1:2", "a:1:2:3:4", "a:x:2:3", ":1:2:3", "a:1:-2:3"] {
            assert_eq!(Instance::parse(bad), None, "{bad:?}");
        }
        let ok = Instance::parse("b1d0:4026531836:42:1234").expect("well formed");
        assert_eq!((ok.boot.as_str(), ok.pid_ns, ok.pid, ok.started), ("b1d0", 4026531836, 42, 1234));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_still_gives_the_start_time() {
        let root = std::env::temp_dir().join(format!("plimsoll-proc-{}", std::process::id()));
        std::fs::create_dir_all(root.join("77")).expect("mkdir");
        let fields: Vec<String> = (4..=52).map(|i| i.to_string()).collect();
        std::fs::write(root.join("77/stat"), format!("77 (a) b (c)) S {}", fields.join(" "))).expect("write");
        // Field 22 (start time) is the 20th after the state.
        assert_eq!(Proc::at(&root).start_time("77"), Some(22));
        std::fs::remove_dir_all(&root).expect("clean");
    }
}
