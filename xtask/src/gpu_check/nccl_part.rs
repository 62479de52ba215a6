//! The real-NCCL part's steps: find `libnccl.so.2` and a CUDA runtime on the
//! node (or skip the part, saying why), compile `nccl_workload`, run it under
//! the collector, and turn what both saw into checks. A problem here fails
//! or skips this part only; the CUDA and NVML checks run as before.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    cuda::parse_record,
    nccl::{
        broke, nccl_checks, parse_nccl_console, parse_nccl_workload, parse_probe_lines,
        record_nccl, skipped, version_text, NcclWorkload,
    },
    nccl_find::{find, with_cudart, Libraries, Places},
    proc::{read, run_logged, tail},
    report::{Check, Halt, Report},
    target_dir, Args, NCCL_WORKLOAD_C,
};

/// `ncclCommInitAll` takes at most this many devices here (the collector's
/// probe records at most 8 ranks of one call).
pub const MAX_NCCL_DEVICES: usize = 8;

/// Time kept back from the NCCL workload for the windows after it, the
/// collector's stop and the judging.
const JUDGE_RESERVE: Duration = Duration::from_secs(60);

/// What the NCCL part will do.
#[derive(Debug)]
pub enum Plan {
    Run(Ready),
    /// Not run, and why (no NCCL on the node, `--no-nccl`, the stand-in).
    Skip(String),
    /// Could not be run though NCCL is there (the workload did not compile).
    Broke(String),
}

#[derive(Debug)]
pub struct Ready {
    pub libs: Libraries,
    pub devices: Vec<u32>,
    pub binary: PathBuf,
}

impl Plan {
    /// The `libnccl.so.2` the collector is to probe.
    pub fn nccl(&self) -> Option<&Path> {
        match self {
            Plan::Run(r) => Some(&r.libs.nccl),
            _ => None,
        }
    }
}

/// The devices of `--nccl-devices` (`None`: `default` alone; `all`: every
/// one of `count`, at most [`MAX_NCCL_DEVICES`]); each must exist, none twice.
pub fn parse_devices(spec: Option<&str>, default: u32, count: usize) -> Result<Vec<u32>, String> {
    let v: Vec<u32> = match spec.map(str::trim) {
        None => vec![default],
        Some("all") => (0..count.min(MAX_NCCL_DEVICES))
            .map(|d| u32::try_from(d).unwrap_or(u32::MAX))
            .collect(),
        Some(s) => s
            .split(',')
            .map(|d| {
                d.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("--nccl-devices {s:?}: {d:?} is not a device ordinal"))
            })
            .collect::<Result<_, _>>()?,
    };
    if v.is_empty() || v.len() > MAX_NCCL_DEVICES {
        return Err(format!(
            "--nccl-devices: 1 to {MAX_NCCL_DEVICES} devices, not {}",
            v.len()
        ));
    }
    if let Some(d) = v.iter().find(|d| **d as usize >= count) {
        return Err(format!(
            "--nccl-devices has device {d} but CUDA has {count} device(s)"
        ));
    }
    let mut seen = v.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != v.len() {
        return Err(format!("--nccl-devices names a device twice: {v:?}"));
    }
    Ok(v)
}

/// Decides whether the NCCL part runs, and prepares it (the libraries, the
/// devices, the compiled workload).
pub fn plan(
    args: &Args,
    out: &Path,
    python: &Path,
    cuda_devices: usize,
    deadline: Instant,
    report: &mut Report,
) -> Result<Plan, Halt> {
    if args.no_nccl {
        return Ok(Plan::Skip("--no-nccl".into()));
    }
    if args.standin() && args.nccl_library.is_none() {
        return Ok(Plan::Skip(
            "the stand-in driver cannot run NVIDIA's NCCL (pass --nccl-library with the stand-in \
             libnccl.so.2 to self-test this part)"
                .into(),
        ));
    }
    let devices = parse_devices(args.nccl_devices.as_deref(), args.device, cuda_devices)
        .map_err(Halt::CannotRun)?;
    let places = Places::of_this_node(&target_dir().join("nvidia-venv/bin/python"), python);
    let libs = match &args.nccl_library {
        Some(p) if !p.is_file() => {
            return Err(Halt::CannotRun(format!(
                "--nccl-library {}: no such file",
                p.display()
            )))
        }
        Some(p) => match &args.cudart_library {
            Some(c) => Ok(Libraries {
                nccl: p.clone(),
                cudart: c.clone(),
                how: "--nccl-library and --cudart-library".into(),
            }),
            None => with_cudart(&places, p.clone(), "--nccl-library"),
        },
        None => find(&places).map(|mut l| {
            if let Some(c) = &args.cudart_library {
                l.cudart = c.clone();
                l.how = format!("{}; CUDA runtime: --cudart-library", l.how);
            }
            l
        }),
    };
    let libs = match libs {
        Ok(l) => l,
        Err(why) => return Ok(Plan::Skip(why)),
    };
    report.fact("nccl_library", libs.nccl.display().to_string());
    report.fact("cudart_library", libs.cudart.display().to_string());
    report.fact("nccl_found", libs.how.clone());
    report.fact("nccl_devices", devices.clone());
    println!(
        "gpu-check: NCCL part: {} with {} ({}), ncclCommInitAll over device(s) {devices:?}",
        libs.nccl.display(),
        libs.cudart.display(),
        libs.how
    );
    match compile(out, deadline) {
        Ok(binary) => Ok(Plan::Run(Ready {
            libs,
            devices,
            binary,
        })),
        Err(why) => Ok(Plan::Broke(why)),
    }
}

/// Writes `nccl_workload.c` and compiles it with `$CC`.
fn compile(out: &Path, deadline: Instant) -> Result<PathBuf, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = out.join("nccl_workload.c");
    let bin = out.join("nccl_workload");
    fs::write(&src, NCCL_WORKLOAD_C).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let mut c = Command::new(&cc);
    c.args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-ldl");
    let log = out.join("nccl_cc.log");
    match run_logged(c, &log, deadline, "compiling the NCCL workload") {
        Ok(st) if st.success() => Ok(bin),
        Ok(_) => Err(format!(
            "{cc} could not compile the NCCL workload: {}",
            tail(&log.with_extension("err"), 10)
        )),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// `nccl_workload run` to its end; its own account, or why it failed.
pub fn run(
    args: &Args,
    ready: &Ready,
    out: &Path,
    deadline: Instant,
    report: &mut Report,
) -> Result<NcclWorkload, String> {
    let wl_out = out.join("nccl_workload.out");
    let mut c = Command::new(&ready.binary);
    c.arg("run")
        .arg(&ready.libs.cudart)
        .arg(&ready.libs.nccl)
        .arg(args.rounds.to_string())
        .arg(args.elements.to_string())
        .args(ready.devices.iter().map(u32::to_string));
    let debug_log = out.join("nccl_debug.log");
    let _ = fs::remove_file(&debug_log);
    if std::env::var_os("NCCL_DEBUG").is_none() {
        c.env("NCCL_DEBUG", "WARN");
    }
    if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        // One process, no peer elsewhere: NCCL's bootstrap on the loopback,
        // whatever (or whether) the node's network is.
        c.env("NCCL_SOCKET_IFNAME", "lo");
    }
    if std::env::var_os("NCCL_DEBUG_FILE").is_none() {
        // NCCL's messages in their own file, not among the workload's lines.
        c.env("NCCL_DEBUG_FILE", &debug_log);
    }
    if let Some(dir) = args.cuda_library.as_deref().and_then(Path::parent) {
        // The runtime loads `libcuda.so.1` by name: the stand-in's first.
        let mut path = vec![dir.to_path_buf()];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            path.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(path) {
            c.env("LD_LIBRARY_PATH", joined);
        }
    }
    // A hang (an ncclCommInitAll that never returns) fails this part and
    // leaves time to judge the rest.
    let own = deadline
        .checked_sub(JUDGE_RESERVE)
        .unwrap_or(deadline)
        .max(Instant::now());
    let st = run_logged(c, &wl_out, own, "the NCCL workload").map_err(|e| format!("{e:#}"))?;
    let parsed = parse_nccl_workload(&read(&wl_out));
    let wl = match parsed {
        Ok(wl) if st.success() => wl,
        failed => {
            let mut why = match failed {
                Err(e) => format!("{e:#}"),
                Ok(_) => format!("the NCCL workload exited with {st}"),
            };
            for f in [wl_out.with_extension("err"), debug_log] {
                if !read(&f).trim().is_empty() {
                    why.push_str(&format!(" | {}: {}", f.display(), tail(&f, 4)));
                }
            }
            return Err(why);
        }
    };
    report.fact("nccl_workload", wl.to_json());
    let calls: u64 = wl.ops.values().map(|(c, _)| c).sum();
    println!(
        "gpu-check: NCCL workload pid {} (NCCL {}) made {calls} NCCL calls on {} rank(s)",
        wl.pid,
        wl.nccl_version.map_or_else(|| "?".into(), version_text),
        wl.nranks
    );
    Ok(wl)
}

/// How the NCCL part went.
#[derive(Debug)]
pub enum Part {
    Ran(NcclWorkload),
    Skipped(String),
    /// It was to run but broke (the workload failed or did not compile).
    Broke(String),
}

impl From<Plan> for Part {
    /// A plan that did not get to run its workload.
    fn from(p: Plan) -> Self {
        match p {
            Plan::Skip(why) => Part::Skipped(why),
            Plan::Broke(why) => Part::Broke(why),
            Plan::Run(_) => Part::Broke("the NCCL workload did not run".into()),
        }
    }
}

/// The NCCL part's rows: the checks when it ran, else one skipped or failed row.
pub fn judge(
    part: &Part,
    record: &str,
    console: &str,
    standin: bool,
    report: &mut Report,
) -> Vec<Check> {
    match part {
        Part::Ran(wl) => {
            let windows: Vec<Value> = match parse_record(record) {
                Ok(w) => w,
                Err(e) => return vec![broke(&format!("{e:#}"))],
            };
            let rec = record_nccl(&windows, wl.pid);
            let con = parse_nccl_console(console, wl.pid);
            nccl_checks(wl, &rec, &con, &parse_probe_lines(console), standin)
        }
        Part::Skipped(why) => {
            println!("gpu-check: NCCL part skipped: {why}");
            report.notes.push("NCCL part skipped".into());
            report.fact("nccl_skipped", why.clone());
            vec![skipped(why)]
        }
        Part::Broke(why) => vec![broke(why)],
    }
}
