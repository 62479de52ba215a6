//! NCCL end to end, with no OTLP at all: ranks of one communicator (the
//! stand-in `libnccl.so.2`, processes on this host) seen by the real
//! collector's NCCL probes, streamed to the real correlator, judged there.
//! - A rank stopped mid-job (SIGSTOP) raises `collective_hang` naming it
//!   within 2 windows; it resolves once the rank runs again.
//! - Every rank paused after one collective (a checkpoint) raises nothing;
//!   every rank hung in its sync after one collective (the driver never
//!   completes it) raises `collective_hang` from the blocked calls the CUDA
//!   probes see, with no cause below; a rank then killed is named.
//! - A rank that computes slower (its loop sleeps 3× as long) makes every
//!   rank's cadence its own, yet is named a `straggler` from its issue lag
//!   behind its peers.
//! - A degrading link on the HCA one rank's NCCL uses, while the job's
//!   collectives slow down: one incident names the link, its BER, the
//!   communicator crossing it, and the job with its step-time regression
//!   inferred from collective cadence.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use tests::{bin, stream::free_port, KillOnDrop};

struct Run {
    dir: PathBuf,
    ib: tests::FakeIb,
    sub: mpsc::Receiver<String>,
    col: mpsc::Receiver<String>,
    procs: Vec<KillOnDrop>,
    ranks: Vec<u32>,
    /// The collector's `/metrics` address.
    metrics: String,
    /// More environment for the ranks started next.
    rank_env: Vec<(String, String)>,
}

impl Run {
    fn start(tag: &str, window: &str, correlator_cfg: &str) -> Self {
        let ib = tests::FakeIb::new(tag);
        for hca in 0..4 {
            ib.active_port(&format!("mlx5_{hca}"), 1);
        }
        let dir = tests::scratch_dir(tag);
        let cfg = dir.join("correlator.toml");
        std::fs::write(&cfg, correlator_cfg).expect("config");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut procs = Vec::new();
        procs.push(KillOnDrop(
            Command::new(bin("faultline-correlator"))
                .args([
                    "serve",
                    "--insecure",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                ])
                .arg("--config")
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("correlator"),
        ));
        let mut sub = tests::subscriber(&url, &["--json"]);
        let sub_lines = tests::lines_of(&mut sub);
        procs.push(KillOnDrop(sub));
        let mut col = Command::new(bin("faultline-collector"))
            .args(["--window", window, "--duration", "150", "--quiet"])
            .args(["--no-nvml", "--no-block", "--no-otlp"])
            .arg("--verbs-library")
            .arg(tests::fake_verbs())
            .arg("--cuda-library")
            .arg(tests::fake_libcuda())
            .arg("--nccl-library")
            .arg(tests::fake_nccl())
            .args(["--metrics-addr", "127.0.0.1:0", "--correlator", &url])
            .arg("--spool-dir")
            .arg(dir.join("spool"))
            .arg("--sysfs-root")
            .arg(ib.root())
            .arg("--record")
            .arg(dir.join("windows.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("collector");
        let col_lines = tests::lines_of(&mut col);
        procs.push(KillOnDrop(col));
        let metrics = loop {
            let l = col_lines
                .recv_timeout(Duration::from_secs(30))
                .expect("collector output");
            if let Some(a) = l.strip_prefix("metrics on http://") {
                break a.trim_end_matches("/metrics").to_string();
            }
        };
        let r = Self {
            dir,
            ib,
            sub: sub_lines,
            col: col_lines,
            procs,
            ranks: Vec::new(),
            metrics,
            rank_env: Vec::new(),
        };
        // The probes are attached once the first window closes.
        r.window(1);
        r
    }

    /// Starts `n` ranks of one communicator in loop mode (an all-reduce
    /// every `sleep_us`), job 5150, rank i on GPU i with its QPs on HCA
    /// port mlx5_i/1.
    fn ranks(&mut self, n: u32, sleep_us: u32) {
        let slow = self.dir.join("slow");
        self.ranks_slowed_by(n, sleep_us, |_| slow.clone());
    }

    /// As [`Self::ranks`], rank i's cadence multiplied by the number in
    /// the file `slow_file(i)` while it exists.
    fn ranks_slowed_by(&mut self, n: u32, sleep_us: u32, slow_file: impl Fn(u32) -> PathBuf) {
        let mut lines = Vec::new();
        for i in 0..n {
            let mut child = Command::new(tests::nccl_workload())
                .arg(tests::fake_nccl())
                .arg(tests::fake_libcuda())
                .arg(self.dir.join("comm.id"))
                .args([
                    n.to_string(),
                    i.to_string(),
                    i.to_string(),
                    "0".into(),
                    "loop".into(),
                ])
                .arg(sleep_us.to_string())
                .env("FAKE_NCCL_SHM_DIR", &self.dir)
                .env("NCCL_WORKLOAD_SLOW_FILE", slow_file(i))
                // Loop mode is one collective per step, and a training step
                // ends in a sync on its collectives (the loss, the optimizer):
                // a rank's collective returns once every rank issued it. (With
                // the stand-in's default of one collective of run-ahead and no
                // sync, a healthy rank can settle a whole collective behind
                // its peers for good, which a real job's per-step sync undoes.)
                .env("FAKE_NCCL_DEPTH", "0")
                .env("SLURM_JOB_ID", "5150")
                .env("RANK", i.to_string())
                // NCCL may use any of four HCAs; its QPs land on mlx5_i port 1.
                .env("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3")
                .env("FAKE_NCCL_VERBS", tests::fake_verbs())
                .env("FAKE_NCCL_IB", format!("mlx5_{i}:1"))
                .envs(self.rank_env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::piped())
                .spawn()
                .expect("rank");
            lines.push(tests::lines_of(&mut child));
            self.ranks.push(child.id());
            self.procs.push(KillOnDrop(child));
        }
        for (i, rx) in lines.iter().enumerate() {
            let l = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("rank ready");
            assert_eq!(l, format!("ready pid={}", self.ranks[i]));
        }
    }

    /// `/metrics` now, failing on a series exported twice; with `ranks`,
    /// every rank's `faultline_nccl_rank_info` must be there.
    fn scrape(&self, ranks: bool) -> String {
        let text = tests::metrics::scrape(&self.metrics).expect("scrape");
        tests::metrics::assert_unique_series(&text);
        for pid in self.ranks.iter().filter(|_| ranks) {
            let pid = pid.to_string();
            assert!(
                tests::metrics::samples(&text).any(|s| s.name == "faultline_nccl_rank_info"
                    && s.labels.iter().any(|(k, v)| *k == "pid" && *v == pid)),
                "rank {pid} on /metrics: {text}"
            );
        }
        text
    }

    /// Waits for the collector's window `n`.
    fn window(&self, n: u64) {
        tests::wait_window(&self.col, n);
    }

    /// The NCCL rows the collector recorded (every window's).
    fn recorded_nccl(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("windows.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|w| w["nccl"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.procs.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: a plain kill(2) on a child of this test.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill {pid}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

#[test]
fn a_stopped_rank_raises_collective_hang_naming_it_within_two_windows() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_e2e hang") {
        return;
    }
    let mut r = Run::start(
        "nccl-hang",
        "1",
        "[detect.incidents]\nquiet_windows = 2\nquiet_s = 2.0\n",
    );
    r.ranks(4, 10_000);
    r.window(4);
    r.scrape(true);
    // Every rank reports, with one communicator id, its GPU and HCA.
    let rows = r.recorded_nccl();
    let comms: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|x| x["comm"].as_str()).collect();
    assert_eq!(comms.len(), 1, "{comms:?}");
    for (i, pid) in r.ranks.iter().enumerate() {
        let mine = rows
            .iter()
            .find(|x| x["pid"] == *pid && x["seq"].as_u64() > Some(0))
            .unwrap_or_else(|| panic!("rank {i} reported: {rows:?}"));
        assert_eq!(mine["rank"], i as i64);
        assert_eq!(mine["device"], i as i64);
        assert_eq!(mine["job"], "5150");
        // The port its QPs are bound to (verbs probe), not NCCL_IB_HCA's four.
        assert_eq!(tests::json_strs(&mine["hcas"]), vec![format!("mlx5_{i}/1")]);
    }
    assert!(
        tests::updates(&r.sub)
            .iter()
            .all(|u| u["kind"] != "collective_hang"),
        "no hang while healthy"
    );
    let stopped = r.ranks[2];
    signal(stopped, libc::SIGSTOP);
    let stop_ms = now_ms();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut all = Vec::new();
    let hang = loop {
        all.extend(tests::updates(&r.sub));
        if let Some(u) = all
            .iter()
            .find(|u| u["kind"] == "collective_hang" && u["state"] == "opened")
        {
            break u.clone();
        }
        assert!(Instant::now() < deadline, "no collective_hang: {all:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ev = tests::json_strs(&hang["evidence"]);
    assert!(
        ev.iter().any(|e| e.starts_with("stalled rank 2 on ")
            && e.contains(&format!("pid {stopped}, gpu 2, job 5150 rank 2"))),
        "{ev:?}"
    );
    assert_eq!(
        ev.iter().filter(|e| e.starts_with("stalled rank")).count(),
        1,
        "only the stopped rank: {ev:?}"
    );
    assert_eq!(
        tests::json_strs(&hang["affected_jobs"]),
        vec!["5150".to_string()]
    );
    let late = hang["ts"].as_i64().expect("ts") - stop_ms;
    assert!(
        late <= 2_000 + 300,
        "raised {late} ms after the stop (windows of 1 s)"
    );
    // The rank runs again: the communicator moves and the hang resolves.
    signal(stopped, libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        all.extend(tests::updates(&r.sub));
        if all
            .iter()
            .any(|u| u["kind"] == "collective_hang" && u["state"] == "resolved")
        {
            break;
        }
        assert!(Instant::now() < deadline, "hang never resolved: {all:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let opened = all
        .iter()
        .filter(|u| u["kind"] == "collective_hang" && u["state"] == "opened")
        .count();
    assert_eq!(opened, 1, "one incident for the hang");
}

/// The largest sequence any rank recorded.
fn max_seq(r: &Run) -> u64 {
    r.recorded_nccl()
        .iter()
        .filter_map(|x| x["seq"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Waits for a `collective_hang` update (opened or updated) whose
/// evidence has a line containing `line`; returns it.
fn hang_update(
    r: &Run,
    all: &mut Vec<serde_json::Value>,
    line: &str,
    within: Duration,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        all.extend(tests::updates(&r.sub));
        if let Some(u) = all.iter().find(|u| {
            u["kind"] == "collective_hang"
                && (u["state"] == "opened" || u["state"] == "updated")
                && tests::json_strs(&u["evidence"])
                    .iter()
                    .any(|e| e.contains(line))
        }) {
            return u.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no collective_hang with {line:?}: {all:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_rank_waiting_in_one_collective_is_a_hang_and_a_pause_is_not() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_e2e every-rank hang") {
        return;
    }
    let mut r = Run::start(
        "nccl-wait",
        "1",
        "[detect.incidents]\nquiet_windows = 2\nquiet_s = 2.0\n",
    );
    let control = r.dir.join("control");
    r.rank_env = vec![
        ("NCCL_WORKLOAD_SYNC_EACH".into(), "1".into()),
        (
            "NCCL_WORKLOAD_CONTROL_FILE".into(),
            control.display().to_string(),
        ),
    ];
    r.ranks(4, 10_000);
    r.window(4);
    // A pause: every rank stops after one collective, on the host, with
    // nothing in flight below (a checkpoint, an evaluation on the CPU).
    let at = max_seq(&r) + 300;
    std::fs::write(&control, format!("pause {at}")).expect("control");
    let deadline = Instant::now() + Duration::from_secs(30);
    while r
        .recorded_nccl()
        .iter()
        .filter(|x| x["seq"].as_u64() == Some(at))
        .count()
        < 4
    {
        assert!(Instant::now() < deadline, "the ranks never reached {at}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Paused for 8 windows: past the hang bound (1 s) many times over.
    let mut all = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        all.extend(tests::updates(&r.sub));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        all.iter().all(|u| u["kind"] != "collective_hang"),
        "a pause is no hang: {all:#?}"
    );
    let paused_at = max_seq(&r);
    assert_eq!(paused_at, at, "every rank paused after collective {at}");
    std::fs::remove_file(&control).expect("resume");
    let deadline = Instant::now() + Duration::from_secs(30);
    while max_seq(&r) < paused_at + 100 {
        assert!(Instant::now() < deadline, "the ranks never resumed");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A hang: every rank issues collective N and sits in its sync.
    let at = max_seq(&r) + 300;
    std::fs::write(&control, format!("hang {at}")).expect("control");
    let hang = hang_update(
        &r,
        &mut all,
        &format!("every rank waits in collective {at}; no cause seen below"),
        Duration::from_secs(30),
    );
    let ev = tests::json_strs(&hang["evidence"]);
    assert!(
        ev.iter().any(|e| e.contains("cuStreamSynchronize")),
        "the blocked syncs are the proof: {ev:?}"
    );
    assert_eq!(
        tests::json_strs(&hang["affected_jobs"]),
        vec!["5150".to_string()]
    );
    // A rank's process dies in the hang: it is named.
    let dead = r.ranks[1];
    signal(dead, libc::SIGKILL);
    let named = hang_update(&r, &mut all, "culprit: rank 1 on ", Duration::from_secs(30));
    assert!(
        tests::json_strs(&named["evidence"])
            .iter()
            .any(|e| e.starts_with("culprit: rank 1 on ") && e.contains(&format!("pid {dead}"))),
        "{named:#}"
    );
    assert_eq!(named["id"], hang["id"], "one incident for the hang");
    r.scrape(false);
}

#[test]
fn a_degrading_link_carries_the_communicator_and_its_inferred_step_regression() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_e2e link") {
        return;
    }
    let mut r = Run::start(
        "nccl-link",
        "0.5",
        "[detect.workload]\nmin_persist_s = 3.0\nexplain_grace_s = 3.0\nwarm_observations = 20\n",
    );
    r.ranks(4, 20_000);
    let slow = r.dir.join("slow");
    let mut all = Vec::new();
    let mut sym = 0;
    for w in 1..=90u64 {
        // 8 s healthy (the job's own cadence), then the link degrades and
        // the whole job's collectives slow down with it.
        if w == 16 {
            r.scrape(true);
            std::fs::write(&slow, "1.5").expect("slow");
        }
        if w >= 16 {
            sym += 40;
        }
        r.ib.traffic(w, sym);
        r.window(w + 1);
        all.extend(tests::updates(&r.sub));
        let joined = all.iter().find(|u| {
            u["kind"] == "ib_link_degraded"
                && tests::json_strs(&u["evidence"])
                    .iter()
                    .any(|e| e.starts_with(
                        "explains job 5150 interval between NCCL collectives (its step time, inferred: no OTLP) +",
                    ))
        });
        if let Some(u) = joined {
            let ev = tests::json_strs(&u["evidence"]);
            assert!(ev.iter().any(|e| e.starts_with("BER ")), "{ev:?}");
            assert!(
                ev.iter().any(|e| e.starts_with("NCCL communicator ")
                    && e.contains("job 5150")
                    && e.ends_with("has rank 2 here")),
                "the communicator crossing the link: {ev:?}"
            );
            assert!(
                u["entity"]
                    .as_str()
                    .is_some_and(|e| e.ends_with("/mlx5_2/1")),
                "{u}"
            );
            assert!(
                tests::json_strs(&u["affected_jobs"]).contains(&"5150".to_string()),
                "{u}"
            );
            let opened: Vec<&serde_json::Value> =
                all.iter().filter(|u| u["state"] == "opened").collect();
            assert_eq!(opened.len(), 1, "one incident for the fault: {opened:#?}");
            assert_eq!(opened[0]["incident_id"], u["incident_id"]);
            return;
        }
    }
    panic!("no ib_link_degraded incident carried the job's regression: {all:#?}");
}

#[test]
fn a_slow_rank_without_otlp_is_named_from_its_issue_lag() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_e2e slow rank") {
        return;
    }
    let mut r = Run::start(
        "nccl-slow-rank",
        "1",
        "[detect.workload]\nmin_persist_s = 3.0\n",
    );
    let dir = r.dir.clone();
    // An all-reduce every 50 ms; rank 2's pace from its own file.
    r.ranks_slowed_by(4, 50_000, |i| {
        dir.join(if i == 2 { "slow-2" } else { "slow" })
    });
    r.window(4);
    r.scrape(true);
    let healthy = tests::updates(&r.sub);
    assert!(
        healthy.iter().all(|u| u["kind"] != "straggler"),
        "no straggler while healthy: {healthy:#?}"
    );
    std::fs::write(dir.join("slow-2"), "3").expect("slow file");
    let slow_ms = now_ms();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut all = Vec::new();
    let u = loop {
        all.extend(tests::updates(&r.sub));
        if let Some(u) = all
            .iter()
            .find(|u| u["kind"] == "straggler" && u["state"] == "opened")
        {
            break u.clone();
        }
        assert!(Instant::now() < deadline, "no straggler: {all:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(u["entity"], "5150/2", "{u:#?}");
    let ev = tests::json_strs(&u["evidence"]);
    let pid = r.ranks[2];
    let line = ev
        .iter()
        .find(|e| e.starts_with("job 5150 rank 2 ") && e.contains(&format!("(pid {pid}, gpu 2)")))
        .unwrap_or_else(|| panic!("{ev:?}"));
    // Its loop takes 100 ms longer than its peers': they enter each
    // collective at least that much before it, and up to two of its
    // intervals (150 ms) before, as NCCL lets them run a collective ahead.
    let lag: f64 = line
        .split(" collectives ")
        .nth(1)
        .and_then(|x| x.split(" s after").next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("lag in {line:?}"));
    assert!((0.09..0.35).contains(&lag), "lag {lag} s: {line}");
    let late = u["ts"].as_i64().expect("ts") - slow_ms;
    eprintln!("named {late} ms after the slowdown; {line}");
    // Two windows of lag and 3 s of persistence, plus a window of slack.
    assert!(late <= 6_000, "named {late} ms after the slowdown");
    // No other rank is named.
    assert!(
        all.iter()
            .filter(|u| u["kind"] == "straggler")
            .all(|u| u["entity"] == "5150/2"),
        "{all:#?}"
    );
}
