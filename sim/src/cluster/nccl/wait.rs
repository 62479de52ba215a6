//! What the collector sees of the job's processes around a hang or its
//! end: a process that exited sends its last row (`exited`) and no more;
//! a rank waiting on a collective that never completes sits in
//! `cuStreamSynchronize`; each rank's phase sets its GPU's utilisation and
//! its CUDA launches.
use proto::v1::NcclRank;

use super::{Collectives, Gen, EXIT_SPREAD_S, PID_BASE};
use crate::cluster::GPUS;

/// What a rank's process does at a window's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Trains (or pauses: checkpoints and evaluations are the cluster's).
    Run,
    /// Waits in a collective that never completes: NCCL's kernel spins.
    Spin,
    /// Stalled before issuing a collective (`nccl-hang`): GPU idle.
    Stalled,
    /// Its process exited.
    Gone,
}

impl Collectives {
    /// When rank `i`'s process of run `g` exits (`None`: not in the run).
    pub(super) fn exit_s(g: &Gen, i: usize) -> Option<f64> {
        if g.exits && g.end_s.is_finite() {
            return Some(g.end_s + EXIT_SPREAD_S * (i % GPUS) as f64 / GPUS as f64);
        }
        g.dead.filter(|d| *d == i).and(g.hung_s)
    }

    /// Rank `i` (`node·8 + gpu`) of the current run at the window's end.
    pub fn phase(&self, i: usize) -> Phase {
        let g = self.current();
        let b = self.span.1;
        if Self::exit_s(g, i).is_some_and(|x| x < b) {
            return Phase::Gone;
        }
        let hung = g.hung_s.is_some_and(|h| h < b) || (g.hung_s.is_none() && self.stuck_by(b));
        if !hung {
            return Phase::Run;
        }
        if self.stall.get(i).is_some_and(|s| s.is_finite()) {
            Phase::Stalled
        } else {
            Phase::Spin
        }
    }

    /// Node `n`'s rows as a collector with the CUDA probes sees them: a
    /// process that exited sends its last row (`exited`) and no more; a
    /// rank waiting on a collective that never completes sits in
    /// `cuStreamSynchronize` since its latest collective.
    pub(super) fn below(&self, n: usize, rows: &mut Vec<NcclRank>) {
        let (a, b) = self.span;
        rows.retain_mut(|row| {
            let Some(g) = self.gens.iter().find(|g| g.ids.contains(&row.comm)) else {
                return true;
            };
            let i = n * GPUS + row.pid.saturating_sub(PID_BASE) as usize;
            if let Some(x) = Self::exit_s(g, i) {
                if x < a - 1e-9 {
                    return false;
                }
                if x < b {
                    row.exited = true;
                    return true;
                }
            }
            let hung = g.hung_s.is_some_and(|h| h < b) || g.stuck_s.is_some_and(|s| s < b);
            let stalled = self.stall.get(i).is_some_and(|s| s.is_finite());
            let last = [
                g.ring.get(i),
                i.is_multiple_of(GPUS).then(|| g.tree.get(n)).flatten(),
            ]
            .into_iter()
            .flatten()
            .filter_map(|s| s.last_s)
            .fold(f64::NEG_INFINITY, f64::max);
            if hung && !stalled && last.is_finite() && last < b {
                row.blocked_call = "cuStreamSynchronize".into();
                row.blocked_s = b - last;
            }
            true
        });
    }
}
