//! Attaching the NCCL uprobes (at load and on rescan) to every copy of
//! the library found; the maps are read by `crate::nccl::probe`.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use aya::Ebpf;
use collector_common::nccl::{cookie, init, layout, op};
use object::{Object, ObjectSymbol};

use super::{
    entry::ElfError,
    libraries::{detach, take_unmapped, AttachedLib, Synced},
    ProbeState, ProbeStatus, Probes,
};
use crate::proc_libs::FileKey;

/// One NCCL API: its name (without the `nccl`/`pnccl` prefix), the programs
/// and the cookie, and whether every supported NCCL exports it.
#[derive(Clone, Copy, Debug)]
pub struct NcclApi {
    /// Status name, `nccl:ncclAllReduce`.
    pub status: &'static str,
    /// `AllReduce`: attached as `pncclAllReduce` / `ncclAllReduce`.
    pub name: &'static str,
    pub entry: &'static str,
    pub ret: Option<&'static str>,
    pub cookie: u64,
    /// Exported by every NCCL 2.x the collector supports; others
    /// (`ncclCommInitRankScalable` 2.23, `ncclAlltoAll` 2.28) may be absent.
    pub core: bool,
}

const fn coll(status: &'static str, name: &'static str, o: u32, l: u32, core: bool) -> NcclApi {
    NcclApi {
        status,
        name,
        entry: op::program(o),
        ret: None,
        cookie: cookie(o, l),
        core,
    }
}

const fn init_api(status: &'static str, name: &'static str, kind: u32, core: bool) -> NcclApi {
    NcclApi {
        status,
        name,
        entry: "nccl_init_enter",
        ret: Some("nccl_init_return"),
        cookie: kind as u64,
        core,
    }
}

/// A communicator lifecycle call: counted per communicator, and sets its
/// state (`collector_common::nccl::end`). Newer NCCL only.
const fn lifecycle(status: &'static str, name: &'static str, o: u32) -> NcclApi {
    coll(status, name, o, layout::COMM_ARG0, false)
}

/// Every probed NCCL API (`ncclBcast` is counted through `ncclBroadcast`,
/// which NCCL calls to implement it). The `*Config` collectives (NCCL 2.32:
/// a trailing `ncclCollConfig_t *`) are separate code that calls no other
/// API, counted under the plain op; every one of NCCL 2.32.3's exports that
/// is not here is listed with the reason in `docs/nccl.md`.
pub const NCCL_APIS: &[NcclApi] = &[
    init_api(
        "nccl:ncclCommInitRank",
        "CommInitRank",
        init::INIT_RANK,
        true,
    ),
    init_api(
        "nccl:ncclCommInitRankConfig",
        "CommInitRankConfig",
        init::INIT_RANK_CONFIG,
        true,
    ),
    init_api(
        "nccl:ncclCommInitRankScalable",
        "CommInitRankScalable",
        init::INIT_RANK_SCALABLE,
        false,
    ),
    init_api("nccl:ncclCommInitAll", "CommInitAll", init::INIT_ALL, true),
    init_api("nccl:ncclCommSplit", "CommSplit", init::SPLIT, false),
    NcclApi {
        status: "nccl:ncclCommDestroy",
        name: "CommDestroy",
        entry: "nccl_comm_end",
        ret: None,
        cookie: 1,
        core: true,
    },
    NcclApi {
        status: "nccl:ncclCommAbort",
        name: "CommAbort",
        entry: "nccl_comm_end",
        ret: None,
        cookie: 2,
        core: true,
    },
    coll(
        "nccl:ncclAllReduce",
        "AllReduce",
        op::ALL_REDUCE,
        layout::COMM_ARG5,
        true,
    ),
    coll(
        "nccl:ncclReduceScatter",
        "ReduceScatter",
        op::REDUCE_SCATTER,
        layout::COMM_ARG5,
        true,
    ),
    coll(
        "nccl:ncclBroadcast",
        "Broadcast",
        op::BROADCAST,
        layout::COMM_ARG5,
        true,
    ),
    coll(
        "nccl:ncclAllGather",
        "AllGather",
        op::ALL_GATHER,
        layout::COMM_ARG4,
        true,
    ),
    coll(
        "nccl:ncclAlltoAll",
        "AlltoAll",
        op::ALL_TO_ALL,
        layout::COMM_ARG4,
        false,
    ),
    coll(
        "nccl:ncclReduce",
        "Reduce",
        op::REDUCE,
        layout::COMM_STACK,
        true,
    ),
    coll("nccl:ncclSend", "Send", op::SEND, layout::COUNT_ARG1, true),
    coll("nccl:ncclRecv", "Recv", op::RECV, layout::COUNT_ARG1, true),
    coll(
        "nccl:ncclGroupStart",
        "GroupStart",
        op::GROUP_START,
        layout::NONE,
        true,
    ),
    coll(
        "nccl:ncclGroupEnd",
        "GroupEnd",
        op::GROUP_END,
        layout::NONE,
        true,
    ),
    // Newer NCCL (all present in 2.32.3; absent in older releases).
    init_api("nccl:ncclCommShrink", "CommShrink", init::SHRINK, false),
    init_api("nccl:ncclCommGrow", "CommGrow", init::GROW, false),
    lifecycle("nccl:ncclCommFinalize", "CommFinalize", op::COMM_FINALIZE),
    lifecycle("nccl:ncclCommRevoke", "CommRevoke", op::COMM_REVOKE),
    lifecycle("nccl:ncclCommSuspend", "CommSuspend", op::COMM_SUSPEND),
    lifecycle("nccl:ncclCommResume", "CommResume", op::COMM_RESUME),
    // Marks a communicator whose kernels communicate by themselves.
    coll(
        "nccl:ncclDevCommCreate",
        "DevCommCreate",
        op::DEV_COMM_CREATE,
        layout::COMM_ARG0,
        false,
    ),
    coll(
        "nccl:ncclGather",
        "Gather",
        op::GATHER,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclScatter",
        "Scatter",
        op::SCATTER,
        layout::COMM_ARG5,
        false,
    ),
    // `(…, comm, stream, const ncclCollConfig_t *config)`: the plain
    // layout, one more argument at the end.
    coll(
        "nccl:ncclAllReduceConfig",
        "AllReduceConfig",
        op::ALL_REDUCE,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclReduceScatterConfig",
        "ReduceScatterConfig",
        op::REDUCE_SCATTER,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclBroadcastConfig",
        "BroadcastConfig",
        op::BROADCAST,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclAllGatherConfig",
        "AllGatherConfig",
        op::ALL_GATHER,
        layout::COMM_ARG4,
        false,
    ),
    coll(
        "nccl:ncclAlltoAllConfig",
        "AlltoAllConfig",
        op::ALL_TO_ALL,
        layout::COMM_ARG4,
        false,
    ),
    coll(
        "nccl:ncclReduceConfig",
        "ReduceConfig",
        op::REDUCE,
        layout::COMM_STACK,
        false,
    ),
    coll(
        "nccl:ncclGatherConfig",
        "GatherConfig",
        op::GATHER,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclScatterConfig",
        "ScatterConfig",
        op::SCATTER,
        layout::COMM_ARG5,
        false,
    ),
    coll(
        "nccl:ncclPutSignal",
        "PutSignal",
        op::PUT_SIGNAL,
        layout::PUT_SIGNAL,
        false,
    ),
    coll(
        "nccl:ncclSignal",
        "Signal",
        op::SIGNAL,
        layout::COMM_ONLY_ARG4,
        false,
    ),
    coll(
        "nccl:ncclWaitSignal",
        "WaitSignal",
        op::WAIT_SIGNAL,
        layout::COMM_ONLY_ARG2,
        false,
    ),
];

/// One API in one library: the symbol to attach and its address, or why not.
pub type Resolved = Result<(String, u64), ElfError>;

/// Where one API is attached in one library: the symbol used (`pncclX`
/// when both names share an address, else the public `ncclX`) and its
/// address; `Err` when neither is defined.
pub fn resolve(path: &Path, apis: &[NcclApi]) -> Result<Vec<Resolved>, ElfError> {
    let cache = super::entry::open(path)?;
    let obj = super::entry::parse(path, &cache)?;
    let mut addr: BTreeMap<String, u64> = BTreeMap::new();
    for s in obj.dynamic_symbols().chain(obj.symbols()) {
        if !s.is_definition() {
            continue;
        }
        if let Ok(n) = s.name() {
            if n.starts_with("nccl") || n.starts_with("pnccl") {
                addr.entry(n.to_string()).or_insert(s.address());
            }
        }
    }
    Ok(apis
        .iter()
        .map(|a| {
            let public = format!("nccl{}", a.name);
            let profiling = format!("pnccl{}", a.name);
            match (addr.get(&public), addr.get(&profiling)) {
                (Some(x), Some(y)) if x == y => Ok((profiling, *y)),
                (Some(x), _) => Ok((public, *x)),
                (None, Some(y)) => Ok((profiling, *y)),
                (None, None) => Err(ElfError::NotDefined(public).in_file(path)),
            }
        })
        .collect())
}

/// Attaches the NCCL probes to every library [`crate::nccl_lib::discover`]
/// finds. Every outcome goes into `status` (one line per API: attached in
/// how many of the libraries); nothing here stops the collector.
pub(super) fn attach_nccl(
    ebpf: &mut Ebpf,
    search: &crate::nccl_lib::Search,
    status: &mut Vec<ProbeStatus>,
) -> BTreeMap<FileKey, AttachedLib> {
    let libs = match crate::nccl_lib::discover(search) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("{e}");
            status.push(ProbeStatus {
                name: "nccl",
                state: ProbeState::Inactive(e.to_string()),
            });
            return BTreeMap::new();
        }
    };
    attach_libraries(ebpf, &libs, status)
}

/// Attaches the NCCL probes to each of `libs`; one status line per API.
fn attach_libraries(
    ebpf: &mut Ebpf,
    libs: &[crate::nccl_lib::Found],
    status: &mut Vec<ProbeStatus>,
) -> BTreeMap<FileKey, AttachedLib> {
    let mut loaded = Vec::new();
    let mut attached_in = vec![0usize; NCCL_APIS.len()];
    let mut why: Vec<Option<String>> = vec![None; NCCL_APIS.len()];
    let mut used = BTreeMap::new();
    for found in libs {
        let mut held = match AttachedLib::hold(
            &found.path,
            found.key,
            found.shown.clone(),
            found.pinned,
            found.on_host,
        ) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(library = %found.shown, error = %e, "NCCL library not attached");
                continue;
            }
        };
        let lib = held.attach_path.clone();
        let resolved = match resolve(&lib, NCCL_APIS) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(library = %found.shown, error = %e, "NCCL library unreadable");
                continue;
            }
        };
        let symbols: Vec<String> = resolved
            .iter()
            .map(|r| r.as_ref().map(|(s, _)| s.clone()).unwrap_or_default())
            .collect();
        let placements = super::entry::placements_of(&lib, symbols.iter().map(String::as_str));
        for (i, (api, r)) in NCCL_APIS.iter().zip(resolved).enumerate() {
            let (symbol, _) = match r {
                Ok(s) => s,
                Err(e) => {
                    why[i] = Some(e.to_string());
                    continue;
                }
            };
            let skip = placements[i].skip;
            let mut links = Vec::new();
            let r = [(Some(api.entry), false), (api.ret, true)]
                .into_iter()
                .filter_map(|(p, ret)| p.map(|p| (p, ret)))
                .try_for_each(|(prog, ret)| {
                    super::attach::attach_one_link(
                        ebpf,
                        &mut loaded,
                        prog,
                        super::attach::location(&symbol, skip),
                        api.cookie,
                        &lib,
                    )
                    .map(|id| links.push((prog, id)))
                    .map_err(|e| e.of(ret, &symbol, Path::new(&found.shown)))
                });
            held.links.extend(links);
            match r {
                Ok(()) => attached_in[i] += 1,
                Err(e) => why[i] = Some(e.to_string()),
            }
        }
        if held.links.is_empty() {
            continue;
        }
        used.insert(found.key, held);
    }
    for (i, api) in NCCL_APIS.iter().enumerate() {
        let state = if attached_in[i] > 0 {
            ProbeState::Attached
        } else {
            ProbeState::Inactive(why[i].take().unwrap_or_else(|| "no library".into()))
        };
        if let ProbeState::Inactive(w) = &state {
            if api.core {
                tracing::warn!(api = api.status, reason = %w, "NCCL probe inactive");
            } else {
                tracing::info!(api = api.status, reason = %w, "optional NCCL probe inactive");
            }
        }
        metrics::gauge!(crate::metrics_catalog::PROBE_ATTACHED.name, "probe" => api.status)
            .set(f64::from(u8::from(state == ProbeState::Attached)));
        status.push(ProbeStatus {
            name: api.status,
            state,
        });
    }
    let libraries: Vec<&str> = used
        .values()
        .map(|l: &AttachedLib| l.shown.as_str())
        .collect();
    tracing::info!(libraries = ?libraries, "NCCL probes");
    used
}

impl Probes {
    /// Attaches the NCCL probes to libraries discovery finds now that it did
    /// not find before (a container started after the collector, a virtual
    /// environment created later, a new image layer), up to
    /// [`crate::nccl_lib::MAX_LIBRARIES`] in all. Only for discovery: a
    /// configured list is attached once. Returns the libraries added (the
    /// paths they were found at). Libraries no process maps any more are
    /// detached.
    pub fn nccl_rescan(&mut self, search: &crate::nccl_lib::Search) -> Vec<std::path::PathBuf> {
        if !search.configured.is_empty() {
            return Vec::new();
        }
        let found = crate::nccl_lib::discover(search).unwrap_or_default();
        let before: Vec<FileKey> = self.nccl_libraries.keys().copied().collect();
        self.nccl_sync(&found);
        self.nccl_libraries
            .iter()
            .filter(|(k, _)| !before.contains(k))
            .map(|(_, l)| l.found_at.clone())
            .collect()
    }

    /// Brings the attached NCCL libraries to `found` (what discovery sees
    /// now): attaches the new ones (room permitting), detaches those not
    /// pinned that no process maps any more.
    pub fn nccl_sync(&mut self, found: &[crate::nccl_lib::Found]) -> Synced {
        let live: BTreeSet<FileKey> = found.iter().map(|f| f.key).collect();
        let detached: Vec<String> = take_unmapped(&mut self.nccl_libraries, &live)
            .into_iter()
            .map(|l| {
                let shown = l.shown.clone();
                detach(&mut self.ebpf, l);
                shown
            })
            .collect();
        let room = crate::nccl_lib::MAX_LIBRARIES.saturating_sub(self.nccl_libraries.len());
        let new: Vec<crate::nccl_lib::Found> = found
            .iter()
            .filter(|f| !self.nccl_libraries.contains_key(&f.key))
            .cloned()
            .collect();
        let refused = new.len().saturating_sub(room);
        if refused > 0 {
            metrics::counter!(crate::metrics_catalog::NCCL_LIBRARIES_REFUSED.name)
                .increment(refused as u64);
            tracing::warn!(
                refused,
                max = crate::nccl_lib::MAX_LIBRARIES,
                "NCCL libraries not attached: too many distinct copies"
            );
        }
        let mut out = Synced {
            detached,
            refused,
            ..Synced::default()
        };
        if !out.detached.is_empty() {
            metrics::counter!(crate::metrics_catalog::NCCL_LIBRARIES_DETACHED.name)
                .increment(out.detached.len() as u64);
        }
        let new: Vec<_> = new.into_iter().take(room).collect();
        if new.is_empty() {
            return out;
        }
        let mut status = Vec::new();
        let used = attach_libraries(&mut self.ebpf, &new, &mut status);
        for st in status
            .into_iter()
            .filter(|s| s.state == ProbeState::Attached)
        {
            match self.status.iter_mut().find(|s| s.name == st.name) {
                Some(old) => old.state = ProbeState::Attached,
                None => self.status.push(st),
            }
        }
        // The library-level line of a first discovery that found nothing.
        if !used.is_empty() {
            self.status
                .retain(|s| !(s.name == "nccl" && matches!(s.state, ProbeState::Inactive(_))));
        }
        metrics::counter!(crate::metrics_catalog::NCCL_LIBRARIES_ATTACHED_LATE.name)
            .increment(used.len() as u64);
        for l in used.values() {
            tracing::info!(library = %l.shown, "NCCL probes attached to a library found after start");
            out.attached.push(l.shown.clone());
        }
        self.nccl_libraries.extend(used);
        out
    }
}
