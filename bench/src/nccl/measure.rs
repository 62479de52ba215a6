//! One measurement of one configuration: the stand-in alone, under
//! faultline's NCCL probes (their counts checked against the stand-in's),
//! or under bpftrace's `count()`; and the in-kernel program cost pass.
use std::path::Path;

use anyhow::{ensure, Context as _, Result};
use collector::{
    nccl_lib::Search,
    probes::{ProbeOptions, ProbeState, Probes},
};
use collector_common::nccl::op;
use serde::Serialize;

use super::{
    storm::{finish, spawn, Truth},
    Args, Config,
};
use crate::peer::Bpftrace;

/// One measurement.
pub(super) struct Measured {
    pub truth: Truth,
    /// What the tool counted over the calls it should have seen.
    pub count_over_truth: Option<f64>,
    /// Faultline: every op, the all-reduce bytes and the communicators
    /// equal the stand-in's; bpftrace: its total equals the calls made.
    pub exact: Option<bool>,
    /// Why not exact.
    pub mismatch: Option<String>,
}

#[derive(Serialize)]
pub(super) struct Placed {
    symbol: String,
    /// Bytes past the symbol where faultline probes.
    skip: u64,
    kind: &'static str,
}

/// The symbols faultline attaches in `lib` (`pncclX` where both names
/// share an address) and where.
pub(super) fn placed(lib: &Path) -> Result<Vec<Placed>> {
    let resolved = collector::probes::nccl::resolve(lib, collector::probes::nccl::NCCL_APIS)
        .map_err(anyhow::Error::msg)?;
    let symbols: Vec<String> = resolved
        .into_iter()
        .filter_map(|r| r.ok())
        .map(|(s, _)| s)
        .collect();
    let places = collector::probes::entry::placements_of(lib, symbols.iter().map(String::as_str));
    Ok(symbols
        .into_iter()
        .zip(places)
        .map(|(symbol, p)| Placed {
            symbol,
            skip: p.skip,
            kind: p.kind.name(),
        })
        .collect())
}

fn options(a: &Args) -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        cuda: false,
        verbs: false,
        nccl: true,
        nccl_search: Search {
            configured: vec![a.library()],
            ld_cache: false,
            proc_root: None,
        },
        ..ProbeOptions::default()
    }
}

/// Faultline's probes, every one the storm calls attached.
fn load_probes(a: &Args) -> Result<Probes> {
    let p = Probes::load(&options(a))?;
    for name in [
        "nccl:ncclAllReduce",
        "nccl:ncclGroupStart",
        "nccl:ncclGroupEnd",
        "nccl:ncclCommInitAll",
    ] {
        let s = p
            .status()
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no status for {name}"))?;
        ensure!(s.state == ProbeState::Attached, "{s}");
    }
    Ok(p)
}

/// Faultline's counts for `pid` against the stand-in's truth.
fn check_faultline(p: &Probes, pid: u32, a: &Args, t: &Truth) -> Result<Measured> {
    let maps = p.nccl_maps()?;
    let calls = |o: u32| -> u64 {
        maps.ops
            .iter()
            .filter(|(k, _)| k.pid == pid && k.op == o)
            .map(|(_, v)| v.calls)
            .sum()
    };
    let ar_bytes: u64 = maps
        .ops
        .iter()
        .filter(|(k, _)| k.pid == pid && k.op == op::ALL_REDUCE)
        .map(|(_, v)| v.bytes)
        .sum();
    let (ar, gs, ge) = (
        calls(op::ALL_REDUCE),
        calls(op::GROUP_START),
        calls(op::GROUP_END),
    );
    let comms: Vec<_> = maps
        .comms
        .iter()
        .filter(|((p, _), _)| *p == pid)
        .map(|(_, c)| c)
        .collect();
    let want_comms = u64::from(a.threads) * u64::from(a.ndev);
    let ended = comms.iter().filter(|c| c.ended == 1).count() as u64;
    let ranks_ok = comms.iter().all(|c| c.nranks == a.ndev as i32);
    let mut why = Vec::new();
    for (what, got, want) in [
        ("ncclAllReduce calls", ar, t.allreduce),
        ("ncclGroupStart calls", gs, t.group_start),
        ("ncclGroupEnd calls", ge, t.group_end),
        ("all-reduce bytes", ar_bytes, t.allreduce * 1024 * 4),
        ("communicators", comms.len() as u64, want_comms),
        ("destroyed communicators", ended, t.destroy),
    ] {
        if got != want {
            why.push(format!("{what}: counted {got}, stand-in {want}"));
        }
    }
    if !ranks_ok {
        why.push(format!("a communicator's nranks is not {}", a.ndev));
    }
    Ok(Measured {
        truth: *t,
        count_over_truth: Some((ar + gs + ge) as f64 / t.calls.max(1) as f64),
        exact: Some(why.is_empty()),
        mismatch: (!why.is_empty()).then(|| why.join("; ")),
    })
}

/// The bpftrace program: `count()` on every symbol faultline attaches.
fn peer_program(lib: &Path, symbols: &[Placed]) -> String {
    let probes: Vec<String> = symbols
        .iter()
        .map(|s| format!("uprobe:{}:{}", lib.display(), s.symbol))
        .collect();
    format!("{} {{ @ = count(); }}", probes.join(",\n"))
}

pub(super) fn measure(c: Config, a: &Args, symbols: &[Placed]) -> Result<Measured> {
    Ok(match c {
        Config::Without => Measured {
            truth: finish(spawn(a, a.seconds)?)?,
            count_over_truth: None,
            exact: None,
            mismatch: None,
        },
        Config::Faultline => {
            let p = load_probes(a)?;
            let s = spawn(a, a.seconds)?;
            let pid = s.pid;
            let t = finish(s)?;
            check_faultline(&p, pid, a, &t)?
        }
        Config::Bpftrace => {
            let b = Bpftrace::start(&peer_program(&a.library(), symbols))?;
            let t = finish(spawn(a, a.seconds)?)?;
            let counted = crate::peer::count_printed(&b.stop()?);
            // Every call the stand-in made to an attached symbol.
            let want = t.calls + t.init + t.destroy;
            Measured {
                truth: t,
                count_over_truth: Some(counted as f64 / want.max(1) as f64),
                exact: Some(counted == want),
                mismatch: (counted != want)
                    .then(|| format!("bpftrace counted {counted}, stand-in made {want} calls")),
            }
        }
    })
}

/// Seconds of each run of the program-cost pass.
const STATS_SECONDS: f64 = 1.0;

/// Alternating program-cost passes per tool (the median is reported: the
/// machine's load moves one pass by ±10 ns).
const STATS_PASSES: usize = 3;

/// In-kernel program time per NCCL call for faultline and the peer, with
/// BPF run-time statistics on: [`STATS_PASSES`] runs each, alternating,
/// the median of each tool's.
pub(super) fn program_costs(
    a: &Args,
    symbols: &[Placed],
    peer: bool,
) -> Result<(f64, Option<f64>)> {
    let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
    let (mut fl, mut bt) = (Vec::new(), Vec::new());
    for _ in 0..STATS_PASSES {
        fl.push(faultline_cost(a)?);
        if peer {
            bt.push(peer_cost(a, symbols)?);
        }
    }
    Ok((crate::median(&fl), peer.then(|| crate::median(&bt))))
}

/// One pass of faultline's probes: ns per NCCL call over its programs.
fn faultline_cost(a: &Args) -> Result<f64> {
    let p = load_probes(a)?;
    finish(spawn(a, STATS_SECONDS)?)?;
    let stats = p.program_run_stats();
    let nccl: Vec<_> = stats
        .iter()
        .filter(|(n, c, _)| n.starts_with("nccl_") && *c > 0)
        .collect();
    let (runs, ns) = nccl
        .iter()
        .fold((0u64, 0u64), |(r, t), (_, c, n)| (r + c, t + n));
    let per_call = ns as f64 / runs.max(1) as f64;
    let each: Vec<String> = nccl
        .iter()
        .map(|(n, c, t)| format!("{n} {:.0}", *t as f64 / (*c).max(1) as f64))
        .collect();
    println!(
        "  faultline program ns/call {per_call:.0} ({})",
        each.join(", ")
    );
    Ok(per_call)
}

/// One pass of bpftrace `count()`: ns per NCCL call.
fn peer_cost(a: &Args, symbols: &[Placed]) -> Result<f64> {
    let b = Bpftrace::start(&peer_program(&a.library(), symbols))?;
    finish(spawn(a, STATS_SECONDS)?)?;
    let costs = b.run_stats();
    b.stop()?;
    let (runs, ns) = costs.iter().fold((0u64, 0f64), |(r, t), c| {
        (r + c.runs, t + c.ns_per_run * c.runs as f64)
    });
    let per_call = ns / runs.max(1) as f64;
    println!("  bpftrace program ns/call {per_call:.0}");
    Ok(per_call)
}
