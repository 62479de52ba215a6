//! NFS: every node mounts the shared dataset target `filer01:/datasets` at
//! `/datasets` (NFSv4.2 over TCP) and its training job's input pipeline
//! reads from it.
//!
//! Each node keeps its mount's counters as the kernel does
//! (`/proc/self/mountstats`, per procedure): RPCs, transmissions, major
//! timeouts, bytes, and the cumulative queue, round-trip and execution
//! times, summed per RPC at nanosecond resolution and printed in whole
//! milliseconds of the sum. The window's rows come out of the collector's
//! own [`NfsTracker`] (the same deltas and field semantics as a real
//! collector's), primed once at start as the collector's reader is.
//!
//! Per window and procedure a node completes Poisson(rate × W) RPCs while
//! the job runs (2 % of it while the job is gone); each RPC's RTT is
//! lognormal (σ [`RTT_SIGMA`]) around the mount's own median, drawn once
//! per node (READ 0.6–1.0 ms for 1 MiB, WRITE 0.7–1.0 ms, GETATTR
//! 0.25–0.4 ms), times a per-window jitter of ±5 % shared by the server's
//! clients and ±5 % of the node's own. The window's sum is the normal
//! approximation of the sum of its RPCs' RTTs. Healthy links retransmit
//! nothing (TCP mounts time out after 60 s).
//!
//! `nfs-slow` multiplies the RTT of the RPCs completed after its onset by
//! `factor` on every node mounting the target (or on one host's mount);
//! the job's ranks there wait on their reads for [`READ_SHARE`] of a
//! healthy step, `factor` times longer. These draws use their own random
//! stream, so every other stream of the cluster is as it was without them.
use collector::nfs::{Mount, NfsTracker, OpStats, Parsed, Xprt};
use proto::v1::NfsOp;

use super::{overlap, Cluster, Fault, Kind, Span, Target};
use crate::rng::Rng;

/// The shared target: its server, export and where the nodes mount it.
pub const SERVER: &str = "filer01";
pub const EXPORT: &str = "/datasets";
pub const MOUNTPOINT: &str = "/datasets";
/// Lognormal σ of one RPC's RTT around the mount's median.
pub const RTT_SIGMA: f64 = 0.35;
/// Share of a healthy step the input pipeline waits on its dataset reads.
pub const READ_SHARE: f64 = 0.02;
/// Client-side wait in the transmit queue and execution beyond the RTT
/// (ms per RPC).
const QUEUE_MS: f64 = 0.02;
const EXE_EXTRA_MS: f64 = 0.03;

/// One procedure the job uses: RPCs per second per node while it runs,
/// the range its per-node healthy median RTT (ms) is drawn from, bytes
/// sent and received per RPC (headers included).
struct Proc {
    name: &'static str,
    rate: f64,
    rtt_ms: (f64, f64),
    sent: u64,
    recv: u64,
}

const PROCS: [Proc; 3] = [
    // 1 MiB reads (rsize=1048576) of the dataset's shards.
    Proc {
        name: "READ",
        rate: 240.0,
        rtt_ms: (0.6, 1.0),
        sent: 248,
        recv: (1 << 20) + 144,
    },
    // 64 KiB writes of logs and small outputs.
    Proc {
        name: "WRITE",
        rate: 25.0,
        rtt_ms: (0.7, 1.0),
        sent: (64 << 10) + 264,
        recv: 160,
    },
    Proc {
        name: "GETATTR",
        rate: 90.0,
        rtt_ms: (0.25, 0.4),
        sent: 220,
        recv: 260,
    },
];

/// The target as the mount names it: `server:/export`.
pub fn target() -> String {
    format!("{SERVER}:{EXPORT}")
}

/// The target's entity (`nfs:server:/export`), or one host's mount of it.
pub fn entity(host: Option<&str>) -> String {
    match host {
        Some(h) => vocab::entity::nfs_mount(h, SERVER, EXPORT),
        None => vocab::entity::nfs_target(SERVER, EXPORT),
    }
}

/// One node's mount of the target.
#[derive(Debug)]
pub(super) struct NfsMount {
    /// The kernel's counters (milliseconds of the nanosecond sums).
    mount: Mount,
    /// Per procedure: cumulative queue, RTT and execution nanoseconds.
    ns: [[u64; 3]; PROCS.len()],
    /// Per procedure: the healthy median RTT (ms).
    median_ms: [f64; PROCS.len()],
    tracker: NfsTracker,
    /// This window's rows.
    pub rows: Vec<NfsOp>,
}

impl NfsMount {
    pub(super) fn new(rng: &mut Rng) -> Self {
        let mut median_ms = [0.0; PROCS.len()];
        for (m, p) in median_ms.iter_mut().zip(&PROCS) {
            *m = rng.log_uniform(p.rtt_ms.0, p.rtt_ms.1);
        }
        let mount = Mount {
            device: target(),
            server: SERVER.into(),
            export: EXPORT.into(),
            mountpoint: MOUNTPOINT.into(),
            fstype: "nfs4".into(),
            xprts: vec![Xprt {
                proto: "tcp".into(),
                connect_count: Some(1),
                sends: Some(0),
                recvs: Some(0),
                bad_xids: Some(0),
            }],
            ops: PROCS
                .iter()
                .map(|p| {
                    let zero = OpStats {
                        errors: Some(0),
                        ..OpStats::default()
                    };
                    (p.name.to_string(), zero)
                })
                .collect(),
        };
        let mut m = Self {
            mount,
            ns: [[0; 3]; PROCS.len()],
            median_ms,
            tracker: NfsTracker::new(64),
            rows: Vec::new(),
        };
        // The collector reads once at start: its first window has deltas.
        m.read();
        m
    }

    /// The collector's read of the counters: the window's rows.
    fn read(&mut self) {
        let parsed = Parsed {
            mounts: vec![self.mount.clone()],
            malformed: 0,
        };
        self.rows = self.tracker.update(parsed).0;
    }

    /// One procedure's window: `n` RPCs, `slow` of them after the fault's
    /// onset at `factor` times the RTT; `jitter` scales the median.
    fn complete(&mut self, rng: &mut Rng, i: usize, n: u64, slow: u64, factor: f64, jitter: f64) {
        let median = self.median_ms[i] * jitter;
        let rtt_ms = rtt_sum(rng, n - slow, median) + rtt_sum(rng, slow, median * factor);
        let queue_ms = n as f64 * QUEUE_MS * rng.range(0.8, 1.2);
        let exe_ms = rtt_ms + queue_ms + n as f64 * EXE_EXTRA_MS;
        let ns = &mut self.ns[i];
        for (c, ms) in ns.iter_mut().zip([queue_ms, rtt_ms, exe_ms]) {
            *c += (ms * 1e6).round() as u64;
        }
        let p = &PROCS[i];
        let Some(s) = self.mount.ops.get_mut(p.name) else {
            return;
        };
        s.ops += n;
        s.transmissions += n;
        s.bytes_sent += n * p.sent;
        s.bytes_recv += n * p.recv;
        s.queue_ms = ns[0] / 1_000_000;
        s.rtt_ms = ns[1] / 1_000_000;
        s.execute_ms = ns[2] / 1_000_000;
        if let Some(x) = self.mount.xprts.first_mut() {
            x.sends = x.sends.map(|v| v + n);
            x.recvs = x.recvs.map(|v| v + n);
        }
    }
}

/// The summed RTT (ms) of `n` RPCs, each lognormal (σ [`RTT_SIGMA`])
/// around `median` ms: the normal approximation of the sum.
fn rtt_sum(rng: &mut Rng, n: u64, median: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let s2 = RTT_SIGMA * RTT_SIGMA;
    let mean = median * (s2 / 2.0).exp();
    let sd = mean * (s2.exp() - 1.0).sqrt();
    let n = n as f64;
    (n * mean + n.sqrt() * sd * rng.normal()).max(0.0)
}

/// A node's ranks slowed by their dataset reads taking `factor` times longer.
fn read_slowdown(factor: f64) -> f64 {
    (1.0 + READ_SHARE * (factor - 1.0)).min(2.0)
}

impl Cluster {
    /// Every node's NFS window: the RPCs it completed (none while down),
    /// their times with the `nfs-slow` faults' factors from their onsets,
    /// the collector's rows; the job's ranks on slowed mounts wait longer
    /// for their reads. `io_scale` is the share of the job's I/O rate.
    pub(super) fn nfs_advance(&mut self, faults: &[Fault], s: Span, io_scale: f64) {
        let shared = self.nfs_rng.range(0.95, 1.05);
        for n in 0..self.nodes.len() {
            // (factor, share of the window after the onset) of each fault here.
            let mut slow: Vec<(f64, f64)> = Vec::new();
            for f in faults {
                let (Kind::NfsSlow { factor }, Target::Nfs { node }) = (&f.kind, &f.target) else {
                    continue;
                };
                if node.is_some_and(|x| x != n) {
                    continue;
                }
                let o = s.on(f);
                let share = overlap(s.a, s.b, o, f64::INFINITY) / s.w;
                if share > 0.0 {
                    slow.push((*factor, share));
                }
                if s.at_end(o) {
                    for st in &mut self.nodes[n].step {
                        *st *= read_slowdown(*factor);
                    }
                }
            }
            let up = self.nodes[n].up;
            let rng = &mut self.nfs_rng;
            let jitter = shared * rng.range(0.95, 1.05);
            let mount = &mut self.nodes[n].nfs;
            for (i, p) in PROCS.iter().enumerate() {
                let rpcs = if up {
                    rng.poisson(p.rate * s.w * io_scale)
                } else {
                    0
                };
                // Faults multiply; the RPCs after the latest onset carry them all.
                let factor: f64 = slow.iter().map(|x| x.0).product();
                let share = slow.iter().map(|x| x.1).fold(1.0, f64::min);
                let late = if slow.is_empty() {
                    0
                } else {
                    rng.binomial(rpcs, share.clamp(0.0, 1.0))
                };
                mount.complete(rng, i, rpcs, late, factor, jitter);
            }
            mount.read();
        }
    }
}
