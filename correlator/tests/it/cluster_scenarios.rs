//! GPU, storage, node and straggler detectors on a scripted 8-node cluster
//! (2 GPUs and one NVMe each, one data-parallel job with a rank per GPU):
//! each fault raises exactly its incident on the right entity within 2
//! windows of onset; root causes absorb stragglers; confounders raise nothing.
use correlator::engine::Engine;
use proto::v1::{BlockStat, CandidateUpdate, Event, GpuSample, Origin, StepTime, Window};

const HOSTS: usize = 8;
const GPUS: usize = 2;

#[derive(Clone)]
struct Gpu {
    temp: u32,
    clock: u32,
    throttle: u64,
    power: f64,
    sbe: u64,
    dbe: u64,
    lost: bool,
}

struct Cluster {
    gpus: Vec<Vec<Gpu>>,
    disk_latency_ms: Vec<f64>,
    step_s: Vec<f64>,
    silent: Vec<bool>,
    xid: Option<(usize, usize, i64)>,
    seq: Vec<u64>,
    t: i64,
}

impl Cluster {
    fn new() -> Self {
        Self {
            gpus: vec![
                vec![
                    Gpu {
                        temp: 60,
                        clock: 1980,
                        throttle: 0,
                        power: 400.0,
                        sbe: 0,
                        dbe: 0,
                        lost: false
                    };
                    GPUS
                ];
                HOSTS
            ],
            disk_latency_ms: vec![0.5; HOSTS],
            step_s: vec![1.0; HOSTS * GPUS],
            silent: vec![false; HOSTS],
            xid: None,
            seq: vec![0; HOSTS],
            t: 1_800_000_000_000,
        }
    }

    fn tick(&mut self, e: &mut Engine) -> Vec<CandidateUpdate> {
        self.t += 1000;
        let mut out = Vec::new();
        for h in 0..HOSTS {
            if self.silent[h] {
                continue;
            }
            self.seq[h] += 1;
            let gpus = (0..GPUS)
                .map(|g| {
                    let s = &self.gpus[h][g];
                    GpuSample {
                        index: g as u32,
                        uuid: format!("GPU-{h}-{g}"),
                        lost: s.lost,
                        power_w: Some(s.power),
                        power_limit_w: Some(700.0),
                        temp_c: Some(s.temp),
                        sm_clock_mhz: Some(s.clock),
                        sm_clock_max_mhz: Some(1980),
                        throttle_reasons: Some(s.throttle),
                        ecc_sbe_volatile: Some(s.sbe),
                        ecc_dbe_volatile: Some(s.dbe),
                        ..GpuSample::default()
                    }
                })
                .collect();
            let lat = (self.disk_latency_ms[h] * 1e6) as u64;
            let mut events = Vec::new();
            if let Some((xh, xg, code)) = self.xid.take_if(|(xh, _, _)| *xh == h) {
                events.push(Event {
                    unix_ms: self.t,
                    kind: "gpu_xid".into(),
                    entity: format!("h{xh}/gpu{xg}"),
                    detail: format!("GPU-{xh}-{xg}"),
                    code,
                    ..Default::default()
                });
            }
            let w = Window {
                origin: Some(Origin {
                    hostname: format!("h{h}"),
                    boot_id: "b".into(),
                    instance: format!("h{h}-1"),
                    ..Origin::default()
                }),
                seq: self.seq[h],
                start_unix_ms: self.t - 1000,
                end_unix_ms: self.t,
                gpus,
                block: vec![BlockStat {
                    device: "nvme0n1".into(),
                    op: "write".into(),
                    requests: 200,
                    bytes: 200 << 20,
                    latency_sum_ns: 200 * lat,
                    latency_max_ns: lat * 2,
                    ..BlockStat::default()
                }],
                steps: (0..GPUS)
                    .map(|g| StepTime {
                        job: "job7".into(),
                        rank: (h * GPUS + g) as u32,
                        seconds: self.step_s[h * GPUS + g],
                        device: g as i32,
                        hca: format!("mlx5_{g}"),
                        ..StepTime::default()
                    })
                    .collect(),
                events,
                ..Window::default()
            };
            out.extend(e.ingest(&w));
        }
        out
    }

    fn run(&mut self, e: &mut Engine, n: usize) -> Vec<CandidateUpdate> {
        (0..n).flat_map(|_| self.tick(e)).collect()
    }
}

fn opened(u: &[CandidateUpdate]) -> Vec<(String, String)> {
    u.iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect()
}

fn one(u: &[CandidateUpdate], kind: &str, entity: &str) {
    assert_eq!(
        opened(u),
        [(kind.to_string(), entity.to_string())],
        "{u:#?}"
    );
}

fn warm() -> (Cluster, Engine) {
    let mut c = Cluster::new();
    let mut e = Engine::default();
    let u = c.run(&mut e, 5);
    assert!(u.is_empty(), "healthy cluster: {u:#?}");
    (c, e)
}

#[test]
fn thermal_throttle_opens_on_the_gpu_and_absorbs_the_straggler() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    c.gpus[5][1] = Gpu {
        temp: 92,
        clock: 1100,
        throttle: 0x40,
        ..c.gpus[5][1].clone()
    };
    c.step_s[5 * GPUS + 1] = 1.6; // its rank slows the job
    let u1 = c.tick(&mut e);
    let u2 = c.tick(&mut e);
    let all: Vec<_> = u1.iter().chain(&u2).cloned().collect();
    one(&all, "gpu_thermal_throttle", "h5/gpu1");
    // A rank is a straggler after 20 s slow (workload.min_persist_s).
    let rest = c.run(&mut e, 25);
    let all: Vec<_> = all.into_iter().chain(rest).collect();
    assert!(
        opened(&all).iter().all(|(k, _)| k != "straggler"),
        "the straggler is a symptom: {all:#?}"
    );
    let ev: Vec<&String> = all.iter().flat_map(|u| &u.evidence).collect();
    assert!(
        ev.iter()
            .any(|e| e.starts_with("explains job job7 rank 11")),
        "{ev:?}"
    );
    assert!(all
        .iter()
        .any(|u| u.affected_jobs.contains(&"job7".to_string())));
}

#[test]
fn power_throttle_xid_and_ecc() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    c.gpus[2][0] = Gpu {
        throttle: 0x4,
        clock: 1500,
        power: 699.0,
        ..c.gpus[2][0].clone()
    };
    let u = c.run(&mut e, 2);
    one(&u, "gpu_power_throttle", "h2/gpu0");

    let (mut c, mut e) = warm();
    c.xid = Some((3, 1, 79));
    let u = c.tick(&mut e);
    one(&u, "gpu_xid", "h3/gpu1");
    assert!(
        u[0].evidence[0].starts_with("XID 79"),
        "{:?}",
        u[0].evidence
    );

    let (mut c, mut e) = warm();
    c.gpus[6][0].dbe = 2;
    let u = c.tick(&mut e);
    one(&u, "gpu_ecc", "h6/gpu0");

    let (mut c, mut e) = warm();
    c.gpus[1][1].lost = true;
    let u = c.tick(&mut e);
    one(&u, "gpu_xid", "h1/gpu1");
}

#[test]
fn storage_stall_opens_on_the_device() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    c.disk_latency_ms[4] = 40.0;
    let u = c.run(&mut e, 2);
    one(&u, "storage_latency", "h4/nvme0n1");
    c.disk_latency_ms[4] = 0.5;
    // Resolution after the quiet period: 30 s of 1 s windows.
    let u = c.run(&mut e, 29);
    assert!(u.iter().all(|u| u.state != "resolved"), "{u:#?}");
    let u = c.run(&mut e, 2);
    assert_eq!(
        u.iter().filter(|u| u.state == "resolved").count(),
        1,
        "{u:#?}"
    );
}

#[test]
fn node_lost_after_three_windows_and_resolved_when_back() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    c.silent[7] = true;
    let u = c.run(&mut e, 2);
    assert!(
        opened(&u).is_empty(),
        "two missing windows are not a lost node: {u:#?}"
    );
    let u = c.run(&mut e, 2);
    one(&u, "node_lost", "h7");
    c.silent[7] = false;
    let u = c.tick(&mut e);
    assert!(
        u.iter()
            .any(|u| u.state == "resolved" && u.kind == "node_lost"),
        "{u:#?}"
    );
}

#[test]
fn unexplained_straggler_says_so() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    c.step_s[3] = 1.8;
    // 1 s windows: slow for 20 s of event time, not for 2 windows.
    let early = c.run(&mut e, 18);
    assert!(early.is_empty(), "{early:#?}");
    let u = c.run(&mut e, 4);
    one(&u, "straggler", "job7/3");
    assert!(
        u[0].evidence
            .iter()
            .any(|e| e
                .starts_with("no GPU throttling, link degradation or storage stall found on h1")),
        "{:?}",
        u[0].evidence
    );
}

#[test]
fn gpu_and_job_confounders_raise_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let (mut c, mut e) = warm();
    let mut all = Vec::new();
    // Idle GPUs report the idle reason with low clocks.
    c.gpus[0][0] = Gpu {
        throttle: 0x1,
        clock: 210,
        ..c.gpus[0][0].clone()
    };
    // A thermal flag without a clock drop (boost headroom lost, not a slowdown).
    c.gpus[1][0] = Gpu {
        throttle: 0x40,
        clock: 1950,
        temp: 84,
        ..c.gpus[1][0].clone()
    };
    // A few correctable ECC errors once.
    c.gpus[2][1].sbe = 3;
    all.extend(c.run(&mut e, 3));
    // The whole job slows down alike (e.g. a bigger batch): no straggler.
    c.step_s = vec![2.5; HOSTS * GPUS];
    all.extend(c.run(&mut e, 3));
    // All disks slow alike (shared filesystem under load): not one device's fault.
    c.disk_latency_ms = vec![30.0; HOSTS];
    all.extend(c.run(&mut e, 3));
    // A collector restart: one missing window.
    c.silent[4] = true;
    all.extend(c.run(&mut e, 1));
    c.silent[4] = false;
    all.extend(c.run(&mut e, 3));
    assert!(all.is_empty(), "{all:#?}");
}

/// One host with one disk (no peers): judged against its own history. A
/// healthy disk with a 4x burst in one window raises nothing; a stall that
/// lasts and wavers (two windows at 12x the baseline, one at 4x) is one
/// incident that stays open until the stall ends, because its windows do not
/// feed the baseline.
#[test]
fn lone_disk_is_judged_against_its_own_history() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::default();
    let mut all = Vec::new();
    let mut resolved_at = None;
    for seq in 1..=80u64 {
        let base_ms = 2.0 + (seq % 3) as f64 * 0.2;
        let lat_ms = match seq {
            6 => base_ms * 4.0,
            12..=35 if seq % 3 == 0 => base_ms * 4.0,
            12..=35 => base_ms * 12.0,
            _ => base_ms,
        };
        let lat = (lat_ms * 1e6) as u64;
        let w = Window {
            origin: Some(Origin {
                hostname: "solo".into(),
                instance: "solo-1".into(),
                ..Origin::default()
            }),
            seq,
            end_unix_ms: 1_800_000_000_000 + seq as i64 * 1000,
            block: vec![BlockStat {
                device: "sda".into(),
                op: "write".into(),
                requests: 200,
                bytes: 200 << 20,
                latency_sum_ns: 200 * lat,
                latency_max_ns: 2 * lat,
                ..BlockStat::default()
            }],
            ..Window::default()
        };
        let ups = e.ingest(&w);
        if ups.iter().any(|u| u.state == "resolved") {
            resolved_at.get_or_insert(seq);
        }
        all.extend(ups);
    }
    assert_eq!(
        opened(&all),
        [("storage_latency".to_string(), "solo/sda".to_string())],
        "{all:#?}"
    );
    let o = all.iter().find(|u| u.state == "opened").expect("opened");
    assert!(
        o.evidence
            .iter()
            .any(|e| e.contains("judged against its own history")),
        "{:?}",
        o.evidence
    );
    assert!(
        resolved_at.is_some_and(|s| s >= 36),
        "resolved at {resolved_at:?}, the stall lasts until window 35"
    );
}
