//! Attaching the CUDA uprobes: to the discovered driver library at load,
//! and to copies found after start (inside containers, [`Probes::cuda_sync`]);
//! the launch probes' links go to the duty cycle (`launch_duty`). The
//! maps are read by `crate::cuda::probe`.
use std::{collections::BTreeMap, path::Path};

use aya::{programs::uprobe::UProbeLinkId, Ebpf};

use super::{
    attach::{attach_one_link, location},
    launch_duty::LaunchLink,
    libraries::{detach, take_unmapped, AttachedLib, Synced},
    table, ProbeOptions, ProbeState, ProbeStatus, Probes,
};
use crate::proc_libs::FileKey;

/// Attaches the CUDA uprobes to the discovered library. Every outcome is
/// recorded in `status`; nothing here stops the collector.
/// Returns the library (its identity and hold) and the launch symbols'
/// links (for duty-cycling).
pub(super) fn attach_cuda(
    ebpf: &mut Ebpf,
    opts: &ProbeOptions,
    status: &mut Vec<ProbeStatus>,
) -> (
    Option<(crate::proc_libs::FileKey, AttachedLib)>,
    Vec<LaunchLink>,
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
    // Found inside a process's root (a container's driver library at a path
    // the host lacks): held open, attached through the open file.
    let on_host = !opts
        .cuda_search
        .proc_root
        .as_ref()
        .is_some_and(|r| lib.starts_with(r));
    let held = crate::proc_libs::FileKey::of(&lib)
        .ok_or_else(|| format!("{} is not a readable file", lib.display()))
        .and_then(|key| {
            AttachedLib::hold(&lib, key, lib.display().to_string(), true, on_host)
                .map(|h| (key, h))
                .map_err(|e| e.to_string())
        });
    let (key, mut held) = match held {
        Ok(h) => h,
        Err(why) => {
            tracing::warn!("CUDA probes inactive: {why}");
            status.push(ProbeStatus {
                name: "cuda",
                state: ProbeState::Inactive(why),
            });
            return (None, Vec::new());
        }
    };
    let (attached, launch_links, links) = attach_cuda_to(ebpf, &held.attach_path, &lib, status);
    held.links = links;
    tracing::info!(library = %lib.display(), attached, of = table::CUDA_PROBES.len(), "CUDA probes");
    ((attached > 0).then_some((key, held)), launch_links)
}

/// Attaches every CUDA probe to the library at `attach_path` (`shown` in
/// messages). Returns how many probes attached, the launch probes' links
/// (duty-cycled) and every other link.
pub(super) fn attach_cuda_to(
    ebpf: &mut Ebpf,
    attach_path: &std::path::Path,
    shown: &std::path::Path,
    status: &mut Vec<ProbeStatus>,
) -> (usize, Vec<LaunchLink>, Vec<(&'static str, UProbeLinkId)>) {
    let lib = attach_path.to_path_buf();
    let mut other_links = Vec::new();
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
            .map_err(|e| e.of(is_ret, spec.symbol, shown));
            match r {
                Ok(id) => {
                    if table::is_launch_program(prog_name) {
                        launch_links.push(LaunchLink {
                            program: prog_name,
                            symbol: spec.symbol,
                            placement,
                            cookie: spec.cookie,
                            link: Some(id),
                            lib: lib.clone(),
                        });
                    } else {
                        other_links.push((prog_name, id));
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
            Err(why) => ProbeState::Inactive(why.to_string()),
        };
        metrics::gauge!(crate::metrics_catalog::PROBE_ATTACHED.name, "probe" => spec.symbol).set(
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
    (attached, launch_links, other_links)
}

impl Probes {
    /// Brings the CUDA driver libraries to what processes map now
    /// (`mapped`, from a scan of `proc_root`): a copy not attached yet (a
    /// container's driver at a path and inode the host's is not) gets every
    /// CUDA probe, its launch probes duty-cycled with the first library's;
    /// one no process maps any more is detached. The first library stays.
    pub fn cuda_sync(
        &mut self,
        mapped: &BTreeMap<FileKey, crate::proc_libs::Mapped>,
        proc_root: &Path,
    ) -> Synced {
        let mut out = Synced::default();
        let primary = self.cuda_primary.as_ref().map(|(k, _)| *k);
        let live: std::collections::BTreeSet<FileKey> = mapped.keys().copied().collect();
        for l in take_unmapped(&mut self.cuda_extra, &live) {
            if let Ok(mut duty) = self.launch.lock() {
                duty.remove_lib(&mut self.ebpf, &l.attach_path);
            }
            out.detached.push(l.shown.clone());
            detach(&mut self.ebpf, l);
        }
        for (k, m) in mapped {
            if Some(*k) == primary || self.cuda_extra.contains_key(k) {
                continue;
            }
            if self.cuda_extra.len() >= MAX_EXTRA_CUDA {
                out.refused += 1;
                continue;
            }
            let found = crate::nccl_lib::Found::mapped(proc_root, *k, m);
            let mut held = match AttachedLib::hold(
                &found.path,
                *k,
                found.shown.clone(),
                false,
                m.on_host,
            ) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(library = %found.shown, error = %e, "CUDA library not attached");
                    continue;
                }
            };
            let mut status = Vec::new();
            let (n, launch, links) = attach_cuda_to(
                &mut self.ebpf,
                &held.attach_path.clone(),
                Path::new(&found.shown),
                &mut status,
            );
            held.links = links;
            if n == 0 {
                detach(&mut self.ebpf, held);
                continue;
            }
            if let Ok(mut duty) = self.launch.lock() {
                duty.add_links(&mut self.ebpf, launch);
            }
            for st in status
                .into_iter()
                .filter(|s| s.state == ProbeState::Attached)
            {
                match self.status.iter_mut().find(|s| s.name == st.name) {
                    Some(old) => old.state = ProbeState::Attached,
                    None => self.status.push(st),
                }
            }
            self.status
                .retain(|s| !(s.name == "cuda" && matches!(s.state, ProbeState::Inactive(_))));
            if self.cuda_library.is_none() {
                self.cuda_library = Some(held.found_at.clone());
            }
            tracing::info!(library = %held.shown, attached = n, "CUDA probes attached to a library found after start");
            out.attached.push(held.shown.clone());
            self.cuda_extra.insert(*k, held);
        }
        if out.refused > 0 {
            metrics::counter!(crate::metrics_catalog::CUDA_LIBRARIES_REFUSED.name)
                .increment(out.refused as u64);
        }
        out
    }

    /// The CUDA libraries attached after start (as shown).
    pub fn cuda_libraries_extra(&self) -> Vec<String> {
        self.cuda_extra.values().map(|l| l.shown.clone()).collect()
    }
}

/// CUDA driver copies attached beside the first (distinct driver inodes on
/// one host are rare: a driver container beside the host's, an upgrade).
pub const MAX_EXTRA_CUDA: usize = 8;
