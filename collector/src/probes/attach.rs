//! Attaching the programs: tracepoints from the table, the CUDA driver's
//! uprobes, the verbs library's and provider's uprobes.
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
        BtfTracePoint, ProgramError, TracePoint, UProbe,
    },
    Btf, Ebpf,
};

use super::*;
use crate::tracefs::Tracefs;

/// Why a program did not load or attach (a probe's status says it).
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("program {0} missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error("program {program}: {source}")]
    ProgramType {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("verifier rejected {program}: {source:#}")]
    Verifier {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("tracepoint {category}/{name} not found in {root}/events (kernel lacks it)")]
    NoTracepoint {
        category: &'static str,
        name: &'static str,
        root: String,
    },
    #[error("attach tp_btf {name}: {source}")]
    BtfTracepoint {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("attach to {category}/{name}: {source}")]
    Tracepoint {
        category: &'static str,
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("kernel BTF: {0}")]
    KernelBtf(#[source] aya::BtfError),
    #[error("reading /proc/self/maps: {0}")]
    SelfMaps(#[source] std::io::Error),
    #[error("{0:#x} is in no mapping of /proc/self/maps")]
    NotMapped(usize),
    /// The uprobe on the collector's own calibration function.
    #[error("{kind} entry at {offset:#x} of /proc/self/exe: {source}")]
    Calibration {
        kind: &'static str,
        offset: u64,
        #[source]
        source: ProgramError,
    },
    #[error("calibration entries exist for x86-64 only")]
    NoCalibration,
    /// A uprobe that did not attach at its location.
    #[error("{0}")]
    Uprobe(#[source] ProgramError),
    /// Which probe of which library: `uprobe X in LIB: ...`.
    #[error("{kind} {symbol} in {}: {source}", .lib.display())]
    In {
        kind: &'static str,
        symbol: String,
        lib: std::path::PathBuf,
        #[source]
        source: Box<AttachError>,
    },
}

impl AttachError {
    /// `self`, said of the entry (`uprobe`) or return (`uretprobe`) probe
    /// on `symbol` in `lib`.
    pub(super) fn of(self, ret: bool, symbol: &str, lib: &std::path::Path) -> Self {
        Self::In {
            kind: if ret { "uretprobe" } else { "uprobe" },
            symbol: symbol.to_string(),
            lib: lib.to_path_buf(),
            source: Box::new(self),
        }
    }
}

/// Program `name` of `ebpf` as a `T` (a tracepoint, a uprobe ...).
pub(crate) fn program<'e, T>(
    ebpf: &'e mut Ebpf,
    name: &'static str,
) -> Result<&'e mut T, AttachError>
where
    &'e mut T: TryFrom<&'e mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(AttachError::MissingProgram(name))?
        .try_into()
        .map_err(|source| AttachError::ProgramType {
            program: name,
            source,
        })
}

/// Loads `program` of `ebpf` as a BTF-enabled raw tracepoint program on
/// tracepoint `name` (types from `btf`, the kernel's) and attaches it.
pub(super) fn attach_btf_tracepoint(
    ebpf: &mut Ebpf,
    program: &'static str,
    name: &'static str,
    btf: &Btf,
) -> Result<(), AttachError> {
    let prog: &mut BtfTracePoint = self::program(ebpf, program)?;
    prog.load(name, btf)
        .map_err(|source| AttachError::Verifier { program, source })?;
    prog.attach()
        .map_err(|source| AttachError::BtfTracepoint { name, source })?;
    Ok(())
}

/// Loads `program` of `ebpf` as a classic tracepoint program and attaches
/// it to `category`/`name`.
pub(super) fn attach_tracepoint(
    ebpf: &mut Ebpf,
    program: &'static str,
    category: &'static str,
    name: &'static str,
) -> Result<(), AttachError> {
    let prog: &mut TracePoint = self::program(ebpf, program)?;
    prog.load()
        .map_err(|source| AttachError::Verifier { program, source })?;
    prog.attach(category, name)
        .map_err(|source| AttachError::Tracepoint {
            category,
            name,
            source,
        })?;
    Ok(())
}

/// Attaches `spec`: as its BTF-enabled raw tracepoint program when `btf`
/// (the kernel's BTF) is given and the spec has one, else as a classic
/// tracepoint.
pub(super) fn attach(
    ebpf: &mut Ebpf,
    tracefs: &Tracefs,
    spec: &ProbeSpec,
    btf: Option<&Btf>,
) -> Result<(), AttachError> {
    match spec.attach {
        Attach::Tracepoint { category, name } => {
            if !tracefs.has_tracepoint(category, name) {
                return Err(AttachError::NoTracepoint {
                    category,
                    name,
                    root: tracefs.root().display().to_string(),
                });
            }
            if let (Some(btf), Some(program)) = (btf, spec.btf_program) {
                return attach_btf_tracepoint(ebpf, program, name, btf);
            }
            attach_tracepoint(ebpf, spec.program, category, name)
        }
    }
}

/// Unloads (and so detaches) the BTF program of `spec`, if it was loaded.
pub(super) fn unload_btf(ebpf: &mut Ebpf, spec: &ProbeSpec) {
    let Some(program) = spec.btf_program else {
        return;
    };
    let prog: Option<&mut BtfTracePoint> =
        ebpf.program_mut(program).and_then(|p| p.try_into().ok());
    if let Some(p) = prog {
        let _ = p.unload();
    }
}

/// Loads `prog` once and attaches it at `loc` in `target` for all processes.
pub(super) fn attach_one(
    ebpf: &mut Ebpf,
    loaded: &mut Vec<&'static str>,
    prog: &'static str,
    loc: UProbeAttachLocation<'_>,
    cookie: u64,
    target: &std::path::Path,
) -> Result<(), AttachError> {
    attach_one_link(ebpf, loaded, prog, loc, cookie, target).map(|_| ())
}

/// `symbol`, or `skip` bytes into it.
pub(super) fn location(symbol: &str, skip: u64) -> UProbeAttachLocation<'_> {
    if skip == 0 {
        UProbeAttachLocation::Symbol(symbol)
    } else {
        UProbeAttachLocation::SymbolOffset(symbol, skip)
    }
}

/// [`attach_one`], returning the link (to detach it later).
pub(super) fn attach_one_link(
    ebpf: &mut Ebpf,
    loaded: &mut Vec<&'static str>,
    prog: &'static str,
    loc: UProbeAttachLocation<'_>,
    cookie: u64,
    target: &std::path::Path,
) -> Result<UProbeLinkId, AttachError> {
    let p: &mut UProbe = program(ebpf, prog)?;
    // Loaded once: by this attach pass, or by an earlier one (a rescan).
    if !loaded.contains(&prog) && p.fd().is_err() {
        p.load().map_err(|source| AttachError::Verifier {
            program: prog,
            source,
        })?;
        loaded.push(prog);
    }
    let point = UProbeAttachPoint {
        location: loc,
        cookie: Some(cookie),
    };
    p.attach(point, target, UProbeScope::AllProcesses)
        .map_err(AttachError::Uprobe)
}

/// Why a verbs probe is inactive.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error("{op} in {}: {source}", .path.display())]
    Op {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: AttachError,
    },
    #[error("verbs control-path probes inactive: verbs.library {} does not exist", .0.display())]
    NoLibrary(std::path::PathBuf),
    #[error("verbs control-path probes inactive: libibverbs.so.1 not found (ld.so cache, {}); set verbs.library", crate::cuda_lib::SYSTEM_LIB_DIRS.join(", "))]
    LibraryNotFound,
    #[error("verbs data-path probes inactive: {0}; set verbs.provider with its poll_cq/post_send/post_recv symbols or offsets")]
    DataPath(#[source] crate::rdma::DataPathError),
}

/// Records the outcome of verbs probe `name` in `status`.
fn record(status: &mut Vec<ProbeStatus>, name: &'static str, r: Result<(), VerbsError>) {
    let state = match r {
        Ok(()) => ProbeState::Attached,
        Err(why) => {
            tracing::warn!(probe = name, reason = %why, "verbs probe inactive");
            ProbeState::Inactive(why.to_string())
        }
    };
    metrics::gauge!(crate::metrics_catalog::PROBE_ATTACHED.name, "probe" => name).set(
        if state == ProbeState::Attached {
            1.0
        } else {
            0.0
        },
    );
    status.push(ProbeStatus { name, state });
}

/// Where a uprobe goes for `loc`.
fn at(loc: &CodeLoc) -> UProbeAttachLocation<'_> {
    match loc {
        CodeLoc::Symbol(s) => UProbeAttachLocation::Symbol(s.as_str()),
        CodeLoc::Offset(o) => UProbeAttachLocation::AbsoluteOffset(*o),
    }
}

/// Attaches the verbs probes: control path on libibverbs' exports, data path
/// on the provider (configured, or resolved through an opened context's ops
/// table). Every outcome goes into `status`; nothing here is fatal.
pub(super) fn attach_verbs(ebpf: &mut Ebpf, opts: &ProbeOptions, status: &mut Vec<ProbeStatus>) {
    let mut loaded = Vec::new();
    attach_verbs_control(ebpf, &mut loaded, opts, status);
    let targets = match &opts.verbs_provider {
        Some(t) => Ok(vec![
            ("poll_cq", t.path.clone(), t.poll_cq.clone()),
            ("post_send", t.path.clone(), t.post_send.clone()),
            ("post_recv", t.path.clone(), t.post_recv.clone()),
        ]),
        None => crate::rdma::Verbs::load()
            .map_err(crate::rdma::DataPathError::from)
            .and_then(|v| v.data_path_locations())
            .map(|locs| {
                locs.into_iter()
                    .map(|(n, l)| (n, l.path, CodeLoc::Offset(l.file_offset)))
                    .collect()
            })
            .map_err(VerbsError::DataPath),
    };
    let targets = match targets {
        Ok(t) => t,
        Err(why) => return record(status, "verbs:data_path", Err(why)),
    };
    for (op, path, loc) in targets {
        let r = match op {
            "poll_cq" => attach_one(ebpf, &mut loaded, "verbs_poll_enter", at(&loc), 0, &path)
                .and_then(|()| {
                    attach_one(ebpf, &mut loaded, "verbs_poll_return", at(&loc), 0, &path)
                }),
            "post_send" => attach_one(ebpf, &mut loaded, "verbs_post", at(&loc), 0, &path),
            _ => attach_one(ebpf, &mut loaded, "verbs_post", at(&loc), 1, &path),
        };
        let name = match op {
            "poll_cq" => "verbs:poll_cq",
            "post_send" => "verbs:post_send",
            _ => "verbs:post_recv",
        };
        let r = r.map_err(|source| VerbsError::Op {
            op,
            path: path.clone(),
            source,
        });
        record(status, name, r);
    }
}

/// The control-path probes on libibverbs' exports.
fn attach_verbs_control(
    ebpf: &mut Ebpf,
    loaded: &mut Vec<&'static str>,
    opts: &ProbeOptions,
    status: &mut Vec<ProbeStatus>,
) {
    let lib = opts
        .verbs_library
        .clone()
        .or_else(|| crate::cuda_lib::find_system_library("libibverbs.so.1"));
    let lib = match lib {
        Some(lib) if lib.is_file() => lib,
        Some(p) => return record(status, "verbs:control", Err(VerbsError::NoLibrary(p))),
        None => return record(status, "verbs:control", Err(VerbsError::LibraryNotFound)),
    };
    // (status name, symbol, programs attached to it: all or none counts)
    let control: [(&'static str, &str, &[&'static str]); 2] = [
        ("verbs:ibv_modify_qp", "ibv_modify_qp", &["verbs_modify_qp"]),
        (
            "verbs:ibv_get_async_event",
            "ibv_get_async_event",
            &["verbs_async_enter", "verbs_async_return"],
        ),
    ];
    for (name, sym, progs) in control {
        let r = progs.iter().try_for_each(|prog| {
            attach_one(
                ebpf,
                loaded,
                prog,
                UProbeAttachLocation::Symbol(sym),
                0,
                &lib,
            )
        });
        record(status, name, r.map_err(VerbsError::from));
    }
}
