#!/usr/bin/env python3
"""Writes deploy/seccomp/faultline-collector.json, the DaemonSet's seccomp
allowlist, from the systemd unit's SystemCallFilter= (the same sets, expanded
recursively with `systemd-analyze syscall-filter`), so both stay in step.
Run after editing the unit; tests/tests/unit_hardening.rs checks they agree."""
import json
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
UNIT = HERE.parent / "faultline-collector.service"


def expand(names, seen=None):
    seen = set() if seen is None else seen
    out = set()
    for n in names:
        if not n.startswith("@"):
            out.add(n)
            continue
        if n in seen:
            continue
        seen.add(n)
        text = subprocess.run(["systemd-analyze", "syscall-filter", n],
                              capture_output=True, text=True, check=True).stdout
        inner = [l.strip() for l in text.splitlines()[1:]
                 if l.strip() and not l.strip().startswith("#")]
        out |= expand(inner, seen)
    return out


allow, deny = [], []
for line in UNIT.read_text().splitlines():
    if line.startswith("SystemCallFilter="):
        v = line.split("=", 1)[1]
        (deny if v.startswith("~") else allow).extend(v.lstrip("~").split())
names = sorted(expand(allow) - expand(deny))
profile = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 1,
    "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "syscalls": [{"names": names, "action": "SCMP_ACT_ALLOW"}],
}
(HERE / "faultline-collector.json").write_text(json.dumps(profile, indent=1) + "\n")
print(f"{len(names)} system calls allowed")
