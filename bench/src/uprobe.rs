//! Uprobe cost: ns per `cuLaunchKernel` call on the stand-in driver with no
//! probe, with an empty uprobe, and with faultline's probes, for both the
//! plain stand-in (an ordinary, single-stepped first instruction: the
//! kernel traps with int3, then single-steps it) and the nop5 stand-in (5-byte-nop entry: the kernel's
//! optimised uprobe path). Rounds alternate between configurations.
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

impl Lib {
    fn open(path: &Path) -> Result<Self> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())?;
        // SAFETY: valid C string; RTLD_NOW|RTLD_LOCAL.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            bail!("dlopen {} failed", path.display());
        }
        // SAFETY: valid handle and symbol name.
        let sym = unsafe { libc::dlsym(handle, c"cuLaunchKernel".as_ptr()) };
        if sym.is_null() {
            bail!("cuLaunchKernel not in {}", path.display());
        }
        // SAFETY: the stand-in exports cuLaunchKernel with this C signature.
        let launch: LaunchFn = unsafe { std::mem::transmute::<*mut libc::c_void, LaunchFn>(sym) };
        Ok(Self { handle, launch })
    }

    /// ns per call over `n` calls, in the calling thread's CPU time (user
    /// and kernel: the traps are charged to the thread that hits them), so
    /// that time the thread spent preempted by other work (bpftrace's
    /// process, the collector's threads, the VM's neighbours) does not
    /// count; wall time swung by ±50 ns a call on nop5 entries here.
    fn measure(&self, n: u64) -> f64 {
        let f = 0x1000 as *mut libc::c_void;
        let t0 = thread_cpu_ns();
        for i in 0..n {
            // SAFETY: the stand-in only inspects the scalar arguments.
            let r = unsafe {
                (self.launch)(
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
            };
            std::hint::black_box(r);
        }
        thread_cpu_ns().saturating_sub(t0) as f64 / n as f64
    }
}

/// CLOCK_THREAD_CPUTIME_ID, ns.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64
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
    let (rf, rb) = (paired(&full, &empty), paired(&bt, &empty));
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
    })
}

/// nop5 measurements make this many times `--calls` calls.
const NOP5_CALLS_FACTOR: u64 = 10;

/// Median over rounds of `x[i] / base[i]` (0 without data).
fn paired(x: &[f64], base: &[f64]) -> f64 {
    let r: Vec<f64> = x
        .iter()
        .zip(base)
        .filter(|(_, b)| **b > 0.0)
        .map(|(x, b)| x / b)
        .collect();
    if r.is_empty() {
        0.0
    } else {
        crate::median(&r)
    }
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _g = rt.enter();
    let plain: PathBuf = tests::fake_libcuda();
    let nop5: PathBuf = tests::fake_libcuda_nop5();
    let peer = crate::peer::available();
    if !peer {
        println!("bpftrace not found: no peer column (scripts/setup.sh installs it)");
    }
    // nop5 calls are ~20× cheaper: 10× as many keep each measurement
    // longer than a scheduler tick's worth of noise.
    let variants = vec![
        variant(
            &plain,
            "ordinary (int3 trap + single step)",
            a,
            a.calls,
            peer,
        )
        .context("plain stand-in")?,
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
    let report = Report {
        benchmark: "cuda_uprobe_cost",
        calls_per_measurement: a.calls,
        rounds: a.rounds,
        target_ratio_max: 1.15,
        peer: if peer {
            crate::peer::version()
        } else {
            String::new()
        },
        variants,
    };
    let path = out_dir.join("uprobe.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
