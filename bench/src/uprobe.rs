//! Uprobe cost: ns per `cuLaunchKernel` call on the stand-in driver with no
//! probe, with an empty uprobe, and with faultline's probes, for both the
//! stepped stand-in (a single-stepped first instruction faultline cannot
//! probe past, so every tool probes the same instruction: the kernel traps
//! with int3, then single-steps it) and the nop5 stand-in (5-byte-nop entry:
//! the kernel's optimised uprobe path). Rounds alternate between
//! configurations. (On the plain build faultline probes an emulated jump
//! past the argument check while bpftrace can only probe the symbol: that
//! is the launch benchmark's comparison, not a per-program cost.)
use std::{
    ffi::CString,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};
use collector::probes::{EmptyUprobe, ProbeOptions, Probes};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Calls per measurement.
    #[arg(long, default_value_t = 100_000)]
    calls: u64,
    /// Rounds per configuration.
    #[arg(long, default_value_t = 9)]
    rounds: u32,
}

type LaunchFn = unsafe extern "C" fn(
    *mut libc::c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut libc::c_void,
    *mut *mut libc::c_void,
    *mut *mut libc::c_void,
) -> i32;

struct Lib {
    handle: *mut libc::c_void,
    launch: LaunchFn,
}

/// The stand-in's copies of `cuLaunchKernel` (same entry code), one per
/// configuration of the interleaved measurement besides faultline's.
const COPY_EMPTY: &str = "faultline_bench_copy_empty";
const COPY_PEER: &str = "faultline_bench_copy_peer";
const COPY_NONE: &str = "faultline_bench_copy_none";

/// One call of a launch-shaped function, as the timed loops make it.
#[inline(always)]
fn call_launch(launch: LaunchFn, i: u64) -> i32 {
    let f = 0x1000 as *mut libc::c_void;
    // SAFETY: the stand-in only inspects the scalar arguments.
    unsafe {
        launch(
            std::hint::black_box(f),
            1 + (i & 1) as u32,
            1,
            1,
            128,
            1,
            1,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
}

impl Lib {
    fn open(path: &Path) -> Result<Self> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())?;
        // SAFETY: valid C string; RTLD_NOW|RTLD_LOCAL.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            bail!("dlopen {} failed", path.display());
        }
        match launch_symbol(handle, "cuLaunchKernel") {
            Ok(launch) => Ok(Self { handle, launch }),
            Err(e) => {
                // SAFETY: handle from dlopen, not used after this.
                unsafe { libc::dlclose(handle) };
                Err(e)
            }
        }
    }

    /// A launch-shaped function of the stand-in.
    fn symbol(&self, name: &str) -> Result<LaunchFn> {
        launch_symbol(self.handle, name)
    }

    /// ns per call over `n` calls, in the calling thread's CPU time (user
    /// and kernel: the traps are charged to the thread that hits them), so
    /// that time the thread spent preempted by other work (bpftrace's
    /// process, the collector's threads, the VM's neighbours) does not
    /// count; wall time swung by ±50 ns a call on nop5 entries here.
    fn measure(&self, n: u64) -> f64 {
        let t0 = thread_cpu_ns();
        for i in 0..n {
            std::hint::black_box(call_launch(self.launch, i));
        }
        thread_cpu_ns().saturating_sub(t0) as f64 / n as f64
    }
}

/// CLOCK_THREAD_CPUTIME_ID, ns.
fn thread_cpu_ns() -> u64 {
    collector::probes::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The launch-shaped function `name` of the stand-in opened as `handle`.
fn launch_symbol(handle: *mut libc::c_void, name: &str) -> Result<LaunchFn> {
    let c = CString::new(name)?;
    // SAFETY: valid handle and symbol name.
    let sym = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if sym.is_null() {
        bail!("{name} not in the stand-in (rebuild it: cargo build -p tests)");
    }
    // SAFETY: the stand-in exports it with cuLaunchKernel's C signature.
    Ok(unsafe { std::mem::transmute::<*mut libc::c_void, LaunchFn>(sym) })
}

impl Drop for Lib {
    fn drop(&mut self) {
        // SAFETY: handle from dlopen.
        unsafe { libc::dlclose(self.handle) };
    }
}

#[derive(Serialize)]
struct Variant {
    library: String,
    entry: &'static str,
    no_probe_ns: Vec<f64>,
    empty_uprobe_ns: Vec<f64>,
    faultline_ns: Vec<f64>,
    /// bpftrace `uprobe:LIB:cuLaunchKernel { @ = count(); }` (empty when
    /// bpftrace is not installed).
    bpftrace_count_ns: Vec<f64>,
    median_no_probe_ns: f64,
    median_empty_uprobe_ns: f64,
    median_faultline_ns: f64,
    median_bpftrace_count_ns: f64,
    ratio_faultline_over_empty: f64,
    ratio_bpftrace_count_over_empty: f64,
    /// In-kernel program time per call (BPF run-time stats, one extra pass
    /// after the timed rounds): what each program itself costs, without the
    /// trap that all three pay alike.
    program_ns_per_call: ProgramNs,
    /// All configurations in place at once, each on its own copy of the
    /// function, the calls alternating (see [`interleaved`]).
    interleaved: Interleaved,
}

/// Per-call costs (10 %-trimmed means) with every configuration in place at once: the empty
/// uprobe, faultline and bpftrace each on their own copy of
/// `cuLaunchKernel` (same entry code) and one copy unprobed, called in turn
/// (the order rotated call by call), each call timed by the TSC. The
/// machine's drift (this VM's single-step trap moved between 9.8 and 14 µs
/// within a minute) then falls on every configuration alike, which
/// separate timed runs cannot give.
#[derive(Serialize, Default)]
struct Interleaved {
    calls_each: u64,
    mean_no_probe_ns: f64,
    mean_empty_uprobe_ns: f64,
    mean_faultline_ns: f64,
    mean_bpftrace_count_ns: f64,
    /// (faultline − no probe) / (empty − no probe): the probe's cost over
    /// the empty probe's, the call itself and the timing taken out.
    ratio_faultline_over_empty: f64,
    ratio_bpftrace_count_over_empty: f64,
}

/// Mean of the middle 80 % of `v`: the preemptions and interrupts in the
/// top tail are dropped, and unlike a median it resolves differences below
/// the counter's step (this VM's TSC reads advance by ~10 ns).
fn trimmed_mean(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    let cut = v.len() / 10;
    let mid = &v[cut..v.len() - cut];
    if mid.is_empty() {
        return 0.0;
    }
    mid.iter().map(|&x| x as f64).sum::<f64>() / mid.len() as f64
}

/// The TSC.
#[inline(always)]
fn ticks() -> u64 {
    // SAFETY: rdtsc is available on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn interleaved(
    lib: &Lib,
    lib_path: &Path,
    opts: &ProbeOptions,
    bt_prog: &str,
    calls: u64,
    peer: bool,
) -> Result<Interleaved> {
    // Every copy must be probed on the same kind of entry as cuLaunchKernel
    // (the library parsed once for all four).
    let copies = [COPY_NONE, COPY_EMPTY, COPY_PEER];
    let placed = collector::probes::entry::placements_of(
        lib_path,
        std::iter::once("cuLaunchKernel").chain(copies),
    );
    for (copy, got) in copies.iter().zip(&placed[1..]) {
        if *got != placed[0] {
            bail!(
                "{copy} starts {got:?}, cuLaunchKernel {:?}: the copies must match",
                placed[0]
            );
        }
    }
    // Order: none, empty, faultline, bpftrace.
    let fns = [
        lib.symbol(COPY_NONE)?,
        lib.symbol(COPY_EMPTY)?,
        lib.launch,
        lib.symbol(COPY_PEER)?,
    ];
    let _e = EmptyUprobe::attach(lib_path, COPY_EMPTY)?;
    let p = Probes::load(opts)?;
    if !p.is_attached("cuLaunchKernel") {
        bail!("cuLaunchKernel probe not attached: {:?}", p.status());
    }
    let b = if peer {
        Some(crate::peer::Bpftrace::start(bt_prog)?)
    } else {
        None
    };
    for i in 0..calls / 20 {
        for f in fns {
            std::hint::black_box(call_launch(f, i));
        }
    }
    let mut t: [Vec<u64>; 4] = std::array::from_fn(|_| Vec::with_capacity(calls as usize));
    let (w0, c0) = (std::time::Instant::now(), ticks());
    for i in 0..calls {
        for k in 0..4 {
            let j = (i as usize + k) % 4;
            let t0 = ticks();
            std::hint::black_box(call_launch(fns[j], i));
            t[j].push(ticks().wrapping_sub(t0));
        }
    }
    let ns_per_tick = w0.elapsed().as_nanos() as f64 / ticks().wrapping_sub(c0).max(1) as f64;
    if let Some(b) = b {
        let out = b.stop()?;
        let n = crate::peer::count_printed(&out);
        if n < calls {
            bail!("bpftrace counted {n} of {calls} calls on {COPY_PEER}: {out}");
        }
    }
    drop(p);
    let mean: Vec<f64> = t
        .iter_mut()
        .map(|v| trimmed_mean(v) * ns_per_tick)
        .collect();
    let over = |x: f64| {
        let d = mean[1] - mean[0];
        if d > 0.0 {
            (x - mean[0]) / d
        } else {
            0.0
        }
    };
    Ok(Interleaved {
        calls_each: calls,
        mean_no_probe_ns: mean[0],
        mean_empty_uprobe_ns: mean[1],
        mean_faultline_ns: mean[2],
        mean_bpftrace_count_ns: if peer { mean[3] } else { 0.0 },
        ratio_faultline_over_empty: over(mean[2]),
        ratio_bpftrace_count_over_empty: if peer { over(mean[3]) } else { 0.0 },
    })
}

#[derive(Serialize, Default)]
struct ProgramNs {
    empty: f64,
    faultline: f64,
    bpftrace_count: f64,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    calls_per_measurement: u64,
    rounds: u32,
    target_ratio_max: f64,
    peer: String,
    variants: Vec<Variant>,
}

fn variant(
    lib_path: &Path,
    entry: &'static str,
    a: &Args,
    calls: u64,
    peer: bool,
) -> Result<Variant> {
    let lib = Lib::open(lib_path)?;
    let opts = ProbeOptions {
        exec: false,
        block: false,
        cuda: true,
        verbs: false,
        cuda_search: collector::cuda_lib::Search {
            configured: Some(lib_path.to_path_buf()),
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        },
        ..ProbeOptions::default()
    };
    let (mut none, mut empty, mut full, mut bt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let bt_prog = format!(
        "uprobe:{}:cuLaunchKernel {{ @ = count(); }}",
        lib_path.display()
    );
    lib.measure(calls / 10); // warm-up
                             // Each round measures every configuration once, in an order rotated by
                             // the round, so a drift of the machine does not favour one of them; the
                             // ratios are medians of each round's own ratios.
    let configs = if peer { 4 } else { 3 };
    for round in 0..a.rounds as usize {
        for k in 0..configs {
            match (round + k) % configs {
                0 => none.push(lib.measure(calls)),
                1 => {
                    let _e = EmptyUprobe::attach(lib_path, "cuLaunchKernel")?;
                    empty.push(lib.measure(calls));
                }
                2 => {
                    let p = Probes::load(&opts)?;
                    if !p.is_attached("cuLaunchKernel") {
                        bail!("cuLaunchKernel probe not attached: {:?}", p.status());
                    }
                    full.push(lib.measure(calls));
                }
                _ => {
                    let b = crate::peer::Bpftrace::start(&bt_prog)?;
                    bt.push(lib.measure(calls));
                    let out = b.stop()?;
                    // It must have counted every call (`@: N` at exit).
                    let n = crate::peer::count_printed(&out);
                    if n < calls {
                        bail!("bpftrace counted {n} of {calls} calls: {out}");
                    }
                }
            }
        }
    }
    // In-kernel cost pass: run-time stats on, each configuration once.
    let mut prog = ProgramNs::default();
    {
        let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
        let per_call = |before: &std::collections::BTreeSet<u32>| {
            crate::peer::run_ns_since(before) as f64 / calls as f64
        };
        let before = crate::peer::prog_ids();
        {
            let _e = EmptyUprobe::attach(lib_path, "cuLaunchKernel")?;
            lib.measure(calls);
            prog.empty = per_call(&before);
        }
        let before = crate::peer::prog_ids();
        {
            let _p = Probes::load(&opts)?;
            lib.measure(calls);
            prog.faultline = per_call(&before);
        }
        if peer {
            let before = crate::peer::prog_ids();
            let b = crate::peer::Bpftrace::start(&bt_prog)?;
            lib.measure(calls);
            prog.bpftrace_count = per_call(&before);
            b.stop()?;
        }
    }
    let (mn, me, mf, mb) = (
        crate::median(&none),
        crate::median(&empty),
        crate::median(&full),
        crate::median(&bt),
    );
    let (rf, rb) = (crate::paired(&full, &empty), crate::paired(&bt, &empty));
    let inter = interleaved(
        &lib,
        lib_path,
        &opts,
        &bt_prog.replace("cuLaunchKernel", COPY_PEER),
        calls,
        peer,
    )
    .context("interleaved measurement")?;
    Ok(Variant {
        library: lib_path.display().to_string(),
        entry,
        no_probe_ns: none,
        empty_uprobe_ns: empty,
        faultline_ns: full,
        bpftrace_count_ns: bt,
        median_no_probe_ns: mn,
        median_empty_uprobe_ns: me,
        median_faultline_ns: mf,
        median_bpftrace_count_ns: mb,
        ratio_faultline_over_empty: rf,
        ratio_bpftrace_count_over_empty: rb,
        program_ns_per_call: prog,
        interleaved: inter,
    })
}

/// nop5 measurements make this many times `--calls` calls.
const NOP5_CALLS_FACTOR: u64 = 10;

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _g = rt.enter();
    let stepped: PathBuf = tests::fake_libcuda_stepped();
    let nop5: PathBuf = tests::fake_libcuda_nop5();
    let peer = crate::peer::available();
    if !peer {
        println!("bpftrace not found: no peer column (scripts/setup.sh installs it)");
    }
    // nop5 calls are ~20× cheaper: 10× as many keep each measurement
    // longer than a scheduler tick's worth of noise.
    let variants = vec![
        variant(
            &stepped,
            "single-stepped mov (int3 trap + single step)",
            a,
            a.calls,
            peer,
        )
        .context("stepped stand-in")?,
        variant(
            &nop5,
            "5-byte nop (optimised uprobe)",
            a,
            a.calls * NOP5_CALLS_FACTOR,
            peer,
        )
        .context("nop5 stand-in")?,
    ];
    println!(
        "uprobe cost: ns of the calling thread's CPU time per cuLaunchKernel call, {} calls (nop5: {}) × {} rounds, order rotated per round; medians, ratios are medians of each round's ratio",
        a.calls,
        a.calls * NOP5_CALLS_FACTOR,
        a.rounds
    );
    println!("| entry | no probe | empty uprobe | faultline | bpftrace count() | faultline / empty | bpftrace / empty | program ns/call: empty, faultline, bpftrace |");
    println!("|---|---|---|---|---|---|---|---|");
    for v in &variants {
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.3} | {:.3} | {:.0}, {:.0}, {:.0} |",
            v.entry,
            v.median_no_probe_ns,
            v.median_empty_uprobe_ns,
            v.median_faultline_ns,
            v.median_bpftrace_count_ns,
            v.ratio_faultline_over_empty,
            v.ratio_bpftrace_count_over_empty,
            v.program_ns_per_call.empty,
            v.program_ns_per_call.faultline,
            v.program_ns_per_call.bpftrace_count
        );
    }
    println!(
        "interleaved: every configuration in place at once, each on its own copy of the function, calls alternating ({} each), TSC per call, 10 %-trimmed means; ratios (x − no probe) / (empty − no probe)",
        variants.first().map_or(0, |v| v.interleaved.calls_each)
    );
    println!("| entry | no probe | empty uprobe | faultline | bpftrace count() | faultline / empty | bpftrace / empty |");
    println!("|---|---|---|---|---|---|---|");
    for v in &variants {
        let i = &v.interleaved;
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.3} | {:.3} |",
            v.entry,
            i.mean_no_probe_ns,
            i.mean_empty_uprobe_ns,
            i.mean_faultline_ns,
            i.mean_bpftrace_count_ns,
            i.ratio_faultline_over_empty,
            i.ratio_bpftrace_count_over_empty
        );
    }
    let report = Report {
        benchmark: "cuda_uprobe_cost",
        calls_per_measurement: a.calls,
        rounds: a.rounds,
        target_ratio_max: 1.15,
        peer: crate::peer::version_if(peer),
        variants,
    };
    crate::report::write(
        &out_dir.join("uprobe.json"),
        &report,
        &crate::report::Failures::default(),
    )
}
