//! History: incidents and series survive a kill -9 of the correlator (the
//! open incident continues under its id while the fault persists and
//! resolves once it is gone); retention removes raw rows past their horizon
//! and keeps the rollups; a corrupt database is a clear error at start;
//! the correlator's /metrics passes `promtool check metrics`.
use crate::common;

use std::{process::Command, time::Duration};

use common::*;
use correlator::history::{samples::Sample, HistoryConfig, HistoryError, Store, HOUR, MINUTE, RAW};

#[test]
fn incidents_and_series_survive_kill_9() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = out_dir("history_restart");
    let ws = degraded_link_windows(&dir, 120);
    let (before, rest): (Vec<_>, Vec<_>) = ws.into_iter().partition(|w| w.seq <= 30);
    let (persist, after): (Vec<_>, Vec<_>) = rest.into_iter().partition(|w| w.seq <= 50);
    let gone = without_port(&after, "n000", "mlx5_5");
    let db = dir.join("history.db");

    let s = Serve::start(&db, &[]);
    s.send(before);
    s.wait_until("the incident in history", Duration::from_secs(20), || {
        !incidents_of(&s, "ib_link_degraded").is_empty()
    });
    let first = incidents_of(&s, "ib_link_degraded");
    assert_eq!(first.len(), 1, "{first:?}");
    let id = first[0]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(first[0]["state"], "open");
    assert_eq!(first[0]["entity"], "n000/mlx5_5/1");
    // Series reach the database off the hot loop: wait for the port's BER.
    let ber_points = |s: &Serve| {
        s.api(&format!("/api/incidents/{id}"))["panels"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["signal"] == "ber").cloned())
            .and_then(|p| p["points"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    s.wait_until("the port's BER series", Duration::from_secs(20), || {
        ber_points(&s) >= 20
    });
    let points_before = ber_points(&s);
    s.kill9();

    let s = Serve::start(&db, &[]);
    // Restored into the engine: open, same id, before any window.
    let open = s.api("/api/open");
    assert_eq!(open["incidents"][0]["incident_id"], id.as_str(), "{open}");
    assert!(ber_points(&s) >= points_before, "series lost in the kill");
    // The fault persists: the same incident continues, no second one opens.
    s.send(persist);
    s.wait_until(
        "the windows after the restart",
        Duration::from_secs(20),
        || ber_points(&s) >= points_before + 15,
    );
    let now = incidents_of(&s, "ib_link_degraded");
    assert_eq!(
        now.len(),
        1,
        "a new incident instead of the restored one: {now:?}"
    );
    assert_eq!(now[0]["id"], id.as_str());
    assert_eq!(now[0]["state"], "open");
    // The fault is gone: it resolves (after the 30 s quiet period).
    s.send(gone);
    s.wait_until(
        "the restored incident to resolve",
        Duration::from_secs(20),
        || {
            incidents_of(&s, "ib_link_degraded")
                .first()
                .is_some_and(|i| i["state"] == "resolved")
        },
    );
    let last = incidents_of(&s, "ib_link_degraded");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0]["id"], id.as_str());
    let detail = s.api(&format!("/api/incidents/{id}"));
    let states: Vec<&str> = detail["updates"]
        .as_array()
        .map(|u| u.iter().filter_map(|x| x["state"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(states.first(), Some(&"opened"), "{states:?}");
    assert_eq!(states.last(), Some(&"resolved"), "{states:?}");

    // The CLI reads the same history.
    let out = Command::new(correlator_bin())
        .args([
            "incidents",
            "--json",
            "--entity",
            "n000/mlx5_5/1",
            "--history",
        ])
        .arg(&db)
        .output()
        .expect("run incidents");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains(&id) && text.contains("\"state\":\"resolved\""),
        "{text}"
    );

    // /metrics is valid Prometheus text.
    let metrics = get(&format!("{}/metrics", s.web)).expect("GET /metrics");
    let text = String::from_utf8_lossy(&metrics).to_string();
    assert!(
        text.contains("faultline_correlator_windows_total"),
        "{text}"
    );
    assert!(
        text.contains("faultline_correlator_open_incidents{kind=\"ib_link_degraded\"} 0"),
        "{text}"
    );
    if require("/usr/bin/promtool") {
        let (ok, said) = Command::new("/usr/bin/promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .output_with(&metrics);
        assert!(ok, "promtool check metrics: {said}\n{text}");
    }
}

/// `output()` with `input` on stdin: (success, stdout + stderr).
trait OutputWith {
    fn output_with(&mut self, input: &[u8]) -> (bool, String);
}

impl OutputWith for Command {
    fn output_with(&mut self, input: &[u8]) -> (bool, String) {
        use std::io::Write as _;
        let mut child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        if let Some(mut i) = child.stdin.take() {
            i.write_all(input).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

#[test]
fn retention_drops_old_raw_rows_and_keeps_rollups() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = out_dir("history_retention");
    let cfg = HistoryConfig {
        raw_retention_s: 3600,
        ..HistoryConfig::default()
    };
    let path = dir.join("h.db");
    let mut st = Store::open(&path, &cfg).expect("open");
    // Three hours of one sample every 10 s, value = its index.
    let t0 = 1_800_000_000_000 - 1_800_000_000_000 % HOUR;
    let samples: Vec<Sample> = (0..3 * 360)
        .map(|i| Sample {
            entity: "n001/gpu0".into(),
            signal: "temp_c",
            ts: t0 + i * 10_000,
            value: i as f64,
        })
        .collect();
    // A restart in the middle of minute 90, after a rollup: the open
    // minute and hour come back from the database, counted once.
    st.write(&[], &samples[..545]).expect("write");
    st.rollup(t0 + 545 * 10_000).expect("rollup");
    drop(st);
    let mut st = Store::open(&path, &cfg).expect("reopen");
    st.write(&[], &samples[545..]).expect("write");
    // Windows may arrive 10 s late: a minute is rolled up 10 s after it ends.
    let now = t0 + 3 * HOUR + correlator::history::store::LATE_MS;
    st.rollup(now).expect("rollup");
    let gone = st.retain(now).expect("retain");
    let [raw, minutes, hours, _] = st.counts().expect("counts");
    // Raw: only the last hour (less the 10 s margin: 359 samples) is left.
    assert_eq!(raw, 359, "raw rows after retention");
    assert_eq!(gone, 3 * 360 - 359);
    // Rollups: every complete minute (up to now − 10 s late margin) and hour.
    assert_eq!(minutes, 180);
    assert_eq!(hours, 3);
    // The first hour reads back from the rollups: 60 one-minute means.
    let (res, pts) = st
        .series("n001/gpu0", "temp_c", t0, t0 + HOUR, 1000)
        .expect("series");
    assert_eq!(res, MINUTE);
    assert_eq!(pts.len(), 60);
    assert_eq!(pts[7].mean, 44.5, "mean of samples 42..47");
    let (_, m90) = st
        .series(
            "n001/gpu0",
            "temp_c",
            t0 + 90 * MINUTE,
            t0 + 91 * MINUTE,
            10,
        )
        .expect("series");
    assert_eq!(m90.len(), 1);
    assert_eq!(
        m90[0].mean, 542.5,
        "minute 90 (across the restart): samples 540..545"
    );
    let (res, pts) = st
        .series("n001/gpu0", "temp_c", now - HOUR, now, 1000)
        .expect("series");
    assert_eq!(res, RAW);
    assert_eq!(pts.len(), 359);
    // Idempotent: a second pass (a restart) double-counts nothing.
    st.rollup(now).expect("rollup again");
    let (_, h) = st
        .series("n001/gpu0", "temp_c", t0, t0 + HOUR, 1)
        .expect("series");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].mean, 179.5, "mean of samples 0..359");
    let (_, h1) = st
        .series("n001/gpu0", "temp_c", t0 + HOUR, t0 + 2 * HOUR, 1)
        .expect("series");
    assert_eq!(
        h1[0].mean, 539.5,
        "hour 1 (across the restart): samples 360..719"
    );
    assert_eq!(st.counts().expect("counts")[2], 3);
    // Older than the minute retention: only the hour rollups remain.
    let later = t0 + 31 * 86_400_000;
    st.retain(later).expect("retain");
    let [raw, minutes, hours, _] = st.counts().expect("counts");
    assert_eq!((raw, minutes, hours), (0, 0, 3));
}

#[test]
fn disk_budget_bounds_the_file() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = out_dir("history_budget");
    let cfg = HistoryConfig {
        max_bytes: 2 << 20,
        ..HistoryConfig::default()
    };
    let path = dir.join("h.db");
    let mut st = Store::open(&path, &cfg).expect("open");
    let t0 = 1_800_000_000_000;
    for batch in 0..20 {
        let s: Vec<Sample> = (0..5000)
            .map(|i| Sample {
                entity: format!("n{:03}/mlx5_{}/1", i % 500, i / 500),
                signal: "ber",
                ts: t0 + batch * 1000,
                value: 1e-12,
            })
            .collect();
        st.write(&[], &s).expect("write");
        st.retain(t0 + batch * 1000).expect("retain");
    }
    let used = st.used_bytes().expect("used");
    assert!(used <= 2 << 20, "{used} bytes in use over a 2 MiB budget");
    let raw = st.counts().expect("counts")[0];
    assert!(
        raw > 0 && raw < 100_000,
        "oldest raw rows went first: {raw}"
    );
}

#[test]
fn corrupt_database_is_a_clear_error() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = out_dir("history_corrupt");
    let path = dir.join("h.db");
    std::fs::write(&path, vec![0x5a; 8192]).expect("write garbage");
    let e = Store::open(&path, &HistoryConfig::default())
        .err()
        .expect("an error");
    assert!(matches!(e, HistoryError::Corrupt { .. }), "{e}");
    // The file is kept for inspection, never replaced.
    assert_eq!(std::fs::read(&path).expect("read").len(), 8192);
    // A path that cannot be a database file (a directory): told apart.
    let e = Store::open(&dir, &HistoryConfig::default())
        .err()
        .expect("an error");
    assert!(matches!(e, HistoryError::Unwritable { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("check that the correlator's user can write"),
        "{e}"
    );
    // A valid database with a damaged page.
    let good = dir.join("good.db");
    {
        let mut st = Store::open(&good, &HistoryConfig::default()).expect("open");
        let s: Vec<Sample> = (0..20_000)
            .map(|i| Sample {
                entity: format!("e{i}"),
                signal: "x",
                ts: i,
                value: 1.0,
            })
            .collect();
        st.write(&[], &s).expect("write");
    }
    let mut bytes = std::fs::read(&good).expect("read");
    let _ = std::fs::remove_file(dir.join("good.db-wal"));
    for b in &mut bytes[8192..16384] {
        *b = 0xff;
    }
    std::fs::write(&good, &bytes).expect("damage");
    let out = Command::new(correlator_bin())
        .args([
            "serve",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
            "--history",
        ])
        .arg(&good)
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a usable SQLite database") && err.contains("move it aside"),
        "{err}"
    );
}

#[test]
fn offenders_rank_entities_with_repeated_incidents() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = out_dir("history_offenders");
    let path = dir.join("h.db");
    let now = correlator::web::api::now_ms();
    let day = 86_400_000;
    let mut ups = Vec::new();
    let mut add = |id: &str, kind: &str, entity: &str, opened: i64, open_ms: i64| {
        let mut u = proto::v1::CandidateUpdate {
            ts_unix_ms: opened,
            incident_id: id.into(),
            state: "opened".into(),
            kind: kind.into(),
            entity: entity.into(),
            confidence: 0.9,
            ..Default::default()
        };
        ups.push(u.clone());
        u.state = "resolved".into();
        u.ts_unix_ms = opened + open_ms;
        ups.push(u);
    };
    // A link degraded twice and down once in 30 days; a GPU with two XIDs;
    // a disk slow once; a job slowed three times (a symptom, not hardware);
    // the link's oldest incident is 40 days old.
    add(
        "a",
        "ib_link_degraded",
        "n001/mlx5_0/1",
        now - 20 * day,
        60_000,
    );
    add(
        "b",
        "ib_link_degraded",
        "n001/mlx5_0/1",
        now - 5 * day,
        120_000,
    );
    add("c", "ib_link_down", "n001/mlx5_0/1", now - day, 30_000);
    add(
        "d",
        "ib_link_degraded",
        "n001/mlx5_0/1",
        now - 40 * day,
        30_000,
    );
    add("e", "gpu_xid", "n002/gpu3", now - 10 * day, 10_000);
    add("f", "gpu_xid", "n002/gpu3", now - 2 * day, 10_000);
    add(
        "g",
        "storage_latency",
        "n003/nvme0n1",
        now - 3 * day,
        10_000,
    );
    for i in 0..3 {
        add(
            &format!("j{i}"),
            "job_slowdown",
            "train-7",
            now - (i + 1) * day,
            1000,
        );
    }
    let mut st = Store::open(&path, &HistoryConfig::default()).expect("open");
    st.write(&ups, &[]).expect("write");
    drop(st);
    let out = Command::new(correlator_bin())
        .args(["offenders", "--json", "--since", "30d", "--history"])
        .arg(&path)
        .output()
        .expect("run offenders");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["entity"], "n001/mlx5_0/1");
    assert_eq!(rows[0]["incidents"], 3);
    assert_eq!(rows[0]["open_s"], 210.0);
    assert_eq!(rows[1]["entity"], "n002/gpu3");
    assert_eq!(rows[1]["incidents"], 2);
    // The table form, and --since narrowing it to one incident each.
    let out = Command::new(correlator_bin())
        .args(["offenders", "--since", "4d", "--min", "1", "--history"])
        .arg(&path)
        .output()
        .expect("run offenders");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 4, "header and three entities: {text}");
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("n001/mlx5_0/1")),
        "{text}"
    );
}
