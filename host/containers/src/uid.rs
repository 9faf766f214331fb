//! Which uid a guest may run as. The guest must never be root, never share an id
//! with anything on the host (a uid that owns host files or a group that grants host
//! access would make a container escape worse), and never collide with the bands
//! systemd assigns dynamically, where a host service may appear later.

/// The guest uid (and gid) used when the operator sets none.
pub const DEFAULT_GUEST_UID: u32 = 61000;

/// systemd's dynamically assigned ranges (`DynamicUser=`, container uid ranges,
/// `systemd-homed`), inclusive.
const SYSTEMD_BANDS: [(u32, u32); 3] = [(60001, 60513), (60578, 60705), (61184, 65519)];

/// Checks a guest uid against the rules, given the host's `/etc/passwd` and
/// `/etc/group` contents. `uid + 1` must be free as well, since some images create
/// a second account next to the first.
///
/// # Errors
///
/// The rule the uid breaks, in words that name the fix (`SANDBOX_DOCKER_GUEST_UID`).
pub fn check_guest_uid(uid: u32, passwd: &str, group: &str) -> Result<(), String> {
    if !(1..=65532).contains(&uid) {
        return Err(format!("guest uid {uid} is outside 1..=65532; set SANDBOX_DOCKER_GUEST_UID to another id"));
    }
    for id in [uid, uid + 1] {
        if let Some((lo, hi)) = SYSTEMD_BANDS.iter().find(|(lo, hi)| (*lo..=*hi).contains(&id)) {
            return Err(format!(
                "guest uid {uid}: {id} is in systemd's dynamic range {lo}-{hi}; set SANDBOX_DOCKER_GUEST_UID to another id"
            ));
        }
        if let Some(name) = owner(passwd, id) {
            return Err(format!(
                "guest uid {uid}: {id} is the host user {name:?} in /etc/passwd; set SANDBOX_DOCKER_GUEST_UID to an unused id"
            ));
        }
        if let Some(name) = owner(group, id) {
            return Err(format!(
                "guest uid {uid}: {id} is the host group {name:?} in /etc/group; set SANDBOX_DOCKER_GUEST_UID to an unused id"
            ));
        }
    }
    Ok(())
}

/// The name of the entry whose third field (uid or gid) is `id`.
fn owner(db: &str, id: u32) -> Option<&str> {
    db.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let num = fields.nth(1)?;
        (num.parse::<u32>().ok()? == id).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:\ndocker:x:998:alice\n";

    #[test]
    fn the_default_is_accepted() {
        assert_eq!(check_guest_uid(DEFAULT_GUEST_UID, PASSWD, GROUP), Ok(()));
    }

    #[test]
    fn root_and_out_of_range_ids_are_refused() {
        for uid in [0, 65533, 70000] {
            let err = check_guest_uid(uid, PASSWD, GROUP).expect_err("must fail");
            assert!(err.contains("outside 1..=65532"), "{err}");
        }
    }

    #[test]
    fn systemd_bands_are_refused_including_the_next_id() {
        let err = check_guest_uid(60001, PASSWD, GROUP).expect_err("must fail");
        assert!(err.contains("dynamic range 60001-60513"), "{err}");
        let err = check_guest_uid(61183, PASSWD, GROUP).expect_err("must fail");
        assert!(err.contains("61184 is in systemd's dynamic range 61184-65519"), "{err}");
    }

    #[test]
    fn host_users_and_groups_are_refused() {
        let err = check_guest_uid(1000, PASSWD, GROUP).expect_err("must fail");
        assert!(err.contains("host user \"alice\""), "{err}");
        let err = check_guest_uid(997, PASSWD, GROUP).expect_err("must fail");
        assert!(err.contains("998 is the host group \"docker\""), "{err}");
    }
}
