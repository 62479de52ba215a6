//! A fault that persists keeps its incident open (issue: a port down for
//! good was resolved once the flap horizon passed, and the training job it
//! slows then raised an unexplained `job_slowdown` of its own).
use sim::{run, SimArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_down_for_30_minutes_keeps_one_open_incident_that_explains_the_job() {
    let _turn = tests::one_file_at_a_time(file!());
    let seen = run(SimArgs {
        nodes: 4,
        // The port goes down at 60 s and stays down; the job slows with it.
        inject: vec!["ib-link-down@n000/mlx5_5/1".into(), "job-slow".into()],
        seed: 1,
        speed: 2000.0,
        duration: 1800.0,
        onset: 60.0,
        json: true,
        ..SimArgs::default()
    })
    .await
    .expect("sim runs");
    let port: Vec<_> = seen
        .iter()
        .filter(|u| u.entity == "n000/mlx5_5/1")
        .collect();
    let ids: std::collections::BTreeSet<&str> =
        port.iter().map(|u| u.incident_id.as_str()).collect();
    assert_eq!(ids.len(), 1, "one incident for the port: {port:#?}");
    assert_eq!(port[0].kind, "ib_link_down");
    assert!(
        port.iter().all(|u| u.state != "resolved"),
        "still down at the end, yet resolved: {port:#?}"
    );
    let last = port.last().expect("updates");
    assert_eq!(last.affected_jobs, ["llm-pretrain"]);
    let slow: Vec<_> = seen.iter().filter(|u| u.kind == "job_slowdown").collect();
    assert!(
        slow.is_empty(),
        "the job's slowdown is the port's: {slow:#?}"
    );
}
