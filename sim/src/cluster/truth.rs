//! Ground truth of the injected faults: when each begins and when it is
//! physically visible, decided from the simulator's own physics and never
//! from the detector it scores.
//!
//! A degrading link is visible in the first window (from its onset window
//! on) where the excess bit errors the fault has injected since its onset
//! are more than a link at the reference BER would plausibly show over the
//! same bits: with `B` the bits the port signalled since the onset and `K`
//! the injected excess errors, `P(Poisson(reference_ber · B) ≥ K) <
//! significance`. The tail is summed here, in log space.
use serde::Serialize;

use super::{Cluster, Fault, Kind};

/// Ground truth of one injected fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Truth {
    /// The window containing the onset.
    pub onset_window: u64,
    /// The first window at which the fault is physically visible: for a
    /// degrading link, where its excess errors since the onset are beyond
    /// what a link at the reference BER would show over the same bits (see
    /// the module doc; `None` until then); the onset window for discrete
    /// faults; the second down for a flapping link; onset + 3 windows for a
    /// lost node. `None` for confounders.
    pub visible_window: Option<u64>,
    /// Errors the fault added beyond the port's base BER (true count, not
    /// the saturated counter), so far.
    pub excess_errors: u64,
    /// Bits the port signalled since the onset (degrading links).
    #[serde(skip)]
    bits_since_onset: f64,
    /// `nccl-hang`: the hang as it physically happened, once the other
    /// ranks wait: `<host>/nccl/<comm>` (the first host, by name, of the
    /// ranks holding the others up, and the communicator they wait in) …
    pub hang_entity: Option<String>,
    /// … and those ranks: (host, rank in the communicator).
    pub hang_holders: Vec<(String, i32)>,
}

impl Truth {
    /// A degrading link's window `k`: `excess` errors injected over `bits`
    /// signalled since the onset; visible once the errors since the onset
    /// are significant against `reference_ber` at `significance`.
    pub(super) fn link_errors(
        &mut self,
        k: u64,
        excess: u64,
        bits: f64,
        reference_ber: f64,
        significance: f64,
    ) {
        self.excess_errors += excess;
        self.bits_since_onset += bits;
        if self.visible_window.is_none() && k >= self.onset_window {
            let background = reference_ber * self.bits_since_onset;
            if poisson_tail(self.excess_errors, background) < significance {
                self.visible_window = Some(k);
            }
        }
    }
}

/// `ln n!`: exact products up to 20!, Stirling's series beyond (relative
/// error below 1e-15 there).
fn ln_factorial(n: u64) -> f64 {
    if n <= 20 {
        return (2..=n).map(|i| i as f64).product::<f64>().ln();
    }
    let x = n as f64;
    let x2 = x * x;
    x * x.ln() - x + 0.5 * (std::f64::consts::TAU * x).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x2)
        + 1.0 / (1260.0 * x * x2 * x2)
}

/// `P(X ≥ k)` for `X ~ Poisson(lambda)`. Above the mean, the upper tail is
/// summed from the pmf at `k` upwards (each term `lambda / i` times the
/// last, all scaled by the pmf at `k`, which is taken in log space so that
/// neither `lambda^k` nor `k!` overflows); at or below it, the complement of
/// the lower tail, summed from `k − 1` downwards the same way.
pub fn poisson_tail(k: u64, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda.is_nan() || lambda <= 0.0 {
        return 0.0;
    }
    let ln_pmf = |i: u64| i as f64 * lambda.ln() - lambda - ln_factorial(i);
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    if k as f64 > lambda {
        let mut i = k;
        loop {
            i += 1;
            term *= lambda / i as f64;
            sum += term;
            if term <= sum * 1e-17 {
                break;
            }
        }
        (ln_pmf(k) + sum.ln()).exp().min(1.0)
    } else {
        let top = k - 1;
        let mut i = top;
        while i > 0 {
            term *= i as f64 / lambda;
            sum += term;
            if term <= sum * 1e-17 {
                break;
            }
            i -= 1;
        }
        (1.0 - (ln_pmf(top) + sum.ln()).exp()).clamp(0.0, 1.0)
    }
}

impl Cluster {
    /// Sets up the faults' truth: their onset windows, and the visible
    /// window of those whose visibility is known in advance.
    pub(super) fn init_truth(&mut self, faults: &[Fault], onset: f64) {
        self.tenants = super::tenants::Tenants::of(faults, self.spec.seed);
        self.truth = faults
            .iter()
            .map(|f| {
                let o = f.onset.unwrap_or(onset);
                let ow = self.window_of(o);
                let visible = match f.kind {
                    // Once the other ranks wait (the timeline says when).
                    Kind::IbLinkDegrade { .. }
                    | Kind::NcclHang
                    | Kind::NcclHangDeadPeer
                    | Kind::NcclHangPortDown
                    | Kind::NcclHangUnknown => None,
                    // Once its errors are significant (`gpu::gpu_faults_advance`).
                    Kind::GpuNvlink { .. } => None,
                    Kind::IbLinkFlap { period_s, .. } => Some(self.window_of(o + period_s)),
                    Kind::NodeLoss => {
                        Some(ow + correlator::engine::node::LOST_AFTER_WINDOWS as u64)
                    }
                    // A workload symptom is one once it has lasted
                    // `min_persist_s` (its definition, like a flap's second down).
                    Kind::JobSlow { .. }
                    | Kind::NcclSlowRank { .. }
                    | Kind::InferenceSlow { .. }
                    | Kind::InterferenceStorage { .. }
                    | Kind::InterferenceLink { .. }
                    | Kind::InterferenceGpu { .. } => {
                        Some(self.window_of(o + self.persist_s).saturating_sub(1).max(ow))
                    }
                    // The second unrelated job's death: the first time
                    // the data can tell the GPU from an application.
                    Kind::XidBadGpu { jobs, gap_s, .. } => {
                        (jobs >= 2).then(|| self.window_of(o + gap_s))
                    }
                    ref k if k.is_confounder() => None,
                    _ => Some(ow),
                };
                Truth {
                    onset_window: ow,
                    visible_window: visible,
                    ..Truth::default()
                }
            })
            .collect();
    }
}

#[cfg(test)]
#[path = "truth_tests.rs"]
mod tests;
