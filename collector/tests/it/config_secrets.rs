//! A config path aimed at a file the operator should not read through the
//! collector (a symlink to `/proc/self/environ`, a key with a secret) is
//! refused naming the path, line and column, never quoting the file: toml's
//! own error text quoted the offending line.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-collector");

#[test]
fn a_parse_error_names_the_place_but_never_echoes_the_file() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-ccs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let secret = "s3cr3t-hunter2-7f9a";
    let file = dir.join("secret.toml");
    std::fs::write(
        &file,
        format!("[collector]\nwindow_secs = 2\napi_key={secret} # x\n"),
    )
    .expect("write");
    let typed = dir.join("typed.toml");
    std::fs::write(&typed, format!("[collector]\nwindow_secs = \"{secret}\"\n")).expect("write");
    let environ = dir.join("environ.toml");
    let _ = std::fs::remove_file(&environ);
    std::os::unix::fs::symlink("/proc/self/environ", &environ).expect("symlink");
    for (path, line) in [
        (&file, "line 3, column 9: "),
        (&typed, "line 2, column 15: invalid type: string \"…\""),
        (&environ, "line 1, column "),
    ] {
        for args in [&["check-config", "--config"][..], &["--config"][..]] {
            let out = Command::new(BIN)
                .args(args)
                .arg(path)
                .env("FAULTLINE_TEST_SECRET", secret)
                .output()
                .expect("run");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                !stderr.contains(secret),
                "{args:?} echoed the file: {stderr}"
            );
            assert!(
                stderr.contains(&format!("config error: {} {line}", path.display())),
                "{args:?}: {stderr}"
            );
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
