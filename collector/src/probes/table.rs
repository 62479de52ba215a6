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
    /// The same probe as a BTF-enabled raw tracepoint program (used when the
    /// kernel has BTF, see [`BlockAttach`]).
    pub btf_program: Option<&'static str>,
    /// The block modes the BTF program is used in (the BTF path needs fewer
    /// programs: in mode IO `block_rq_complete` takes the bytes and the
    /// count, and `block_io_start`'s record carries the submitter).
    pub btf_modes: &'static [BlockMode],
}

impl ProbeSpec {
    /// Enabled in the configuration (whether this kernel needs it is
    /// [`Self::unused_in`]).
    pub fn enabled(&self, opts: &ProbeOptions) -> bool {
        match self.family {
            Family::Exec => opts.exec,
            Family::Block => opts.block,
        }
    }

    /// Why this probe is not used in `mode` (another pair times block I/O).
    pub fn unused_in(&self, mode: BlockMode) -> Option<&'static str> {
        match (self.only_in, mode) {
            (Some(BlockMode::Io), BlockMode::Rq) => Some(
                "this kernel has no block_io_start/block_io_done (before 6.5); block_rq_issue/block_rq_complete time block I/O",
            ),
            (Some(BlockMode::Rq), BlockMode::Io) => {
                Some("block_io_start/block_io_done time block I/O on this kernel")
            }
            _ => None,
        }
    }

    /// Why this probe is not used in `mode` when the block family attaches
    /// as `attach` (on BTF some programs are not needed).
    pub fn unused_with(&self, mode: BlockMode, attach: BlockAttach) -> Option<&'static str> {
        if let Some(why) = self.unused_in(mode) {
            return Some(why);
        }
        match (attach, self.family) {
            (BlockAttach::Btf, Family::Block) if !self.btf_modes.contains(&mode) => Some(
                "on BTF raw tracepoints block_io_start notes the submitter and block_rq_complete counts the request",
            ),
            _ => None,
        }
    }
}

/// How the block programs attach: BTF-enabled raw tracepoints keyed by the
/// request pointer when the kernel publishes BTF (and `[block] btf` is on),
/// else the classic tracepoints keyed by (dev, sector, op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockAttach {
    Btf,
    Classic,
}

impl BlockAttach {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Btf => "btf",
            Self::Classic => "classic",
        }
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
        btf_program: None,
        btf_modes: &[],
    }
}

const fn block_tp(
    name: &'static str,
    btf_program: Option<&'static str>,
    only_in: Option<BlockMode>,
    btf_modes: &'static [BlockMode],
) -> ProbeSpec {
    ProbeSpec {
        btf_program,
        btf_modes,
        ..tp(name, "block", Family::Block, false, only_in)
    }
}

pub const PROBES: &[ProbeSpec] = &[
    // Exec events refresh the process identity cache; without them attribution is stale.
    tp("sched_process_exec", "sched", Family::Exec, true, None),
    block_tp(
        "block_io_start",
        Some("block_btf_io_start"),
        Some(BlockMode::Io),
        &[BlockMode::Io],
    ),
    block_tp("block_io_done", None, Some(BlockMode::Io), &[]),
    block_tp(
        "block_rq_issue",
        Some("block_btf_rq_issue"),
        None,
        &[BlockMode::Rq],
    ),
    block_tp(
        "block_rq_complete",
        Some("block_btf_rq_complete"),
        None,
        &[BlockMode::Io, BlockMode::Rq],
    ),
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
        let nr_sector = tracefs.field(issue.0, issue.1, "nr_sector")?;
        if mode == BlockMode::Io {
            for name in ["block_io_start", "block_io_done"] {
                for (field, want) in [
                    ("dev", dev),
                    ("sector", sector),
                    ("rwbs", rwbs),
                    ("nr_sector", nr_sector),
                ] {
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
        out.push(("BLK_OFF_NR_SECTOR", nr_sector.offset));
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

/// One CUDA driver symbol: the entry program, the optional return program,
/// and the attach cookie the programs read (`call::*`, or a variant selector).
#[derive(Clone, Copy, Debug)]
pub struct UprobeSpec {
    pub symbol: &'static str,
    pub entry: &'static str,
    pub ret: Option<&'static str>,
    pub cookie: u64,
    /// Present in every driver the collector supports; a missing optional
    /// symbol (newer API) is reported but expected on older drivers.
    pub core: bool,
}

const fn up(
    symbol: &'static str,
    entry: &'static str,
    ret: Option<&'static str>,
    cookie: u64,
    core: bool,
) -> UprobeSpec {
    UprobeSpec {
        symbol,
        entry,
        ret,
        cookie,
        core,
    }
}

use collector_common::cuda::call;

/// The launch programs: the ones bounded-overhead mode duty-cycles.
pub fn is_launch_program(program: &str) -> bool {
    matches!(
        program,
        "cuda_launch" | "cuda_launch_coop" | "cuda_launch_ex"
    )
}

/// The CUDA driver-API probes (see `collector-ebpf/src/cuda.rs` for prototypes).
pub const CUDA_PROBES: &[UprobeSpec] = &[
    up(
        "cuLaunchKernel",
        "cuda_launch",
        None,
        call::LAUNCH_KERNEL as u64,
        true,
    ),
    // The per-thread-default-stream exports (`_ptsz` / `_ptds`): what
    // `cuGetProcAddress` hands out with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
    // so what the CUDA runtime calls for work on `cudaStreamPerThread` or from
    // code built with `--default-stream per-thread` (docs/cuda-entry-points.md).
    // Same kinds as the legacy exports; optional, an old driver may lack one.
    up(
        "cuLaunchKernel_ptsz",
        "cuda_launch",
        None,
        call::LAUNCH_KERNEL as u64,
        false,
    ),
    up(
        "cuLaunchCooperativeKernel",
        "cuda_launch_coop",
        None,
        call::LAUNCH_COOPERATIVE as u64,
        true,
    ),
    up(
        "cuLaunchCooperativeKernel_ptsz",
        "cuda_launch_coop",
        None,
        call::LAUNCH_COOPERATIVE as u64,
        false,
    ),
    up(
        "cuLaunchKernelEx",
        "cuda_launch_ex",
        None,
        call::LAUNCH_KERNEL_EX as u64,
        false,
    ),
    up(
        "cuLaunchKernelEx_ptsz",
        "cuda_launch_ex",
        None,
        call::LAUNCH_KERNEL_EX as u64,
        false,
    ),
    up(
        "cuGraphLaunch",
        "cuda_enter",
        None,
        call::GRAPH_LAUNCH as u64,
        true,
    ),
    up(
        "cuGraphLaunch_ptsz",
        "cuda_enter",
        None,
        call::GRAPH_LAUNCH as u64,
        false,
    ),
    up(
        "cuMemcpyHtoD_v2",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_HTOD as u64,
        true,
    ),
    up(
        "cuMemcpyHtoD_v2_ptds",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_HTOD as u64,
        false,
    ),
    up(
        "cuMemcpyDtoH_v2",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_DTOH as u64,
        true,
    ),
    up(
        "cuMemcpyDtoH_v2_ptds",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_DTOH as u64,
        false,
    ),
    // The generic copy (unified addressing): what the CUDA runtime calls for
    // `cudaMemcpy` with `cudaMemcpyDefault`.
    up(
        "cuMemcpy",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY as u64,
        true,
    ),
    up(
        "cuMemcpy_ptds",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY as u64,
        false,
    ),
    up(
        "cuMemcpyAsync",
        "cuda_enter",
        None,
        call::MEMCPY_ASYNC as u64,
        true,
    ),
    up(
        "cuMemcpyAsync_ptsz",
        "cuda_enter",
        None,
        call::MEMCPY_ASYNC as u64,
        false,
    ),
    up(
        "cuMemcpyHtoDAsync_v2",
        "cuda_enter",
        None,
        call::MEMCPY_HTOD_ASYNC as u64,
        true,
    ),
    up(
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuda_enter",
        None,
        call::MEMCPY_HTOD_ASYNC as u64,
        false,
    ),
    up(
        "cuMemcpyDtoHAsync_v2",
        "cuda_enter",
        None,
        call::MEMCPY_DTOH_ASYNC as u64,
        true,
    ),
    up(
        "cuMemcpyDtoHAsync_v2_ptsz",
        "cuda_enter",
        None,
        call::MEMCPY_DTOH_ASYNC as u64,
        false,
    ),
    // Device to device, and between two GPUs' memories (peer): the copies
    // `cudaMemcpy` / `cudaMemcpyAsync` with `cudaMemcpyDeviceToDevice` and
    // `cudaMemcpyPeer` / `cudaMemcpyPeerAsync` call.
    up(
        "cuMemcpyDtoD_v2",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_DTOD as u64,
        true,
    ),
    up(
        "cuMemcpyDtoD_v2_ptds",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_DTOD as u64,
        false,
    ),
    up(
        "cuMemcpyDtoDAsync_v2",
        "cuda_enter",
        None,
        call::MEMCPY_DTOD_ASYNC as u64,
        true,
    ),
    up(
        "cuMemcpyDtoDAsync_v2_ptsz",
        "cuda_enter",
        None,
        call::MEMCPY_DTOD_ASYNC as u64,
        false,
    ),
    up(
        "cuMemcpyPeer",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_PEER as u64,
        true,
    ),
    up(
        "cuMemcpyPeer_ptds",
        "cuda_enter",
        Some("cuda_return"),
        call::MEMCPY_PEER as u64,
        false,
    ),
    up(
        "cuMemcpyPeerAsync",
        "cuda_enter",
        None,
        call::MEMCPY_PEER_ASYNC as u64,
        true,
    ),
    up(
        "cuMemcpyPeerAsync_ptsz",
        "cuda_enter",
        None,
        call::MEMCPY_PEER_ASYNC as u64,
        false,
    ),
    up(
        "cuStreamSynchronize",
        "cuda_enter",
        Some("cuda_return"),
        call::STREAM_SYNC as u64,
        true,
    ),
    up(
        "cuStreamSynchronize_ptsz",
        "cuda_enter",
        Some("cuda_return"),
        call::STREAM_SYNC as u64,
        false,
    ),
    up(
        "cuCtxSynchronize",
        "cuda_enter",
        Some("cuda_return"),
        call::CTX_SYNC as u64,
        true,
    ),
    up(
        "cuEventSynchronize",
        "cuda_enter",
        Some("cuda_return"),
        call::EVENT_SYNC as u64,
        true,
    ),
    up(
        "cuMemAlloc_v2",
        "cuda_enter",
        Some("cuda_return"),
        call::MEM_ALLOC as u64,
        true,
    ),
    up(
        "cuMemFree_v2",
        "cuda_enter",
        None,
        call::MEM_FREE as u64,
        true,
    ),
    up(
        "cuModuleGetFunction",
        "cuda_name_enter",
        Some("cuda_name_return"),
        0,
        true,
    ),
    up(
        "cuLibraryGetKernel",
        "cuda_name_enter",
        Some("cuda_name_return"),
        1,
        false,
    ),
    up(
        "cuKernelGetFunction",
        "cuda_kernel_func_enter",
        Some("cuda_kernel_func_return"),
        0,
        false,
    ),
    up(
        "cuDevicePrimaryCtxRetain",
        "cuda_ctx_retain_enter",
        Some("cuda_ctx_return"),
        0,
        true,
    ),
    up(
        "cuCtxCreate_v2",
        "cuda_ctx_create_enter",
        Some("cuda_ctx_return"),
        1,
        true,
    ),
    up("cuCtxSetCurrent", "cuda_ctx_set_current", None, 0, true),
];
