//! `[history]`, `[web]` and `[alertmanager]` in the correlator's config
//! file: check-config prints them with defaults; a bad value names its key.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn check(text: &str) -> (bool, String, String) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("history_config");
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join(format!("c{}.toml", text.len()));
    std::fs::write(&f, text).expect("write");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&f)
        .output()
        .expect("run");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn history_web_and_alertmanager_keys_are_checked_and_printed() {
    let _turn = tests::one_file_at_a_time(file!());
    let (ok, out, err) = check(
        "[history]\npath = \"/var/lib/faultline/history.db\"\nraw_retention_s = 3600\n\
         [web]\nlisten = \"127.0.0.1:8080\"\n[alertmanager]\nurl = \"http://127.0.0.1:9093\"\n",
    );
    assert!(ok, "{err}");
    for line in [
        "path = \"/var/lib/faultline/history.db\"",
        "raw_retention_s = 3600",
        "minute_retention_s = 2592000",
        "hour_retention_s = 31536000",
        "max_bytes = 1073741824",
        "listen = \"127.0.0.1:8080\"",
        "url = \"http://127.0.0.1:9093\"",
        "resend_s = 60.0",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "{line} missing from:\n{out}"
        );
    }
    let (ok, _, err) = check("[history]\nraw_retention_s = 7200\nminute_retention_s = 3600\n");
    assert!(!ok);
    assert!(
        err.contains("history.minute_retention_s: must be at least raw_retention_s"),
        "{err}"
    );
    let (ok, _, err) = check("[alertmanager]\nurl = \"https://am.example\"\n");
    assert!(!ok);
    assert!(
        err.contains("alertmanager.ca_file: is required for an https:// url"),
        "{err}"
    );
    let (ok, _, err) = check("[alertmanager]\nurl = \"ftp://am.example\"\n");
    assert!(!ok);
    assert!(
        err.contains("alertmanager.url: must start with http:// or https://"),
        "{err}"
    );
    let (ok, _, err) = check("[web]\nlisten = \"localhost\"\n");
    assert!(!ok);
    assert!(err.contains("listen"), "{err}");
}
