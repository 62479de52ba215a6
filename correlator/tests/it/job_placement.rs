//! Job claims bounded by placement (issue 47): job 4711 runs 16 ranks on 8
//! hosts whose collectors attribute its CUDA processes (job and rank from
//! the process identity, as the real collector sends them). Host x01 runs
//! only its own job 9999.
//!
//! - x01 reporting 64 slow "ranks" of 4711 (ranks 16..79 at 10 s) no
//!   longer masks 4711's real straggler (rank 5 at +50 %): x01's rows are
//!   refused and counted (`dropped{what=unplaced}`), rank 5 is named.
//! - x01 reporting a slow rank 3 of the healthy 4711 (+200 %) raises
//!   nothing: no `job_slowdown`, no `straggler`.
//! - Every host reporting its own ranks is unaffected, and a job nobody
//!   attributes (no CUDA rows) still cannot have a rank taken from its
//!   first claimant.
use correlator::engine::Engine;
use proto::v1::{CandidateUpdate, CudaProc, Origin, StepTime, Window};

const WIN_MS: i64 = 10_000;
const HOSTS: u32 = 8;
const GPUS: u32 = 2;

fn window(host: &str, seq: u64, end_ms: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: "i".into(),
            ..Origin::default()
        }),
        seq,
        start_unix_ms: end_ms - WIN_MS,
        end_unix_ms: end_ms,
        ..Window::default()
    }
}

fn step(job: &str, rank: u32, seconds: f64) -> StepTime {
    StepTime {
        job: job.into(),
        rank,
        seconds,
        device: (rank % GPUS) as i32,
        count: 5,
        ..StepTime::default()
    }
}

fn cuda(job: &str, rank: u32) -> CudaProc {
    CudaProc {
        pid: 10_000 + rank,
        device: (rank % GPUS) as i32,
        job: job.into(),
        rank: Some(rank),
        launches: 1000,
        ..CudaProc::default()
    }
}

/// The cluster: job 4711's hosts and x01.
struct Cluster {
    seq: u64,
    t: i64,
    /// Rank → step seconds (2 s unless set).
    slow: Vec<(u32, f64)>,
    /// Whether job 4711's hosts send CUDA rows for it.
    attributed: bool,
}

impl Cluster {
    fn new(attributed: bool) -> Self {
        Self {
            seq: 0,
            t: 1_800_000_000_000,
            slow: Vec::new(),
            attributed,
        }
    }

    /// One window from every host of 4711, then `x01`'s (its own job, plus
    /// `forged` step rows of 4711).
    fn tick(&mut self, e: &mut Engine, forged: &[StepTime]) -> Vec<CandidateUpdate> {
        self.seq += 1;
        self.t += WIN_MS;
        let mut out = Vec::new();
        for h in 0..HOSTS {
            let mut w = window(&format!("n{h:03}"), self.seq, self.t);
            for g in 0..GPUS {
                let rank = h * GPUS + g;
                let jitter = 1.0 + 0.005 * f64::from((self.seq as u32 + rank) % 3);
                let s = self
                    .slow
                    .iter()
                    .find(|(r, _)| *r == rank)
                    .map_or(2.0, |(_, s)| *s);
                w.steps.push(step("4711", rank, s * jitter));
                if self.attributed {
                    w.cuda.push(cuda("4711", rank));
                }
            }
            out.extend(e.ingest(&w));
        }
        let mut x = window("x01", self.seq, self.t);
        x.cuda.push(cuda("9999", 0));
        x.steps.push(step("9999", 0, 1.0));
        x.steps.extend(forged.iter().cloned());
        out.extend(e.ingest(&x));
        out
    }

    fn run(&mut self, e: &mut Engine, n: usize, forged: &[StepTime]) -> Vec<CandidateUpdate> {
        (0..n).flat_map(|_| self.tick(e, forged)).collect()
    }
}

fn opened(u: &[CandidateUpdate]) -> Vec<(String, String)> {
    u.iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect()
}

#[test]
fn another_hosts_slow_ranks_do_not_mask_the_real_straggler() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = Cluster::new(true);
    let mut e = Engine::default();
    assert!(c.run(&mut e, 6, &[]).is_empty());
    // Rank 5 (n002, gpu1) falls behind by half; x01 claims 64 slow ranks
    // of the job, which would put its median at 10 s.
    c.slow = vec![(5, 3.0)];
    let forged: Vec<StepTime> = (16..80).map(|r| step("4711", r, 10.0)).collect();
    let all = c.run(&mut e, 12, &forged);
    let opened = opened(&all);
    assert!(
        opened.contains(&("straggler".to_string(), "4711/5".to_string())),
        "{opened:?}"
    );
    assert!(
        opened.iter().all(|(_, entity)| entity == "4711/5"),
        "only the real straggler: {opened:?}"
    );
    assert_eq!(e.dropped().get("unplaced"), Some(&(64 * 12)));
    assert_eq!(e.claims.hosts("4711").len(), HOSTS as usize);
}

#[test]
fn a_forged_slow_rank_of_a_healthy_job_raises_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = Cluster::new(true);
    let mut e = Engine::default();
    assert!(c.run(&mut e, 6, &[]).is_empty());
    // x01 says rank 3 of 4711 takes 6 s (+200 %) for two minutes.
    let all = c.run(&mut e, 12, &[step("4711", 3, 6.0)]);
    assert!(all.is_empty(), "{:?}", opened(&all));
    assert_eq!(e.dropped().get("unplaced"), Some(&12));
}

#[test]
fn without_attribution_a_rank_stays_with_its_first_claimant() {
    let _turn = tests::one_file_at_a_time(file!());
    // No collector attributes 4711 (no CUDA probes): x01 still cannot take
    // rank 3 from n001, which keeps reporting it.
    let mut c = Cluster::new(false);
    let mut e = Engine::default();
    assert!(c.run(&mut e, 6, &[]).is_empty());
    let all = c.run(&mut e, 12, &[step("4711", 3, 6.0)]);
    assert!(all.is_empty(), "{:?}", opened(&all));
    assert_eq!(e.dropped().get("claimed"), Some(&12));
}

#[test]
fn every_host_reporting_its_own_ranks_is_judged_as_before() {
    let _turn = tests::one_file_at_a_time(file!());
    for attributed in [true, false] {
        let mut c = Cluster::new(attributed);
        let mut e = Engine::default();
        assert!(c.run(&mut e, 6, &[]).is_empty());
        c.slow = vec![(5, 3.0)];
        let all = c.run(&mut e, 12, &[]);
        assert_eq!(
            opened(&all),
            [("straggler".to_string(), "4711/5".to_string())],
            "attributed: {attributed}"
        );
        assert!(e.dropped().is_empty(), "{:?}", e.dropped());
    }
}
