//! Series other than histograms: gauge step times, sums and up-down
//! counters, GenAI grouping, bounds and attribution.
use super::*;

#[test]
fn gauge_steps_in_milliseconds_become_step_times_per_job_and_rank() {
    let s = shared();
    let t = now_ns();
    let r = s.export(
        &request(
            vec![
                kv("service.name", "trainer"),
                kv("slurm.job.id", "4242"),
                kv("rank", 3),
            ],
            vec![gauge(
                "train.step.duration",
                "ms",
                vec![number(250.0, t, vec![]), number(350.0, t, vec![])],
            )],
        ),
        "test",
    );
    assert_eq!(r.partial_success, None);
    let (steps, work) = take(&s);
    assert!(work.is_empty());
    assert_eq!(steps.len(), 1);
    let st = &steps[0];
    assert_eq!((st.job.as_str(), st.rank, st.count), ("4242", 3, 2));
    assert!(close(st.seconds, 0.3), "{st:?}");
    assert!(close(st.max_seconds, 0.35), "{st:?}");
    assert_eq!(st.device, -1);
    // The take swapped the window out.
    assert_eq!(take(&s), (vec![], vec![]));
}

#[test]
fn an_up_down_counter_is_a_level_and_a_delta_sum_is_taken_as_is() {
    let s = shared();
    let t = now_ns();
    let sum = |v: f64, t_: AggregationTemporality, mono: bool| {
        request(
            vec![kv("service.name", "srv")],
            vec![metric(
                "faultline.inference.queue.depth",
                "{request}",
                Data::Sum(Sum {
                    data_points: vec![number(v, t, vec![])],
                    aggregation_temporality: t_ as i32,
                    is_monotonic: mono,
                }),
            )],
        )
    };
    s.export(&sum(7.0, AggregationTemporality::Cumulative, false), "test");
    s.export(&sum(5.0, AggregationTemporality::Cumulative, false), "test");
    s.export(&sum(4.0, AggregationTemporality::Delta, true), "test");
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1);
    assert_eq!((work[0].signal.as_str(), work[0].count), ("queue_depth", 3));
    assert!(
        close(work[0].sum, 16.0) && close(work[0].max, 7.0),
        "{work:?}"
    );
}

#[test]
fn genai_grouping_by_model_and_provider_with_the_older_system_attribute() {
    let s = shared();
    let t = now_ns();
    let p = |model: &str, provider: (&str, &str), v: f64| {
        number(
            v,
            t,
            vec![
                kv("gen_ai.request.model", model),
                kv(provider.0, provider.1),
            ],
        )
    };
    s.export(
        &request(
            vec![kv("service.name", "gateway"), kv("process.pid", 77)],
            vec![gauge(
                "gen_ai.server.request.duration",
                "s",
                vec![
                    p("m1", ("gen_ai.provider.name", "openai"), 1.0),
                    p("m1", ("gen_ai.provider.name", "openai"), 3.0),
                    p("m2", ("gen_ai.system", "vllm"), 5.0),
                ],
            )],
        ),
        "test",
    );
    let (_, work) = take(&s);
    let got: Vec<_> = work
        .iter()
        .map(|w| {
            (
                w.model.as_str(),
                w.provider.as_str(),
                w.count,
                w.sum,
                w.pid,
                w.p50,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("m1", "openai", 2, 4.0, 77, 0.0),
            ("m2", "vllm", 1, 5.0, 77, 0.0)
        ]
    );
}

#[test]
fn bounds_drop_and_count_points_and_unknown_names_are_ignored() {
    let cfg = OtlpSection {
        max_points_per_request: 3,
        max_series_per_window: 2,
        ..OtlpSection::default()
    };
    let s = Shared::new(&cfg);
    let t = now_ns();
    let pts = |n: usize| {
        (0..n)
            .map(|i| number(1.0, t, vec![kv("rank", i as i64)]))
            .collect()
    };
    let r = s.export(
        &request(
            vec![kv("service.name", "x")],
            vec![
                gauge("http.server.active_requests", "", pts(5)),
                gauge("train.step.duration", "s", pts(4)),
            ],
        ),
        "test",
    );
    // 5 ignored (unknown name, not rejected); of 4 step points 3 are read
    // (request cap) and 2 aggregated (series cap: one series per rank).
    let ps = r.partial_success.expect("partial success");
    assert_eq!(ps.rejected_data_points, 2, "{}", ps.error_message);
    assert!(
        ps.error_message.contains("request_cap=1"),
        "{}",
        ps.error_message
    );
    assert!(
        ps.error_message.contains("series_cap=1"),
        "{}",
        ps.error_message
    );
    let (steps, _) = take(&s);
    assert_eq!(steps.iter().map(|s| s.rank).collect::<Vec<_>>(), vec![0, 1]);
    // A time metric with a unit that is not time, and NaN values, are dropped.
    let r = s.export(
        &request(
            vec![],
            vec![
                gauge("train.step.duration", "By", pts(1)),
                gauge(
                    "gen_ai.server.request.duration",
                    "s",
                    vec![number(f64::NAN, t, vec![])],
                ),
            ],
        ),
        "test",
    );
    let msg = r.partial_success.expect("partial success").error_message;
    assert!(
        msg.contains("unit=1") && msg.contains("invalid_value=1"),
        "{msg}"
    );
    assert_eq!(take(&s), (vec![], vec![]));
}

#[test]
fn attribution_joins_the_process_identity_and_lets_attributes_win() {
    let s = Shared::new(&OtlpSection {
        names: BTreeMap::from([("my.step".into(), "step_seconds".into())]),
        ..OtlpSection::default()
    });
    let t = now_ns();
    let id = ProcessIdentity {
        pid: 100,
        cgroup: "/system.slice/slurmstepd.scope/job_991/step_0/user/task_0".into(),
        workload: Workload::Slurm {
            job: "991".into(),
            step: Some("0".into()),
        },
        env: [
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
    };
    let mk = |res: Vec<KeyValue>, pt: Vec<KeyValue>| {
        request(res, vec![gauge("my.step", "s", vec![number(0.5, t, pt)])])
    };
    // pid 100: job, rank, GPU and HCA from its identity.
    s.export(
        &mk(
            vec![kv("process.pid", 100), kv("service.name", "svc")],
            vec![],
        ),
        "test",
    );
    // pid 200 (unknown to the identity): the Slurm job attribute, rank from the point.
    s.export(
        &mk(
            vec![
                kv("process.pid", 200),
                kv("SLURM_JOB_ID", "992"),
                kv("RANK", "1"),
            ],
            vec![kv("training.rank", 7)],
        ),
        "test",
    );
    // Nothing but the pod: the pod UID, then the service name.
    s.export(
        &mk(
            vec![kv("k8s.pod.uid", "uid-1"), kv("service.name", "svc")],
            vec![],
        ),
        "test",
    );
    s.export(&mk(vec![kv("service.name", "svc")], vec![]), "test");
    // pid 100 seen from a container's pid namespace: the identity found on
    // the host names another pod, so it is not used.
    s.export(
        &mk(
            vec![kv("process.pid", 100), kv("k8s.pod.uid", "uid-2")],
            vec![],
        ),
        "test",
    );
    let (steps, _) = s.take_window(|pid| (pid == 100).then(|| id.clone()));
    let got: Vec<_> = steps
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.device, s.hca.as_str(), s.count))
        .collect();
    assert_eq!(
        got,
        vec![
            ("991", 5, 1, "mlx5_1", 1),
            ("992", 7, -1, "", 1),
            ("svc", 0, -1, "", 1),
            ("uid-1", 0, -1, "", 1),
            ("uid-2", 0, -1, "", 1),
        ]
    );
}
