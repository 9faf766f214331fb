//! The host's startup proof, per image and runtime: a throwaway locked-down
//! container runs `runners/probe/probe.py` and the host compares what it saw with
//! what the lockdown promised. Any difference refuses startup, naming the check.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::engine::{Engine, ImageFacts};
use crate::lockdown::{Lockdown, Spec, Tmpfs, is_loader_variable};

/// The resolver file every container sees, bound read-only from the host.
pub const RESOLV_CONF: &[u8] = include_bytes!("../../../images/resolv.conf");

/// The probe's path inside plimsoll's images.
pub const PROBE: &str = "/opt/plimsoll/probe.py";

/// Limits the probe container runs with; the checks compare against them.
const PROBE_PIDS: u32 = 64;
const PROBE_TMPFS: [(&str, u32); 3] = [("/tmp", 16), ("/dev/shm", 8), ("/work", 32)];

#[derive(Debug, Deserialize)]
struct Mount {
    fstype: String,
    options: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Observed {
    root_write: String,
    writable: Vec<String>,
    mounts: std::collections::BTreeMap<String, Mount>,
    exec_denied: std::collections::BTreeMap<String, bool>,
    interfaces: Vec<String>,
    uid: u32,
    gid: u32,
    euid: u32,
    egid: u32,
    groups: Vec<u32>,
    pids_max: Option<String>,
    resolv: String,
    no_new_privs: bool,
}

/// Checks an image's static facts: no `VOLUME` (an anonymous volume would bypass
/// the read-only root and the size caps) and no loader variables in its env.
///
/// # Errors
///
/// What is wrong with the image, naming it.
pub fn check_image(name: &str, facts: &ImageFacts) -> Result<(), String> {
    if !facts.volumes.is_empty() {
        return Err(format!(
            "image {name} ({}) declares VOLUME {:?}; anonymous volumes would bypass the read-only root, so it is refused",
            facts.id, facts.volumes
        ));
    }
    if let Some(var) = facts.env.iter().find(|kv| is_loader_variable(kv.split('=').next().unwrap_or(""))) {
        return Err(format!("image {name} ({}) sets {var:?}, which the dynamic loader reads; it is refused", facts.id));
    }
    Ok(())
}

/// Runs the probe in `image_id` under `runtime` and checks every promise.
///
/// # Errors
///
/// `smoke test (<runtime>, <image>): <check>: <what was seen>`.
pub async fn prove(
    engine: &Engine,
    lockdown: &Lockdown,
    image_id: &str,
    runtime: &str,
    now_unix: u64,
) -> Result<(), String> {
    let fail = |check: &str, seen: String| format!("smoke test ({runtime}, {image_id}): {check}: {seen}");
    let spec = Spec {
        image_id: image_id.into(),
        runtime: runtime.into(),
        user: lockdown.guest_uid,
        memory_mb: 128,
        cpus_milli: 1000,
        pids: PROBE_PIDS,
        tmpfs: PROBE_TMPFS.iter().map(|(t, s)| Tmpfs { target: (*t).into(), size_mb: *s }).collect(),
        workdir: "/work".into(),
        command: ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "/usr/bin/python3", "-I", PROBE]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        labels: Vec::new(),
        lifetime_s: 600,
        broker: None,
    };
    let id = engine.create(lockdown, &spec, now_unix).await.map_err(|e| fail("create", e.to_string()))?;
    let outcome = async {
        let started = engine.start(&id, Vec::new(), 1 << 20).await.map_err(|e| fail("start", e.to_string()))?;
        let out =
            engine.wait(&id, started, Duration::from_secs(120), None).await.map_err(|e| fail("run", e.to_string()))?;
        let inspected = engine.inspect(&id).await.map_err(|e| fail("inspect", e.to_string()))?;
        Ok::<_, String>((out, inspected))
    }
    .await;
    let _ = engine.remove(&id).await;
    let (out, inspected) = outcome?;
    if out.exit_code != Some(0) {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        return Err(fail("probe", format!("exit {:?}, stderr {err:?}", out.exit_code)));
    }
    let seen: Observed = serde_json::from_slice(&out.stdout).map_err(|e| fail("probe output", e.to_string()))?;
    check(&seen, lockdown.guest_uid, inspected.pids, runtime == "runsc").map_err(|(c, s)| fail(c, s))
}

/// `gvisor`: gVisor reports tmpfs sizes in MiB and does not list `nosuid` on its
/// tmpfs mounts; there, no_new_privs (checked for every runtime) is what keeps a
/// set-uid file from raising privileges.
fn check(seen: &Observed, uid: u32, inspected_pids: u32, gvisor: bool) -> Result<(), (&'static str, String)> {
    if seen.root_write.is_empty() {
        return Err(("read-only root", "a file could be created at /".into()));
    }
    if !seen.no_new_privs {
        return Err(("no-new-privileges", "NoNewPrivs is not set for the guest".into()));
    }
    let promised: BTreeSet<&str> = PROBE_TMPFS.iter().map(|(t, _)| *t).collect();
    let writable: BTreeSet<&str> = seen.writable.iter().map(String::as_str).collect();
    if writable != promised {
        return Err(("writable mounts", format!("writes succeeded at {writable:?}, promised only {promised:?}")));
    }
    for (target, size_mb) in PROBE_TMPFS {
        let m = seen.mounts.get(target).ok_or(("tmpfs", format!("{target} is not mounted")))?;
        let opts: BTreeSet<&str> = m.options.iter().map(String::as_str).collect();
        let size = format!("size={}k", size_mb * 1024);
        let size_ok = opts.contains(size.as_str()) || (gvisor && opts.contains(format!("size={size_mb}m").as_str()));
        let nosuid_ok = opts.contains("nosuid") || gvisor;
        if m.fstype != "tmpfs" || !opts.contains("noexec") || !nosuid_ok || !size_ok {
            return Err((
                "tmpfs",
                format!("{target} is {} {:?}, promised tmpfs noexec,nosuid,{size}", m.fstype, m.options),
            ));
        }
        if seen.exec_denied.get(target) != Some(&true) {
            return Err(("noexec", format!("a script written to {target} could be executed")));
        }
    }
    if seen.interfaces != ["lo"] {
        return Err(("network", format!("interfaces {:?}, promised only lo", seen.interfaces)));
    }
    let ids = [seen.uid, seen.gid, seen.euid, seen.egid];
    if ids.iter().any(|&i| i != uid) || seen.groups.iter().any(|&g| g != uid) {
        return Err(("guest ids", format!("uid/gid/euid/egid {ids:?} groups {:?}, promised {uid}", seen.groups)));
    }
    match &seen.pids_max {
        Some(p) if *p != PROBE_PIDS.to_string() => {
            return Err(("pids limit", format!("pids.max is {p}, promised {PROBE_PIDS}")));
        }
        // Under gVisor the cgroup file is not visible inside; the engine's read-back stands in.
        None if inspected_pids != PROBE_PIDS => {
            return Err(("pids limit", format!("the engine reports {inspected_pids}, promised {PROBE_PIDS}")));
        }
        _ => {}
    }
    let ours = hex_sha256(RESOLV_CONF);
    if seen.resolv != ours {
        return Err(("resolv.conf", format!("sha256 {} is not plimsoll's {ours}", seen.resolv)));
    }
    Ok(())
}

fn hex_sha256(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Observed {
        let mounts = PROBE_TMPFS
            .iter()
            .map(|(t, s)| {
                let options =
                    ["rw", "nosuid", "nodev", "noexec", &format!("size={}k", s * 1024)].map(String::from).to_vec();
                (t.to_string(), Mount { fstype: "tmpfs".into(), options })
            })
            .collect();
        Observed {
            root_write: "Read-only file system".into(),
            writable: PROBE_TMPFS.iter().map(|(t, _)| t.to_string()).collect(),
            mounts,
            exec_denied: PROBE_TMPFS.iter().map(|(t, _)| (t.to_string(), true)).collect(),
            interfaces: vec!["lo".into()],
            uid: 61000,
            gid: 61000,
            euid: 61000,
            egid: 61000,
            groups: vec![],
            pids_max: Some("64".into()),
            resolv: hex_sha256(RESOLV_CONF),
            no_new_privs: true,
        }
    }

    fn failed(change: impl FnOnce(&mut Observed)) -> &'static str {
        let mut o = good();
        change(&mut o);
        check(&o, 61000, 64, false).expect_err("must fail").0
    }

    #[test]
    fn a_faithful_observation_passes() {
        assert_eq!(check(&good(), 61000, 64, false), Ok(()));
    }

    #[test]
    fn each_broken_promise_is_named() {
        assert_eq!(failed(|o| o.root_write.clear()), "read-only root");
        assert_eq!(failed(|o| o.writable.push("/etc/hosts".into())), "writable mounts");
        assert_eq!(failed(|o| o.mounts.get_mut("/tmp").expect("tmp").options.retain(|x| x != "noexec")), "tmpfs");
        assert_eq!(failed(|o| o.mounts.get_mut("/work").expect("work").options[4] = "size=1k".into()), "tmpfs");
        assert_eq!(failed(|o| *o.exec_denied.get_mut("/dev/shm").expect("shm") = false), "noexec");
        assert_eq!(failed(|o| o.interfaces.push("eth0".into())), "network");
        assert_eq!(failed(|o| o.uid = 0), "guest ids");
        assert_eq!(failed(|o| o.groups.push(0)), "guest ids");
        assert_eq!(failed(|o| o.pids_max = Some("max".into())), "pids limit");
        assert_eq!(failed(|o| o.resolv = "0".repeat(64)), "resolv.conf");
        let mut o = good();
        o.pids_max = None;
        assert_eq!(check(&o, 61000, 64, false), Ok(()));
        assert_eq!(check(&o, 61000, 0, false).expect_err("read-back").0, "pids limit");
        assert_eq!(failed(|o| o.no_new_privs = false), "no-new-privileges");
    }

    #[test]
    fn gvisor_reports_sizes_in_mib_and_omits_nosuid() {
        let mut o = good();
        for (t, s) in PROBE_TMPFS {
            o.mounts.get_mut(t).expect("mount").options =
                ["rw", "noexec", &format!("size={s}m")].map(String::from).to_vec();
        }
        assert_eq!(check(&o, 61000, 64, true), Ok(()));
        assert_eq!(check(&o, 61000, 64, false).expect_err("runc must list nosuid").0, "tmpfs");
        o.mounts.get_mut("/tmp").expect("tmp").options.retain(|x| x != "noexec");
        assert_eq!(check(&o, 61000, 64, true).expect_err("noexec").0, "tmpfs");
    }

    #[test]
    fn images_with_volumes_or_loader_variables_are_refused() {
        let facts = |volumes: Vec<&str>, env: Vec<&str>| ImageFacts {
            id: "sha256:x".into(),
            volumes: volumes.into_iter().map(String::from).collect(),
            env: env.into_iter().map(String::from).collect(),
            platform: "linux/amd64".into(),
        };
        assert_eq!(check_image("i", &facts(vec![], vec!["PATH=/bin"])), Ok(()));
        assert!(check_image("i", &facts(vec!["/data"], vec![])).expect_err("must fail").contains("declares VOLUME"));
        assert!(
            check_image("i", &facts(vec![], vec!["LD_PRELOAD=/x.so"]))
                .expect_err("must fail")
                .contains("\"LD_PRELOAD=/x.so\"")
        );
        assert_eq!(
            check_image("i", &facts(vec![], vec!["GLIBC_TUNABLES=x"])).expect_err("tunables"),
            "image i (sha256:x) sets \"GLIBC_TUNABLES=x\", which the dynamic loader reads; it is refused"
        );
    }
}
