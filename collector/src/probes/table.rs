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
    /// Only used in this block mode.
    pub only_in: Option<BlockMode>,
}

impl ProbeSpec {
    pub fn enabled(&self, opts: &ProbeOptions, mode: BlockMode) -> bool {
        let family = match self.family {
            Family::Exec => opts.exec,
            Family::Block => opts.block,
        };
        family && self.only_in.is_none_or(|m| m == mode)
    }
}

/// How the block probes time requests, chosen from the tracepoints the kernel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockMode {
    /// `block_io_start` → `block_io_done` (kernel ≥ 6.5): submitter attribution,
    /// counts identical to `/sys/block/<dev>/stat`.
    Io,
    /// `block_rq_issue` → `block_rq_complete`: device-side latency; the submitter
    /// is whoever issued to the driver (often a kworker).
    Rq,
}

impl BlockMode {
    /// Value of the `BLOCK_MODE` global in the eBPF object.
    pub fn global(self) -> u32 {
        match self {
            Self::Io => 0,
            Self::Rq => 1,
        }
    }

    pub fn detect(tracefs: &Tracefs) -> Self {
        if tracefs.has_tracepoint("block", "block_io_start")
            && tracefs.has_tracepoint("block", "block_io_done")
        {
            Self::Io
        } else {
            Self::Rq
        }
    }
}

const fn tp(
    name: &'static str,
    category: &'static str,
    family: Family,
    required: bool,
    only_in: Option<BlockMode>,
) -> ProbeSpec {
    ProbeSpec {
        name,
        program: name,
        attach: Attach::Tracepoint { category, name },
        family,
        required,
        only_in,
    }
}

pub const PROBES: &[ProbeSpec] = &[
    // Exec events refresh the process identity cache; without them attribution is stale.
    tp("sched_process_exec", "sched", Family::Exec, true, None),
    tp(
        "block_io_start",
        "block",
        Family::Block,
        false,
        Some(BlockMode::Io),
    ),
    tp(
        "block_io_done",
        "block",
        Family::Block,
        false,
        Some(BlockMode::Io),
    ),
    tp("block_rq_issue", "block", Family::Block, false, None),
    tp("block_rq_complete", "block", Family::Block, false, None),
];

/// Globals to patch before load: (symbol, value).
///
/// A missing exec tracepoint is an error (that probe is required); missing
/// block tracepoints are left to the attach step, which reports them.
pub fn globals(
    tracefs: &Tracefs,
    opts: &ProbeOptions,
    mode: BlockMode,
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
    if opts.block && tracefs.has_tracepoint("block", "block_rq_complete") {
        out.push(("BLOCK_MODE", mode.global()));
        out.push(("BLOCK_SAMPLE_EVERY", opts.block_sample_every));
        // block_rq_issue, block_io_start and block_io_done share one layout;
        // the eBPF side reads them with one set of offsets, so check that.
        let issue = ("block", "block_rq_issue");
        let dev = tracefs.field(issue.0, issue.1, "dev")?;
        let sector = tracefs.field(issue.0, issue.1, "sector")?;
        let rwbs = tracefs.field(issue.0, issue.1, "rwbs")?;
        if mode == BlockMode::Io {
            for name in ["block_io_start", "block_io_done"] {
                for (field, want) in [("dev", dev), ("sector", sector), ("rwbs", rwbs)] {
                    let got = tracefs.field("block", name, field)?;
                    if got != want {
                        return Err(TracefsError::MissingField {
                            category: "block".into(),
                            name: name.into(),
                            field: format!("{field} at the offset block_rq_issue uses"),
                        });
                    }
                }
            }
        }
        out.push(("BLK_OFF_DEV", dev.offset));
        out.push(("BLK_OFF_SECTOR", sector.offset));
        out.push(("BLK_OFF_RWBS", rwbs.offset));
        let c = ("block", "block_rq_complete");
        out.push(("BLKC_OFF_DEV", tracefs.field(c.0, c.1, "dev")?.offset));
        out.push(("BLKC_OFF_SECTOR", tracefs.field(c.0, c.1, "sector")?.offset));
        out.push((
            "BLKC_OFF_NR_SECTOR",
            tracefs.field(c.0, c.1, "nr_sector")?.offset,
        ));
        out.push(("BLKC_OFF_RWBS", tracefs.field(c.0, c.1, "rwbs")?.offset));
    }
    Ok(out)
}
