//! The probe table: every program in the eBPF object, where it attaches,
//! whether the collector can run without it, and the tracepoint field offsets
//! it needs (read from tracefs and patched into the object's globals).
use super::ProbeOptions;
use crate::tracefs::{Tracefs, TracefsError};

#[derive(Clone, Copy, Debug)]
pub enum Attach {
    Tracepoint {
        category: &'static str,
        name: &'static str,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Family {
    Exec,
    Block,
}

#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    /// Name in logs, status and metrics labels.
    pub name: &'static str,
    /// Program name in the eBPF object.
    pub program: &'static str,
    pub attach: Attach,
    pub family: Family,
    /// A required probe that cannot attach stops the collector with an error.
    pub required: bool,
}

impl ProbeSpec {
    pub fn enabled(&self, opts: &ProbeOptions) -> bool {
        match self.family {
            Family::Exec => opts.exec,
            Family::Block => opts.block,
        }
    }
}

pub const PROBES: &[ProbeSpec] = &[ProbeSpec {
    name: "exec",
    program: "sched_process_exec",
    attach: Attach::Tracepoint {
        category: "sched",
        name: "sched_process_exec",
    },
    family: Family::Exec,
    // Exec events refresh the process identity cache; without them attribution is stale.
    required: true,
}];

/// Globals to patch before load: (symbol, value).
pub fn globals(
    tracefs: &Tracefs,
    opts: &ProbeOptions,
) -> Result<Vec<(&'static str, u32)>, TracefsError> {
    let mut out = Vec::new();
    if opts.exec {
        let tp = ("sched", "sched_process_exec");
        out.push((
            "EXEC_OFF_FILENAME",
            tracefs.field(tp.0, tp.1, "filename")?.offset,
        ));
        out.push((
            "EXEC_OFF_OLD_PID",
            tracefs.field(tp.0, tp.1, "old_pid")?.offset,
        ));
    }
    Ok(out)
}
