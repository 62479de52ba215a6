//! From two parses of mountstats to a window of per-mount, per-procedure
//! deltas: wire rows, console lines and the Prometheus families.
//!
//! A mount is keyed by (device, mount point). The same superblock seen at
//! a second mount point (a bind mount, or a container's view of the host's
//! mount) carries the same counters: it is counted once, at its first
//! mount point. At most `max_mounts` mounts are tracked (in file order);
//! the rest are counted in `faultline_nfs_mounts_dropped_total`. A mount
//! whose counters went backwards (unmounted and mounted again between two
//! reads) has no delta that window: its window is unknown, counted in
//! `faultline_nfs_resets_total`, and the new values are the base
//! ([`crate::cumulative`], shared with Lustre).
use proto::v1 as pb;

use super::parse::{Mount, OpStats, Parsed};
use crate::{
    cumulative::{inc, Tracker},
    prom_text::Text,
};

use proto::metric::Family;

pub const NFS_MOUNTS: Family = Family::gauge(
    "faultline_nfs_mounts",
    &[],
    "NFS mounts tracked from mountstats",
);
pub const NFS_TRANSPORT_CONNECTS: Family = Family::counter(
    "faultline_nfs_transport_connects_total",
    &["server", "export", "mountpoint"],
    "TCP connections the mount's transports made (a rise after the first is a reconnection)",
);

pub const NFS_MOUNTS_DROPPED: Family = Family::counter(
    "faultline_nfs_mounts_dropped_total",
    &[],
    "NFS mounts past nfs.max_mounts, not tracked (per read)",
);
pub const NFS_RESETS: Family = Family::counter(
    "faultline_nfs_resets_total",
    &[],
    "NFS mount windows left out because their counters went back (remount)",
);
pub const NFS_MALFORMED_LINES: Family = Family::counter(
    "faultline_nfs_malformed_lines_total",
    &[],
    "mountstats lines of NFS mounts without their expected form, skipped",
);
const OP: &[&str] = &["server", "export", "mountpoint", "op"];
pub const NFS_RPC_OPERATIONS: Family = Family::counter(
    "faultline_nfs_rpc_operations_total",
    OP,
    "NFS RPCs completed, per mount and procedure",
);
pub const NFS_RPC_RETRANSMISSIONS: Family = Family::counter(
    "faultline_nfs_rpc_retransmissions_total",
    OP,
    "NFS RPC transmissions beyond the first, per mount and procedure",
);
pub const NFS_RPC_MAJOR_TIMEOUTS: Family = Family::counter(
    "faultline_nfs_rpc_major_timeouts_total",
    OP,
    "NFS RPC major timeouts, per mount and procedure",
);
pub const NFS_RPC_RTT_SECONDS: Family = Family::counter(
    "faultline_nfs_rpc_rtt_seconds_total",
    OP,
    "Sum of NFS RPC round-trip times (request sent to reply), per mount and procedure",
);
pub const NFS_RPC_EXECUTE_SECONDS: Family = Family::counter(
    "faultline_nfs_rpc_execute_seconds_total",
    OP,
    "Sum of NFS RPC execution times (submitted to completed, queueing and retransmits included), per mount and procedure",
);
pub const NFS_RPC_BYTES: Family = Family::counter(
    "faultline_nfs_rpc_bytes_total",
    &["server", "export", "mountpoint", "op", "direction"],
    "NFS RPC bytes sent and received (direction), per mount and procedure",
);

/// The families above, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Family] = &[
    &NFS_MOUNTS,
    &NFS_TRANSPORT_CONNECTS,
    &NFS_MOUNTS_DROPPED,
    &NFS_RESETS,
    &NFS_MALFORMED_LINES,
    &NFS_RPC_OPERATIONS,
    &NFS_RPC_RETRANSMISSIONS,
    &NFS_RPC_MAJOR_TIMEOUTS,
    &NFS_RPC_RTT_SECONDS,
    &NFS_RPC_EXECUTE_SECONDS,
    &NFS_RPC_BYTES,
];

type Key = (String, String);

/// What one window found, besides its rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Mounts tracked this window.
    pub mounts: usize,
    /// Mounts past `max_mounts`, not tracked.
    pub dropped: u64,
    /// Mounts whose counters went back: no delta this window.
    pub resets: u64,
    /// Second mount points of a tracked superblock, counted once.
    pub duplicates: u64,
}

/// Deltas between successive parses, bounded to `max_mounts` mounts.
#[derive(Debug)]
pub struct NfsTracker {
    max_mounts: usize,
    /// The latest parse's tracked mounts, in file order.
    mounts: Tracker<Key, Mount>,
    dropped_total: u64,
    malformed_total: u64,
}

/// One procedure's window; `None` when a cumulative counter went back.
fn op_delta(c: &OpStats, p: &OpStats) -> Option<OpStats> {
    Some(OpStats {
        ops: inc(c.ops, p.ops)?,
        transmissions: inc(c.transmissions, p.transmissions)?,
        timeouts: inc(c.timeouts, p.timeouts)?,
        bytes_sent: inc(c.bytes_sent, p.bytes_sent)?,
        bytes_recv: inc(c.bytes_recv, p.bytes_recv)?,
        // The queue time is a sum of signed intervals in the kernel (a
        // negative one prints as a huge unsigned value): never a reset.
        queue_ms: c.queue_ms.saturating_sub(p.queue_ms),
        rtt_ms: inc(c.rtt_ms, p.rtt_ms)?,
        execute_ms: inc(c.execute_ms, p.execute_ms)?,
        errors: match (c.errors, p.errors) {
            (Some(a), Some(b)) => Some(inc(a, b)?),
            _ => None,
        },
    })
}

/// The mount's rows for the procedures that completed RPCs (or timed out)
/// in the window; `None` when any counter went back.
fn mount_rows(cur: &Mount, prev: &Mount) -> Option<Vec<pb::NfsOp>> {
    let reconnects = inc(cur.connects(), prev.connects())?;
    let mut rows = Vec::new();
    for (name, c) in &cur.ops {
        let p = prev.ops.get(name).copied().unwrap_or_default();
        let d = op_delta(c, &p)?;
        if d.ops == 0 && d.timeouts == 0 {
            continue;
        }
        rows.push(pb::NfsOp {
            server: cur.server.clone(),
            export: cur.export.clone(),
            mountpoint: cur.mountpoint.clone(),
            fstype: cur.fstype.clone(),
            op: name.clone(),
            ops: d.ops,
            retrans: d.transmissions.saturating_sub(d.ops),
            timeouts: d.timeouts,
            bytes_sent: d.bytes_sent,
            bytes_recv: d.bytes_recv,
            queue_ms_sum: d.queue_ms,
            rtt_ms_sum: d.rtt_ms,
            exe_ms_sum: d.execute_ms,
            errors: d.errors.unwrap_or(0),
            reconnects,
            nid: String::new(),
        });
    }
    Some(rows)
}

impl NfsTracker {
    pub fn new(max_mounts: usize) -> Self {
        Self {
            max_mounts,
            mounts: Tracker::new(),
            dropped_total: 0,
            malformed_total: 0,
        }
    }

    /// The tracked mounts of a parse: duplicates of a superblock skipped,
    /// at most `max_mounts`.
    fn admit(&self, parsed: Parsed, counts: &mut WindowCounts) -> Vec<Mount> {
        let mut kept: Vec<Mount> = Vec::new();
        for m in parsed.mounts {
            if kept
                .iter()
                .any(|k| k.device == m.device && k.ops == m.ops && k.fstype == m.fstype)
            {
                counts.duplicates += 1;
            } else if kept.len() < self.max_mounts {
                kept.push(m);
            } else {
                counts.dropped += 1;
            }
        }
        kept
    }

    /// A new parse: the window's rows (none for a mount seen for the first
    /// time, whose counters are the base) and what it counted.
    pub fn update(&mut self, parsed: Parsed) -> (Vec<pb::NfsOp>, WindowCounts) {
        let mut counts = WindowCounts::default();
        self.malformed_total += parsed.malformed;
        let kept = self.admit(parsed, &mut counts);
        let read = kept
            .into_iter()
            .map(|m| ((m.device.clone(), m.mountpoint.clone()), m));
        let (rows, resets) = self.mounts.update(read, mount_rows);
        counts.resets = resets;
        counts.mounts = self.mounts.len();
        self.dropped_total += counts.dropped;
        (rows, counts)
    }

    /// The exposition of the latest parse: cumulative counters per mount
    /// and procedure (procedures with RPCs only), and the tracker's own.
    pub fn render(&self) -> String {
        let mut t = Text::new();
        for m in self.mounts.latest() {
            render_mount(&mut t, m);
        }
        t.add(&NFS_MOUNTS, &[], self.mounts.latest().count());
        t.add(&NFS_MOUNTS_DROPPED, &[], self.dropped_total);
        t.add(&NFS_RESETS, &[], self.mounts.resets_total());
        t.add(&NFS_MALFORMED_LINES, &[], self.malformed_total);
        t.render()
    }
}

fn render_mount(t: &mut Text, m: &Mount) {
    let base = [
        ("server", m.server.as_str()),
        ("export", m.export.as_str()),
        ("mountpoint", m.mountpoint.as_str()),
    ];
    t.add(&NFS_TRANSPORT_CONNECTS, &base, m.connects());
    for (op, s) in m.ops.iter().filter(|(_, s)| s.ops > 0) {
        let l = [base[0], base[1], base[2], ("op", op.as_str())];
        let secs = |ms: u64| ms as f64 / 1e3;
        t.add(&NFS_RPC_OPERATIONS, &l, s.ops);
        t.add(
            &NFS_RPC_RETRANSMISSIONS,
            &l,
            s.transmissions.saturating_sub(s.ops),
        );
        t.add(&NFS_RPC_MAJOR_TIMEOUTS, &l, s.timeouts);
        t.add(&NFS_RPC_RTT_SECONDS, &l, secs(s.rtt_ms));
        t.add(&NFS_RPC_EXECUTE_SECONDS, &l, secs(s.execute_ms));
        for (dir, v) in [("sent", s.bytes_sent), ("received", s.bytes_recv)] {
            let l = [l[0], l[1], l[2], l[3], ("direction", dir)];
            t.add(&NFS_RPC_BYTES, &l, v);
        }
    }
}

/// One console line per mount and procedure with RPCs in the window.
pub fn line(r: &pb::NfsOp) -> String {
    let mean = |ms: u64| {
        if r.ops > 0 {
            ms as f64 / r.ops as f64
        } else {
            0.0
        }
    };
    format!(
        "nfs {}:{} on {} {} ops={} rtt={:.2}ms exe={:.2}ms retrans={} timeouts={}{}",
        r.server,
        r.export,
        r.mountpoint,
        r.op,
        r.ops,
        mean(r.rtt_ms_sum),
        mean(r.exe_ms_sum),
        r.retrans,
        r.timeouts,
        if r.reconnects > 0 {
            format!(" reconnects={}", r.reconnects)
        } else {
            String::new()
        }
    )
}
