//! The kernel log as a signal source (issue 48): the NVIDIA driver's real
//! lines (`tests/data/kmsg/nvrm.txt`, each with its public source) in
//! `/dev/kmsg`'s record format, read by the real collector from the path its
//! `[kmsg]` section names, exactly as it reads `/dev/kmsg`:
//! - an XID naming a stand-in CUDA process is attributed to its Slurm job,
//!   rank and uid; NVML's report of the same XID joins it (one event,
//!   `source = "nvml+kmsg"`);
//! - a driver-like line with a user-space facility is not trusted;
//! - 10,000 XID 95 lines are one event with count 10000;
//! - an SXid is an `nvswitch_sxid` event on `host/nvswitch/<pci>`;
//! - a restart does not report old records again;
//! - a line written into the real `/dev/kmsg` from user space (facility
//!   LOG_USER) is ignored and counted.
use std::{
    io::{BufRead, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc::Receiver,
    time::{Duration, Instant},
};

use collector::kmsg::nvrm::{self, Report};
use tests::{bin, lines_of, KillOnDrop};

/// The fixture's lines (comments and blank lines left out).
fn fixtures() -> Vec<String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/kmsg/nvrm.txt");
    std::fs::read_to_string(p)
        .expect("tests/data/kmsg/nvrm.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn fixture(prefix: &str) -> String {
    fixtures()
        .into_iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no fixture line starts with {prefix:?}"))
}

/// The kernel's monotonic clock (the records' TS_USEC).
fn mono_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// A file in `/dev/kmsg`'s record format that the test appends to.
struct KmsgFile {
    path: PathBuf,
    seq: u64,
}

impl KmsgFile {
    /// Appends records (`PRIO`, message), each with a dictionary as the
    /// kernel writes for device messages.
    fn append(&mut self, records: &[(u32, &str)]) {
        let mut text = String::new();
        let ts = mono_usec();
        for (prio, msg) in records {
            self.seq += 1;
            text.push_str(&format!(
                "{prio},{},{ts},-;{msg}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n",
                self.seq
            ));
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .expect("open the kmsg file");
        f.write_all(text.as_bytes()).expect("append records");
    }
}

struct Run {
    child: KillOnDrop,
    out: Receiver<String>,
    seen: Vec<String>,
}

impl Run {
    fn start(cfg: &Path, record: &Path, nvml: Option<&Path>) -> Self {
        let mut c = Command::new(bin("faultline-collector"));
        c.arg("--config")
            .arg(cfg)
            .args(["--window", "0.25", "--duration", "60"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--no-cuda", "--no-verbs", "--no-block"])
            .arg("--record")
            .arg(record)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        match nvml {
            Some(scenario) => {
                c.arg("--nvml-library")
                    .arg(tests::fake_nvml())
                    .env("FAKE_NVML_SCENARIO", scenario)
                    .env("FAKE_NVML_GPUS", "2");
            }
            None => {
                c.arg("--no-nvml");
            }
        }
        let mut child = c.spawn().expect("start the collector");
        let out = lines_of(&mut child);
        Self {
            child: KillOnDrop(child),
            out,
            seen: Vec::new(),
        }
    }

    /// The first console line (since the start) that `pred` accepts.
    fn wait(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        if let Some(l) = self.seen.iter().find(|l| pred(l)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok(l) = self.out.recv_timeout(left) else {
                break;
            };
            self.seen.push(l.clone());
            if pred(&l) {
                return l;
            }
        }
        panic!("the collector never printed {what}: {:#?}", self.seen);
    }

    /// SIGTERM, and the events of every window it recorded.
    fn stop(mut self, record: &Path) -> Vec<serde_json::Value> {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGTERM) };
        let st = self.child.0.wait().expect("wait for the collector");
        assert!(st.success(), "collector exit: {st}");
        std::fs::read_to_string(record)
            .expect("record file")
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a window"))
            .flat_map(|w| w["events"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

fn config(dir: &Path, kmsg: &Path, state: &Path, first_start: &str) -> PathBuf {
    let p = dir.join("collector.toml");
    std::fs::write(
        &p,
        format!(
            "[kmsg]\nenabled = true\npath = {kmsg:?}\nstate_file = {state:?}\nfirst_start = \"{first_start}\"\njoin_s = 1.0\n"
        ),
    )
    .expect("config");
    p
}

fn xids(events: &[serde_json::Value], code: i64) -> Vec<&serde_json::Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "gpu_xid" && e["code"] == code)
        .collect()
}

#[test]
fn every_fixture_line_is_a_driver_report() {
    let _turn = tests::one_file_at_a_time(file!());
    let lines = fixtures();
    assert!(lines.len() >= 10, "{lines:?}");
    for l in &lines {
        let r = nvrm::parse(l).unwrap_or_else(|| panic!("not parsed: {l}"));
        if let Report::Xid(x) = &r {
            assert!(x.code > 0 && !x.text.is_empty(), "{l}: {x:?}");
            assert_eq!(
                x.pid.is_some(),
                l.contains(", pid=") && !l.contains("'<unknown>'")
            );
        }
    }
    let Some(Report::Xid(x)) = nvrm::parse(&fixture("NVRM: Xid (PCI:0000:cb:00): 109")) else {
        panic!("XID 109");
    };
    assert_eq!(
        (x.pid, x.process.as_deref()),
        (Some(1797828), Some("pt_main_thread"))
    );
}

#[test]
fn kernel_log_xids_are_attributed_joined_folded_and_not_replayed() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::scratch_dir("kmsg");
    let mut kmsg = KmsgFile {
        path: dir.join("kmsg"),
        seq: 100,
    };
    std::fs::write(&kmsg.path, "").expect("kmsg file");
    let state = dir.join("state/kmsg.state");
    let cfg = config(&dir, &kmsg.path, &state, "beginning");
    let scenario = dir.join("nvml.txt");
    std::fs::write(&scenario, "0.3 gpu=0 xid=13\n").expect("scenario");

    // A stand-in CUDA process of Slurm job 4711, rank 3.
    let mut app = Command::new(tests::cuda_workload())
        .arg(tests::fake_libcuda())
        .args(["device:0", "wait"])
        .env("SLURM_JOB_ID", "4711")
        .env("SLURM_PROCID", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cuda_workload");
    let mut ready = String::new();
    std::io::BufReader::new(app.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready line");
    let pid: u32 = ready
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{ready}"));
    let app = KillOnDrop(app);

    let record = dir.join("run1.jsonl");
    let mut run = Run::start(&cfg, &record, Some(&scenario));
    // NVML delivered its XID 13 on GPU 0: the driver's line follows it.
    run.wait("NVML's XID 13", |l| {
        l.contains("gpu event") && l.contains("XID 13")
    });
    let gpu0 = "PCI:0000:18:00";
    let gpu1 = "PCI:0000:19:00";
    let with_pid = fixture("NVRM: Xid (PCI:0000:01:00): 13, pid=1773")
        .replace("PCI:0000:01:00", gpu0)
        .replace("pid=1773", &format!("pid={pid}"));
    let user = format!("NVRM: Xid ({gpu0}): 79, pid=1, name=x, GPU has fallen off the bus.");
    let unknown =
        fixture("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM")
            .replace("PCI:0000:cb:00", gpu1);
    let sxid = fixture("nvidia-nvswitch1: SXid");
    let burst = fixture("NVRM: Xid (PCI:0000:9b:00): 95")
        .replace("PCI:0000:9b:00", gpu1)
        .replace("pid=1234", &format!("pid={pid}"));
    let mut recs = vec![
        (3, with_pid.as_str()),
        (11, user.as_str()),
        (3, unknown.as_str()),
        (3, sxid.as_str()),
    ];
    recs.extend(std::iter::repeat_n((3, burst.as_str()), 10_000));
    kmsg.append(&recs);
    run.wait("the joined XID 13", |l| {
        l.contains("gpu_xid 13") && l.contains("nvml+kmsg")
    });
    run.wait("the burst", |l| l.contains("gpu_xid 95"));
    run.wait("the SXid", |l| l.contains("nvswitch_sxid 12028"));
    run.wait("GPU 1's XID 13", |l| l.contains("gpu1 gpu_xid 13"));
    let events = run.stop(&record);

    let x13 = xids(&events, 13);
    assert_eq!(x13.len(), 2, "one XID 13 per GPU: {x13:#?}");
    let joined = x13
        .iter()
        .find(|e| e["entity"].as_str().is_some_and(|s| s.ends_with("/gpu0")))
        .expect("GPU 0's XID 13");
    assert_eq!(joined["source"], "nvml+kmsg", "{joined}");
    assert_eq!(joined["pid"], pid, "{joined}");
    assert_eq!(joined["process"], ".gala-wrapped", "{joined}");
    assert_eq!(joined["job"], "4711", "{joined}");
    assert_eq!(joined["rank"], 3, "{joined}");
    assert_eq!(joined["uid"], unsafe { libc::getuid() }, "{joined}");
    assert_eq!(joined["count"], 1, "{joined}");
    assert!(
        joined["detail"].as_str().is_some_and(|d| d.contains(gpu0)),
        "{joined}"
    );
    let nobody = x13
        .iter()
        .find(|e| e["entity"].as_str().is_some_and(|s| s.ends_with("/gpu1")))
        .expect("GPU 1's XID 13");
    assert_eq!(
        (nobody["source"].as_str(), nobody["pid"].as_u64()),
        (Some("kmsg"), Some(0))
    );
    assert!(
        nobody["detail"]
            .as_str()
            .is_some_and(|d| d.contains("named no process")),
        "{nobody}"
    );
    assert!(
        xids(&events, 79).is_empty(),
        "a user-space line is not trusted: {events:#?}"
    );
    let x95 = xids(&events, 95);
    assert_eq!(x95.len(), 1, "the burst is one event: {x95:#?}");
    assert_eq!(x95[0]["count"], 10_000, "{}", x95[0]);
    assert_eq!(x95[0]["job"], "4711");
    let sx: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "nvswitch_sxid")
        .collect();
    assert_eq!(sx.len(), 1, "{sx:#?}");
    assert!(
        sx[0]["entity"]
            .as_str()
            .is_some_and(|s| s.ends_with("/nvswitch/0000:84:00.0")),
        "{}",
        sx[0]
    );
    assert_eq!(sx[0]["code"], 12028);

    // A restart reads the file from its start again: nothing old comes
    // back, the next record does.
    let record2 = dir.join("run2.jsonl");
    let mut run = Run::start(&cfg, &record2, None);
    run.wait("the kmsg reader", |l| l.starts_with("kmsg: reading"));
    run.wait("a window", |l| l.starts_with("window 2:"));
    let old = fixture("NVRM: Xid (PCI:0000:01:00): 31");
    kmsg.append(&[(3, old.as_str())]);
    run.wait("the new XID 31", |l| l.contains("gpu_xid 31"));
    let events = run.stop(&record2);
    let kinds: Vec<_> = events
        .iter()
        .map(|e| (e["kind"].clone(), e["code"].clone()))
        .collect();
    assert_eq!(
        kinds.len(),
        1,
        "only the new record after a restart: {events:#?}"
    );
    assert_eq!(xids(&events, 31).len(), 1, "{events:#?}");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_user_space_line_in_the_real_dev_kmsg_is_not_trusted() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut dev = match std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("kmsg_xid: cannot write /dev/kmsg ({e})");
            assert!(!tests::in_ci(), "{msg}");
            eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
            return;
        }
    };
    let dir = tests::scratch_dir("kmsg-dev");
    let cfg = config(&dir, Path::new("/dev/kmsg"), &dir.join("kmsg.state"), "end");
    let record = dir.join("run.jsonl");
    let mut run = Run::start(&cfg, &record, None);
    let metrics = run.wait("the metrics address", |l| {
        l.starts_with("metrics on http://")
    });
    let addr = metrics
        .trim_start_matches("metrics on http://")
        .split('/')
        .next()
        .expect("address")
        .to_string();
    run.wait("the kmsg reader", |l| {
        l.starts_with("kmsg: reading /dev/kmsg")
    });
    run.wait("a window", |l| l.starts_with("window 1:"));
    // What `echo '<3>NVRM: ...' > /dev/kmsg` does: the kernel stores it
    // with facility LOG_USER.
    dev.write_all(
        b"<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n",
    )
    .expect("write /dev/kmsg");
    run.wait("the ignored line", |l| {
        l.contains("written from user space ignored")
    });
    let untrusted = tests::metrics::counter(
        &addr,
        "faultline_kmsg_dropped_total",
        &[("reason", "untrusted")],
    );
    assert!(untrusted >= 1, "untrusted = {untrusted}");
    let events = run.stop(&record);
    assert!(xids(&events, 79).is_empty(), "{events:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
