//! The simulator's console is its presentation: each incident printed once
//! on stdout, no per-node log lines on stderr, no colour codes when stderr
//! is not a terminal, and `RUST_LOG` honoured.
use std::process::Command;

fn sim(rust_log: Option<&str>) -> (String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faultline-sim"));
    c.args([
        "--nodes",
        "8",
        "--duration",
        "10",
        "--onset",
        "3",
        "--speed",
        "20",
        "--inject",
        "gpu-thermal@n003/gpu1",
    ]);
    c.env_remove("RUST_LOG");
    if let Some(l) = rust_log {
        c.env("RUST_LOG", l);
    }
    let out = c.output().expect("sim runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sim_prints_each_incident_once_without_per_node_logs() {
    let _turn = tests::one_file_at_a_time(file!());
    let (stdout, stderr) = sim(None);
    assert_eq!(
        stdout
            .matches("OPENED gpu_thermal_throttle n003/gpu1")
            .count(),
        1,
        "{stdout}"
    );
    assert!(
        !stderr.contains("streaming to the correlator") && !stderr.contains("candidate"),
        "one log line per node or per candidate: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes on a pipe: {stderr:?}"
    );
    // RUST_LOG brings the info lines back, uncoloured.
    let (_, stderr) = sim(Some("info"));
    assert!(stderr.contains("streaming to the correlator"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}
