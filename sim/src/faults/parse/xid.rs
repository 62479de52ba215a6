//! Parameters of the kernel-log XID and SXid kinds
//! ([`crate::cluster::xid`]).
use anyhow::Result;

use super::Given;
use crate::faults::Kind;

/// The kernel-log XID and SXid kinds ([`crate::cluster::xid`]).
pub(super) fn xid_kind_of(kname: &str, g: &Given) -> Result<Kind> {
    let whole = |k: &str, lo: f64, hi: f64, what: &str| -> Result<u32> {
        Ok(g.checked(k, |v| v >= lo && v <= hi && v.fract() == 0.0, what)? as u32)
    };
    let xid = || {
        whole(
            "code",
            1.0,
            1023.0,
            "must be an XID code (a whole number in 1..=1023)",
        )
    };
    let span = |k: &str| {
        g.checked(
            k,
            |s| (1.0..=86_400.0).contains(&s),
            "must be seconds in 1..=86400",
        )
    };
    Ok(match kname {
        "xid-crash-loop" => Kind::XidCrashLoop {
            code: xid()?,
            crashes: whole(
                "crashes",
                1.0,
                10_000.0,
                "must be a whole number of crashes in 1..=10000",
            )?,
            span_s: span("span")?,
        },
        "xid-bad-gpu" => Kind::XidBadGpu {
            code: xid()?,
            jobs: whole(
                "jobs",
                1.0,
                100.0,
                "must be a whole number of jobs in 1..=100",
            )?,
            gap_s: span("gap")?,
        },
        "nvswitch-sxid" => Kind::NvswitchSxid {
            code: whole(
                "code",
                1.0,
                99_999.0,
                "must be an SXid code (a whole number in 1..=99999)",
            )?,
            switch: whole(
                "switch",
                0.0,
                (crate::cluster::xid::NVSWITCHES - 1) as f64,
                "must be an NVSwitch of the tray, 0..=3",
            )? as usize,
        },
        "xid-burst" => Kind::XidBurst {
            code: xid()?,
            lines: whole(
                "lines",
                1.0,
                1_000_000.0,
                "must be a whole number of lines in 1..=1000000",
            )?,
            folded: whole(
                "folded",
                0.0,
                1.0,
                "must be 1 (folded as the collector sends them) or 0 (each line an event)",
            )? == 1,
        },
        _ => Kind::XidCancelledJobs {
            jobs: whole(
                "jobs",
                1.0,
                100_000.0,
                "must be a whole number of jobs in 1..=100000",
            )?,
            span_s: span("span")?,
        },
    })
}
