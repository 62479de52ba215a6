//! `--speed 1e-320` used to panic in `Duration::from_secs_f64`; out-of-range
//! speed and duration are one clear line and exit 1.
use std::process::Command;

#[test]
fn sim_speed_and_duration_out_of_range_are_errors_not_panics() {
    let _turn = tests::one_file_at_a_time(file!());
    for (args, want) in [
        (
            ["--speed", "1e-320"],
            "faultline-sim: error: --speed must be within 0.01..=10000 simulated seconds per second, got 1e-320",
        ),
        (
            ["--speed", "NaN"],
            "faultline-sim: error: --speed must be within 0.01..=10000 simulated seconds per second, got NaN",
        ),
        (
            ["--duration", "1e20"],
            "faultline-sim: error: --duration must be within (0, 1e7] simulated seconds, got 1e20",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_faultline-sim"))
            .args(args)
            .output()
            .expect("run sim");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim(), want, "{args:?}");
    }
}
