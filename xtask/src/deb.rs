//! `cargo xtask deb`: the Debian packages `faultline-collector` and
//! `faultline-correlator` with cargo-deb (`cargo install cargo-deb
//! --locked`), from `[package.metadata.deb]` of each crate's Cargo.toml:
//! the binary in /usr/bin, its systemd unit (enabled and started on
//! install), the config files as conffiles under /etc/faultline and
//! /etc/default, the correlator's system user made by its postinst.
//!
//! By default cargo-deb builds the release binaries (minutes). With
//! `--bin-dir DIR` it packages the binaries already in DIR instead (the
//! test packages the debug build): they are linked into a staging target
//! directory's `release/` and cargo-deb runs `--no-build` against it.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

/// The packages, as (crate, binary).
const PACKAGES: [(&str, &str); 2] = [
    ("collector", "faultline-collector"),
    ("correlator", "faultline-correlator"),
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Package the binaries already built in DIR (e.g. target/debug)
    /// instead of building release binaries.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Where the .deb files go.
    #[arg(long, value_name = "DIR", default_value = "target/debian")]
    out: PathBuf,
    /// Faster compression, larger packages (tests).
    #[arg(long)]
    fast: bool,
}

pub fn run(a: &Args) -> Result<()> {
    let version = super::cargo().args(["deb", "--version"]).output();
    if !version.is_ok_and(|o| o.status.success()) {
        bail!("cargo-deb is missing: cargo install cargo-deb --locked (scripts/setup.sh)");
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let out = a
        .out
        .canonicalize()
        .with_context(|| format!("resolving {}", a.out.display()))?;
    let staging = match &a.bin_dir {
        Some(dir) => Some(stage(dir, &out)?),
        None => None,
    };
    // Both at once (each strips and compresses on its own core).
    let mut running = Vec::new();
    for (krate, _) in PACKAGES {
        let mut c = super::cargo();
        c.current_dir(super::workspace_root())
            .args(["deb", "--locked", "-p", krate, "--output"])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if a.fast {
            c.arg("--fast");
        }
        if let Some(target) = &staging {
            c.arg("--no-build").env("CARGO_TARGET_DIR", target);
        }
        let child = c
            .spawn()
            .with_context(|| format!("running cargo deb -p {krate}"))?;
        running.push((krate, child));
    }
    for (krate, child) in running {
        let o = child
            .wait_with_output()
            .with_context(|| format!("waiting for cargo deb -p {krate}"))?;
        if !o.status.success() {
            bail!(
                "cargo deb -p {krate} failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        // cargo-deb prints the package's path last on stdout.
        let made = String::from_utf8_lossy(&o.stdout);
        let deb = made
            .lines()
            .rev()
            .find(|l| l.ends_with(".deb"))
            .unwrap_or("");
        println!("{deb}");
    }
    if let Some(target) = staging {
        let _ = std::fs::remove_dir_all(target);
    }
    Ok(())
}

/// A target directory whose `release/` holds DIR's binaries (hard links
/// where DIR is on the same file system, else copies).
fn stage(dir: &Path, out: &Path) -> Result<PathBuf> {
    let target = out.join(".staging-target");
    let release = target.join("release");
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&release).with_context(|| format!("creating {}", release.display()))?;
    for (_, bin) in PACKAGES {
        let from = dir.join(bin);
        if !from.is_file() {
            bail!(
                "{} is missing: build it first (cargo build -p collector -p correlator)",
                from.display()
            );
        }
        let to = release.join(bin);
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
    }
    Ok(target)
}
