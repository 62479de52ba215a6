//! `faultline-correlator usage`: the chargeback report from the history
//! database. Its lines add up to the sum of every window's usage rows
//! (per team and per job), unattributed usage is its own line, and the
//! recorder path (engine → recorder → SQLite) stores what the windows said.
use std::process::Command;

use correlator::history::{usage::By, HistoryConfig, Recorder, Store};
use proto::v1::JobUsage;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn row(job: &str, team: &str, kind: &str, k: u64) -> JobUsage {
    JobUsage {
        job: job.into(),
        team: team.into(),
        resource_kind: kind.into(),
        resource: "r".into(),
        gpu_alloc_seconds: 10.0,
        gpu_busy_seconds: 2.5 * k as f64,
        energy_joules: 1000.0 + k as f64,
        peak_mem_bytes: k << 30,
        launches: 100 * k,
        copy_bytes: 4096 * k,
        sync_wait_ns: 1_000_000 * k,
        io_requests: 7 * k,
        io_bytes: 7 * 4096 * k,
        io_device_ns: 3_000_000 * k,
        fabric_bytes: 1_000_003 * k,
        ..JobUsage::default()
    }
}

/// 90 windows of 10 s over 15 minutes, crossing an hour boundary: two jobs
/// of team vision, one of team search, a job without a team, unattributed
/// usage.
fn windows(now_ms: i64) -> Vec<(i64, Vec<JobUsage>)> {
    let start = now_ms - now_ms.rem_euclid(3_600_000) - 450_000;
    (0..90u64)
        .map(|i| {
            let k = i % 7 + 1;
            (
                start + i as i64 * 10_000,
                vec![
                    row("4711", "vision", "gpu", k),
                    row("4712", "vision", "storage", k + 1),
                    row("pod-9", "search", "fabric", k + 2),
                    row("4800", "", "gpu", k + 3),
                    row("", "", "storage", k + 4),
                ],
            )
        })
        .collect()
}

fn run(db: &std::path::Path, by: &str, fmt: Option<&str>) -> String {
    let out = Command::new(BIN)
        .args(["usage", "--since", "2h", "--by", by])
        .args(fmt)
        .arg("--history")
        .arg(db)
        .output()
        .expect("run usage");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn report_totals_equal_the_sum_of_the_windows() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-usage-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let db = dir.join("history.db");
    let now = correlator::web::api::now_ms();
    let wins = windows(now);
    {
        // Through the recorder, as the live correlator writes them.
        let store = Store::open(&db, &HistoryConfig::default()).expect("open");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (rec, h) = Recorder::start(store, 1024).expect("recorder");
        rt.block_on(async {
            for (ts, rows) in &wins {
                rec.usage(*ts, rows.clone());
            }
            rec.flush().await;
        });
        drop(rec);
        h.join().expect("writer");
    }
    let all: Vec<&JobUsage> = wins.iter().flat_map(|(_, r)| r.iter()).collect();
    let sum = |f: &dyn Fn(&JobUsage) -> u64| all.iter().map(|u| f(u)).sum::<u64>();
    let fsum = |f: &dyn Fn(&JobUsage) -> f64| all.iter().map(|u| f(u)).sum::<f64>();

    // By team, JSON lines.
    let text = run(&db, "team", Some("--json"));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let keys: Vec<&str> = lines
        .iter()
        .map(|l| l["key"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        keys,
        ["(no team)", "search", "vision", "(unattributed)", "TOTAL"],
        "{text}"
    );
    let total = &lines[4];
    assert_eq!(total["io_bytes"].as_u64(), Some(sum(&|u| u.io_bytes)));
    assert_eq!(total["cuda_launches"].as_u64(), Some(sum(&|u| u.launches)));
    assert_eq!(
        total["fabric_bytes"].as_u64(),
        Some(sum(&|u| u.fabric_bytes))
    );
    let kwh = total["energy_kwh"].as_f64().unwrap_or(0.0);
    assert!(
        (kwh - fsum(&|u| u.energy_joules) / 3.6e6).abs() < 1e-9,
        "{kwh}"
    );
    let busy = total["gpu_busy_hours"].as_f64().unwrap_or(0.0);
    assert!((busy - fsum(&|u| u.gpu_busy_seconds) / 3600.0).abs() < 1e-9);
    // The lines add up to the total, field by field.
    for f in [
        "io_bytes",
        "io_requests",
        "cuda_launches",
        "cuda_copy_bytes",
        "fabric_bytes",
    ] {
        let parts: u64 = lines[..4].iter().map(|l| l[f].as_u64().unwrap_or(0)).sum();
        assert_eq!(Some(parts), total[f].as_u64(), "{f}");
    }
    // Unattributed usage is its own line with exactly its windows' bytes.
    let un: u64 = all
        .iter()
        .filter(|u| u.job.is_empty())
        .map(|u| u.io_bytes)
        .sum();
    assert_eq!(lines[3]["io_bytes"].as_u64(), Some(un));
    assert!(un > 0);
    // Team vision: both of its jobs.
    let vision: u64 = all
        .iter()
        .filter(|u| u.team == "vision")
        .map(|u| u.launches)
        .sum();
    assert_eq!(lines[2]["cuda_launches"].as_u64(), Some(vision));

    // By job, CSV: one line per job with its team, the same total.
    let csv = run(&db, "job", Some("--csv"));
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows[0][0], "key");
    let col = |name: &str| rows[0].iter().position(|c| *c == name).expect("column");
    let jobs: Vec<(&str, &str)> = rows[1..].iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        jobs,
        [
            ("4711", "vision"),
            ("4712", "vision"),
            ("4800", ""),
            ("pod-9", "search"),
            ("(unattributed)", ""),
            ("TOTAL", "")
        ]
    );
    let io = col("io_bytes");
    let last = rows.last().expect("total");
    assert_eq!(last[io].parse::<u64>().ok(), Some(sum(&|u| u.io_bytes)));

    // The store's own view matches the CLI's.
    let store = Store::open_reader(&db, &HistoryConfig::default()).expect("reader");
    let by_job = store.usage(now - 7_200_000, By::Job).expect("query");
    assert_eq!(
        by_job.last().map(|r| r.io_requests),
        Some(sum(&|u| u.io_requests))
    );
    // The table form prints the same keys.
    let table = run(&db, "team", None);
    assert!(
        table.lines().any(|l| l.starts_with("(unattributed)")),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
