//! Fault injection with real processes on loopback: kill -9 at random points
//! of either side, a full disk under the spool, the correlator's ingest log
//! and its history database (small tmpfs mounts), damaged spool files,
//! half-open clients, a flood of 20,000 concurrent streams.
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
    correlator, correlator_with, free_port, recorded, recorded_windows, summary_field, tmp,
    wait_recorded, Collector,
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

/// One case's setup: the kernel lock (the collector attaches probes), a
/// fresh directory, a fake sysfs tree with `ports` ports, a free port; `None`
/// when BPF is unavailable (locally; CI fails instead).
struct Setup {
    _k: std::sync::MutexGuard<'static, ()>,
    dir: PathBuf,
    ib: tests::FakeIb,
    port: u16,
}

fn setup(tag: &str, ports: u32) -> Option<Setup> {
    let k = tests::kernel_lock();
    if !tests::require_bpf(tag) {
        return None;
    }
    Some(Setup {
        _k: k,
        dir: tmp(tag),
        ib: sysfs(tag, ports),
        port: free_port(),
    })
}

/// How a case ended.
struct End {
    final_seq: u64,
    summary: String,
    took: Duration,
    /// Sequence numbers the correlator recorded, in order.
    seqs: Vec<u64>,
    /// 1 when SIGTERM was not honoured in time.
    wedges: u64,
}

/// SIGTERM to the collector; once the correlator recorded its last window,
/// the correlator is stopped.
fn end(col: Collector, mut corr: std::process::Child, record: &Path) -> End {
    let (final_seq, summary, took) = col.stop();
    wait_recorded(record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();
    End {
        final_seq,
        summary,
        took,
        seqs: recorded(record),
        wedges: u64::from(took > STOP_BOUND),
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-damaged", 1) else {
        return;
    };
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
    let corr = correlator(port, &record);
    let mut col = Collector::start(port, &spool, 64 << 20, ib.root());
    col.wait_seq(10);
    wait_recorded(&record, 10);
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-killcorr", 1) else {
        return;
    };
    let mut rng = Rng::new("kill -9 correlator");
    let record = dir.join("ingest.jsonl");
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());
    for _ in 0..3 {
        col.wait_seq(col.last_seq + rng.range(2, 8));
        corr.kill().expect("kill -9 correlator");
        corr.wait().expect("reap");
        col.wait_seq(col.last_seq + rng.range(1, 6));
        corr = correlator(port, &record);
    }
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-killcol", 1) else {
        return;
    };
    let mut rng = Rng::new("kill -9 collector");
    let record = dir.join("ingest.jsonl");
    let spool = dir.join("spool");
    let corr = correlator(port, &record);
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
    // The restarted collectors stream their predecessors' windows first.
    let End {
        final_seq,
        summary,
        took,
        wedges,
        ..
    } = end(col, corr, &record);
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

/// The spool's filesystem fills up (64 KiB tmpfs) while the correlator is
/// down: the collector runs on, counts every window it could not write, leaves
/// no temporary files; once the correlator is back and space frees, the
/// spooled windows are delivered and accepted + dropped = produced.
#[test]
fn full_disk_under_the_spool_counts_and_keeps_going() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-fullspool", 8) else {
        return;
    };
    let spool = dir.join("spool");
    let fs = Tmpfs::mount(&spool, "64k");
    let record = dir.join("ingest.jsonl");
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
    let corr = correlator(port, &record);
    col.wait_seq(col.last_seq + 20);
    fs.resize("8m");
    col.wait_seq(col.last_seq + 10);
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
    let dropped = summary_field(&summary, "dropped");
    let accepted = seqs.len() as u64;
    let lost = final_seq.saturating_sub(accepted + dropped);
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

/// The correlator's ingest log fills its filesystem (64 KiB tmpfs): windows
/// are refused, not half-written; the collector backs off instead of
/// reconnecting thousands of times; after the filesystem grows every window
/// is recorded exactly once.
#[test]
fn full_disk_under_the_ingest_log_no_storm_no_half_line() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-fullrec", 8) else {
        return;
    };
    let logdir = dir.join("log");
    let fs = Tmpfs::mount(&logdir, "64k");
    let record = logdir.join("ingest.jsonl");
    let corr = correlator(port, &record);
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
    // The backlog arrives once the collector's backoff (grown while the
    // disk was full) expires; stopping earlier would leave it in the spool.
    wait_recorded(&record, col.last_seq);
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
    let connects = summary_field(&summary, "connects");
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
    let _turn = tests::one_file_at_a_time(file!());
    use std::io::Write as _;
    let Some(Setup { _k, dir, ib, port }) = setup("fi-halfopen", 1) else {
        return;
    };
    let record = dir.join("ingest.jsonl");
    let corr = correlator(port, &record);
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
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
    drop(idle);
    drop(slow);
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

/// The collector's own `--record` file fills its filesystem (16 KiB tmpfs):
/// the collector used to exit; it counts the failed appends and runs on, the
/// file holds whole lines only, and streaming is unaffected.
#[test]
fn full_disk_under_the_collectors_record_keeps_it_running() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-colrec", 8) else {
        return;
    };
    let recdir = dir.join("rec");
    let fs = Tmpfs::mount(&recdir, "16k");
    let record = dir.join("ingest.jsonl");
    let corr = correlator(port, &record);
    let mut child = tests::streaming_collector(
        "0.05",
        &format!("http://127.0.0.1:{port}"),
        &dir.join("spool"),
        ib.root(),
    )
    .arg("--record")
    .arg(recdir.join("windows.jsonl"))
    .spawn()
    .expect("start the collector");
    let lines = tests::lines_of(&mut child);
    let mut col = Collector::from_parts(child, lines);
    let started = Instant::now();
    loop {
        col.wait_seq(col.last_seq + 10);
        let full = recorded(&recdir.join("windows.jsonl")).len() as u64;
        if full + 20 < col.last_seq {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "record never filled"
        );
    }
    let End {
        final_seq,
        summary,
        took,
        seqs,
        wedges,
    } = end(col, corr, &record);
    // Every line of the full file is a whole window (recorded() panics otherwise).
    let in_file = recorded(&recdir.join("windows.jsonl")).len() as u64;
    row(
        "full disk under the collector's --record (16 KiB tmpfs)",
        final_seq,
        seqs.len() as u64,
        final_seq - seqs.len() as u64,
        wedges,
        &format!("collector ran on; {in_file} whole lines in the full file"),
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert!(in_file < final_seq);
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    drop(fs);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// The correlator's resident memory in KiB (`VmRSS` of /proc/PID/status).
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Raise this process's soft file limit to its hard limit (the flood holds
/// hundreds of sockets; the correlator inherits the limit).
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// How the 20,000 flood streams ended.
#[derive(Debug, Default)]
struct Flood {
    /// Streams the correlator served to the end (`StreamSummary`, 0 windows).
    served: u64,
    /// Streams ended by an error status, by code.
    refused: BTreeMap<String, u64>,
}

/// A collector's probe during the flood from its own address: `Resume` and
/// a new stream with one window; how long each took.
async fn probe(url: &str, seq: u64) -> (Duration, Duration) {
    use proto::v1::{ingest_client::IngestClient, ResumeRequest};
    let t0 = Instant::now();
    let chan = tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("probe connects during the flood");
    let mut c = IngestClient::new(chan);
    let mut w = proto_window("probe-1", seq);
    if let Some(o) = w.origin.as_mut() {
        o.hostname = "fi-probe".into();
    }
    w.end_unix_ms = now_ms();
    w.start_unix_ms = w.end_unix_ms - 1000;
    c.resume(ResumeRequest {
        origin: w.origin.clone(),
    })
    .await
    .expect("Resume answered during the flood");
    let resumed = t0.elapsed();
    let t1 = Instant::now();
    let s = c
        .stream(tokio_stream::iter(vec![w]))
        .await
        .expect("a new stream is served during the flood")
        .into_inner();
    assert_eq!(s.accepted, 1, "probe window accepted");
    (resumed, t1.elapsed())
}

/// 20,000 concurrent `Stream` calls from one client address (127.0.0.2),
/// 63 per connection over 318 connections as a client multiplexing HTTP/2
/// would (the correlator allows 64 streams per connection, 256 connections
/// per peer): the connections past the per-peer limit are refused and
/// counted, the rest are served. Meanwhile a real collector on 127.0.0.1
/// keeps delivering (no window lost), `Resume` and new streams are answered
/// within 5 s, the correlator's RSS returns to within 64 MiB of where it
/// started once the flood ends, and SIGTERM of the collector is honoured.
#[test]
fn twenty_thousand_streams_are_bounded_and_do_not_wedge_ingest() {
    let _turn = tests::one_file_at_a_time(file!());
    const STREAMS: u64 = 20_000;
    const PER_CONN: u64 = 63;
    let Some(Setup { _k, dir, ib, port }) = setup("fi-20k", 1) else {
        return;
    };
    raise_nofile();
    let t_case = Instant::now();
    let record = dir.join("ingest.jsonl");
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let corr = correlator_with(port, &record, &["--metrics-addr", &maddr]);
    let pid = corr.id();
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());
    col.wait_seq(3);
    wait_recorded(&record, 1);
    let rss_before = vm_rss_kib(pid);
    let url = format!("http://127.0.0.1:{port}");
    let rt = tests::runtime();
    let conns = STREAMS.div_ceil(PER_CONN);
    // Open the flood and hold every stream open (its sender alive).
    let (mut senders, tasks) = rt.block_on(async {
        let mut senders = Vec::new();
        let mut tasks = Vec::new();
        let mut left = STREAMS;
        for _ in 0..conns {
            let n = left.min(PER_CONN);
            left -= n;
            let ep = tonic::transport::Endpoint::from_shared(url.clone())
                .expect("url")
                .local_address(Some(std::net::Ipv4Addr::new(127, 0, 0, 2).into()));
            // A connection closed at accept may still "connect": its
            // streams then fail; one refused before that fails them too.
            let chan = match ep.connect().await {
                Ok(c) => c,
                Err(_) => ep.connect_lazy(),
            };
            for _ in 0..n {
                let (tx, rx) = tokio::sync::mpsc::channel::<proto::v1::Window>(1);
                let mut c = proto::v1::ingest_client::IngestClient::new(chan.clone());
                senders.push(tx);
                tasks.push(tokio::spawn(async move {
                    c.stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                        .await
                        .map(|r| r.into_inner().accepted)
                }));
            }
        }
        (senders, tasks)
    });
    let opened = t_case.elapsed();
    // Hold the flood while the real collector delivers and a probe gets in.
    let held_from = col.last_seq;
    let (resumed, streamed) = rt.block_on(probe(&url, 1));
    col.wait_seq(held_from + 5);
    wait_recorded(&record, held_from + 5);
    let rss_peak = vm_rss_kib(pid);
    // End the flood: every open stream closes its request side cleanly.
    senders.clear();
    let mut flood = Flood::default();
    rt.block_on(async {
        for t in tasks {
            match tokio::time::timeout(Duration::from_secs(20), t).await {
                Ok(Ok(Ok(0))) => flood.served += 1,
                Ok(Ok(Ok(n))) => panic!("a flood stream had {n} windows accepted"),
                Ok(Ok(Err(st))) => {
                    *flood.refused.entry(format!("{:?}", st.code())).or_default() += 1
                }
                Ok(Err(e)) => panic!("flood task: {e}"),
                Err(_) => panic!("a flood stream did not end within 20 s: wedged"),
            }
        }
    });
    drop(rt);
    // The refusals, once every stream has ended: a connection whose
    // connect failed retries lazily, with its first stream, which under a
    // loaded machine can come after the flood is held (ci18 read 51 of the
    // 62 refusals there).
    let per_peer = tests::metrics::counter(
        &maddr,
        "faultline_connections_refused_total",
        &[("listener", "grpc"), ("reason", "per_peer")],
    );
    // Connections the listener displaced at its cap, idle for a second
    // (accepted, their streams not yet sent: the flood takes 2 s to open
    // on a loaded machine); their streams fail, by design.
    let evicted = tests::metrics::counter(
        &maddr,
        "faultline_connections_closed_total",
        &[("listener", "grpc"), ("reason", "evicted")],
    );
    // Give the correlator a moment to free the connections, then measure.
    let settle = Instant::now();
    let mut rss_after = vm_rss_kib(pid);
    while rss_after > rss_before + 64 * 1024 && settle.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        rss_after = vm_rss_kib(pid);
    }
    let after_probe = tests::runtime().block_on(probe(&url, 2));
    col.wait_seq(col.last_seq + 3);
    let End {
        final_seq,
        summary,
        took,
        wedges,
        ..
    } = end(col, corr, &record);
    // The collector's windows (the probe's two are in the same log).
    let seqs: Vec<u64> = recorded_windows(&record)
        .into_iter()
        .filter(|(inst, _)| inst != "probe-1")
        .map(|(_, seq)| seq)
        .collect();
    let refused: u64 = flood.refused.values().sum();
    println!(
        "20k streams: {flood:?}; per_peer refusals {per_peer}, {evicted} evicted; RSS KiB before {rss_before} \
         peak {rss_peak} after {rss_after}; opened in {opened:?}; probe resume {resumed:?} \
         stream {streamed:?}, after {after_probe:?}; case {:?}",
        t_case.elapsed()
    );
    row(
        "20,000 concurrent streams (63 per connection, one peer)",
        final_seq,
        seqs.len() as u64,
        final_seq - (seqs.len() as u64).min(final_seq),
        wedges,
        &format!(
            "{} streams served, {refused} refused ({per_peer} connections over the per-peer limit); \
             RSS {} → {} → {} MiB; Resume {:.2} s during the flood",
            flood.served,
            rss_before / 1024,
            rss_peak / 1024,
            rss_after / 1024,
            resumed.as_secs_f64()
        ),
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert_eq!(flood.served + refused, STREAMS);
    assert!(per_peer >= conns - 256, "refusals counted: {per_peer}");
    // The connections within the per-peer limit (256) were served, never
    // more, but those the listener evicted as idle at its cap (ci17/18 and
    // here: up to 2.5 connections' worth short, with 39 evictions in one
    // run). Under a loaded machine a few streams of a served connection can
    // also fail on the client's side (seen once: 13 of 16,128, as
    // `Cancelled`); fewer than one connection's worth is that, not the
    // limit refusing honest connections.
    assert!(flood.served <= 256 * PER_CONN, "{flood:?}");
    assert!(
        flood.served + evicted * PER_CONN > 255 * PER_CONN,
        "{flood:?}, {evicted} connections evicted"
    );
    assert!(resumed < Duration::from_secs(5) && streamed < Duration::from_secs(5));
    assert!(
        rss_after <= rss_before + 64 * 1024,
        "RSS {rss_before} → {rss_after} KiB"
    );
    assert_eq!(wedges, 0, "SIGTERM took {took:?}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Fills the filesystem holding `path` with `path` until ENOSPC; its size.
fn fill(path: &Path) -> u64 {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    let _ = f.sync_all();
    n
}

fn dir_kib(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum::<u64>()
        })
        .unwrap_or(0)
        / 1024
}

/// The correlator's history database runs out of disk (its 1 MiB tmpfs is
/// filled by another file once history is being written): ingest never
/// waits on the disk, so every window of a real collector is still
/// accepted; the failed history transactions are counted in
/// `faultline_history_write_errors_total`; once space is freed history
/// writes succeed again; the correlator does not crash and exits promptly
/// on SIGTERM.
#[test]
fn full_disk_under_the_history_database_keeps_ingest_going() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(Setup { _k, dir, ib, port }) = setup("fi-fullhist", 8) else {
        return;
    };
    let histdir = dir.join("hist");
    let fs = Tmpfs::mount(&histdir, "1m");
    let record = dir.join("ingest.jsonl");
    let maddr = format!("127.0.0.1:{}", free_port());
    let db = histdir.join("history.db");
    let mut corr = correlator_with(
        port,
        &record,
        &["--metrics-addr", &maddr, "--history", &db.to_string_lossy()],
    );
    let mut col = Collector::start_window("0.05", port, &dir.join("spool"), 64 << 20, ib.root());
    let errors =
        |addr: &str| tests::metrics::counter(addr, "faultline_history_write_errors_total", &[]);
    col.wait_seq(20);
    let before_fill = dir_kib(&histdir);
    assert!(before_fill > 0, "history is being written");
    assert_eq!(errors(&maddr), 0, "no error before the disk fills");
    let filler = histdir.join("filler");
    let filled = fill(&filler);
    let started = Instant::now();
    loop {
        col.wait_seq(col.last_seq + 10);
        if errors(&maddr) > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "history writes never failed on the full disk"
        );
    }
    // Keep streaming on the full disk.
    col.wait_seq(col.last_seq + 40);
    let write_errors = errors(&maddr);
    assert!(corr.try_wait().expect("poll").is_none(), "correlator died");
    // Space again: history writes succeed (the error count stops rising).
    std::fs::remove_file(&filler).expect("free the disk");
    // Recovered: the count stops rising for 20 windows (1 s).
    let freed = Instant::now();
    let recovered = loop {
        let before = errors(&maddr);
        col.wait_seq(col.last_seq + 20);
        if errors(&maddr) == before {
            break true;
        }
        if freed.elapsed() > Duration::from_secs(15) {
            break false;
        }
    };
    let recovery = freed.elapsed();
    let (final_seq, summary, took) = col.stop();
    wait_recorded(&record, final_seq);
    let seqs = recorded(&record);
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(corr.id() as libc::pid_t, libc::SIGTERM);
    }
    let exited = loop {
        if let Some(st) = corr.try_wait().expect("poll") {
            break Some(st);
        }
        if t.elapsed() > STOP_BOUND {
            let _ = corr.kill();
            let _ = corr.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let term = t.elapsed();
    let wedges = u64::from(took > STOP_BOUND) + u64::from(exited.is_none());
    row(
        "full disk under the correlator's history database (1 MiB tmpfs, filled)",
        final_seq,
        seqs.len() as u64,
        final_seq - (seqs.len() as u64).min(final_seq),
        wedges,
        &format!(
            "{write_errors} failed history transactions counted ({before_fill} KiB written, \
             {} KiB filler); writes resumed within {:.1} s once freed; correlator SIGTERM exit in {:.1} s",
            filled / 1024,
            recovery.as_secs_f64(),
            term.as_secs_f64()
        ),
    );
    assert_eq!(seqs, (1..=final_seq).collect::<Vec<_>>(), "{summary}");
    assert!(write_errors > 0);
    assert!(
        recovered,
        "history writes still failing after space was freed"
    );
    assert!(
        exited.is_some_and(|s| s.success()),
        "SIGTERM not honoured: {exited:?} after {term:?}"
    );
    assert_eq!(wedges, 0, "collector SIGTERM took {took:?}");
    drop(fs);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
