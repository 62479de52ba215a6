//! Attaching the programs: tracepoints from the table, the CUDA driver's
//! uprobes, the verbs library's and provider's uprobes.
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
        BtfTracePoint, TracePoint, UProbe,
    },
    Btf, Ebpf,
};

use super::*;
use crate::tracefs::Tracefs;

/// Loads `program` of `ebpf` as a BTF-enabled raw tracepoint program on
/// tracepoint `name` (types from `btf`, the kernel's) and attaches it.
pub(super) fn attach_btf_tracepoint(
    ebpf: &mut Ebpf,
    program: &str,
    name: &str,
    btf: &Btf,
) -> Result<(), String> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| format!("program {program} missing from the eBPF object"))?
        .try_into()
        .map_err(|e| format!("program {program}: {e}"))?;
    prog.load(name, btf)
        .map_err(|e| format!("verifier rejected {program}: {e:#}"))?;
    prog.attach()
        .map_err(|e| format!("attach tp_btf {name}: {e}"))?;
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
) -> Result<(), String> {
    match spec.attach {
        Attach::Tracepoint { category, name } => {
            if !tracefs.has_tracepoint(category, name) {
                return Err(format!(
                    "tracepoint {category}/{name} not found in {}/events (kernel lacks it)",
                    tracefs.root().display()
                ));
            }
            if let (Some(btf), Some(program)) = (btf, spec.btf_program) {
                return attach_btf_tracepoint(ebpf, program, name, btf);
            }
            let prog: &mut TracePoint = ebpf
                .program_mut(spec.program)
                .ok_or_else(|| format!("program {} missing from the eBPF object", spec.program))?
                .try_into()
                .map_err(|e| format!("program {}: {e}", spec.program))?;
            prog.load()
                .map_err(|e| format!("verifier rejected {}: {e:#}", spec.program))?;
            prog.attach(category, name)
                .map_err(|e| format!("attach to {category}/{name}: {e}"))?;
            Ok(())
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

/// Attaches the CUDA uprobes to the discovered library. Every outcome is
/// recorded in `status`; nothing here stops the collector.
/// Returns the library and the launch symbols' links (for duty-cycling).
pub(super) fn attach_cuda(
    ebpf: &mut Ebpf,
    opts: &ProbeOptions,
    status: &mut Vec<ProbeStatus>,
) -> (
    Option<std::path::PathBuf>,
    Vec<super::launch_duty::LaunchLink>,
) {
    let lib = match crate::cuda_lib::discover(&opts.cuda_search) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("{e}");
            status.push(ProbeStatus {
                name: "cuda",
                state: ProbeState::Inactive(e.to_string()),
            });
            return (None, Vec::new());
        }
    };
    let mut loaded: Vec<&'static str> = Vec::new();
    let mut attached = 0usize;
    let mut launch_links = Vec::new();
    // Past a leading endbr64 (see `entry`): entry and return probe on the
    // same address, one breakpoint. The library is parsed once for all.
    let placements = super::entry::placements_of(&lib, table::CUDA_PROBES.iter().map(|p| p.symbol));
    for (spec, &placement) in table::CUDA_PROBES.iter().zip(&placements) {
        let mut outcome = Ok(());
        let skip = placement.skip;
        tracing::debug!(
            symbol = spec.symbol,
            skip,
            entry = placement.kind.name(),
            "probe placement (past a leading endbr64 and flag-only checks, onto an emulated instruction)"
        );
        for (prog_name, is_ret) in [(Some(spec.entry), false), (spec.ret, true)] {
            let Some(prog_name) = prog_name else { continue };
            let r = attach_one_link(
                ebpf,
                &mut loaded,
                prog_name,
                location(spec.symbol, skip),
                spec.cookie,
                &lib,
            )
            .map_err(|e| {
                format!(
                    "{} {} in {}: {e}",
                    if is_ret { "uretprobe" } else { "uprobe" },
                    spec.symbol,
                    lib.display()
                )
            });
            match r {
                Ok(id) => {
                    if table::is_launch_program(prog_name) {
                        launch_links.push(super::launch_duty::LaunchLink {
                            program: prog_name,
                            symbol: spec.symbol,
                            placement,
                            cookie: spec.cookie,
                            link: Some(id),
                        });
                    }
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let state = match outcome {
            Ok(()) => {
                attached += 1;
                ProbeState::Attached
            }
            Err(why) => ProbeState::Inactive(why),
        };
        metrics::gauge!("faultline_probe_attached", "probe" => spec.symbol).set(
            if state == ProbeState::Attached {
                1.0
            } else {
                0.0
            },
        );
        if let ProbeState::Inactive(why) = &state {
            if spec.core {
                tracing::warn!(symbol = spec.symbol, reason = %why, "CUDA probe inactive");
            } else {
                tracing::info!(symbol = spec.symbol, reason = %why, "optional CUDA probe inactive");
            }
        }
        status.push(ProbeStatus {
            name: spec.symbol,
            state,
        });
    }
    tracing::info!(library = %lib.display(), attached, of = table::CUDA_PROBES.len(), "CUDA probes");
    ((attached > 0).then_some(lib), launch_links)
}

/// Loads `prog` once and attaches it at `loc` in `target` for all processes.
pub(super) fn attach_one(
    ebpf: &mut Ebpf,
    loaded: &mut Vec<&'static str>,
    prog: &'static str,
    loc: UProbeAttachLocation<'_>,
    cookie: u64,
    target: &std::path::Path,
) -> Result<(), String> {
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
) -> Result<UProbeLinkId, String> {
    let p: &mut UProbe = ebpf
        .program_mut(prog)
        .ok_or_else(|| format!("program {prog} missing from the eBPF object"))?
        .try_into()
        .map_err(|e| format!("program {prog}: {e}"))?;
    // Loaded once: by this attach pass, or by an earlier one (a rescan).
    if !loaded.contains(&prog) && p.fd().is_err() {
        p.load()
            .map_err(|e| format!("verifier rejected {prog}: {e:#}"))?;
        loaded.push(prog);
    }
    let point = UProbeAttachPoint {
        location: loc,
        cookie: Some(cookie),
    };
    p.attach(point, target, UProbeScope::AllProcesses)
        .map_err(|e| e.to_string())
}

/// Attaches the verbs probes: control path on libibverbs' exports, data path
/// on the provider (configured, or resolved through an opened context's ops
/// table). Every outcome goes into `status`; nothing here is fatal.
pub(super) fn attach_verbs(ebpf: &mut Ebpf, opts: &ProbeOptions, status: &mut Vec<ProbeStatus>) {
    let mut loaded = Vec::new();
    let record = |status: &mut Vec<ProbeStatus>, name: &'static str, r: Result<(), String>| {
        let state = match r {
            Ok(()) => ProbeState::Attached,
            Err(why) => {
                tracing::warn!(probe = name, reason = %why, "verbs probe inactive");
                ProbeState::Inactive(why)
            }
        };
        metrics::gauge!("faultline_probe_attached", "probe" => name).set(
            if state == ProbeState::Attached {
                1.0
            } else {
                0.0
            },
        );
        status.push(ProbeStatus { name, state });
    };
    let lib = opts
        .verbs_library
        .clone()
        .or_else(|| crate::cuda_lib::find_system_library("libibverbs.so.1"));
    match &lib {
        Some(lib) if lib.is_file() => {
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
                        &mut loaded,
                        prog,
                        UProbeAttachLocation::Symbol(sym),
                        0,
                        lib,
                    )
                });
                record(status, name, r);
            }
        }
        other => {
            let why = match other {
                Some(p) => format!("verbs.library {} does not exist", p.display()),
                None => format!(
                    "libibverbs.so.1 not found (ld.so cache, {}); set verbs.library",
                    crate::cuda_lib::SYSTEM_LIB_DIRS.join(", ")
                ),
            };
            record(
                status,
                "verbs:control",
                Err(format!("verbs control-path probes inactive: {why}")),
            );
        }
    }
    let targets: Result<Vec<(&'static str, std::path::PathBuf, CodeLoc)>, String> = match &opts.verbs_provider {
        Some(t) => Ok(vec![
            ("poll_cq", t.path.clone(), t.poll_cq.clone()),
            ("post_send", t.path.clone(), t.post_send.clone()),
            ("post_recv", t.path.clone(), t.post_recv.clone()),
        ]),
        None => crate::rdma::Verbs::load()
            .map_err(|e| e.to_string())
            .and_then(|v| v.data_path_locations())
            .map(|locs| {
                locs.into_iter()
                    .map(|(n, l)| (n, l.path, CodeLoc::Offset(l.file_offset)))
                    .collect()
            })
            .map_err(|e| format!("verbs data-path probes inactive: {e}; set verbs.provider with its poll_cq/post_send/post_recv symbols or offsets")),
    };
    match targets {
        Ok(targets) => {
            for (op, path, loc) in targets {
                let l = match &loc {
                    CodeLoc::Symbol(s) => UProbeAttachLocation::Symbol(s.as_str()),
                    CodeLoc::Offset(o) => UProbeAttachLocation::AbsoluteOffset(*o),
                };
                let r = match op {
                    "poll_cq" => attach_one(ebpf, &mut loaded, "verbs_poll_enter", l, 0, &path)
                        .and_then(|()| {
                            let l = match &loc {
                                CodeLoc::Symbol(s) => UProbeAttachLocation::Symbol(s.as_str()),
                                CodeLoc::Offset(o) => UProbeAttachLocation::AbsoluteOffset(*o),
                            };
                            attach_one(ebpf, &mut loaded, "verbs_poll_return", l, 0, &path)
                        }),
                    "post_send" => attach_one(ebpf, &mut loaded, "verbs_post", l, 0, &path),
                    _ => attach_one(ebpf, &mut loaded, "verbs_post", l, 1, &path),
                };
                let name = match op {
                    "poll_cq" => "verbs:poll_cq",
                    "post_send" => "verbs:post_send",
                    _ => "verbs:post_recv",
                };
                record(
                    status,
                    name,
                    r.map_err(|e| format!("{op} in {}: {e}", path.display())),
                );
            }
        }
        Err(why) => record(status, "verbs:data_path", Err(why)),
    }
}
