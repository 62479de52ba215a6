//! The CPU time of each bounded process, split by whether the launch gate
//! was counting (bounded-overhead mode, [`crate::launch_budget`]).
//!
//! Scaling the uncounted time by wall-clock time assumes a process launches
//! at the same pace counted or not. On a loaded node it does not: whatever
//! else runs (the collector attaching and detaching, a checkpoint writer,
//! another job) takes CPU from it in one phase and not the other, and a
//! process that exits keeps being extrapolated until its counters are
//! pruned. Launches per CPU second of the process itself hold through both:
//! a launch costs the process the same CPU whenever it runs, and a dead
//! process accrues none. So the CPU time of each process is read at every
//! gate change and every snapshot, and each piece goes to the counted or
//! the uncounted side.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub use crate::launch_budget::CpuSplit;

#[derive(Clone, Copy, Debug, Default)]
struct Track {
    /// CPU seconds at the last reading.
    last_s: f64,
    split: CpuSplit,
    /// Read at the start of this snapshot interval (else the split covers
    /// only part of it, and the wall clock scales this interval).
    whole: bool,
    /// Gone (its CPU can no longer be read): nothing more to attribute.
    gone: bool,
}

/// Per tracked process: the CPU split since the last snapshot.
#[derive(Debug)]
pub struct CpuAccount {
    proc_root: PathBuf,
    ticks: f64,
    tracks: BTreeMap<u32, Track>,
}

impl Default for CpuAccount {
    fn default() -> Self {
        Self::new(Path::new("/proc"))
    }
}

/// Processes tracked at most (bounded memory; the controller's shares hold
/// only launch-heavy processes, a handful per node).
pub const MAX_TRACKED: usize = 1024;

impl CpuAccount {
    pub fn new(proc_root: &Path) -> Self {
        // SAFETY: sysconf reads a constant of the running system.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            proc_root: proc_root.to_path_buf(),
            ticks: if ticks > 0 { ticks as f64 } else { 100.0 },
            tracks: BTreeMap::new(),
        }
    }

    pub fn set_proc_root(&mut self, root: &Path) {
        if self.proc_root != root {
            self.proc_root = root.to_path_buf();
            self.tracks.clear();
        }
    }

    /// Tracks exactly `pids` from now on (the controller's launch-heavy
    /// processes); a new one is read now and scales by its CPU from the
    /// next snapshot interval on.
    pub fn track(&mut self, pids: impl IntoIterator<Item = u32>) {
        let want: std::collections::BTreeSet<u32> = pids.into_iter().take(MAX_TRACKED).collect();
        self.tracks.retain(|p, _| want.contains(p));
        for pid in want {
            if self.tracks.contains_key(&pid) {
                continue;
            }
            let t = match self.read(pid) {
                Some(s) => Track {
                    last_s: s,
                    ..Default::default()
                },
                None => Track {
                    gone: true,
                    ..Default::default()
                },
            };
            self.tracks.insert(pid, t);
        }
    }

    /// Attributes each tracked process's CPU since its last reading: the
    /// share `counted` of it (the share of that time the gate counted) to
    /// the counted side, the rest to the uncounted.
    pub fn account(&mut self, counted: f64) {
        let counted = counted.clamp(0.0, 1.0);
        let pids: Vec<u32> = self.tracks.keys().copied().collect();
        for pid in pids {
            let now = self.read(pid);
            let Some(t) = self.tracks.get_mut(&pid) else {
                continue;
            };
            if t.gone {
                continue;
            }
            let Some(now) = now else {
                // Exited (and reaped) since the last reading: what it ran
                // in between is unknown, and nothing after it is owed.
                t.gone = true;
                continue;
            };
            let d = (now - t.last_s).max(0.0);
            t.last_s = now;
            t.split.counted_s += d * counted;
            t.split.uncounted_s += d * (1.0 - counted);
        }
    }

    /// At a snapshot (after [`Self::account`]): each tracked process's split
    /// over the whole interval, for those read since its start, and gone
    /// processes with zero uncounted time past their exit; starts the next.
    pub fn take(&mut self) -> BTreeMap<u32, CpuSplit> {
        let mut out = BTreeMap::new();
        for (&pid, t) in &mut self.tracks {
            if t.whole || t.gone {
                out.insert(pid, t.split);
            }
            t.split = CpuSplit::default();
            t.whole = true;
        }
        self.tracks.retain(|_, t| !t.gone);
        out
    }

    /// CPU seconds (user + system) of `pid`, from `/proc/<pid>/stat`
    /// (a zombie keeps its final times).
    fn read(&self, pid: u32) -> Option<f64> {
        let text =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        let (utime, stime, _) = stat_times(&text)?;
        Some((utime + stime) as f64 / self.ticks)
    }
}

/// `utime`, `stime` and `starttime` (clock ticks) of a `/proc/<pid>/stat`
/// line: fields 14, 15 and 22, counted after the command, which may hold
/// spaces and parentheses.
pub fn stat_times(text: &str) -> Option<(u64, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.get(11)?.parse().ok()?,
        f.get(12)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch proc root of its own, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Self {
            let p =
                std::env::temp_dir().join(format!("faultline-cpu-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("mkdir");
            Self(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write_stat(root: &Path, pid: u32, utime: u64, stime: u64) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (a (b) c) R 1 1 1 0 -1 4194304 0 0 0 0 {utime} {stime} 0 0 20 0 4 0 500 0 0\n"),
        )
        .expect("write stat");
    }

    #[test]
    fn stat_times_skip_a_command_with_spaces_and_parentheses() {
        let line = "42 (a (b) c) R 1 1 1 0 -1 4194304 0 0 0 0 150 25 0 0 20 0 4 0 500 0 0";
        assert_eq!(stat_times(line), Some((150, 25, 500)));
        assert_eq!(stat_times("42 (x) R 1"), None);
    }

    #[test]
    fn cpu_goes_to_the_side_the_gate_was_on_and_stops_at_exit() {
        let dir = Scratch::new("split");
        let mut a = CpuAccount::new(dir.path());
        a.ticks = 100.0;
        write_stat(dir.path(), 7, 100, 0);
        a.track([7]);
        // The first interval is partial: no split for it.
        a.account(1.0);
        assert!(a.take().is_empty());
        // 0.30 s counted, then 0.50 s not, then 0.20 s counted.
        write_stat(dir.path(), 7, 120, 10);
        a.account(1.0);
        write_stat(dir.path(), 7, 150, 30);
        a.account(0.0);
        write_stat(dir.path(), 7, 160, 40);
        a.account(1.0);
        let s = a.take()[&7];
        assert!((s.counted_s - 0.5).abs() < 1e-9, "{s:?}");
        assert!((s.uncounted_s - 0.5).abs() < 1e-9, "{s:?}");
        // Exited: what it ran before is still reported, nothing after.
        write_stat(dir.path(), 7, 170, 40);
        a.account(0.0);
        std::fs::remove_dir_all(dir.path().join("7")).expect("rm");
        a.account(0.0);
        let s = a.take()[&7];
        assert!((s.uncounted_s - 0.1).abs() < 1e-9, "{s:?}");
        assert_eq!(s.counted_s, 0.0);
        // And it is forgotten.
        assert!(a.take().is_empty());
    }

    #[test]
    fn untracked_processes_are_dropped_and_tracking_is_bounded() {
        let dir = Scratch::new("bound");
        let mut a = CpuAccount::new(dir.path());
        write_stat(dir.path(), 1, 0, 0);
        a.track([1]);
        a.track([2]);
        assert_eq!(a.tracks.keys().copied().collect::<Vec<_>>(), vec![2]);
        a.track(0..(MAX_TRACKED as u32 + 10));
        assert_eq!(a.tracks.len(), MAX_TRACKED);
    }
}
