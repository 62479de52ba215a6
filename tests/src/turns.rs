//! One former test file at a time: each crate's integration tests are
//! linked into one binary (`tests/it/main.rs`), whose tests the harness runs
//! in parallel, yet the tests of different files were written to run in
//! binaries of their own, one after the other (they count system-wide
//! events, attach probes, set environment variables the NVML stand-in reads,
//! install a process-wide metrics recorder). Each test opens with
//! `let _turn = tests::one_file_at_a_time(file!());`: tests of one file
//! still run side by side, tests of two files never overlap, and when a
//! file's last test ends the environment is put back as the process started
//! (a file that sets `FAKE_NVML_SCENARIO` leaves it to no other file, nor to
//! the children other files start).
use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
    sync::{Condvar, Mutex, OnceLock, PoisonError},
};

/// Which file's tests run now, and how many of them.
struct Turn {
    file: Option<&'static str>,
    running: usize,
}

static TURN: Mutex<Turn> = Mutex::new(Turn {
    file: None,
    running: 0,
});
static CHANGED: Condvar = Condvar::new();
/// The environment before the first test's turn.
static START_ENV: OnceLock<BTreeMap<OsString, OsString>> = OnceLock::new();

/// A test's hold on its file's turn, given back when the test ends (passed,
/// failed or panicked).
#[must_use = "the turn ends when this is dropped"]
pub struct FileTurn {
    file: &'static str,
}

/// Waits until no test of another file runs, then holds `file`'s turn for
/// the caller (`file!()`).
pub fn one_file_at_a_time(file: &'static str) -> FileTurn {
    let mut t = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    START_ENV.get_or_init(|| std::env::vars_os().collect());
    while t.running > 0 && t.file != Some(file) {
        t = CHANGED.wait(t).unwrap_or_else(PoisonError::into_inner);
    }
    t.file = Some(file);
    t.running += 1;
    FileTurn { file }
}

impl Drop for FileTurn {
    fn drop(&mut self) {
        let mut t = TURN.lock().unwrap_or_else(PoisonError::into_inner);
        debug_assert_eq!(t.file, Some(self.file));
        t.running -= 1;
        if t.running == 0 {
            restore_env();
            t.file = None;
            CHANGED.notify_all();
        }
    }
}

/// Puts the environment back as it was before the first turn. Called with
/// [`TURN`] held and no test running, so no test thread reads it meanwhile.
fn restore_env() {
    let Some(start) = START_ENV.get() else {
        return;
    };
    let now: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (k, v) in &now {
        if start.get(k) != Some(v) {
            match start.get(k) {
                Some(old) => std::env::set_var(k, old),
                None => std::env::remove_var(k),
            }
        }
    }
    for (k, v) in start {
        if !now.contains_key(k) {
            std::env::set_var(k, v);
        }
    }
}

/// The tests under `dir` (recursively) whose first statement does not take
/// their file's turn, as `path:line name`: a check each `it` binary runs.
pub fn tests_without_a_turn(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut missing = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            missing.push(format!("{}: unreadable", path.display()));
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let s = lines[i].trim_start();
            if !(s.starts_with("#[test]") || s.starts_with("#[tokio::test")) {
                i += 1;
                continue;
            }
            let Some(f) = (i..lines.len()).find(|&j| is_fn(lines[j])) else {
                break;
            };
            let Some(open) = (f..lines.len()).find(|&j| lines[j].trim_end().ends_with('{')) else {
                break;
            };
            let first = lines.get(open + 1).map_or("", |l| l.trim());
            if !first.contains("one_file_at_a_time(file!())") {
                missing.push(format!("{}:{} {}", path.display(), f + 1, lines[f].trim()));
            }
            i = open + 1;
        }
    }
    missing
}

fn is_fn(line: &str) -> bool {
    let s = line.trim_start();
    let s = s.strip_prefix("pub ").unwrap_or(s);
    let s = s.strip_prefix("async ").unwrap_or(s);
    s.starts_with("fn ")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    #[test]
    fn two_files_never_overlap_and_one_file_s_tests_do() {
        static INSIDE_A: AtomicUsize = AtomicUsize::new(0);
        static MOST_A: AtomicUsize = AtomicUsize::new(0);
        static OVERLAP: AtomicUsize = AtomicUsize::new(0);
        let a = |_| {
            let _t = one_file_at_a_time("a.rs");
            let now = INSIDE_A.fetch_add(1, Ordering::SeqCst) + 1;
            MOST_A.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            INSIDE_A.fetch_sub(1, Ordering::SeqCst);
        };
        let b = || {
            let _t = one_file_at_a_time("b.rs");
            if INSIDE_A.load(Ordering::SeqCst) > 0 {
                OVERLAP.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::scope(|s| {
            for i in 0..3 {
                s.spawn(move || a(i));
            }
            std::thread::sleep(Duration::from_millis(10));
            for _ in 0..3 {
                s.spawn(b);
            }
        });
        assert_eq!(OVERLAP.load(Ordering::SeqCst), 0, "b ran while a ran");
        assert!(
            MOST_A.load(Ordering::SeqCst) > 1,
            "a's tests ran side by side"
        );
    }

    #[test]
    fn a_file_s_environment_is_gone_when_its_last_test_ends() {
        {
            let _t = one_file_at_a_time("env_a.rs");
            std::env::set_var("FAULTLINE_TURNS_TEST", "a");
            let _t2 = one_file_at_a_time("env_a.rs");
        }
        let _t = one_file_at_a_time("env_b.rs");
        assert_eq!(std::env::var_os("FAULTLINE_TURNS_TEST"), None);
    }

    #[test]
    fn a_test_without_its_turn_is_named() {
        let dir = crate::scratch_dir("turns-check");
        let body =
            "#[test]\nfn with() {\n    let _turn = tests::one_file_at_a_time(file!());\n}\n\n\
                    #[tokio::test]\nasync fn without() {\n    work();\n}\n";
        std::fs::write(dir.join("x.rs"), body).expect("write");
        let missing = tests_without_a_turn(&dir);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].ends_with(":7 async fn without() {"),
            "{missing:?}"
        );
    }
}
