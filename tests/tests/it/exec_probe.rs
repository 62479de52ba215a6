//! The first end-to-end probe: a real load of the embedded object, a real
//! attach of `sched:sched_process_exec`, real execs from this test, and the
//! exact events they caused read back through the ring buffer.
use std::{
    process::Command,
    sync::{mpsc, Mutex},
    time::Duration,
};

use collector::{
    exec::ExecRecord,
    probes::{ProbeOptions, Probes},
};
use collector_common::stat;

/// Captures aya-log records forwarded from the probes.
struct Capture(Mutex<mpsc::Sender<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.target().starts_with("faultline_probes") {
            if let Ok(tx) = self.0.lock() {
                let _ = tx.send(record.args().to_string());
            }
        }
    }
    fn flush(&self) {}
}

#[test]
fn exec_probe_reports_exactly_the_execs_this_test_caused() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("exec_probe") {
        return;
    }
    tests::runtime().block_on(exec_probe());
}

async fn exec_probe() {
    let (log_tx, log_rx) = mpsc::channel();
    log::set_boxed_logger(Box::new(Capture(Mutex::new(log_tx)))).expect("install logger");
    log::set_max_level(log::LevelFilter::Trace);

    let opts = ProbeOptions {
        exec: true,
        block: false,
        cuda: false,
        verbs: false,
        ..ProbeOptions::default()
    };
    let mut probes = Probes::load(&opts).expect("load and attach the probes");
    assert!(
        probes.is_attached("sched_process_exec"),
        "{:?}",
        probes.status()
    );
    let mut ring = probes.take_exec_ring().expect("exec ring");

    const N: usize = 7;
    let mut pids = Vec::with_capacity(N);
    for _ in 0..N {
        let mut child = Command::new("/bin/true").spawn().expect("spawn /bin/true");
        pids.push(child.id());
        assert!(child.wait().expect("wait").success());
    }
    // The ring is one ordered MPSC buffer: once the sentinel's exec (started
    // after every child exited) has been read, every earlier event has been too.
    let mut sentinel = Command::new("/bin/sh")
        .args(["-c", "exit 0"])
        .spawn()
        .expect("spawn sentinel");
    let sentinel_pid = sentinel.id();
    sentinel.wait().expect("wait sentinel");

    let mut seen: Vec<ExecRecord> = Vec::new();
    let mut batch = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            ring.recv_batch(&mut batch).await.expect("ring read");
            let done = batch.iter().any(|e| e.pid == sentinel_pid);
            seen.append(&mut batch);
            if done {
                break;
            }
        }
    })
    .await
    .expect("sentinel exec event within 10 s");

    let ours: Vec<&ExecRecord> = seen.iter().filter(|e| pids.contains(&e.pid)).collect();
    assert_eq!(ours.len(), N, "exactly one exec event per child: {ours:#?}");
    let cgroup = tests::own_cgroup_id().expect("own cgroup id");
    for (e, pid) in ours.iter().zip(&pids) {
        assert_eq!(e.pid, *pid, "events in exec order");
        assert_eq!(e.tid, *pid);
        assert_eq!(e.old_pid, *pid);
        assert_eq!(e.comm, "true");
        assert_eq!(e.filename, "/bin/true");
        assert!(!e.filename_truncated);
        assert_eq!(e.cgroup_id, cgroup, "children inherit the test's cgroup");
    }
    assert!(ours.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
    let s = seen
        .iter()
        .find(|e| e.pid == sentinel_pid)
        .expect("sentinel");
    assert_eq!(s.filename, "/bin/sh");
    assert_eq!(ring.malformed(), 0);

    let k = probes.kernel_stats().expect("kernel stats");
    assert_eq!(k[stat::EXEC_RING_FULL as usize], 0);
    assert!(k[stat::EXEC_EVENTS as usize] >= (N + 1) as u64);

    // aya-log: the probe logs each exec; the first child's record must arrive.
    let want = format!("exec pid={}", pids[0]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match log_rx.recv_timeout(left) {
            Ok(msg) if msg == want => break,
            Ok(_) => {}
            Err(e) => panic!("aya-log record {want:?} not received: {e}"),
        }
    }
}
