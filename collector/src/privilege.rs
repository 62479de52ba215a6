//! Privilege checks done before touching the kernel, so that a missing
//! capability is one clear line instead of an opaque `EPERM` from `bpf(2)`.
use std::fs;

/// Linux capability numbers used by the collector.
pub mod cap {
    pub const SYS_ADMIN: u32 = 21;
    pub const SYS_RESOURCE: u32 = 24;
    pub const DAC_READ_SEARCH: u32 = 2;
    pub const PERFMON: u32 = 38;
    pub const BPF: u32 = 39;
}

/// The kernel's BTF, which the probes' CO-RE relocations read.
pub const BTF_VMLINUX: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrivilegeError {
    #[error(
        "missing capability {missing}: the collector needs CAP_BPF and CAP_PERFMON (or root) to \
         load and attach eBPF probes; run it as root or grant them (e.g. systemd \
         AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_SYS_RESOURCE CAP_DAC_READ_SEARCH \
         CAP_SYS_PTRACE)"
    )]
    MissingCapability { missing: String },
    #[error(
        "this kernel does not expose BTF (/sys/kernel/btf/vmlinux missing); faultline's probes \
         need a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf,
}

/// Effective capability mask of this process (from `/proc/self/status`).
pub fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(0)
}

pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Checks that `caps` allow loading and attaching tracing programs.
/// CAP_SYS_ADMIN implies both CAP_BPF and CAP_PERFMON.
pub fn check_bpf_caps(caps: u64) -> Result<(), PrivilegeError> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(cap::SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&str> = [(cap::BPF, "CAP_BPF"), (cap::PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| n)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PrivilegeError::MissingCapability {
            missing: missing.join(" and "),
        })
    }
}

/// Everything the probes need from the host, checked up front.
pub fn check_host() -> Result<(), PrivilegeError> {
    check_bpf_caps(effective_caps())?;
    if !std::path::Path::new(BTF_VMLINUX).exists() {
        return Err(PrivilegeError::NoBtf);
    }
    Ok(())
}

/// Raises this process's RLIMIT_MEMLOCK soft limit to its hard limit
/// (unlimited with CAP_SYS_RESOURCE). Kernels before 5.11 charge BPF maps
/// to it, and a container's default (often 64 KiB or 8 MiB) is too small
/// for the probes' maps; newer kernels ignore it. Returns the soft limit now
/// in force (`u64::MAX` for unlimited).
pub fn raise_memlock() -> std::io::Result<u64> {
    let want = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid rlimit for the duration of the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) } != 0 {
        // Without CAP_SYS_RESOURCE: as far as the hard limit allows.
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut cur) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        cur.rlim_cur = cur.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &cur) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(if now.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        now.rlim_cur
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_eff_parsing_and_checks() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let caps = parse_cap_eff(status).unwrap();
        assert_eq!(caps, 0x1ff_ffff_ffff);
        assert_eq!(check_bpf_caps(caps), Ok(()));
        // Only CAP_BPF: CAP_PERFMON missing.
        let err = check_bpf_caps(1 << cap::BPF).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("missing capability CAP_PERFMON:"),
            "{err}"
        );
        let err = check_bpf_caps(0).unwrap_err();
        assert!(
            err.to_string().contains("CAP_BPF and CAP_PERFMON:"),
            "{err}"
        );
        assert_eq!(check_bpf_caps(1 << cap::SYS_ADMIN), Ok(()));
        assert_eq!(
            check_bpf_caps((1 << cap::BPF) | (1 << cap::PERFMON)),
            Ok(())
        );
    }
}
