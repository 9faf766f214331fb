#!/usr/bin/python3 -I
"""plimsoll's smoke-test probe: runs once per image at startup, inside a locked-down
container, as the guest user. It only observes; the host-side plugin decides. It
prints one JSON object on stdout:

  root_write   the error text of writing at /, or "" if the write succeeded
  writable     every mount point where creating (dirs) or appending (files) worked
  mounts       {target: {"fstype", "options"}} from /proc/self/mountinfo
  exec_denied  {tmpfs target: true if running a written script there failed}
  interfaces   network interfaces seen in /sys/class/net
  uid, gid, euid, egid, groups
  pids_max     the pids cgroup limit, when visible in the container
  resolv       sha256 hex of /etc/resolv.conf
  no_new_privs whether the kernel (or gVisor's Sentry) holds no_new_privs for us
"""

import ctypes
import hashlib
import json
import os
import stat
import subprocess

SKIP = ("/proc", "/sys", "/dev/pts", "/dev/mqueue")


def mountinfo():
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fields = left.split()
            target = fields[4].replace("\\040", " ")
            fstype, _source, super_opts = right.split()[:3]
            opts = set(fields[5].split(",")) | set(super_opts.split(","))
            mounts[target] = {"fstype": fstype, "options": sorted(opts)}
    return mounts


def try_write(target):
    try:
        st = os.stat(target)
        if stat.S_ISDIR(st.st_mode):
            path = os.path.join(target, ".plimsoll-probe")
            with open(path, "wb") as f:
                f.write(b"x")
            os.unlink(path)
            return True
        if stat.S_ISREG(st.st_mode):
            with open(target, "ab"):
                pass
            return True
    except OSError:
        return False
    return False


def exec_denied(target):
    path = os.path.join(target, ".plimsoll-exec")
    try:
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(path, 0o700)
        subprocess.run([path], check=True)
        return False
    except OSError:
        return True
    except subprocess.CalledProcessError:
        return False
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def main():
    try:
        with open("/plimsoll-probe", "wb"):
            pass
        root_write = ""
    except OSError as e:
        root_write = e.strerror or str(e)
    mounts = mountinfo()
    writable = sorted(t for t in mounts if not t.startswith(SKIP) and try_write(t))
    pids_max = None
    for p in ("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"):
        try:
            with open(p) as f:
                pids_max = f.read().strip()
            break
        except OSError:
            pass
    try:
        interfaces = sorted(os.listdir("/sys/class/net"))
    except OSError:
        with open("/proc/net/dev") as f:
            interfaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    with open("/etc/resolv.conf", "rb") as f:
        resolv = hashlib.sha256(f.read()).hexdigest()
    # PR_GET_NO_NEW_PRIVS; gVisor holds the flag but does not list it in /proc/self/status.
    no_new_privs = ctypes.CDLL(None).prctl(39, 0, 0, 0, 0) == 1
    print(json.dumps({
        "root_write": root_write,
        "writable": writable,
        "mounts": mounts,
        "exec_denied": {t: exec_denied(t) for t in writable},
        "interfaces": interfaces,
        "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "egid": os.getegid(),
        "groups": os.getgroups(),
        "pids_max": pids_max,
        "resolv": resolv,
        "no_new_privs": no_new_privs,
    }))


if __name__ == "__main__":
    main()
