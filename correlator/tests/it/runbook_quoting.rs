//! Runbooks paste names taken from windows (hosts, HCAs, GPU entities) into
//! shell commands an operator copies: a name such as `n2;$(touch FILE)` must
//! reach the shell as one literal word. Each backticked command of every
//! runbook raised here is run through `sh` with `printf` in front: nothing
//! may execute, and the name must come back whole.
use std::process::Command;

use correlator::engine::Engine;
use proto::v1::{CandidateUpdate, Event, IbPort, Origin, Window};

fn window(host: &str, seq: u64, t: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-1"),
            ..Origin::default()
        }),
        seq,
        start_unix_ms: t - 1000,
        end_unix_ms: t,
        ..Window::default()
    }
}

fn port(hca: &str, state: u32) -> IbPort {
    IbPort {
        hca: hca.into(),
        port: 1,
        state,
        phys_state: if state == 4 { 5 } else { 3 },
        link_layer: "InfiniBand".into(),
        ..IbPort::default()
    }
}

#[test]
fn names_from_windows_are_one_shell_word_in_runbook_commands() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::scratch_dir("runbook");
    let marker = dir.join("pwned");
    // No `/` in the names (an entity is HOST/…): `sh` runs in `dir`.
    let evil_host = "n2;$(touch pwned)".to_string();
    let evil_hca = "mlx5_0;$(touch pwned)".to_string();
    let hosts = [
        "n1".to_string(),
        "n3".into(),
        "n4".into(),
        evil_host.clone(),
    ];

    let mut e = Engine::default();
    let mut updates: Vec<CandidateUpdate> = Vec::new();
    let mut t = 1_800_000_000_000i64;
    for i in 1..=14u64 {
        t += 1000;
        for h in &hosts {
            // The evil host falls silent after window 6 (node_lost).
            if *h == evil_host && i > 6 {
                continue;
            }
            let mut w = window(h, i, t);
            if h == "n1" {
                // Its port with the evil name goes down at window 4.
                w.ib_ports = vec![port(&evil_hca, if i < 4 { 4 } else { 1 })];
            }
            if *h == evil_host && i == 3 {
                w.events = vec![Event {
                    unix_ms: t,
                    kind: "gpu_xid".into(),
                    entity: format!("{evil_host}/gpu0"),
                    detail: "GPU-x".into(),
                    code: 79,
                    ..Default::default()
                }];
            }
            updates.extend(e.ingest(&w));
        }
    }
    let kinds: Vec<&str> = updates
        .iter()
        .filter(|u| u.state == "opened")
        .map(|u| u.kind.as_str())
        .collect();
    for want in ["ib_link_down", "gpu_xid", "node_lost"] {
        assert!(kinds.contains(&want), "{want} not raised: {kinds:?}");
    }
    let mut checked = 0;
    for u in updates.iter().filter(|u| !u.runbook.is_empty()) {
        let commands = u.runbook.split('`').skip(1).step_by(2);
        for cmd in commands {
            let out = Command::new("sh")
                .current_dir(&dir)
                .arg("-c")
                .arg(format!("printf '[%s]' {cmd}"))
                .output()
                .expect("sh");
            let words = String::from_utf8_lossy(&out.stdout).into_owned();
            for name in [&evil_host, &evil_hca] {
                if cmd.contains(name.as_str()) || cmd.contains(&name.replace('\'', "'\\''")) {
                    assert!(
                        words.contains(&format!("[{name}]")),
                        "{}: `{cmd}` does not pass {name:?} as one word: {words}",
                        u.kind
                    );
                    checked += 1;
                }
            }
            assert!(
                !marker.exists(),
                "{}: `{cmd}` ran a command taken from a window name",
                u.kind
            );
        }
    }
    // `ibstat HCA 1`, `mlxlink -d HCA -p 1` and `ping HOST`, at least.
    assert!(checked >= 3, "{checked} commands carried a name");
    let _ = std::fs::remove_dir_all(&dir);
}
