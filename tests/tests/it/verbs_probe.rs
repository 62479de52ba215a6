//! Verbs uprobes against the stand-in libibverbs + provider: completions per
//! status, QP and process, posted work requests and bytes, QP transitions to
//! the error state, and async events — exact counts.
use std::process::Command;

use collector::probes::{CodeLoc, ProbeOptions, ProbeState, Probes, ProviderTarget};
use collector_common::{stat, verbs::MAX_WC_PER_POLL};

fn opts() -> ProbeOptions {
    let lib = tests::fake_verbs();
    ProbeOptions {
        exec: false,
        block: false,
        cuda: false,
        verbs: true,
        verbs_library: Some(lib.clone()),
        verbs_provider: Some(ProviderTarget {
            path: lib,
            poll_cq: CodeLoc::Symbol("fakeprov_poll_cq".into()),
            post_send: CodeLoc::Symbol("fakeprov_post_send".into()),
            post_recv: CodeLoc::Symbol("fakeprov_post_recv".into()),
        }),
        ..ProbeOptions::default()
    }
}

fn run(tokens: &[&str]) -> u32 {
    let out = Command::new(tests::verbs_workload())
        .arg(tests::fake_verbs())
        .args(tokens)
        .output()
        .expect("run verbs_workload");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("ready "))
        .and_then(|p| p.trim().parse().ok())
        .expect("pid")
}

#[test]
fn verbs_probes_count_completions_posts_transitions_and_events() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("verbs_probe") {
        return;
    }
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts()).expect("load probes");
        let verbs: Vec<_> = probes.status().iter().filter(|s| s.name.starts_with("verbs:")).collect();
        assert_eq!(verbs.len(), 5, "{verbs:?}");
        assert!(verbs.iter().all(|s| s.state == ProbeState::Attached), "{verbs:?}");
        let before = probes.kernel_stats().unwrap();

        let client = run(&[
            "qp:77",
            "send:3:4:2:100",
            "recv:2:1:1:4096",
            "wc:0:40:4096",
            "poll:16",
            // 45 completions polled 64 at a time: more than the probe decodes per poll.
            "qp:78",
            "wc:0:45:1",
            "poll:64",
            "qp:77",
            "wc:12:3:0",
            "wc:5:7:0",
            "poll:4",
            "modify:6",
            "modifypkey",
            "async:10:1",
            "async:9:1",
            "async:10:1",
            "asyncempty",
        ]);
        let server = run(&["qp:90", "wc:0:5:64", "poll:1", "modify:3"]);

        let snap = probes.verbs_snapshot().expect("snapshot");
        let c = snap.completions_of(client);
        assert_eq!(c[&(77, 0)].completions, 40);
        assert_eq!(c[&(77, 0)].bytes, 40 * 4096);
        assert_eq!(c[&(77, 12)].completions, 3, "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(c[&(77, 5)].completions, 7, "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(c[&(78, 0)].completions, u64::from(MAX_WC_PER_POLL));
        assert_eq!(c.len(), 4);
        let s = snap.completions_of(server);
        assert_eq!(s[&(90, 0)].completions, 5);
        assert_eq!(s.len(), 1);
        let after = probes.kernel_stats().unwrap();
        assert_eq!(
            after[stat::VERBS_WC_UNDECODED as usize] - before[stat::VERBS_WC_UNDECODED as usize],
            45 - u64::from(MAX_WC_PER_POLL)
        );

        let post = |dir| {
            snap.posts
                .iter()
                .find(|(k, _)| k.pid == client && k.qp_num == 77 && k.dir == dir)
                .map(|(_, v)| *v)
                .expect("posts")
        };
        let sends = post(0);
        assert_eq!((sends.calls, sends.wrs, sends.bytes, sends.truncated), (3, 12, 3 * 4 * 2 * 100, 0));
        let recvs = post(1);
        assert_eq!((recvs.calls, recvs.wrs, recvs.bytes), (2, 2, 2 * 4096));

        let qp_err: Vec<_> = snap.qp_states.iter().filter(|(k, _)| k.pid == client).collect();
        assert_eq!(qp_err.len(), 1, "the mask without IBV_QP_STATE is not a transition: {qp_err:?}");
        let (k, n) = qp_err[0];
        assert_eq!((k.qp_num, k.state, *n), (77, 6, 1));
        assert!(snap.qp_states.iter().any(|(k, n)| k.pid == server && k.qp_num == 90 && k.state == 3 && *n == 1));

        let ev: Vec<_> = snap.async_events.iter().filter(|(k, _)| k.pid == client).map(|(k, n)| (k.event_type, *n)).collect();
        assert_eq!(ev, [(9, 1), (10, 2)], "PORT_ACTIVE once, PORT_ERR twice; the failed call not counted");

        // Prometheus by job and rank, no pid or QP label (unbounded).
        let text = snap.render_prometheus(|p| {
            if p == client {
                ("job9".into(), "1".into())
            } else {
                (String::new(), String::new())
            }
        });
        let line = "faultline_verbs_completions_total{hpc_job=\"job9\",rank=\"1\",status=\"IBV_WC_RETRY_EXC_ERR\"} 3";
        assert!(text.lines().any(|l| l == line), "{text}");
        assert!(!text.contains("pid=") && !text.contains("qp="), "{text}");

        // The workloads have exited: their entries leave the maps.
        let dead = std::collections::BTreeSet::from([client, server]);
        assert!(probes.verbs_prune(&dead).expect("prune") >= 4);
        let after = probes.verbs_snapshot().expect("snapshot");
        assert!(after.completions.keys().all(|k| !dead.contains(&k.pid)));
        assert!(after.posts.keys().all(|k| !dead.contains(&k.pid)));
        assert!(after.qp_states.keys().all(|k| !dead.contains(&k.pid)));
        assert!(after.async_events.keys().all(|k| !dead.contains(&k.pid)));
    });
}

#[test]
fn without_a_provider_or_device_the_data_path_is_reported_inactive() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("verbs_inactive") {
        return;
    }
    tests::runtime().block_on(async {
        let mut o = opts();
        o.verbs_provider = None;
        let probes = Probes::load(&o).expect("load");
        let dp = probes
            .status()
            .iter()
            .find(|s| s.name == "verbs:data_path")
            .expect("data path status");
        let ProbeState::Inactive(why) = &dp.state else {
            panic!("{dp:?}")
        };
        assert!(why.starts_with("verbs data-path probes inactive:"), "{why}");
        assert!(why.contains("set verbs.provider"), "{why}");
        assert!(probes.is_attached("verbs:ibv_modify_qp"));
    });
}
