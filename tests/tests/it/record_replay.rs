//! The collector records its live windows in the replay format, and the
//! correlator replays the recording.
use std::process::Command;

use tests::bin;

#[test]
fn recorded_windows_replay_through_the_correlator() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("record_replay") {
        return;
    }
    let ib = tests::FakeIb::new("record");
    ib.active_port("mlx5_0", 1);
    let rec = std::env::temp_dir().join(format!("faultline-record-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&rec);
    let out = Command::new(bin("faultline-collector"))
        .args([
            "--window",
            "0.2",
            "--duration",
            "1.1",
            "--quiet",
            "--no-cuda",
            "--no-verbs",
            "--no-nvml",
            "--no-block",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .arg("--sysfs-root")
        .arg(ib.root())
        .arg("--record")
        .arg(&rec)
        .output()
        .expect("collector");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&rec).expect("record file");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        (5..=7).contains(&lines.len()),
        "one line per window: {}",
        lines.len()
    );
    let first: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(first["seq"], 1);
    assert_eq!(first["ib_ports"][0]["hca"], "mlx5_0");
    let out = Command::new(bin("faultline-correlator"))
        .arg("replay")
        .arg(&rec)
        .output()
        .expect("replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("replayed {} windows", lines.len())),
        "{stderr}"
    );
    std::fs::remove_file(&rec).expect("cleanup");
}
