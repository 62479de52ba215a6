//! The attach side of discovery with the real eBPF object: the probes
//! loaded with NCCL and CUDA discovery on `/proc` (as the collector starts),
//! then what one rescan's `nccl_sync` and `cuda_sync` cost when nothing
//! changed, when a job in a new mount namespace brings new copies of both
//! libraries (attach), and once it has exited (detach).
use std::{path::Path, time::Instant};

use anyhow::Result;
use collector::{
    cuda_lib, nccl_lib,
    probes::{libraries::Synced, ProbeOptions, Probes},
    proc_libs::LibScan,
};
use serde::Serialize;

use super::{
    cost::{measured, process_cpu_s, Cost},
    fleet::Fleet,
    ms, Spread,
};
use crate::report::Failures;

fn search() -> nccl_lib::Search {
    nccl_lib::Search {
        configured: vec![],
        // The ld.so cache lookup is measured on its own.
        ld_cache: false,
        proc_root: Some("/proc".into()),
    }
}

fn options() -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        verbs: false,
        cuda: true,
        cuda_search: cuda_lib::Search {
            configured: None,
            ld_cache: false,
            proc_root: Some("/proc".into()),
            usual: vec![],
        },
        nccl: true,
        nccl_search: search(),
        ..ProbeOptions::default()
    }
}

/// One rescan's sync after a scan: costs and what changed.
struct Synced2 {
    discover: Cost,
    nccl: Cost,
    cuda: Cost,
    nccl_changes: Synced,
    cuda_changes: Synced,
}

/// What the library source does with one scan's result.
fn sync(probes: &mut Probes, scan: &mut LibScan) -> Synced2 {
    let found = scan.scan();
    let root = Path::new("/proc");
    let mapped = found.first().cloned().unwrap_or_default();
    let (libs, discover) = measured(|| {
        nccl_lib::discover_with(&search(), Some(mapped), Some(root)).unwrap_or_default()
    });
    let (nccl_changes, nccl) = measured(|| probes.nccl_sync(&libs));
    let cuda_mapped = found.get(1).cloned().unwrap_or_default();
    let (cuda_changes, cuda) = measured(|| probes.cuda_sync(&cuda_mapped, root));
    Synced2 {
        discover,
        nccl,
        cuda,
        nccl_changes,
        cuda_changes,
    }
}

/// CPU and wall of one kind of sync over the rounds, ms.
#[derive(Debug, Default, Serialize)]
pub struct SyncCost {
    pub cpu_ms: Spread,
    pub wall_ms: Spread,
}

impl SyncCost {
    fn of(c: &[Cost]) -> Self {
        Self {
            cpu_ms: Spread::of(&c.iter().map(|c| ms(c.cpu_s)).collect::<Vec<_>>()),
            wall_ms: Spread::of(&c.iter().map(|c| ms(c.wall_s)).collect::<Vec<_>>()),
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Attach {
    /// `Probes::load` (NCCL and CUDA discovery on /proc: one full scan
    /// each, then the attaches), wall and the process's CPU, s.
    pub load_wall_s: f64,
    pub load_cpu_s: f64,
    pub nccl_libraries_at_load: usize,
    /// CUDA copies attached by the first rescan (beside the first library).
    pub cuda_extra_after_first_sync: usize,
    /// Rescans with nothing new: `discover_with`, `nccl_sync`, `cuda_sync`.
    pub unchanged_discover: SyncCost,
    pub unchanged_nccl_sync: SyncCost,
    pub unchanged_cuda_sync: SyncCost,
    /// A new job (its own namespace, new copies of both libraries).
    pub new_job_nccl_sync: SyncCost,
    pub new_job_cuda_sync: SyncCost,
    /// The job exited: its copies detached (the links drop on a helper
    /// thread, not counted here).
    pub exited_nccl_sync: SyncCost,
    pub exited_cuda_sync: SyncCost,
    /// Rescans where the library changes were not the expected ones (other
    /// processes on the host starting or ending with the stand-ins).
    pub unexpected_changes: usize,
    /// Dropping the probes (every library's uprobes detached), wall, s.
    pub unload_wall_s: f64,
}

/// Loads the probes and measures `rounds` syncs of each kind.
pub fn measure(fleet: &mut Fleet, rounds: usize, failures: &mut Failures) -> Result<Attach> {
    let mut out = Attach::default();
    // The probes forward the kernel's log lines on a runtime, as in the
    // collector.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let _rt = rt.enter();
    let (c0, t0) = (process_cpu_s(), Instant::now());
    let mut probes = Probes::load(&options())?;
    out.load_wall_s = t0.elapsed().as_secs_f64();
    out.load_cpu_s = process_cpu_s() - c0;
    out.nccl_libraries_at_load = probes.nccl_libraries_shown().len();
    // The collector's library source (steady: the fleet's processes count
    // as old; a new pid is read when first seen).
    let mut scan = LibScan::new("/proc", vec![nccl_lib::FAMILY, cuda_lib::FAMILY]);
    scan.young_s = 0.0;
    let _ = sync(&mut probes, &mut scan);
    out.cuda_extra_after_first_sync = probes.cuda_libraries_extra().len();
    let mine = fleet.dir().display().to_string();
    let count = |v: &[String]| v.iter().filter(|s| s.contains(&mine)).count();
    let (mut disc, mut nccl, mut cuda) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let s = sync(&mut probes, &mut scan);
        if !(s.nccl_changes.attached.is_empty()
            && s.nccl_changes.detached.is_empty()
            && s.cuda_changes.attached.is_empty()
            && s.cuda_changes.detached.is_empty())
        {
            out.unexpected_changes += 1;
        }
        disc.push(s.discover);
        nccl.push(s.nccl);
        cuda.push(s.cuda);
    }
    out.unchanged_discover = SyncCost::of(&disc);
    out.unchanged_nccl_sync = SyncCost::of(&nccl);
    out.unchanged_cuda_sync = SyncCost::of(&cuda);
    let (mut an, mut ac, mut dn, mut dc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let pid = match fleet.add_job() {
            Ok(p) => p,
            Err(e) => {
                failures.add(&format!("new job {r}"), &e);
                break;
            }
        };
        let s = sync(&mut probes, &mut scan);
        let got = (
            count(&s.nccl_changes.attached),
            count(&s.cuda_changes.attached),
        );
        if got != (1, 1) {
            out.unexpected_changes += 1;
            failures.add(
                &format!("new job {r}"),
                &anyhow::anyhow!(
                    "attached (nccl, cuda) {got:?}, want (1, 1): {:?} {:?}",
                    s.nccl_changes,
                    s.cuda_changes
                ),
            );
        }
        an.push(s.nccl);
        ac.push(s.cuda);
        fleet.end(pid);
        let s = sync(&mut probes, &mut scan);
        let got = (
            count(&s.nccl_changes.detached),
            count(&s.cuda_changes.detached),
        );
        if got != (1, 1) {
            out.unexpected_changes += 1;
            failures.add(
                &format!("exited job {r}"),
                &anyhow::anyhow!(
                    "detached (nccl, cuda) {got:?}, want (1, 1): {:?} {:?}",
                    s.nccl_changes,
                    s.cuda_changes
                ),
            );
        }
        dn.push(s.nccl);
        dc.push(s.cuda);
    }
    out.new_job_nccl_sync = SyncCost::of(&an);
    out.new_job_cuda_sync = SyncCost::of(&ac);
    out.exited_nccl_sync = SyncCost::of(&dn);
    out.exited_cuda_sync = SyncCost::of(&dc);
    let t = Instant::now();
    drop(probes);
    out.unload_wall_s = t.elapsed().as_secs_f64();
    Ok(out)
}
