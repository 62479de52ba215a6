// The build-info step both binaries' build scripts share, included by
// `collector/build.rs` and `correlator/build.rs` with `include!` (a build
// script cannot depend on a workspace crate without building it first).

/// `FAULTLINE_REVISION` (the git commit this is built from, or "unknown"
/// outside a git checkout, e.g. from a source tarball; a packager may set
/// it) and `FAULTLINE_RUSTC` (the compiler's version) for
/// `faultline_build_info`. Reruns when HEAD moves.
fn build_info(manifest_dir: &std::path::Path) {
    use std::{env, path::Path, process::Command};
    println!("cargo:rerun-if-changed=../build-support/build_info.rs");
    println!("cargo:rerun-if-env-changed=FAULTLINE_REVISION");
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(manifest_dir)
            .output()
            .ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    // Only this workspace's own checkout: a source tarball unpacked inside
    // another repository must not take that one's commit.
    let root = manifest_dir.parent().and_then(|r| r.canonicalize().ok());
    let own_checkout = git(&["rev-parse", "--show-toplevel"])
        .and_then(|t| Path::new(&t).canonicalize().ok())
        .is_some_and(|t| Some(t) == root);
    let revision = match env::var("FAULTLINE_REVISION") {
        Ok(r) if !r.is_empty() => r,
        _ if own_checkout => {
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
        _ => "unknown".into(),
    };
    if revision != "unknown" {
        // HEAD, the branch it names (loose or packed): a commit or a
        // checkout changes one of them.
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for w in watch {
            if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &w]) {
                if Path::new(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
        }
    }
    println!("cargo:rustc-env=FAULTLINE_REVISION={revision}");
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=FAULTLINE_RUSTC={version}");
}
