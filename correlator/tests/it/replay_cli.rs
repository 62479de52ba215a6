//! `faultline-correlator replay`: the documented example prints its incident;
//! bad input stops with file, line and field (exit 2) or is skipped and counted.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/degrading-link.jsonl")
}

/// `replay --skip-invalid FILE`, which must succeed: its stderr.
fn replay_skipping(file: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .args(["replay", "--skip-invalid"])
        .arg(file)
        .output()
        .expect("run replay");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn example_prints_the_degrading_link_incident() {
    let _turn = tests::one_file_at_a_time(file!());
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
    let _turn = tests::one_file_at_a_time(file!());
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

    let stderr = replay_skipping(&bad);
    assert!(stderr.contains("2 invalid lines skipped"), "{stderr}");
    assert!(
        stderr.contains("field `ib_ports[0].counters.symbol_error`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reader_that_leaves_stops_replay_quietly_and_errors_are_said_once() {
    let _turn = tests::one_file_at_a_time(file!());
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

/// Two windows on one line used to be read as the first alone; a line of
/// invalid UTF-8 stopped the replay with no line number and could not be
/// skipped.
#[test]
fn a_second_window_on_a_line_and_invalid_utf8_name_their_line() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-replay-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(example()).unwrap();
    let mut lines: Vec<Vec<u8>> = good
        .lines()
        .take(6)
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let two = format!(
        "{} {}",
        good.lines().nth(6).unwrap(),
        good.lines().nth(7).unwrap()
    );
    lines.insert(2, two.into_bytes());
    lines.insert(4, b"{\"origin\":{\"hostname\":\"n\xff1\"}}".to_vec());
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, lines.join(&b'\n')).unwrap();

    let out = Command::new(BIN).arg("replay").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "faultline-correlator: error: {} line 3: more after the window: one window per line",
            bad.display()
        )
    );
    let stderr = replay_skipping(&bad);
    assert!(stderr.contains("replayed 4 windows"), "{stderr}");
    assert!(stderr.contains("2 invalid lines skipped"), "{stderr}");
    assert!(
        stderr.contains("line=5") && stderr.contains("not UTF-8 text (byte 25)"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `serve --record` writes the replay format (it used to write a summary
/// line per window that `replay` refused): a recorded ingest log replays to
/// the same incidents as the windows that were sent.
#[test]
fn serve_record_is_the_replay_format() {
    let _turn = tests::one_file_at_a_time(file!());
    use std::io::BufRead as _;
    let dir = tests::scratch_dir("serve-record");
    let record = dir.join("ingest.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    struct Serve(std::process::Child);
    impl Drop for Serve {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut serve = Command::new(BIN)
        .args([
            "serve",
            "--insecure",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--record",
        ])
        .arg(&record)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Serve)
        .unwrap();
    // Wait for "serving" on its log.
    let mut err = std::io::BufReader::new(serve.0.stderr.take().unwrap());
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("serving") {
        line.clear();
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    // The example's windows moved to end now (the correlator refuses
    // windows far from its clock), also written out to replay directly.
    let mut windows: Vec<proto::v1::Window> = std::fs::read_to_string(example())
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let shift = now_ms - windows.iter().map(|w| w.end_unix_ms).max().unwrap();
    for w in &mut windows {
        w.start_unix_ms += shift;
        w.end_unix_ms += shift;
        for e in &mut w.events {
            e.unix_ms += shift;
        }
    }
    let source = dir.join("source.jsonl");
    let text: Vec<String> = windows
        .iter()
        .map(|w| serde_json::to_string(w).unwrap())
        .collect();
    std::fs::write(&source, text.join("\n")).unwrap();
    let n = windows.len();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = proto::v1::ingest_client::IngestClient::new(
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
        let summary = c
            .stream(tokio_stream::iter(windows))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary.accepted as usize, n);
    });
    drop(serve);
    let direct = Command::new(BIN)
        .arg("replay")
        .arg(&source)
        .output()
        .unwrap();
    let replayed = Command::new(BIN)
        .arg("replay")
        .arg(&record)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("replayed {n} windows")),
        "{stderr}"
    );
    assert!(!direct.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&replayed.stdout),
        String::from_utf8_lossy(&direct.stdout),
        "same incidents from the recording as from the source"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--config` gives replay what it gives `serve`: ingest's `[detect.limits]`
/// (here a jump past `max_seq_jump` is refused, as live; replay used the
/// defaults before) and the file's `cluster`, on every update.
#[test]
fn the_config_files_limits_and_cluster_apply_as_in_serve() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-replay-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        "cluster = \"lab7\"\n[detect.limits]\nmax_seq_jump = 10\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("replay")
        .arg(example())
        .arg("--config")
        .arg(&cfg)
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
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["cluster"] == "lab7"), "{lines:#?}");
    assert!(lines.iter().all(|l| l["severity"] != ""), "{lines:#?}");

    // A window 50 past its origin's last.
    let jump = dir.join("jump.jsonl");
    std::fs::write(
        &jump,
        "{\"origin\":{\"hostname\":\"n01\",\"instance\":\"x\"},\"seq\":1}\n\
         {\"origin\":{\"hostname\":\"n01\",\"instance\":\"x\"},\"seq\":51}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("replay")
        .arg(&jump)
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2: ") && stderr.contains("max_seq_jump 10"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
