//! Scratch directories for tests: one helper instead of one per test file.
//! A directory is emptied when a test starts, not when it ends, so what a
//! failed test left stays there to be read.
use std::path::PathBuf;

/// `dir`, emptied of whatever an earlier run left there and created.
pub fn fresh_dir(dir: impl Into<PathBuf>) -> PathBuf {
    let dir = dir.into();
    // Absent on a first run.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("creating scratch dir {}: {e}", dir.display()));
    dir
}

/// A fresh `faultline-NAME-PID` in the system's temporary directory: the
/// process id keeps two runs of one test binary (two checkouts) apart, and
/// `name` two tests of one binary.
pub fn scratch_dir(name: &str) -> PathBuf {
    fresh_dir(std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id())))
}
