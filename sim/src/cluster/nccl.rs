//! The simulated training job's NCCL communicators and the `Window.nccl`
//! rows each node's collector reports for them.
//!
//! Communicators (one set per run of the job: a job that ends and starts
//! again creates new ones, with new ids):
//! - **ring**: every rank of the data-parallel job (rank `node·8 + gpu`),
//!   for the gradient AllReduces, which NCCL runs as rings over the rails:
//!   GPU g of every node talks through `mlx5_g`, so the ring crosses every
//!   leaf switch the job spans. Footprint: every host × GPU × HCA port.
//! - **tree**: one rank per node (GPU 0 on `mlx5_0`, rank = node index) for
//!   the step's small AllReduce (loss and gradient norm, 8 bytes), which
//!   NCCL runs as a tree over the leaves. Footprint: every host × GPU 0 ×
//!   `mlx5_0`.
//!
//! Timeline of a step that starts at T (the previous step's collectives
//! completed everywhere): rank i issues gradient bucket j at T + c_i·f_j,
//! c_i its compute time (its step time without what the fabric adds) and
//! f = 0.45, 0.6, 0.75, 0.9 (backward progress), but not before every rank
//! issued bucket j−1 (the job waits on each bucket before the next: a rank
//! runs at most one collective ahead of the slowest). The tree ranks issue
//! their AllReduce at T + 0.95·D, and the next step starts at T + D, D the
//! slowest rank's step time (compute and fabric): collectives are
//! synchronous, so every rank's cadence is the slowest rank's, and a
//! degraded link under any rank stretches everyone's. A rank stalled by
//! `nccl-hang` issues nothing from its stall on; the others issue up to the
//! first collective it did not and wait there, one collective ahead, for
//! good.
//!
//! Rows are what the collector's own code (`collector::nccl::window_rows`)
//! makes of the cumulative state its maps would hold: the same ids, deltas,
//! intervals and lags. After a collector restart the new instance never saw
//! the communicators' creation: their ranks carry `h:<pid>:<handle>` ids
//! and counts since the restart, as on a real host.
use std::collections::{BTreeMap, VecDeque};

use collector::nccl::{id_hex, id_of_unique_id, window_rows, RankState, Who};
use collector_common::nccl::{SeqRing, SEQ_RING};
use proto::v1::NcclRank;

use super::{GPUS, JOB};
use crate::rng::Rng;

mod wait;

pub use wait::Phase;

/// Communicator indices.
pub const RING: usize = 0;
pub const TREE: usize = 1;
/// When a rank issues its gradient buckets, as fractions of its compute.
const BUCKETS: [f64; 4] = [0.45, 0.6, 0.75, 0.9];
/// Bytes per bucket (count × datatype size: 25 M fp32 gradients).
const BUCKET_BYTES: u64 = 100_000_000;
/// When the tree's AllReduce is issued, as a fraction of the step.
const TREE_AT: f64 = 0.95;
const TREE_BYTES: u64 = 8;
/// The training ranks' pids: GPU g is `PID_BASE + g` (as their CUDA rows).
pub const PID_BASE: u32 = 10_000;
/// `ncclComm_t` handles: the generation and communicator in the low bits.
const HANDLE_BASE: u64 = 0x5600_0000_0000;
/// A job's processes exit within this many seconds of its end
/// (`nccl-job-exit`).
const EXIT_SPREAD_S: f64 = 0.4;
/// Probe timestamps are `CLOCK_MONOTONIC`: the hosts booted this long
/// before the simulation's epoch.
const UPTIME_NS: u64 = 1_000_000_000_000;

/// One rank's collectives on one communicator.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// Issue times (s) not yet reached by the windows.
    pending: VecDeque<f64>,
    /// Collectives issued so far and the latest one's time.
    calls: u64,
    last_s: Option<f64>,
    /// Monotonic ns of the latest collectives, collective n at `n % SEQ_RING`.
    ts: [u64; SEQ_RING],
}

/// One run of the job: its communicators and their timeline.
#[derive(Debug)]
struct Gen {
    n: u32,
    ids: [String; 2],
    /// When the communicators were created and destroyed (∞: still alive).
    start_s: f64,
    end_s: f64,
    next_step_s: f64,
    ring: Vec<Slot>,
    tree: Vec<Slot>,
    /// Start of the step that can never complete (a rank stalled in it).
    stuck_s: Option<f64>,
    /// Every rank hangs in the first collective in flight at or after
    /// this time (∞: never), and when the last rank issued it.
    freeze_s: f64,
    pub(super) hung_s: Option<f64>,
    /// The job's processes exit at its end instead of destroying the
    /// communicators (`nccl-job-exit`).
    exits: bool,
    /// The rank whose process died in the hung collective.
    dead: Option<usize>,
}

/// A hang as it physically happened: the communicator whose collective the
/// stalled ranks never issued while others did.
#[derive(Clone, Debug, PartialEq)]
pub struct Hang {
    pub comm: usize,
    pub id: String,
    /// The ranks holding the others up: (node, rank in the communicator).
    pub holders: Vec<(usize, i32)>,
    /// Global ranks (`node·8 + gpu`) of the holders.
    pub global: Vec<usize>,
    /// When the others started waiting on them: the later of the first
    /// holder's stall and the first issue of that collective by another rank.
    pub since_s: f64,
}

/// Per rank (`node·8 + gpu`) this window: step time, compute time, whether
/// its node is up, and when it stalls (∞: never).
pub struct RankTimes<'a> {
    pub own: &'a [f64],
    pub compute: &'a [f64],
    pub up: &'a [bool],
    pub stall: &'a [f64],
    /// Every rank hangs in the collective in flight at this time (∞:
    /// never), with this rank named as the cause (a dead peer, the rank
    /// behind a downed port; none: unknown).
    pub freeze_s: f64,
    pub culprit: Option<usize>,
    /// The culprit's process dies in that collective.
    pub dead: bool,
}

/// What one node's collector knows about the communicators.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// The previous window's cumulative state (for the deltas).
    prev: BTreeMap<(u32, u64), RankState>,
    /// When this collector instance attached its probes: communicators
    /// created before are unknown to it.
    attach_s: f64,
    /// Collectives issued before it attached, per (pid, handle).
    base: BTreeMap<(u32, u64), u64>,
}

impl Default for NodeState {
    fn default() -> Self {
        Self {
            prev: BTreeMap::new(),
            attach_s: f64::NEG_INFINITY,
            base: BTreeMap::new(),
        }
    }
}

/// The communicator id every rank computes: FNV-1a over the
/// `ncclUniqueId` rank 0 drew (128 bytes from the run's seed).
/// (node, rank on communicator `comm`) of each global rank in `global`:
/// the ring ranks every GPU, the tree one GPU per node.
fn holders(comm: usize, global: &[usize]) -> Vec<(usize, i32)> {
    global
        .iter()
        .map(|&i| {
            let node = i / GPUS;
            let rank = if comm == RING { i } else { node };
            (node, rank as i32)
        })
        .collect()
}

fn comm_id(seed: u64, generation: u32, comm: usize) -> String {
    let mut r = Rng::derive(
        seed ^ 0x6e63_636c,
        (u64::from(generation) << 8) | comm as u64,
    );
    let mut uid = [0u8; 128];
    for c in uid.chunks_mut(8) {
        c.copy_from_slice(&r.next_u64().to_le_bytes());
    }
    id_hex(id_of_unique_id(&uid))
}

fn handle(generation: u32, comm: usize) -> u64 {
    HANDLE_BASE + (u64::from(generation) << 12) + ((comm as u64) << 8)
}

fn mono_ns(t_s: f64) -> u64 {
    UPTIME_NS + (t_s.max(0.0) * 1e9).round() as u64
}

impl Gen {
    fn new(seed: u64, n: u32, nodes: usize, start_s: f64, first_step_s: f64) -> Self {
        Self {
            n,
            ids: [comm_id(seed, n, RING), comm_id(seed, n, TREE)],
            start_s,
            end_s: f64::INFINITY,
            next_step_s: first_step_s,
            ring: vec![Slot::default(); nodes * GPUS],
            tree: vec![Slot::default(); nodes],
            stuck_s: None,
            freeze_s: f64::INFINITY,
            hung_s: None,
            exits: false,
            dead: None,
        }
    }

    /// One step from `t0`: every rank's issue times, or the hang that stops it.
    fn step(&mut self, t0: f64, limit: f64, r: &RankTimes, hangs: &mut Vec<Hang>) {
        let d = (0..r.own.len())
            .filter(|&i| r.up[i])
            .map(|i| r.own[i])
            .fold(0.0, f64::max);
        if d <= 0.0 {
            // Nobody runs: no step in this window.
            self.next_step_s = limit;
            return;
        }
        // The gradient buckets on the ring, each after the previous one was
        // issued everywhere.
        let mut prev = t0;
        for f in BUCKETS {
            let mut done = f64::NEG_INFINITY;
            let mut first = f64::INFINITY;
            let mut held = Vec::new();
            for (i, slot) in self.ring.iter_mut().enumerate() {
                if !r.up[i] {
                    continue;
                }
                let t = (t0 + r.compute[i] * f).max(prev);
                if t >= r.stall[i] {
                    held.push(i);
                    continue;
                }
                slot.pending.push_back(t);
                done = done.max(t);
                first = first.min(t);
            }
            if !held.is_empty() {
                self.block(RING, t0, first, &held, r, hangs);
                return;
            }
            if done >= self.freeze_s {
                self.freeze(RING, t0, done, r, hangs);
                return;
            }
            prev = done;
        }
        // The tree's AllReduce, once the gradients are reduced.
        let t = (t0 + TREE_AT * d).max(prev);
        let mut first = f64::INFINITY;
        let mut held = Vec::new();
        for (node, slot) in self.tree.iter_mut().enumerate() {
            let i = node * GPUS;
            if !r.up[i] {
                continue;
            }
            if t >= r.stall[i] {
                held.push(i);
                continue;
            }
            slot.pending.push_back(t);
            first = first.min(t);
        }
        if !held.is_empty() {
            self.block(TREE, t0, first, &held, r, hangs);
            return;
        }
        if t >= self.freeze_s {
            self.freeze(TREE, t0, t, r, hangs);
            return;
        }
        self.next_step_s = t0 + d;
    }

    /// The step from `t0` never completes: `held` (global ranks) did not
    /// issue a collective of `comm` that others issued first at `first`
    /// (∞: nobody did, so nobody waits).
    fn block(
        &mut self,
        comm: usize,
        t0: f64,
        first: f64,
        held: &[usize],
        r: &RankTimes,
        hangs: &mut Vec<Hang>,
    ) {
        self.stuck_s = Some(t0);
        if !first.is_finite() {
            return;
        }
        let stalled = held
            .iter()
            .map(|&i| r.stall[i])
            .fold(f64::INFINITY, f64::min);
        hangs.push(Hang {
            comm,
            id: self.ids[comm].clone(),
            holders: holders(comm, held),
            global: held.to_vec(),
            since_s: stalled.max(first),
        });
    }

    /// Every rank issued collective `comm` (the last at `done`) and none
    /// returns: the step from `t0` never completes; the hang's holders are
    /// the ranks the fault names (a dead peer, the rank behind a downed
    /// port), none when nothing below shows a cause.
    fn freeze(&mut self, comm: usize, t0: f64, done: f64, r: &RankTimes, hangs: &mut Vec<Hang>) {
        self.stuck_s = Some(t0);
        self.hung_s = Some(done);
        self.dead = r.culprit.filter(|_| r.dead);
        let global: Vec<usize> = r.culprit.iter().copied().collect();
        hangs.push(Hang {
            comm,
            id: self.ids[comm].clone(),
            holders: holders(comm, &global),
            global,
            since_s: done,
        });
    }

    /// Moves the collectives issued before `limit` from pending to issued.
    fn drain(&mut self, limit: f64) {
        for s in self.ring.iter_mut().chain(self.tree.iter_mut()) {
            while let Some(&t) = s.pending.front() {
                if t >= limit {
                    break;
                }
                s.pending.pop_front();
                s.calls += 1;
                s.last_s = Some(t);
                s.ts[(s.calls as usize) & (SEQ_RING - 1)] = mono_ns(t);
            }
        }
    }
}

/// The job's communicators over the run.
#[derive(Debug)]
pub struct Collectives {
    nodes: usize,
    seed: u64,
    /// The current run of the job last; an ended one until its window passed.
    gens: Vec<Gen>,
    hangs: Vec<Hang>,
    /// The latest window `[a, b)` and its ranks' stall times.
    span: (f64, f64),
    stall: Vec<f64>,
}

impl Collectives {
    pub fn new(nodes: usize, seed: u64) -> Self {
        // Created during the job's set-up, before the first step at 0.
        Self {
            nodes,
            seed,
            gens: vec![Gen::new(seed, 0, nodes, -1.0, 0.0)],
            hangs: Vec::new(),
            span: (0.0, 0.0),
            stall: Vec::new(),
        }
    }

    fn current(&self) -> &Gen {
        // `gens` is never empty: a generation ends only by pushing the next.
        &self.gens[self.gens.len() - 1]
    }

    /// The current communicator `comm`'s id ([`RING`] or [`TREE`]).
    pub fn id(&self, comm: usize) -> &str {
        &self.current().ids[comm.min(TREE)]
    }

    /// Its number of ranks.
    pub fn nranks(&self, comm: usize) -> usize {
        if comm == RING {
            self.nodes * GPUS
        } else {
            self.nodes
        }
    }

    /// The job stopped completing steps at or before `t` (a rank hangs).
    pub fn stuck_by(&self, t: f64) -> bool {
        self.current().stuck_s.is_some_and(|s| s <= t + 1e-9)
    }

    /// Hangs that began since the last call.
    pub fn take_hangs(&mut self) -> Vec<Hang> {
        std::mem::take(&mut self.hangs)
    }

    /// One window `[a, b)`: job ends and restarts (`stops`: the job is gone
    /// over `[s, e)`; its processes exit instead of destroying the
    /// communicators when the flag is set), pauses (`[s, e)`: no step
    /// starts, as in a checkpoint or an evaluation pass), the steps that
    /// start in it, the collectives issued in it.
    pub fn advance(
        &mut self,
        a: f64,
        b: f64,
        r: &RankTimes,
        stops: &[(f64, f64, bool)],
        pauses: &[(f64, f64)],
    ) {
        self.span = (a, b);
        self.stall.clear();
        self.stall.extend_from_slice(r.stall);
        // An ended run's rows went out in the window of its end (its
        // processes' exits within EXIT_SPREAD_S of it); the current run
        // never ends (ending one starts the next).
        self.gens.retain(|g| a <= g.end_s + EXIT_SPREAD_S);
        let mut stops = stops.to_vec();
        stops.sort_by(|x, y| x.0.total_cmp(&y.0));
        for (s, e, exits) in stops {
            let Some(cur) = self.gens.last_mut() else {
                break;
            };
            if cur.end_s.is_infinite() && cur.start_s < s && s < b {
                cur.end_s = s;
                cur.exits = exits;
                let n = cur.n + 1;
                self.gens.push(Gen::new(self.seed, n, self.nodes, e, e));
            }
        }
        if let Some(cur) = self.gens.last_mut() {
            cur.freeze_s = cur.freeze_s.min(r.freeze_s);
        }
        for g in &mut self.gens {
            let limit = b.min(g.end_s);
            while g.stuck_s.is_none() && g.next_step_s < limit {
                let t0 = g.next_step_s;
                if let Some(&(_, e)) = pauses.iter().find(|(s, e)| t0 >= *s && t0 < *e) {
                    g.next_step_s = e;
                    continue;
                }
                g.step(t0, limit, r, &mut self.hangs);
            }
            g.drain(limit);
        }
    }

    /// Node `n`'s ranks as its collector's maps hold them at `b`.
    fn node_ranks(&self, n: usize, b: f64, st: &NodeState) -> BTreeMap<(u32, u64), RankState> {
        let mut out = BTreeMap::new();
        for g in self.gens.iter().filter(|g| g.start_s < b) {
            let seen = g.start_s >= st.attach_s;
            // Processes that exit never destroy their communicators.
            let ended = g.end_s < b && !g.exits;
            for gpu in 0..GPUS {
                let pid = PID_BASE + gpu as u32;
                let mut comms = vec![(RING, &g.ring[n * GPUS + gpu], n * GPUS + gpu)];
                if gpu == 0 {
                    comms.push((TREE, &g.tree[n], n));
                }
                for (comm, slot, rank) in comms {
                    let key = (pid, handle(g.n, comm));
                    let base = st.base.get(&key).copied().unwrap_or(0);
                    let seq = slot.calls.saturating_sub(base);
                    let bytes = if comm == RING {
                        BUCKET_BYTES
                    } else {
                        TREE_BYTES
                    };
                    let mut ops = BTreeMap::new();
                    if seq > 0 {
                        ops.insert("AllReduce", (seq, seq * bytes));
                    }
                    // The probe's ring holds the collectives it saw.
                    let mut ring = SeqRing {
                        seq,
                        ..SeqRing::default()
                    };
                    for k in seq.saturating_sub(SEQ_RING as u64 - 1).max(1)..=seq {
                        ring.ts[(k as usize) & (SEQ_RING - 1)] =
                            slot.ts[((k + base) as usize) & (SEQ_RING - 1)];
                    }
                    let last_ns = match slot.last_s {
                        Some(t) if seq > 0 => mono_ns(t),
                        _ => 0,
                    };
                    let state = if seen {
                        RankState {
                            comm: g.ids[comm].clone(),
                            nranks: self.nranks(comm) as i32,
                            rank: rank as i32,
                            device: gpu as i32,
                            pid,
                            init: "ncclCommInitRank",
                            ended,
                            ops,
                            seq,
                            last_ns,
                            ring: Some(ring),
                            ..Default::default()
                        }
                    } else if seq > 0 {
                        // Only its collectives since the restart are known.
                        RankState {
                            comm: format!("h:{pid}:{:x}", key.1),
                            nranks: -1,
                            rank: -1,
                            device: -1,
                            pid,
                            init: "unknown",
                            ended: false,
                            ops,
                            seq,
                            last_ns,
                            ring: Some(ring),
                            ..Default::default()
                        }
                    } else {
                        continue;
                    };
                    out.insert(key, state);
                }
            }
        }
        out
    }

    /// Node `n`'s `Window.nccl` rows for the window ending at `b` (simulated
    /// seconds; `t0_ms` the epoch), through the collector's own row code.
    pub fn rows(&self, n: usize, b: f64, t0_ms: i64, st: &mut NodeState) -> Vec<NcclRank> {
        let cur = self.node_ranks(n, b, st);
        let offset = i128::from(t0_ms) * 1_000_000 - i128::from(UPTIME_NS);
        let rows = window_rows(&st.prev, &cur, offset, |pid| {
            let gpu = pid.saturating_sub(PID_BASE);
            Who {
                job: JOB.into(),
                rank: Some((n * GPUS) as u32 + gpu),
                hcas: vec![format!("mlx5_{gpu}/1")],
            }
        });
        st.prev = cur;
        let mut rows = rows;
        self.below(n, &mut rows);
        rows
    }

    /// Node `n`'s collector restarts at `at_s`: it has no previous state,
    /// and the communicators alive now were created before it attached.
    pub fn restart(&self, n: usize, at_s: f64, st: &mut NodeState) {
        st.prev.clear();
        st.attach_s = at_s;
        st.base.clear();
        for g in &self.gens {
            for gpu in 0..GPUS {
                let pid = PID_BASE + gpu as u32;
                st.base
                    .insert((pid, handle(g.n, RING)), g.ring[n * GPUS + gpu].calls);
                if gpu == 0 {
                    st.base.insert((pid, handle(g.n, TREE)), g.tree[n].calls);
                }
            }
        }
    }
}
