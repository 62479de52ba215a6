//! [`Probes::load`]: privileges, the object with its globals, the block
//! programs (BTF raw tracepoints or classic), the table's tracepoints, the
//! library uprobes (CUDA, verbs, NCCL), and the probes' log forwarding.
use aya::{Btf, Ebpf, EbpfLoader};
use collector_common::{
    block::{RqSlot, RQ_SLOTS},
    cuda::{LaunchSlot, LAUNCH_SLOTS},
};
use tokio::io::unix::AsyncFd;

use super::{
    attach::{attach, attach_verbs, unload_btf},
    btf,
    cuda::attach_cuda,
    launch_duty,
    mmap_array::MmapArray,
    nccl, table, BlockAttach, BlockMode, ProbeError, ProbeOptions, ProbeSpec, ProbeState,
    ProbeStatus, Probes, PROBES, PROBES_OBJECT,
};
use crate::{privilege, tracefs::Tracefs};

/// Why the BTF block probes cannot be used (the classic ones are, then).
#[derive(Debug, thiserror::Error)]
enum BlockBtfError {
    #[error(transparent)]
    Offsets(#[from] btf::BtfError),
    #[error("parsing {path}: {source}")]
    Kernel {
        path: &'static str,
        #[source]
        source: aya::BtfError,
    },
}

impl Probes {
    /// Checks privileges, loads the object with tracepoint field offsets read
    /// from tracefs, attaches every enabled probe and starts forwarding the
    /// probes' aya-log records to `tracing`.
    pub fn load(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        if PROBES_OBJECT.is_empty() {
            return Err(ProbeError::Stub);
        }
        privilege::check_host()?;
        let tracefs = Tracefs::system()?;
        let block_mode = opts
            .block_mode
            .unwrap_or_else(|| BlockMode::detect(&tracefs));
        let mut globals = table::globals(&tracefs, opts, block_mode)?;
        // BTF-enabled block probes: struct offsets from the kernel's BTF, and
        // the BTF itself for the attach; without either, classic tracepoints.
        let mut kernel_btf = None;
        if opts.block && opts.block_btf {
            match block_btf() {
                Ok((g, b)) => {
                    globals.extend(g);
                    kernel_btf = Some(b);
                }
                Err(why) => tracing::warn!(
                    reason = %why,
                    "BTF block probes unavailable; using the classic block tracepoints"
                ),
            }
        }
        let (mut ebpf, cpus) = load_object(opts, &globals)?;
        let rq_slots = map_slots::<RqSlot>(&ebpf, "BLOCK_RQ_SLOTS", RQ_SLOTS, false)?;
        let launch_slots = map_slots::<LaunchSlot>(
            &ebpf,
            "CUDA_LAUNCH_SLOTS",
            cpus.saturating_mul(LAUNCH_SLOTS),
            true,
        )?;
        start_log_forwarding(&mut ebpf);
        let block_attach = match &kernel_btf {
            Some(btf) => attach_block_btf(&mut ebpf, &tracefs, btf, block_mode),
            None => BlockAttach::Classic,
        };
        let mut status = attach_table(&mut ebpf, &tracefs, opts, block_mode, block_attach)?;
        let (cuda_primary, launch_links) = if opts.cuda {
            attach_cuda(&mut ebpf, opts, &mut status)
        } else {
            status.push(disabled("cuda"));
            (None, Vec::new())
        };
        let cuda_library = cuda_primary.as_ref().map(|(_, l)| l.found_at.clone());
        let launch = launch_duty::LaunchDuty::new(launch_links);
        if opts.verbs {
            attach_verbs(&mut ebpf, opts, &mut status);
        } else {
            status.push(disabled("verbs"));
        }
        let nccl_libraries = if opts.nccl {
            nccl::attach_nccl(&mut ebpf, &opts.nccl_search, &mut status)
        } else {
            status.push(disabled("nccl"));
            Default::default()
        };
        if opts.block {
            tracing::info!(attach = block_attach.as_str(), "block probes");
        }
        Ok(Self {
            ebpf,
            status,
            block_mode,
            block_attach,
            cuda_library,
            cuda_primary,
            cuda_extra: Default::default(),
            nccl_libraries,
            launch: std::sync::Mutex::new(launch),
            rq_slots,
            launch_slots,
        })
    }
}

fn disabled(name: &'static str) -> ProbeStatus {
    ProbeStatus {
        name,
        state: ProbeState::Disabled,
    }
}

/// Globals of the object: (name, value).
type Globals = Vec<(&'static str, u32)>;

/// The block programs' struct offsets and the kernel's BTF.
fn block_btf() -> Result<(Globals, Btf), BlockBtfError> {
    let globals = btf::block_globals(btf::VMLINUX_BTF)?;
    let kernel = Btf::from_sys_fs().map_err(|source| BlockBtfError::Kernel {
        path: btf::VMLINUX_BTF,
        source,
    })?;
    Ok((globals, kernel))
}

/// The object with `globals` set; returns it and the number of possible CPUs.
fn load_object(opts: &ProbeOptions, globals: &[(&str, u32)]) -> Result<(Ebpf, u32), ProbeError> {
    let mut loader = EbpfLoader::new();
    for (name, value) in globals {
        loader.override_global(name, value, true);
    }
    loader.override_global("CUDA_EVENTS_PER_SEC", &opts.cuda_events_per_sec, true);
    // One row of launch slots per possible CPU (the program indexes by CPU).
    let cpus = aya::util::nr_cpus().unwrap_or(1).max(1) as u32;
    loader.map_max_entries("CUDA_LAUNCH_SLOTS", cpus.saturating_mul(LAUNCH_SLOTS));
    let ebpf = loader
        .load(PROBES_OBJECT)
        .map_err(|e| ProbeError::Load(Box::new(e)))?;
    Ok((ebpf, cpus))
}

/// Block programs first as BTF raw tracepoints; if any of them fails, all
/// of them are unloaded and the family attaches classically.
fn attach_block_btf(
    ebpf: &mut Ebpf,
    tracefs: &Tracefs,
    btf: &Btf,
    block_mode: BlockMode,
) -> BlockAttach {
    let used: Vec<&ProbeSpec> = PROBES
        .iter()
        .filter(|s| {
            s.btf_program.is_some() && s.unused_with(block_mode, BlockAttach::Btf).is_none()
        })
        .collect();
    let failed = used
        .iter()
        .find_map(|s| attach(ebpf, tracefs, s, Some(btf)).err());
    match failed {
        None => BlockAttach::Btf,
        Some(why) => {
            tracing::warn!(reason = %why, "BTF block probes failed; using the classic block tracepoints");
            for s in &used {
                unload_btf(ebpf, s);
            }
            BlockAttach::Classic
        }
    }
}

/// Every probe of the table: attached, disabled, unused or inactive; a
/// required one that fails stops the load.
fn attach_table(
    ebpf: &mut Ebpf,
    tracefs: &Tracefs,
    opts: &ProbeOptions,
    block_mode: BlockMode,
    block_attach: BlockAttach,
) -> Result<Vec<ProbeStatus>, ProbeError> {
    let mut status = Vec::with_capacity(PROBES.len());
    for spec in PROBES {
        let state = if let Some(why) = spec.unused_with(block_mode, block_attach) {
            ProbeState::Unused(why)
        } else if !spec.enabled(opts) {
            ProbeState::Disabled
        } else if block_attach == BlockAttach::Btf && spec.btf_program.is_some() {
            ProbeState::Attached
        } else {
            match attach(ebpf, tracefs, spec, None) {
                Ok(()) => ProbeState::Attached,
                Err(reason) if spec.required => {
                    return Err(ProbeError::Required {
                        probe: spec.name,
                        reason: Box::new(reason),
                    })
                }
                Err(reason) => ProbeState::Inactive(reason.to_string()),
            }
        };
        match &state {
            ProbeState::Attached => tracing::info!(probe = spec.name, "attached"),
            ProbeState::Disabled => tracing::info!(probe = spec.name, "disabled"),
            ProbeState::Unused(why) => tracing::info!(probe = spec.name, why, "not used"),
            ProbeState::Inactive(why) => {
                tracing::warn!(probe = spec.name, reason = %why, "probe inactive")
            }
        }
        metrics::gauge!(crate::metrics_catalog::PROBE_ATTACHED.name, "probe" => spec.name).set(
            if state == ProbeState::Attached {
                1.0
            } else {
                0.0
            },
        );
        status.push(ProbeStatus {
            name: spec.name,
            state,
        });
    }
    Ok(status)
}

/// Maps the mmapable array `name` (`len` values) for the life of the probes.
fn map_slots<T: aya::Pod>(
    ebpf: &Ebpf,
    name: &'static str,
    len: u32,
    writable: bool,
) -> Result<MmapArray<T>, ProbeError> {
    let Some(aya::maps::Map::Array(m)) = ebpf.map(name) else {
        return Err(ProbeError::MissingMap(name));
    };
    MmapArray::map(std::os::fd::AsFd::as_fd(m.fd()), len as usize, writable)
        .map_err(|source| ProbeError::Mmap { name, source })
}

/// Forwards aya-log records from the probes to `log` (bridged into `tracing`).
fn start_log_forwarding(ebpf: &mut Ebpf) {
    let logger = match aya_log::EbpfLogger::init(ebpf) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "eBPF log forwarding unavailable");
            return;
        }
    };
    // SAFETY: the logger owns its ring fd for as long as the AsyncFd lives.
    let mut logger =
        match unsafe { AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE) } {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e.into_parts().1, "eBPF log forwarding unavailable");
                return;
            }
        };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = logger.readable_mut().await else {
                return;
            };
            guard.clear_ready();
            guard.get_inner_mut().flush();
        }
    });
}
