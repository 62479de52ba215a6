//! The workspace's integration tests, linked into one binary (one link
//! instead of one per file). Each former test file is a module here; a test's
//! name starts with its file's (`cargo test -p tests -- block_probe::`).
//!
//! Tests of two files never run at the same time, as when each file was a
//! binary of its own: every test opens with
//! `let _turn = tests::one_file_at_a_time(file!());` ([`tests::turns`]), and
//! [`every_test_takes_its_file_s_turn`] fails on one that does not. Helpers
//! shared by several files are modules here too (`use crate::common;`).

mod block_probe;
mod collector_e2e;
mod collector_metrics;
mod cuda_probe;
mod dcgm_exporter_files;
mod deb_packages;
mod deploy_manifests;
mod deploy_prometheus;
mod exec_probe;
mod fault_injection;
mod fleet_summaries;
mod gpu_check;
mod ib_node_exporter_parity;
mod ib_sysfs;
mod identity;
mod images;
mod kmsg_xid;
mod live_demo;
mod nats_auth;
mod nccl_containers;
mod nccl_e2e;
mod nccl_lifecycle;
mod nccl_probe;
mod no_color;
mod nvml;
mod nvml_events;
mod nvml_wire;
mod pod_resources;
mod real_cudart;
mod record_replay;
mod scale_out;
mod slurm_hooks;
mod slurm_real;
mod stream_outage;
mod stream_refusal;
mod stream_spool;
mod unit_hardening;
mod usage_probe;
mod verbs_probe;
mod web_config;
mod workload_e2e;

#[test]
fn every_test_takes_its_file_s_turn() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let missing = tests::tests_without_a_turn(&dir);
    assert!(missing.is_empty(), "tests without `let _turn = tests::one_file_at_a_time(file!());` as their first line: {missing:#?}");
}
