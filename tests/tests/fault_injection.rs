//! Fault injection with real processes on loopback: kill -9 at random points
//! of either side, a full disk under the spool and under the correlator's
//! ingest log (small tmpfs mounts), damaged spool files, half-open clients.
//! Each case asserts that no window that reached the spool is lost, that
//! every drop is counted, and that nothing wedges (SIGTERM ends the
//! collector within its drain time); each prints one row of the README's
//! fault-injection table (`FAULT-TABLE case | sent | accepted | lost | wedges`).
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use tests::stream::{
    correlator, free_port, recorded, recorded_windows, summary_field, tmp, wait_recorded, Collector,
};

/// The collector's drain time (3 s) plus slack: a SIGTERM that takes longer
/// is a wedge.
const STOP_BOUND: Duration = Duration::from_secs(8);

fn row(case: &str, sent: u64, accepted: u64, lost: u64, wedges: u64, note: &str) {
    println!("FAULT-TABLE | {case} | {sent} | {accepted} | {lost} | {wedges} | {note}");
}

/// A small seeded generator for the kill points (reproducible from the
/// printed seed).
struct Rng(u64);

impl Rng {
    fn new(case: &str) -> Self {
        let seed = std::env::var("FAULTLINE_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("{case}: FAULTLINE_FAULT_SEED={seed}");
        Self(seed | 1)
    }

    /// Uniform in lo..=hi.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo + 1)
    }
}

/// A tmpfs of `size` bytes mounted at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).expect("mount point");
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount tmpfs on {}", dir.display());
        Self(dir.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("mount(8)");
        assert!(st.success(), "remount {}", self.0.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn sysfs(tag: &str, ports: u32) -> tests::FakeIb {
    let ib = tests::FakeIb::new(tag);
    for p in 1..=ports {
        ib.active_port("mlx5_0", p);
    }
    ib
}

fn spool_files(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// An empty and a truncated spool file (what a crash before fsync can
/// leave) used to wedge the collector in a tight reconnect loop that also
/// ignored SIGTERM: both are quarantined, delivery goes on, SIGTERM works.
#[test]
fn damaged_spool_files_are_quarantined_and_delivery_continues() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_damaged_spool") {
        return;
    }
    let dir = tmp("fi-damaged");
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).expect("spool dir");
    let old = "00000000000000000001-1";
    std::fs::write(spool.join(format!("{old}~00000000000000000001.win")), b"").expect("empty");
    let w = proto_window(old, 2);
    let full = collector::stream::spool::encode_file(&w);
    std::fs::write(
        spool.join(format!("{old}~00000000000000000002.win")),
        &full[..full.len() / 2],
    )
    .expect("truncated");
    let record = dir.join("ingest.jsonl");
    let ib = sysfs("fi-damaged", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &spool, 64 << 20, ib.root());
    col.wait_seq(10);
    wait_recorded(&record, 10);
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    let seqs = recorded(&record);
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "empty + truncated spool file",
        final_seq,
        seqs.len() as u64,
        final_seq - seqs.len() as u64,
        wedges,
        &format!(
            "2 files quarantined, SIGTERM exit in {:.1} s",
            took.as_secs_f64()
        ),
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert_eq!(summary_field(&summary, "quarantined"), 2, "{summary}");
    assert_eq!(spool_files(&spool.join("quarantine"), ".win").len(), 2);
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

fn proto_window(instance: &str, seq: u64) -> proto::v1::Window {
    proto::v1::Window {
        origin: Some(proto::v1::Origin {
            hostname: "fi-host".into(),
            instance: instance.into(),
            ..Default::default()
        }),
        seq,
        ..Default::default()
    }
}

/// kill -9 of the correlator at random points, three times, while the
/// collector keeps producing: every window arrives exactly once, in order.
#[test]
fn correlator_killed_at_random_points_loses_nothing() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_kill_correlator") {
        return;
    }
    let mut rng = Rng::new("kill -9 correlator");
    let dir = tmp("fi-killcorr");
    let record = dir.join("ingest.jsonl");
    let ib = sysfs("fi-killcorr", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());
    for _ in 0..3 {
        col.wait_seq(col.last_seq + rng.range(2, 8));
        corr.kill().expect("kill -9 correlator");
        corr.wait().expect("reap");
        col.wait_seq(col.last_seq + rng.range(1, 6));
        corr = correlator(port, &record);
    }
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    let seqs = recorded(&record);
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "kill -9 correlator ×3 (random points)",
        final_seq,
        seqs.len() as u64,
        final_seq.saturating_sub(seqs.len() as u64),
        wedges,
        "exactly once, in order",
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert_eq!(summary_field(&summary, "dropped"), 0, "{summary}");
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// kill -9 of the collector at random points, three times, restarted on the
/// same spool: every window that reached the spool is delivered (the
/// restarted collector resumes its predecessors' windows), none twice. The
/// window being closed at the instant of the kill may not have reached the
/// spool yet; those are counted separately.
#[test]
fn collector_killed_at_random_points_delivers_its_spool() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_kill_collector") {
        return;
    }
    let mut rng = Rng::new("kill -9 collector");
    let dir = tmp("fi-killcol");
    let record = dir.join("ingest.jsonl");
    let spool = dir.join("spool");
    let ib = sysfs("fi-killcol", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    // Instances in start order and the highest seq each reached the spool.
    let mut closed = 0u64;
    let mut spooled: Vec<u64> = Vec::new();
    for _ in 0..3 {
        let mut col = Collector::start(port, &spool, 64 << 20, ib.root());
        col.wait_seq(rng.range(3, 10));
        // Anywhere within the next window (0.1 s).
        std::thread::sleep(Duration::from_millis(rng.range(0, 100)));
        let last = col.kill9();
        closed += last;
        // What is durable now: the spool files plus what was delivered.
        let on_disk = spool_files(&spool, ".win")
            .iter()
            .filter_map(|n| collector::stream::spool::parse_name(n))
            .collect::<Vec<_>>();
        let mut max: BTreeMap<String, u64> = BTreeMap::new();
        for (i, s) in recorded_windows(&record).into_iter().chain(on_disk) {
            let e = max.entry(i).or_default();
            *e = (*e).max(s);
        }
        spooled = max.values().copied().collect();
    }
    let mut col = Collector::start(port, &spool, 64 << 20, ib.root());
    col.wait_seq(5);
    let (final_seq, summary, took) = col.stop();
    wait_recorded_instances(&record, spooled.len() + 1);
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    closed += final_seq;
    let mut by_inst: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (i, s) in recorded_windows(&record) {
        by_inst.entry(i).or_default().push(s);
    }
    assert_eq!(by_inst.len(), 4, "four collector runs: {by_inst:?}");
    let accepted: u64 = by_inst.values().map(|v| v.len() as u64).sum();
    // Lost: reached the spool (durable) but never accepted.
    let mut durable = spooled.clone();
    durable.push(final_seq);
    let lost: u64 = by_inst
        .values()
        .zip(&durable)
        .map(|(v, &d)| d.saturating_sub(v.len() as u64))
        .sum();
    for (inst, v) in &by_inst {
        assert_eq!(
            *v,
            (1..=v.len() as u64).collect::<Vec<_>>(),
            "instance {inst}: in order, no gap, no duplicate"
        );
    }
    let unspooled = closed - accepted;
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "kill -9 collector ×3 (random points, restart on the same spool)",
        closed,
        accepted,
        lost,
        wedges,
        &format!(
            "{unspooled} window(s) being closed at the instant of a kill never reached the spool"
        ),
    );
    assert_eq!(lost, 0, "{by_inst:?} durable {durable:?} {summary}");
    assert!(
        unspooled <= 3,
        "at most the window in hand per kill: {unspooled}"
    );
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

fn wait_recorded_instances(record: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut insts: Vec<String> = recorded_windows(record)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        insts.dedup();
        insts.sort();
        insts.dedup();
        if insts.len() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {} instances recorded",
            insts.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The spool's filesystem fills up (64 KiB tmpfs) while the correlator is
/// down: the collector runs on, counts every window it could not write, leaves
/// no temporary files; once the correlator is back and space frees, the
/// spooled windows are delivered and accepted + dropped = produced.
#[test]
fn full_disk_under_the_spool_counts_and_keeps_going() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_full_spool") {
        return;
    }
    let dir = tmp("fi-fullspool");
    let spool = dir.join("spool");
    let fs = Tmpfs::mount(&spool, "64k");
    let record = dir.join("ingest.jsonl");
    let ib = sysfs("fi-fullspool", 8);
    let port = free_port();
    let mut col = Collector::start_window("0.05", port, &spool, 64 << 20, ib.root());
    // Until the disk is full (the number of spool files stops growing; a
    // tmpfs charges a page per file) and then some.
    let started = Instant::now();
    let mut files = 0;
    loop {
        col.wait_seq(col.last_seq + 10);
        let now = spool_files(&spool, ".win").len();
        if now > 0 && now == files {
            break;
        }
        files = now;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "spool never filled"
        );
    }
    col.wait_seq(col.last_seq + 20);
    let tmp_left = spool_files(&spool, ".tmp");
    let mut corr = correlator(port, &record);
    col.wait_seq(col.last_seq + 20);
    fs.resize("8m");
    col.wait_seq(col.last_seq + 10);
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    let seqs = recorded(&record);
    let dropped = summary_field(&summary, "dropped");
    let accepted = seqs.len() as u64;
    let lost = final_seq.saturating_sub(accepted + dropped);
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "full disk under the spool (64 KiB tmpfs)",
        final_seq,
        accepted,
        lost,
        wedges,
        &format!("{dropped} windows not spooled (disk full), counted; no .tmp left"),
    );
    assert!(
        tmp_left.is_empty(),
        "temporary files left on a full disk: {tmp_left:?}"
    );
    assert!(dropped > 0, "the disk filled: {summary}");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicate"
    );
    assert_eq!(
        accepted + dropped,
        final_seq,
        "every window delivered or counted: {summary}"
    );
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    drop(fs);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

fn spool_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The correlator's ingest log fills its filesystem (64 KiB tmpfs): windows
/// are refused, not half-written; the collector backs off instead of
/// reconnecting thousands of times; after the filesystem grows every window
/// is recorded exactly once.
#[test]
fn full_disk_under_the_ingest_log_no_storm_no_half_line() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_full_record") {
        return;
    }
    let dir = tmp("fi-fullrec");
    let logdir = dir.join("log");
    let fs = Tmpfs::mount(&logdir, "64k");
    let record = logdir.join("ingest.jsonl");
    let ib = sysfs("fi-fullrec", 8);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start_window("0.05", port, &dir.join("spool"), 64 << 20, ib.root());
    let started = Instant::now();
    // Wait until the log stops growing: the disk is full.
    let mut last_len = 0;
    loop {
        col.wait_seq(col.last_seq + 10);
        let len = std::fs::metadata(&record).map_or(0, |m| m.len());
        if len > 32 * 1024 && len == last_len {
            break;
        }
        last_len = len;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "log never filled"
        );
    }
    // Three seconds full: count reconnects by the windows confirmed meanwhile.
    let recorded_full = recorded(&record).len();
    let full_from = col.last_seq;
    col.wait_seq(full_from + 60);
    let during = recorded(&record).len();
    fs.resize("16m");
    col.wait_seq(col.last_seq + 10);
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    let seqs = recorded(&record); // panics on a half-written line
    let connects = summary_field(&summary, "connects");
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "full disk under the correlator's --record (64 KiB tmpfs)",
        final_seq,
        seqs.len() as u64,
        final_seq - seqs.len() as u64,
        wedges,
        &format!("{connects} connects in all (was 6,269 in 10 s); no half-written line"),
    );
    assert_eq!(during, recorded_full, "nothing recorded while full");
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert!(connects <= 20, "reconnect storm: {summary}");
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    drop(fs);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Fifty half-open clients (half an HTTP/2 preface, then silence) and one
/// slow client (a TCP connection that never reads) do not stop a real
/// collector's delivery or its shutdown.
#[test]
fn half_open_and_slow_clients_do_not_wedge_delivery() {
    use std::io::Write as _;
    let _k = tests::kernel_lock();
    if !tests::require_bpf("fault_half_open") {
        return;
    }
    let dir = tmp("fi-halfopen");
    let record = dir.join("ingest.jsonl");
    let ib = sysfs("fi-halfopen", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());
    col.wait_seq(3);
    wait_recorded(&record, 1);
    let mut idle = Vec::new();
    for _ in 0..50 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.write_all(b"PRI * HTTP/2.0\r\n").expect("half a preface");
        idle.push(s);
    }
    let slow = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    col.wait_seq(col.last_seq + 20);
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    drop(idle);
    drop(slow);
    let _ = corr.kill();
    let _ = corr.wait();
    let seqs = recorded(&record);
    let wedges = u64::from(took > STOP_BOUND);
    row(
        "50 half-open + 1 slow client",
        final_seq,
        seqs.len() as u64,
        final_seq - seqs.len() as u64,
        wedges,
        "",
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
