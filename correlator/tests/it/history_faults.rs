//! History through disk faults, with the real writer thread and SQLite on
//! real files: an incident opened while the disk is full (a small tmpfs,
//! filled) is in the database once space returns and survives a restart; a
//! database file deleted or replaced while the correlator runs is detected,
//! reopened and holds the open incidents again, which survive a restart;
//! the disk budget counts the bytes really on disk (file, -wal, -shm); an
//! update only in the incident journal is written at the next start.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use correlator::{
    engine::Engine,
    history::{self, samples::Sample, HistoryConfig, Store},
};
use proto::v1::CandidateUpdate;

fn dir(tag: &str) -> PathBuf {
    tests::fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("history_faults_{tag}_{}", std::process::id())),
    )
}

fn opened(id: &str, entity: &str, ts: i64) -> CandidateUpdate {
    CandidateUpdate {
        ts_unix_ms: ts,
        incident_id: id.into(),
        state: "opened".into(),
        kind: "ib_link_down".into(),
        entity: entity.into(),
        confidence: 0.95,
        evidence: vec![format!("{entity} went down")],
        affected_jobs: vec!["job7".into()],
        runbook: "check the cable".into(),
        cluster: String::new(),
        severity: "critical".into(),
    }
}

/// The incident's state in the file at `db`, read on a new connection.
fn state_of(db: &Path, id: &str) -> Option<String> {
    let st = Store::open_reader(db, &HistoryConfig::default()).ok()?;
    st.incident(id).ok().flatten().map(|(r, _)| r.state)
}

/// A restart: the history opened again, its open incidents restored into a
/// new engine; their ids.
fn restart(db: &Path) -> Vec<String> {
    let mut e = Engine::default();
    let o = history::open(db, &HistoryConfig::default(), &mut e).expect("reopen");
    let mut ids: Vec<String> = e.open().into_iter().map(|u| u.incident_id).collect();
    ids.sort();
    assert_eq!(o.restored, ids.len());
    ids
}

/// A tmpfs of `size` at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount(8)");
        assert!(
            st.success(),
            "mount a tmpfs on {} (needs root)",
            dir.display()
        );
        Self(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `path` with `path` until ENOSPC.
fn fill(path: &Path) -> u64 {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    while f.write_all(&[0]).is_ok() {
        n += 1;
    }
    let _ = f.sync_all();
    n
}

fn samples(ts: i64, n: usize) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            entity: format!("n{:03}/mlx5_{}/1", i % 500, i / 500),
            signal: "ber",
            ts,
            value: 1e-12,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_opened_on_a_full_disk_is_written_when_space_returns() {
    let _turn = tests::one_file_at_a_time(file!());
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let d = dir("full");
    let _fs = Tmpfs::mount(&d, "2m");
    let db = d.join("history.db");
    let mut engine = Engine::default();
    let o = history::open(&db, &HistoryConfig::default(), &mut engine).expect("open");
    let t0 = 1_800_000_000_000;
    o.recorder.samples(samples(t0, 500));
    o.recorder.flush().await;
    let filled = fill(&d.join("filler"));

    let u = opened("inc-full", "n001/mlx5_0/1", t0 + 1000);
    o.recorder.update(&u);
    o.recorder.samples(samples(t0 + 1000, 500));
    o.recorder.flush().await;
    let errors = o.recorder.stats.write_errors.load(Ordering::Relaxed);
    assert!(
        errors > 0,
        "the full disk failed a write ({filled} bytes of filler)"
    );
    assert_eq!(o.recorder.stats.backlog.load(Ordering::Relaxed), 1);

    std::fs::remove_file(d.join("filler")).expect("free the disk");
    o.recorder.flush().await;
    assert_eq!(
        state_of(&db, "inc-full").as_deref(),
        Some("open"),
        "the incident opened on the full disk is in the database once space returns"
    );
    assert_eq!(o.recorder.stats.backlog.load(Ordering::Relaxed), 0);
    println!(
        "{errors} failed transactions on the full disk; the incident written after it was freed"
    );
    drop(o);
    assert_eq!(restart(&db), ["inc-full"], "it survives a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_replaced_database_file_is_reopened_and_keeps_the_open_incidents() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("deleted");
    let db = d.join("history.db");
    let mut engine = Engine::default();
    let o = history::open(&db, &HistoryConfig::default(), &mut engine).expect("open");
    let t0 = 1_800_000_000_000;
    o.recorder.update(&opened("inc-1", "n001/mlx5_0/1", t0));
    o.recorder.samples(samples(t0, 100));
    o.recorder.flush().await;
    assert_eq!(state_of(&db, "inc-1").as_deref(), Some("open"));

    // `rm history.db` while it runs (its -wal and -shm stay).
    std::fs::remove_file(&db).expect("delete the database");
    // Noticed without any write: the writer checks its file every second.
    let deleted = Instant::now();
    while !db.exists() {
        assert!(
            deleted.elapsed() < Duration::from_secs(10),
            "the deleted database was never noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "deleted file noticed and recreated after {:?}",
        deleted.elapsed()
    );
    o.recorder
        .update(&opened("inc-2", "n002/mlx5_0/1", t0 + 1000));
    o.recorder.flush().await;
    assert_eq!(o.recorder.stats.reopened.load(Ordering::Relaxed), 1);
    assert_eq!(
        state_of(&db, "inc-1").as_deref(),
        Some("open"),
        "re-written"
    );
    assert_eq!(state_of(&db, "inc-2").as_deref(), Some("open"));
    // The API's reader follows the new file.
    let via_api = o
        .reader
        .lock()
        .expect("reader")
        .incident("inc-1")
        .expect("query")
        .map(|(r, _)| r.state);
    assert_eq!(via_api.as_deref(), Some("open"));

    // Replaced by another database (a restore from a backup).
    let other = d.join("backup.db");
    drop(Store::open(&other, &HistoryConfig::default()).expect("backup"));
    std::fs::rename(&other, &db).expect("replace the database");
    let _ = std::fs::remove_file(d.join("backup.db-wal"));
    let _ = std::fs::remove_file(d.join("backup.db-shm"));
    o.recorder
        .update(&opened("inc-3", "n003/mlx5_0/1", t0 + 2000));
    o.recorder.flush().await;
    assert_eq!(o.recorder.stats.reopened.load(Ordering::Relaxed), 2);
    for id in ["inc-1", "inc-2", "inc-3"] {
        assert_eq!(state_of(&db, id).as_deref(), Some("open"), "{id}");
    }
    drop(o);
    assert_eq!(
        restart(&db),
        ["inc-1", "inc-2", "inc-3"],
        "the open incidents survive a restart"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// File, -wal and -shm sizes as the file system reports them.
fn on_disk(db: &Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .map(|s| {
            let mut p = db.as_os_str().to_owned();
            p.push(s);
            std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
        })
        .sum()
}

#[test]
fn the_disk_budget_counts_the_bytes_on_disk() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("budget");
    let db = d.join("history.db");
    let max = 4u64 << 20;
    let cfg = HistoryConfig {
        max_bytes: max,
        ..HistoryConfig::default()
    };
    let mut st = Store::open(&db, &cfg).expect("open");
    // A reader in a long read transaction (the web UI in a slow query):
    // checkpoints cannot pass it, so the write-ahead log grows.
    let pin = rusqlite::Connection::open(&db).expect("reader");
    pin.execute_batch("BEGIN; SELECT COUNT(*) FROM incidents;")
        .expect("pin a snapshot");
    let t0 = 1_800_000_000_000;
    for batch in 0..12 {
        st.write(&[], &samples(t0 + batch * 1000, 3000))
            .expect("write");
    }
    let used = st.used_bytes().expect("used");
    let disk = on_disk(&db);
    let live = st.live_bytes().expect("live");
    println!("reported {used} B, on disk {disk} B (file + -wal + -shm), live pages {live} B");
    assert!(
        disk > 2 * live,
        "the log grew past the data: {disk} vs {live}"
    );
    assert!(
        used.abs_diff(disk) <= (disk / 20).max(64 << 10),
        "the budget reports {used} B while the files hold {disk} B"
    );
    // While the reader holds the log, deleting history would not shrink
    // it: nothing is deleted for it.
    let raw = st.counts().expect("counts")[0];
    st.retain(t0 + 12_000).expect("retain");
    assert_eq!(st.counts().expect("counts")[0], raw, "history kept");
    // The reader done: within budget on disk, the log included.
    drop(pin);
    st.retain(t0 + 12_000).expect("retain");
    let disk = on_disk(&db);
    let used = st.used_bytes().expect("used");
    println!("after retention: reported {used} B, on disk {disk} B, budget {max} B");
    assert!(disk <= max, "{disk} B on disk over a {max} B budget");
    assert!(
        used.abs_diff(disk) <= (disk / 20).max(64 << 10),
        "{used} vs {disk}"
    );
    assert!(
        st.counts().expect("counts")[0] > 0,
        "not everything deleted"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// An update in the incident journal that the database never took (a crash
/// while it could not) is written into the database at the next start and
/// restored under its id; once committed it is not replayed again.
#[test]
fn journaled_updates_the_database_lacks_are_written_at_start() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("journal");
    let db = d.join("history.db");
    drop(Store::open(&db, &HistoryConfig::default()).expect("create"));
    let bytes = HistoryConfig::default().journal_bytes;
    {
        let (mut j, replay) = history::journal::Journal::open(&db, bytes, 0).expect("journal");
        assert!(replay.is_empty());
        j.append(&opened("inc-j", "n001/mlx5_0/1", 1_800_000_000_000));
        // Dropped here: the writer never committed it.
    }
    assert_eq!(state_of(&db, "inc-j"), None);
    assert_eq!(restart(&db), ["inc-j"]);
    assert_eq!(state_of(&db, "inc-j").as_deref(), Some("open"));
    let st = Store::open(&db, &HistoryConfig::default()).expect("open");
    let (_, replay) = history::journal::Journal::open(&db, bytes, st.journal_seq().expect("seq"))
        .expect("journal");
    assert!(replay.is_empty(), "replayed again: {replay:?}");
    let _ = std::fs::remove_dir_all(&d);
}
