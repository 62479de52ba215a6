//! `gpu_ecc`: double-bit errors, single-bit errors rising fast, and row
//! remapping (Ampere and later), each with NVIDIA's action: a remapping
//! that failed means the GPU is replaced (RMA), a pending one takes effect
//! at the next GPU reset. One finding per GPU and window, its action the
//! most severe of what it saw.
use proto::v1::GpuSample;
use vocab::kind::IncidentKind;

use super::{GpuState, SBE_PER_WINDOW};
use crate::engine::incidents::Finding;

/// What to do about a GPU's memory, most severe last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// Correctable errors rising: plan a replacement.
    Watch,
    /// Uncorrectable errors: the job's data may be corrupt; drain.
    Drain,
    /// A row remap is pending: it takes effect at the next GPU reset.
    Reset,
    /// A row remap failed: no spare row left; replace the GPU.
    Rma,
}

impl Action {
    fn mark(self) -> &'static str {
        match self {
            Action::Watch => "ecc_action:WATCH",
            Action::Drain => "ecc_action:DRAIN",
            Action::Reset => "ecc_action:RESET_GPU",
            Action::Rma => "ecc_action:RMA",
        }
    }

    fn confidence(self) -> f64 {
        match self {
            Action::Watch => 0.7,
            Action::Drain | Action::Reset => 0.9,
            Action::Rma => 0.99,
        }
    }

    fn runbook(self, host: &str, index: u32) -> String {
        match self {
            Action::Watch => format!("correctable errors rising on {host} GPU {index}: watch for row remapping, plan a replacement"),
            Action::Drain => format!("uncorrectable memory errors: drain {host}, `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i {index}`"),
            Action::Reset => format!("reset the GPU to apply the pending row remap: drain GPU {index}'s jobs on {host}, `nvidia-smi -r -i {index}` (or reboot the node), then `nvidia-smi -q -d ROW_REMAPPER -i {index}` says Pending: No"),
            Action::Rma => format!("replace the GPU (RMA): drain {host} and take GPU {index} out of service; `nvidia-smi -q -d ROW_REMAPPER -i {index}` shows the failure, attach `nvidia-bug-report.sh` output to the RMA"),
        }
    }
}

/// A GPU's ECC counters and row remapping this window (cumulative volatile
/// counters; a decrease is a driver reload or reset, never an error).
pub(super) fn judge(
    st: &mut GpuState,
    g: &GpuSample,
    entity: &str,
    host: &str,
    jobs: &[String],
) -> Option<Finding> {
    let mut evidence = Vec::new();
    let mut action: Option<Action> = None;
    let mut raise = |a: Action| action = Some(action.map_or(a, |b| b.max(a)));
    if let Some(d) = g.ecc_dbe_volatile {
        if let Some(p) = st.dbe.filter(|&p| d > p) {
            evidence.push(format!("{} double-bit ECC errors +{}", g.uuid, d - p));
            raise(Action::Drain);
        }
        st.dbe = Some(d);
    }
    if let Some(s) = g.ecc_sbe_volatile {
        let delta = st.sbe.map_or(0, |p| s.saturating_sub(p));
        st.sbe_streak = if delta >= SBE_PER_WINDOW {
            st.sbe_streak + 1
        } else {
            0
        };
        if st.sbe_streak >= 2 {
            evidence.push(format!(
                "{} single-bit ECC errors rising: +{delta} this window",
                g.uuid
            ));
            raise(Action::Watch);
        }
        st.sbe = Some(s);
    }
    let rows = format!(
        "{} rows remapped for uncorrectable errors, {} for correctable",
        shown(g.remapped_rows_unc),
        shown(g.remapped_rows_corr)
    );
    if g.remap_failure == Some(true) {
        evidence.push(format!(
            "{} row remapping failed: a memory bank has no spare row left ({rows}); NVIDIA's action: replace the GPU (RMA)",
            g.uuid
        ));
        raise(Action::Rma);
    } else if g.remap_pending == Some(true) {
        evidence.push(format!(
            "{} row remap pending ({rows}): the remapped rows are used only after the next GPU reset; until then the faulty rows stay in service",
            g.uuid
        ));
        raise(Action::Reset);
    }
    if let Some(u) = g.remapped_rows_unc {
        if let Some(p) = st.remapped_unc.filter(|&p| u > p) {
            evidence.push(format!(
                "{} rows newly remapped for uncorrectable errors: +{} this window",
                g.uuid,
                u - p
            ));
            raise(Action::Drain);
        }
        st.remapped_unc = Some(u);
    }
    let action = action?;
    let index = g.index;
    Some(
        Finding::new(IncidentKind::GpuEcc, entity, action.confidence())
            .with_evidence_list(evidence)
            .with_mark(action.mark().to_string())
            .with_jobs(jobs)
            .with_runbook(action.runbook(host, index)),
    )
}

fn shown(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}
