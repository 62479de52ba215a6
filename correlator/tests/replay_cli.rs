//! `faultline-correlator replay`: the documented example prints its incident;
//! bad input stops with file, line and field (exit 2) or is skipped and counted.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/degrading-link.jsonl")
}

#[test]
fn example_prints_the_degrading_link_incident() {
    let out = Command::new(BIN)
        .arg("replay")
        .arg(example())
        .output()
        .expect("run replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let states: Vec<&str> = lines.iter().filter_map(|l| l["state"].as_str()).collect();
    assert_eq!(states.first(), Some(&"opened"));
    assert_eq!(states.last(), Some(&"resolved"));
    assert!(
        lines
            .iter()
            .all(|l| l["kind"] == "ib_link_degraded" && l["entity"] == "n03/mlx5_1/1"),
        "{lines:#?}"
    );
    let id = &lines[0]["incident_id"];
    assert!(lines.iter().all(|l| &l["incident_id"] == id));
    // Onset in window 10 (ts …10000); opened by window 11.
    assert!(
        lines[0]["ts"].as_i64().unwrap() <= 1_800_000_011_000,
        "{}",
        lines[0]
    );
    assert_eq!(lines[0]["affected_jobs"], serde_json::json!(["918273"]));
    for key in [
        "ts",
        "incident_id",
        "state",
        "kind",
        "entity",
        "confidence",
        "evidence",
        "affected_jobs",
        "runbook",
    ] {
        assert!(lines[0].get(key).is_some(), "missing {key}");
    }
}

#[test]
fn malformed_lines_name_file_line_and_field_or_are_skipped_with_a_count() {
    let dir = std::env::temp_dir().join(format!("faultline-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(example()).unwrap();
    let mut lines: Vec<String> = good.lines().take(12).map(str::to_string).collect();
    lines.insert(
        5,
        r#"{"origin":{"hostname":"n01","instance":"x"},"seq":"three"}"#.to_string(),
    );
    lines.insert(8, r#"{"origin":{"hostname":"n01","instance":"x"},"seq":4,"ib_ports":[{"hca":"mlx5_0","port":1,"counters":{"symbol_error":-1}}]}"#.to_string());
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, lines.join("\n")).unwrap();

    let out = Command::new(BIN).arg("replay").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "faultline-correlator: error: {} line 6: field `seq`: invalid type: string \"three\"",
            bad.display()
        )),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .args(["replay", "--skip-invalid"])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 invalid lines skipped"), "{stderr}");
    assert!(
        stderr.contains("field `ib_ports[0].counters.symbol_error`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reader_that_leaves_stops_replay_quietly_and_errors_are_said_once() {
    // `replay … | head`: the pipe's reader is gone before the first line.
    let mut child = Command::new(BIN)
        .arg("replay")
        .arg(example())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run replay");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("replay exits");
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    // A missing file: the cause once, not twice.
    let out = Command::new(BIN)
        .args(["replay", "/nonexistent/windows.jsonl"])
        .output()
        .expect("run replay");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}
