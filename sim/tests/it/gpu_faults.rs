//! GPU faults beyond one GPU's state through the whole simulator (real
//! streaming, the real engine): a host's shared cooling failing raises one
//! host incident, a bad NVLink link one `gpu_nvlink_errors` on its GPU;
//! the healthy links' sporadic errors raise nothing.
use sim::run;

use crate::scenario;
use scenario::args;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_cooling_is_one_host_incident_and_a_bad_nvlink_its_gpu_s() {
    let _turn = tests::one_file_at_a_time(file!());
    let seen = run(args(&[
        "gpu-thermal-host@n010:gpus=4",
        "gpu-nvlink@n005/gpu3:rate=5,link=7",
    ]))
    .await
    .expect("sim runs");
    let got = scenario::kinds_and_entities(&seen);
    let got: Vec<(&str, &str)> = got.iter().map(|(k, e)| (k.as_str(), e.as_str())).collect();
    assert_eq!(
        got,
        [
            ("gpu_nvlink_errors", "n005/gpu3"),
            ("gpu_thermal_throttle", "n010")
        ],
        "{seen:#?}"
    );
    let host = seen
        .iter()
        .rev()
        .find(|u| u.entity == "n010")
        .expect("host incident");
    assert!(
        host.evidence[0].starts_with(
            "4 of 8 GPUs of n010 throttling thermally at once (gpu0, gpu1, gpu2, gpu3)"
        ),
        "{:?}",
        host.evidence
    );
    let link = seen
        .iter()
        .find(|u| u.entity == "n005/gpu3")
        .expect("NVLink incident");
    assert!(
        link.evidence.iter().any(|e| e.starts_with("NVLink 7: ")),
        "{:?}",
        link.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_fault_specs_are_checked() {
    let _turn = tests::one_file_at_a_time(file!());
    for (spec, why) in [
        (
            "gpu-thermal-host@n003:gpus=1",
            "gpus=1 must be a whole number of GPUs in 2..=8",
        ),
        (
            "gpu-thermal-host@n003/gpu1",
            "does not fit this kind: it takes a node",
        ),
        (
            "gpu-nvlink@n003/gpu1:link=18",
            "link=18 must be a link number in 0..=17",
        ),
        (
            "gpu-nvlink@n003:rate=2",
            "does not fit this kind: it takes a GPU",
        ),
    ] {
        let e = run(args(&[spec])).await.expect_err(spec);
        assert!(format!("{e:#}").contains(why), "{spec}: {e:#}");
    }
}
