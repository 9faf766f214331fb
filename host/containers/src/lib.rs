//! The container engine as plimsoll's host uses it on a plugin's behalf.
//!
//! [`lockdown`] is the wall: every container a plugin asks for is turned into an
//! engine create body by the host, and that final body is checked against each
//! lockdown invariant before it reaches the engine; a body that breaks one is
//! refused with the invariant named. [`engine`] talks to the local docker engine
//! only (a remote `DOCKER_HOST` is refused), [`uid`] holds the guest-uid rules, and
//! [`smoke`] and [`startup`] prove the whole wall before the first run.

pub mod engine;
pub mod instance;
pub mod lockdown;
pub mod pool;
pub mod resident;
pub mod smoke;
pub mod startup;
pub mod uid;
pub mod watch;

/// The seccomp profile applied under runc (`images/seccomp.json`): deny by default,
/// an allowlist of what interpreters and build tools need. Documented, with its
/// denial table, in `images/README.md`.
pub const SECCOMP_PROFILE: &str = include_str!("../../../images/seccomp.json");

pub use engine::{Engine, EngineError, ExecOutcome, ImageFacts, Inspection, Ours};
pub use engine::{Launched, Reaper};
pub use lockdown::{BROKER_TARGET, BrokerMount, Ceilings, Lockdown, Spec, Tmpfs, Violation, broker_root};
pub use pool::{PoolStats, WarmPool};
pub use resident::{Reply, ReplyEnd, Resident};
pub use watch::{Stamp, Watch};

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The syscalls `images/README.md` promises are denied, read from its table
    /// (rows of `| name | why |` between the denial markers).
    fn documented_denials() -> Vec<String> {
        let doc = include_str!("../../../images/README.md");
        let table = doc
            .split("<!-- denied:begin -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- denied:end -->").next())
            .expect("images/README.md has the denial table markers");
        table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .flat_map(|l| l.split('|').next().unwrap_or("").split(", ").map(|n| n.trim().trim_matches('`').to_string()))
            .filter(|n| !n.is_empty())
            .collect()
    }

    #[test]
    fn the_profile_denies_by_default_and_every_documented_denial_holds() {
        let p: serde_json::Value = serde_json::from_str(super::SECCOMP_PROFILE).expect("profile is JSON");
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], 1);
        let mut unconditional = BTreeSet::new();
        let mut conditional = BTreeSet::new();
        for rule in p["syscalls"].as_array().expect("syscalls") {
            let allow = rule["action"] == "SCMP_ACT_ALLOW";
            for n in rule["names"].as_array().expect("names") {
                let n = n.as_str().expect("name").to_string();
                match (allow, rule.get("args").is_some()) {
                    (true, false) => unconditional.insert(n),
                    (true, true) => conditional.insert(n),
                    (false, _) => false,
                };
            }
        }
        let denied = documented_denials();
        assert!(denied.len() >= 30, "the table lists {} names", denied.len());
        for name in &denied {
            assert!(!unconditional.contains(name), "{name} is documented as denied but allowed");
            assert!(!conditional.contains(name), "{name} is documented as denied but allowed with a condition");
        }
        for name in ["socket", "socketpair", "personality", "mknod", "mknodat", "clone"] {
            assert!(conditional.contains(name) && !unconditional.contains(name), "{name} must be argument-filtered");
        }
    }
}
