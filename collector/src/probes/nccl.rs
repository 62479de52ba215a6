//! Attaching the NCCL uprobes and reading their maps.
use std::{collections::BTreeMap, path::Path};

use aya::{
    maps::{HashMap, MapData},
    Ebpf,
};
use collector_common::{
    cuda::HandleKey,
    nccl::{cookie, init, layout, op, CommInfo, OpKey, OpStats, SeqRing},
};
use object::{Object, ObjectSymbol};

use super::{entry::ElfError, ProbeError, ProbeState, ProbeStatus, Probes};

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
        entry: "nccl_call",
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

/// Every probed NCCL API (`ncclBcast` is counted through `ncclBroadcast`,
/// which NCCL calls to implement it).
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
) -> Vec<std::path::PathBuf> {
    let libs = match crate::nccl_lib::discover(search) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("{e}");
            status.push(ProbeStatus {
                name: "nccl",
                state: ProbeState::Inactive(e.to_string()),
            });
            return Vec::new();
        }
    };
    attach_libraries(ebpf, &libs, status)
}

/// Attaches the NCCL probes to each of `libs`; one status line per API.
fn attach_libraries(
    ebpf: &mut Ebpf,
    libs: &[std::path::PathBuf],
    status: &mut Vec<ProbeStatus>,
) -> Vec<std::path::PathBuf> {
    let mut loaded = Vec::new();
    let mut attached_in = vec![0usize; NCCL_APIS.len()];
    let mut why: Vec<Option<String>> = vec![None; NCCL_APIS.len()];
    let mut used = Vec::new();
    for lib in libs {
        let resolved = match resolve(lib, NCCL_APIS) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(library = %lib.display(), error = %e, "NCCL library unreadable");
                continue;
            }
        };
        let symbols: Vec<String> = resolved
            .iter()
            .map(|r| r.as_ref().map(|(s, _)| s.clone()).unwrap_or_default())
            .collect();
        let placements = super::entry::placements_of(lib, symbols.iter().map(String::as_str));
        let mut any = false;
        for (i, (api, r)) in NCCL_APIS.iter().zip(resolved).enumerate() {
            let (symbol, _) = match r {
                Ok(s) => s,
                Err(e) => {
                    why[i] = Some(e.to_string());
                    continue;
                }
            };
            let skip = placements[i].skip;
            let r = [(Some(api.entry), false), (api.ret, true)]
                .into_iter()
                .filter_map(|(p, ret)| p.map(|p| (p, ret)))
                .try_for_each(|(prog, ret)| {
                    super::attach::attach_one(
                        ebpf,
                        &mut loaded,
                        prog,
                        super::attach::location(&symbol, skip),
                        api.cookie,
                        lib,
                    )
                    .map_err(|e| e.of(ret, &symbol, lib))
                });
            match r {
                Ok(()) => {
                    attached_in[i] += 1;
                    any = true;
                }
                Err(e) => why[i] = Some(e.to_string()),
            }
        }
        if any {
            used.push(lib.clone());
        }
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
        metrics::gauge!("faultline_probe_attached", "probe" => api.status)
            .set(f64::from(u8::from(state == ProbeState::Attached)));
        status.push(ProbeStatus {
            name: api.status,
            state,
        });
    }
    let libraries: Vec<String> = used.iter().map(|p| p.display().to_string()).collect();
    tracing::info!(libraries = ?libraries, "NCCL probes");
    used
}

impl Probes {
    /// Attaches the NCCL probes to libraries discovery finds now that it did
    /// not find before (a virtual environment created after the collector
    /// started, a job that brought its own wheel), up to
    /// [`crate::nccl_lib::MAX_LIBRARIES`] in all. Only for discovery: a
    /// configured list is attached once. Returns the libraries added.
    pub fn nccl_rescan(&mut self, search: &crate::nccl_lib::Search) -> Vec<std::path::PathBuf> {
        let room = crate::nccl_lib::MAX_LIBRARIES.saturating_sub(self.nccl_libraries.len());
        if !search.configured.is_empty() || room == 0 {
            return Vec::new();
        }
        let Ok(found) = crate::nccl_lib::discover(search) else {
            return Vec::new();
        };
        let new: Vec<std::path::PathBuf> = found
            .into_iter()
            .filter(|p| !self.nccl_libraries.contains(p))
            .take(room)
            .collect();
        if new.is_empty() {
            return Vec::new();
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
        metrics::counter!("faultline_nccl_libraries_attached_late_total")
            .increment(used.len() as u64);
        for p in &used {
            tracing::info!(library = %p.display(), "NCCL probes attached to a library found after start");
        }
        self.nccl_libraries.extend(used.iter().cloned());
        used
    }

    /// The NCCL maps as they are now (cumulative).
    pub fn nccl_maps(&self) -> Result<crate::nccl::NcclMaps, ProbeError> {
        let err = |name| move |source| ProbeError::Map { name, source };
        let mut out = crate::nccl::NcclMaps::default();
        let m = self
            .ebpf()
            .map("NCCL_COMMS")
            .ok_or(ProbeError::MissingMap("NCCL_COMMS"))?;
        let h = HashMap::<&MapData, HandleKey, CommInfo>::try_from(m).map_err(err("NCCL_COMMS"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_COMMS"))?;
            out.comms.insert((k.pid, k.handle), v);
        }
        let m = self
            .ebpf()
            .map("NCCL_OPS")
            .ok_or(ProbeError::MissingMap("NCCL_OPS"))?;
        let h = HashMap::<&MapData, OpKey, OpStats>::try_from(m).map_err(err("NCCL_OPS"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_OPS"))?;
            out.ops.insert(k, v);
        }
        let m = self
            .ebpf()
            .map("NCCL_SEQ")
            .ok_or(ProbeError::MissingMap("NCCL_SEQ"))?;
        let h = HashMap::<&MapData, HandleKey, SeqRing>::try_from(m).map_err(err("NCCL_SEQ"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_SEQ"))?;
            out.seqs.insert((k.pid, k.handle), v);
        }
        Ok(out)
    }

    /// Removes the NCCL entries of processes that exited; returns how many.
    pub fn nccl_prune(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        if dead.is_empty() {
            return Ok(0);
        }
        Ok(
            super::prune_hash::<HandleKey, CommInfo>(self, "NCCL_COMMS", dead, |k| k.pid)?
                + super::prune_hash::<OpKey, OpStats>(self, "NCCL_OPS", dead, |k| k.pid)?
                + super::prune_hash::<HandleKey, SeqRing>(self, "NCCL_SEQ", dead, |k| k.pid)?,
        )
    }
}
