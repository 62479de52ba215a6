//! The guest's kernel (Debian's package, unpacked into the cache) and its
//! initramfs (busybox, the host's verbs stack and tools with their shared
//! libraries, the needed modules, faultline's binaries and the init script).
use std::{
    collections::BTreeSet,
    fs,
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

/// The guest's `/init`.
const INIT: &str = include_str!("../../rdma-vm/guest-init.sh");

/// Modules the scenario loads (dependencies are added from `modules.dep`).
/// `crc32_generic` first: without it rxe fails to initialise its ICRC.
const MODULES: &[&str] = &[
    "crc32_generic",
    "rdma_rxe",
    "ib_uverbs",
    "rdma_ucm",
    "veth",
    "sch_netem",
];

/// Host programs copied into the guest (with their shared libraries).
const PROGRAMS: &[&str] = &[
    "/usr/bin/ip",
    "/usr/sbin/tc",
    "/usr/bin/rdma",
    "/usr/bin/ibv_devinfo",
    "/usr/bin/ib_write_bw",
];

/// The rxe provider (loaded by libibverbs through `/etc/libibverbs.d`).
const PROVIDER: &str = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so";
const PROVIDER_DRIVER: &str = "/etc/libibverbs.d/rxe.driver";

pub struct Kernel {
    /// e.g. `6.1.0-57-amd64`.
    pub version: String,
    /// Uncompressed ELF kernel (QEMU boots it through its PVH note).
    pub vmlinux: PathBuf,
    /// Unpacked package root (holds `lib/modules/<version>`).
    pub root: PathBuf,
}

fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let o = cmd.output().with_context(|| format!("spawning {shown}"))?;
    if !o.status.success() {
        bail!(
            "{shown} failed: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The kernel package `linux-image-amd64` depends on (e.g.
/// `linux-image-6.1.0-57-amd64`), from `apt-cache depends` output.
pub fn kernel_package(depends: &str) -> Option<String> {
    depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(str::trim)
        .find(|p| {
            p.strip_prefix("linux-image-")
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Downloads (once) and unpacks Debian's current kernel package into `dir`.
pub fn kernel(dir: &Path) -> Result<Kernel> {
    let depends = output(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))?;
    let package = kernel_package(&depends)
        .context("no linux-image-<version>-amd64 in `apt-cache depends linux-image-amd64`")?;
    let version = package.trim_start_matches("linux-image-").to_string();
    let kdir = dir.join(format!("kernel-{version}"));
    let vmlinux = kdir.join("vmlinux");
    let root = kdir.join("root");
    if vmlinux.is_file()
        && root
            .join("lib/modules")
            .join(&version)
            .join("modules.dep")
            .is_file()
    {
        return Ok(Kernel {
            version,
            vmlinux,
            root,
        });
    }
    fs::create_dir_all(&kdir)?;
    let abs = fs::canonicalize(&kdir)?;
    println!("rdma-vm: downloading {package}");
    super::apt_get(&["download", "-q", &package], &abs)
        .context("downloading the guest kernel package")?;
    let deb = fs::read_dir(&abs)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{package}_")))
        })
        .with_context(|| format!("{package}*.deb not found in {}", abs.display()))?;
    let _ = fs::remove_dir_all(&root);
    crate::run({
        let mut c = Command::new("dpkg-deb");
        c.arg("-x").arg(&deb).arg(&root);
        c
    })?;
    // The package ships no module index; build it for modprobe -D.
    crate::run({
        let mut c = Command::new("depmod");
        c.arg("-b").arg(&root).arg(&version);
        c
    })?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{version}"));
    let image = fs::read(&vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    // bzImage = setup code + an xz-compressed ELF: boot the ELF directly (its
    // PVH entry skips the decompressor, several seconds under emulation).
    let at = find_xz(&image).context("no xz payload in the kernel image")?;
    let mut xz = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning xz")?;
    let mut stdin = xz.stdin.take().context("xz stdin")?;
    let payload = image[at..].to_vec();
    let feeder = std::thread::spawn(move || {
        // xz stops reading after the first stream; a broken pipe is expected.
        let _ = stdin.write_all(&payload);
    });
    let out = xz.wait_with_output().context("decompressing the kernel")?;
    let _ = feeder.join();
    if !out.stdout.starts_with(b"\x7fELF") {
        bail!("the decompressed kernel payload is not an ELF file");
    }
    fs::write(&vmlinux, &out.stdout)?;
    Ok(Kernel {
        version,
        vmlinux,
        root,
    })
}

fn find_xz(image: &[u8]) -> Option<usize> {
    const MAGIC: &[u8] = b"\xfd7zXZ\x00";
    image.windows(MAGIC.len()).position(|w| w == MAGIC)
}

/// Shared libraries a program loads, from `ldd` output (paths only).
pub fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, r)) => r.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Module files in load order for `MODULES`, from `modprobe --show-depends`.
pub fn module_order(show_depends: &str) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    show_depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("insmod "))
        .map(|p| PathBuf::from(p.split_whitespace().next().unwrap_or_default()))
        .filter(|p| seen.insert(p.clone()))
        .collect()
}

fn copy_into(root: &Path, src: &Path) -> Result<()> {
    let rel = src.strip_prefix("/").unwrap_or(src);
    let dst = root.join(rel);
    if let Some(d) = dst.parent() {
        fs::create_dir_all(d)?;
    }
    fs::copy(src, &dst).with_context(|| format!("copying {}", src.display()))?;
    Ok(())
}

/// Copies `bin` and its shared-library closure into `root` (at the same
/// paths, or under `/bin` when `to_bin`).
fn copy_program(root: &Path, bin: &Path, to_bin: bool) -> Result<()> {
    if to_bin {
        let name = bin.file_name().context("program without a file name")?;
        fs::copy(bin, root.join("bin").join(name))
            .with_context(|| format!("copying {}", bin.display()))?;
    } else {
        copy_into(root, bin)?;
    }
    let ldd = output(Command::new("ldd").arg(bin)).unwrap_or_default();
    for lib in ldd_paths(&ldd) {
        if lib.is_file() {
            copy_into(root, &lib)?;
        }
    }
    Ok(())
}

/// Stages the guest's root and packs it as an uncompressed newc cpio
/// (faster to unpack under emulation than a compressed one).
pub fn initramfs(dir: &Path, kernel: &Kernel, bins: &Path) -> Result<PathBuf> {
    let root = dir.join("initramfs");
    let _ = fs::remove_dir_all(&root);
    for d in [
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "etc/libibverbs.d",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "var/lib/faultline",
        "lib/modules/faultline",
    ] {
        fs::create_dir_all(root.join(d))?;
    }
    fs::copy("/bin/busybox", root.join("bin/busybox"))
        .context("copying /bin/busybox (busybox-static)")?;
    for p in PROGRAMS {
        copy_program(&root, Path::new(p), false)?;
    }
    copy_program(&root, Path::new(PROVIDER), false)?;
    copy_into(&root, Path::new(PROVIDER_DRIVER))?;
    for b in ["faultline-collector", "faultline-correlator"] {
        let p = bins.join(b);
        if !p.is_file() {
            bail!(
                "{} missing: build with `cargo build --release -p collector -p correlator`",
                p.display()
            );
        }
        copy_program(&root, &p, true)?;
    }
    // An ld.so cache like a real host's (the collector finds libibverbs there).
    fs::write(
        root.join("etc/ld.so.conf"),
        "/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n",
    )?;
    crate::run({
        let mut c = Command::new("ldconfig");
        c.arg("-r").arg(&root);
        c
    })?;
    let deps = output(
        Command::new("modprobe")
            .arg("-d")
            .arg(&kernel.root)
            .args(["-S", &kernel.version, "--show-depends", "-a"])
            .args(MODULES),
    )?;
    let order = module_order(&deps);
    if order.is_empty() {
        bail!("modprobe --show-depends listed no modules for {MODULES:?}");
    }
    for (i, m) in order.iter().enumerate() {
        let name = m.file_name().context("module without a file name")?;
        let dst = root
            .join("lib/modules/faultline")
            .join(format!("{i:02}-{}", name.to_string_lossy()));
        fs::copy(m, &dst).with_context(|| format!("copying {}", m.display()))?;
    }
    let init = root.join("init");
    fs::write(&init, INIT)?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    let cpio = fs::canonicalize(dir)?.join("initramfs.cpio");
    let out = fs::File::create(&cpio)?;
    let status = Command::new("sh")
        .arg("-c")
        .arg("find . | LC_ALL=C sort | cpio -o -H newc --quiet")
        .current_dir(&root)
        .stdout(out)
        .status()
        .context("spawning cpio")?;
    if !status.success() {
        bail!("cpio failed: {status}");
    }
    Ok(cpio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_versioned_kernel_package() {
        let d = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n  Depends: linux-base\n";
        assert_eq!(
            kernel_package(d).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(
            kernel_package("linux-image-amd64\n  Depends: linux-base\n"),
            None
        );
    }

    #[test]
    fn ldd_output_to_paths() {
        let l = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibibverbs.so.1 => /lib/x86_64-linux-gnu/libibverbs.so.1 (0x1)\n\tlibfoo.so => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x2)\n";
        assert_eq!(
            ldd_paths(l),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libibverbs.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn module_order_keeps_the_first_occurrence() {
        let d = "insmod /k/crc32_generic.ko \ninsmod /k/ib_core.ko \ninsmod /k/rdma_rxe.ko \ninsmod /k/ib_core.ko \nbuiltin crc32\n";
        assert_eq!(
            module_order(d),
            ["/k/crc32_generic.ko", "/k/ib_core.ko", "/k/rdma_rxe.ko"].map(PathBuf::from)
        );
    }
}
