//! Placement and rank claims on hand-made windows.
use proto::v1::{CudaProc, Origin, StepTime, WorkloadSample};

use super::*;

fn window(host: &str, end_ms: i64, job: &str, ranks: &[u32], cuda: bool) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            ..Origin::default()
        }),
        start_unix_ms: end_ms - 10_000,
        end_unix_ms: end_ms,
        steps: ranks
            .iter()
            .map(|&rank| StepTime {
                job: job.into(),
                rank,
                seconds: 2.0,
                ..StepTime::default()
            })
            .collect(),
        cuda: if cuda {
            ranks
                .iter()
                .map(|&rank| CudaProc {
                    pid: 1000 + rank,
                    job: job.into(),
                    rank: Some(rank),
                    ..CudaProc::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        ..Window::default()
    }
}

fn kept(c: &mut Claims, w: Window) -> (Vec<u32>, Refused) {
    let (w, r) = c.admit(Cow::Owned(w));
    (w.steps.iter().map(|s| s.rank).collect(), r)
}

#[test]
fn a_host_outside_the_placement_is_refused() {
    let mut c = Claims::default();
    assert_eq!(
        kept(&mut c, window("a", 10_000, "j", &[0, 1], true)).0,
        [0, 1]
    );
    assert_eq!(
        kept(&mut c, window("b", 10_000, "j", &[2, 3], true)).0,
        [2, 3]
    );
    assert_eq!(c.hosts("j"), ["a", "b"]);
    // x runs none of j's processes: its 64 ranks are all refused.
    let ranks: Vec<u32> = (4..68).collect();
    let (k, r) = kept(&mut c, window("x", 10_000, "j", &ranks, false));
    assert!(k.is_empty());
    assert_eq!(r[0], ("unplaced", 64));
    // Nor may a placed host report ranks its processes are not.
    let (k, r) = kept(&mut c, window("a", 20_000, "j", &[0, 1, 7], false));
    assert_eq!((k, r[0]), (vec![0, 1], ("unplaced", 1)));
}

#[test]
fn the_first_claimant_keeps_a_rank_until_it_goes_silent() {
    let mut c = Claims::default();
    // No host attributes the job (no CUDA or NCCL rows): claims alone.
    assert_eq!(kept(&mut c, window("a", 10_000, "j", &[3], false)).0, [3]);
    let (k, r) = kept(&mut c, window("x", 10_000, "j", &[3], false));
    assert!(k.is_empty());
    assert_eq!(r[1], ("claimed", 1));
    // x's clock running ahead does not age a's claim: a's own does.
    assert!(kept(&mut c, window("x", 500_000, "j", &[3], false))
        .0
        .is_empty());
    for t in (20_000..=70_000).step_by(10_000) {
        kept(&mut c, window("a", t, "j", &[], false));
    }
    assert_eq!(kept(&mut c, window("x", 500_010, "j", &[3], false)).0, [3]);
}

#[test]
fn claims_made_before_the_job_is_placed_yield_to_its_hosts() {
    let mut c = Claims::default();
    assert_eq!(kept(&mut c, window("x", 10_000, "j", &[0], false)).0, [0]);
    assert_eq!(kept(&mut c, window("a", 10_000, "j", &[0], true)).0, [0]);
    assert_eq!(
        kept(&mut c, window("x", 20_000, "j", &[0], false)).1[0],
        ("unplaced", 1)
    );
}

#[test]
fn samples_of_a_placed_job_come_from_its_hosts_only() {
    let mut c = Claims::default();
    kept(&mut c, window("a", 10_000, "serve", &[0], true));
    let mut w = window("x", 10_000, "other", &[], false);
    w.workload = ["serve", "mine"]
        .iter()
        .map(|j| WorkloadSample {
            job: (*j).into(),
            signal: "ttft_seconds".into(),
            ..WorkloadSample::default()
        })
        .collect();
    let (w, r) = c.admit(Cow::Owned(w));
    assert_eq!(r[0], ("unplaced", 1));
    assert_eq!(w.workload.len(), 1);
    assert_eq!(w.workload[0].job, "mine");
}

#[test]
fn forgotten_hosts_leave_the_placement() {
    let mut c = Claims::default();
    kept(&mut c, window("a", 10_000, "j", &[0], true));
    c.forget_hosts(&HashSet::from(["a".to_string()]));
    assert!(c.hosts("j").is_empty());
    assert_eq!(kept(&mut c, window("b", 20_000, "j", &[0], false)).0, [0]);
}

#[test]
fn without_attribution_a_host_reports_at_most_a_rank_per_gpu() {
    let mut c = Claims::default();
    let mut w = window("x", 10_000, "j", &(0..64).collect::<Vec<_>>(), false);
    w.gpus = (0..8)
        .map(|index| proto::v1::GpuSample {
            index,
            ..proto::v1::GpuSample::default()
        })
        .collect();
    let (k, r) = kept(&mut c, w);
    assert_eq!(k, (0..8).collect::<Vec<_>>());
    assert_eq!(r[0], ("unplaced", 56));
}

#[test]
fn a_placed_host_without_rank_rows_reports_as_many_ranks_as_processes() {
    let mut c = Claims::default();
    let mut w = window("a", 10_000, "j", &[0, 1, 2, 3], false);
    w.cuda = (0..2)
        .map(|i| CudaProc {
            pid: 500 + i,
            job: "j".into(),
            ..CudaProc::default()
        })
        .collect();
    let (k, r) = kept(&mut c, w);
    assert_eq!((k, r[0]), (vec![0, 1], ("unplaced", 2)));
}

#[test]
fn the_claims_table_is_bounded() {
    let mut c = Claims::default();
    let per: u32 = 65_536;
    let mut t = 10_000;
    for h in 0..(MAX_CLAIMS as u32 / per) {
        let ranks: Vec<u32> = (0..per).collect();
        let (k, _) = kept(
            &mut c,
            window(&format!("h{h}"), t, &format!("j{h}"), &ranks, false),
        );
        assert_eq!(k.len(), per as usize);
        t += 1;
    }
    let (k, r) = kept(&mut c, window("late", t, "new", &[0, 1], false));
    assert!(k.is_empty());
    assert_eq!(r[2], ("claims", 2));
    // Once their holders have gone silent on them, claims make room.
    for h in 0..(MAX_CLAIMS as u32 / per) {
        kept(
            &mut c,
            window(&format!("h{h}"), t + CLAIM_SILENT_MS, "idle", &[], false),
        );
    }
    assert_eq!(
        kept(
            &mut c,
            window("late", t + CLAIM_SILENT_MS, "new", &[0, 1], false)
        )
        .0,
        [0, 1]
    );
}
