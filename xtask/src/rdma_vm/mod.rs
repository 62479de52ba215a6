//! `cargo xtask rdma-vm`: faultline against a real verbs stack in a soft-RoCE
//! (rdma_rxe) QEMU guest.
//!
//! The host needs no RDMA: Debian's kernel package is downloaded and unpacked
//! (never installed), its modules and the host's rdma-core, perftest,
//! iproute2 and busybox binaries go into an initramfs together with the
//! release collector and correlator, and QEMU boots it. The guest's `/init`
//! (`xtask/rdma-vm/guest-init.sh`) runs the scenario and prints its artifacts
//! on the serial console; [`check`] judges them on the host.
//!
//! Cached under `target/rdma-vm/`: the kernel package, the unpacked and
//! uncompressed kernel with its module index, and which accelerator works.
mod check;
mod image;

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// Debian packages the harness needs on the host.
pub const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "perftest",
    "iproute2",
    "kmod",
    "cpio",
    "xz-utils",
    "libc-bin",
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Accelerator: `auto` tries KVM with a short probe boot and falls back
    /// to TCG (software emulation) when KVM is missing, fails or is slow.
    #[arg(long, default_value = "auto", value_parser = ["auto", "kvm", "tcg"])]
    accel: String,
    /// Give up on the guest after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Collector window length inside the guest, in seconds.
    #[arg(long, default_value_t = 2)]
    window: u32,
    /// Work directory (cache, initramfs, guest log, result JSON).
    #[arg(long, default_value = "target/rdma-vm")]
    dir: PathBuf,
    /// Skip `cargo build --release` (use the binaries already in target/release).
    #[arg(long)]
    no_build: bool,
    /// Boot again when the checks fail, up to this many guests in all (the
    /// emulated guest's timing varies; every attempt is reported).
    #[arg(long, default_value_t = 1)]
    attempts: u32,
    /// Only judge an existing guest log (no build, no boot).
    #[arg(long, value_name = "FILE")]
    check_log: Option<PathBuf>,
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(path) = &args.check_log {
        let report = judge_log(path, args.window)?;
        report.print();
        if !report.passed() {
            bail!("{} of {} checks failed", report.failed(), report.len());
        }
        return Ok(());
    }
    let started = Instant::now();
    fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", args.dir.display()))?;
    ensure_packages()?;
    if !args.no_build {
        let mut c = crate::cargo();
        c.args(["build", "--release", "-p", "collector", "-p", "correlator"]);
        crate::run(c)?;
    }
    let kernel = image::kernel(&args.dir)?;
    let initrd = image::initramfs(&args.dir, &kernel, Path::new("target/release"))?;
    let accel = choose_accel(args, &kernel, &initrd)?;
    println!("rdma-vm: booting {} with {accel}", kernel.version);
    let mut attempts = Vec::new();
    let mut passed = false;
    let last_log = args.dir.join("guest.log");
    for attempt in 1..=args.attempts.max(1) {
        // The last attempt's console is guest.log; earlier ones keep their number.
        let log_path = args.dir.join(format!("guest-{attempt}.log"));
        let boot = Instant::now();
        let finished = boot_guest(
            &kernel,
            &initrd,
            &accel,
            &format!("faultline.window={}", args.window),
            &log_path,
            Duration::from_secs(args.timeout),
            true,
        )?;
        let guest_secs = boot.elapsed().as_secs_f64();
        let report = judge_log(&log_path, args.window)?;
        report.print();
        println!(
            "rdma-vm: attempt {attempt}: guest {guest_secs:.0} s, {} of {} checks passed",
            report.len() - report.failed(),
            report.len()
        );
        attempts.push(serde_json::json!({
            "attempt": attempt,
            "guest_seconds": guest_secs,
            "guest_finished": finished,
            "passed": report.passed(),
            "checks": report.to_json(),
            "guest_log": log_path,
        }));
        fs::copy(&log_path, &last_log)?;
        passed = report.passed();
        if passed {
            break;
        }
        if attempt < args.attempts {
            println!("rdma-vm: attempt {attempt} failed; the guest runs again (every attempt is in result.json)");
        }
    }
    let json = serde_json::json!({
        "kernel": kernel.version,
        "accel": accel,
        "total_seconds": started.elapsed().as_secs_f64(),
        "window_seconds": args.window,
        "passed": passed,
        "attempts": attempts,
    });
    let out = args.dir.join("result.json");
    fs::write(&out, format!("{json:#}\n")).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "rdma-vm: total {:.0} s; log {}, result {}",
        started.elapsed().as_secs_f64(),
        last_log.display(),
        out.display()
    );
    if !passed {
        bail!(
            "soft-RoCE scenario failed; see {} and {}",
            last_log.display(),
            out.display()
        );
    }
    Ok(())
}

/// Reads a guest console log and judges it.
fn judge_log(path: &Path, window: u32) -> Result<check::Report> {
    let log = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A console captured elsewhere may still end its lines with CR LF.
    Ok(check::judge(&log.replace("\r\n", "\n"), window))
}

/// Installs the Debian packages that are missing (root needed only then).
fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("rdma-vm: installing {}", missing.join(" "));
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    apt_get(&args, Path::new("."))
        .context("installing the soft-RoCE guest's packages (run as root)")
}

/// Runs `apt-get ARGS` in `dir`; when that fails (stale or missing package
/// lists on a fresh machine), runs `apt-get update` and tries once more.
pub(crate) fn apt_get(args: &[&str], dir: &Path) -> Result<()> {
    let attempt = || {
        let mut c = Command::new("apt-get");
        c.env("DEBIAN_FRONTEND", "noninteractive")
            .current_dir(dir)
            .args(args);
        crate::run(c)
    };
    attempt().or_else(|_| {
        let mut u = Command::new("apt-get");
        u.args(["update", "-q"]);
        crate::run(u)?;
        attempt()
    })
}

/// QEMU accelerator arguments for `name`.
fn accel_args(name: &str) -> Vec<&'static str> {
    match name {
        "kvm" => vec!["-accel", "kvm", "-cpu", "host"],
        _ => vec!["-accel", "tcg,thread=multi", "-cpu", "max"],
    }
}

/// `kvm` only when a probe boot under KVM reaches the guest's init quickly
/// (a nested or partial KVM can abort on an MSR or run 100x slower than
/// TCG). The answer is cached per kernel.
fn choose_accel(args: &Args, kernel: &image::Kernel, initrd: &Path) -> Result<String> {
    if args.accel != "auto" {
        return Ok(args.accel.clone());
    }
    if !Path::new("/dev/kvm").exists() {
        return Ok("tcg".into());
    }
    let cache = args.dir.join(format!("accel-{}", kernel.version));
    if let Ok(a) = fs::read_to_string(&cache) {
        return Ok(a.trim().to_string());
    }
    let probe_log = args.dir.join("kvm-probe.log");
    let ok = boot_guest(
        kernel,
        initrd,
        "kvm",
        "faultline.probe=1",
        &probe_log,
        Duration::from_secs(20),
        false,
    )
    .unwrap_or(false)
        && fs::read_to_string(&probe_log).is_ok_and(|l| l.contains("=== GUEST PROBE OK"));
    let a = if ok { "kvm" } else { "tcg" };
    println!(
        "rdma-vm: KVM probe boot {}; using {a}",
        if ok { "passed" } else { "failed" }
    );
    fs::write(&cache, a).with_context(|| format!("writing {}", cache.display()))?;
    Ok(a.into())
}

/// Boots the guest, copying its console to `log` (and its step lines to
/// stdout when `echo`). Returns whether the guest powered off by itself
/// before `timeout`.
fn boot_guest(
    kernel: &image::Kernel,
    initrd: &Path,
    accel: &str,
    extra_cmdline: &str,
    log: &Path,
    timeout: Duration,
    echo: bool,
) -> Result<bool> {
    let mut c = Command::new("qemu-system-x86_64");
    c.args(accel_args(accel))
        .args([
            "-smp",
            "2",
            "-m",
            "1536",
            "-nographic",
            "-no-reboot",
            "-nic",
            "none",
        ])
        .arg("-kernel")
        .arg(&kernel.vmlinux)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 quiet panic=-1 {extra_cmdline}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().context("starting qemu-system-x86_64")?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let mut file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let pid = child.id();
    // Watchdog: kill QEMU at the deadline; the reader then sees EOF.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(timeout).is_err() {
            kill_process(pid);
            return true;
        }
        false
    });
    for line in BufReader::new(stdout).split(b'\n') {
        let mut line = line.context("reading the guest console")?;
        // The serial console ends lines with CR LF.
        while line.last() == Some(&b'\r') {
            line.pop();
        }
        file.write_all(&line)?;
        file.write_all(b"\n")?;
        if echo {
            let text = String::from_utf8_lossy(&line);
            if let Some(i) = text.find("=== STEP ") {
                println!("guest: {}", &text[i + 4..]);
            }
        }
    }
    let status = child.wait().context("waiting for qemu")?;
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(true);
    if timed_out {
        println!("rdma-vm: guest killed after {} s", timeout.as_secs());
    }
    Ok(status.success() && !timed_out)
}

/// SIGKILL to `pid` (through kill(1): xtask has no libc dependency).
fn kill_process(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}
