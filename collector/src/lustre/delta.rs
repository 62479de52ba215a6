//! From two reads of the client's targets to a window of per-target,
//! per-RPC-type deltas: wire rows (`NfsOp` with `fstype = "lustre"`),
//! console lines and the `faultline_lustre_*` families.
//!
//! A target is keyed by its client device (`lustrefs-OST0000-osc-ffff…`),
//! so two mounts of one file system are two sets of targets. A device whose
//! counters went backwards (unmounted and mounted again between reads) has
//! no delta that window: counted in `faultline_lustre_resets_total`, and
//! the new values are the base ([`crate::cumulative`], shared with NFS).
use proto::v1 as pb;

use super::parse::{Import, RpcStat, Stats};
use crate::{
    cumulative::{inc, Tracker},
    prom_text::Text,
};

use proto::metric::Family;

pub const LUSTRE_TARGETS: Family = Family::gauge(
    "faultline_lustre_targets",
    &[],
    "Lustre client targets (OSC/MDC devices) tracked",
);
pub const LUSTRE_RPC_OPERATIONS: Family = Family::counter(
    "faultline_lustre_rpc_operations_total",
    &["fsname", "target", "mountpoint", "op"],
    "Lustre RPCs completed, per target and RPC type",
);
pub const LUSTRE_RPC_SECONDS: Family = Family::counter(
    "faultline_lustre_rpc_seconds_total",
    &["fsname", "target", "mountpoint", "op"],
    "Sum of Lustre RPC times (request sent to reply), per target and RPC type",
);
pub const LUSTRE_IMPORT_FULL: Family = Family::gauge(
    "faultline_lustre_import_full",
    &["fsname", "target", "mountpoint", "state", "nid"],
    "1 when the target's import is FULL (connected and serving), else 0; the state and server NID as labels",
);
pub const LUSTRE_IMPORT_TIMEOUTS: Family = Family::counter(
    "faultline_lustre_import_timeouts_total",
    &["fsname", "target", "mountpoint"],
    "Lustre RPCs to the target that timed out",
);
pub const LUSTRE_IMPORT_CONNECTS: Family = Family::counter(
    "faultline_lustre_import_connects_total",
    &["fsname", "target", "mountpoint"],
    "Connection attempts of the target's import (a rise after the first is a reconnection)",
);

pub const LUSTRE_TARGETS_DROPPED: Family = Family::counter(
    "faultline_lustre_targets_dropped_total",
    &[],
    "Lustre client targets past lustre.max_targets, not tracked (per read)",
);
pub const LUSTRE_RESETS: Family = Family::counter(
    "faultline_lustre_resets_total",
    &[],
    "Lustre target windows left out because their counters went back (remount)",
);
pub const LUSTRE_MALFORMED_LINES: Family = Family::counter(
    "faultline_lustre_malformed_lines_total",
    &[],
    "Lustre stats lines without their expected form, skipped",
);

/// The families above, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Family] = &[
    &LUSTRE_TARGETS_DROPPED,
    &LUSTRE_RESETS,
    &LUSTRE_MALFORMED_LINES,
    &LUSTRE_TARGETS,
    &LUSTRE_RPC_OPERATIONS,
    &LUSTRE_RPC_SECONDS,
    &LUSTRE_IMPORT_FULL,
    &LUSTRE_IMPORT_TIMEOUTS,
    &LUSTRE_IMPORT_CONNECTS,
];

/// One client device's latest read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The device directory (`lustrefs-OST0000-osc-ffff88105db50000`).
    pub device: String,
    pub fsname: String,
    /// `lustrefs-OST0000`.
    pub target: String,
    /// The file system's mount point, else the client instance.
    pub mountpoint: String,
    pub stats: Stats,
    /// `None` when the device has no readable import file.
    pub import: Option<Import>,
}

/// What one window found, besides its rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    pub targets: usize,
    pub resets: u64,
}

#[derive(Debug)]
pub struct LustreTracker {
    /// The latest read's devices, in name order.
    targets: Tracker<String, Target>,
    pub(super) dropped_total: u64,
    malformed_total: u64,
}

/// The device's rows for the RPC types that completed in the window;
/// `None` when a counter went back.
fn target_rows(cur: &Target, prev: &Target) -> Option<Vec<pb::NfsOp>> {
    let (timeouts, reconnects) = match (&cur.import, &prev.import) {
        (Some(c), Some(p)) => (
            inc(c.timeouts, p.timeouts)?,
            inc(c.connection_attempts, p.connection_attempts)?,
        ),
        _ => (0, 0),
    };
    let nid = cur.import.as_ref().map_or("", |i| i.nid.as_str());
    let row = |op: &str, d: RpcStat| pb::NfsOp {
        server: cur.target.clone(),
        export: cur.fsname.clone(),
        mountpoint: cur.mountpoint.clone(),
        fstype: "lustre".into(),
        op: op.to_string(),
        ops: d.samples,
        timeouts,
        rtt_ms_sum: d.sum_us / 1000,
        reconnects,
        nid: nid.to_string(),
        ..Default::default()
    };
    let mut rows = Vec::new();
    for (name, c) in &cur.stats.rpcs {
        let p = prev.stats.rpcs.get(name).copied().unwrap_or_default();
        let d = RpcStat {
            samples: inc(c.samples, p.samples)?,
            sum_us: inc(c.sum_us, p.sum_us)?,
        };
        if d.samples > 0 {
            rows.push(row(name, d));
        }
    }
    inc(cur.stats.wait.samples, prev.stats.wait.samples)?;
    if rows.is_empty() && (timeouts > 0 || reconnects > 0) {
        // No RPC completed, but the import timed out or reconnected.
        rows.push(row("import", RpcStat::default()));
    }
    Some(rows)
}

impl Default for LustreTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl LustreTracker {
    pub fn new() -> Self {
        Self {
            targets: Tracker::new(),
            dropped_total: 0,
            malformed_total: 0,
        }
    }

    /// A new read: the window's rows (none for a device seen for the first
    /// time, whose counters are the base) and what it counted.
    pub fn update(&mut self, read: Vec<Target>) -> (Vec<pb::NfsOp>, WindowCounts) {
        self.malformed_total += read.iter().map(|t| t.stats.malformed).sum::<u64>();
        let read = read.into_iter().map(|t| (t.device.clone(), t));
        let (rows, resets) = self.targets.update(read, target_rows);
        let counts = WindowCounts {
            targets: self.targets.len(),
            resets,
        };
        (rows, counts)
    }

    /// The exposition of the latest read: cumulative counters per target
    /// and RPC type, the import's state, and the tracker's own counters.
    pub fn render(&self) -> String {
        let mut t = Text::new();
        for x in self.targets.latest() {
            render_target(&mut t, x);
        }
        t.add(&LUSTRE_TARGETS, &[], self.targets.latest().count());
        t.add(&LUSTRE_TARGETS_DROPPED, &[], self.dropped_total);
        t.add(&LUSTRE_RESETS, &[], self.targets.resets_total());
        t.add(&LUSTRE_MALFORMED_LINES, &[], self.malformed_total);
        t.render()
    }
}

fn render_target(t: &mut Text, x: &Target) {
    let base = [
        ("fsname", x.fsname.as_str()),
        ("target", x.target.as_str()),
        ("mountpoint", x.mountpoint.as_str()),
    ];
    for (op, s) in x.stats.rpcs.iter().filter(|(_, s)| s.samples > 0) {
        let l = [base[0], base[1], base[2], ("op", op.as_str())];
        t.add(&LUSTRE_RPC_OPERATIONS, &l, s.samples);
        t.add(&LUSTRE_RPC_SECONDS, &l, s.sum_us as f64 / 1e6);
    }
    let Some(i) = &x.import else {
        return;
    };
    let full = u8::from(i.state == "FULL");
    let l = [
        base[0],
        base[1],
        base[2],
        ("state", i.state.as_str()),
        ("nid", i.nid.as_str()),
    ];
    t.add(&LUSTRE_IMPORT_FULL, &l, full);
    t.add(&LUSTRE_IMPORT_TIMEOUTS, &base, i.timeouts);
    t.add(&LUSTRE_IMPORT_CONNECTS, &base, i.connection_attempts);
}

/// One console line per target and RPC type with RPCs in the window.
pub fn line(r: &pb::NfsOp) -> String {
    let mean = if r.ops > 0 {
        r.rtt_ms_sum as f64 / r.ops as f64
    } else {
        0.0
    };
    format!(
        "lustre {} ({}) on {} via {} {} ops={} rpc={:.2}ms timeouts={}{}",
        r.server,
        r.export,
        r.mountpoint,
        if r.nid.is_empty() { "?" } else { &r.nid },
        r.op,
        r.ops,
        mean,
        r.timeouts,
        if r.reconnects > 0 {
            format!(" reconnects={}", r.reconnects)
        } else {
            String::new()
        }
    )
}
