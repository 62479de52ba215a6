//! The correlator's integration tests, linked into one binary (one link
//! instead of one per file). Each former test file is a module here; a test's
//! name starts with its file's (`cargo test -p correlator --test it -- mtls::`).
//!
//! Tests of two files never run at the same time, as when each file was a
//! binary of its own: every test opens with
//! `let _turn = tests::one_file_at_a_time(file!());` ([`tests::turns`]), and
//! [`every_test_takes_its_file_s_turn`] fails on one that does not. Helpers
//! shared by several files are modules here too (`use crate::common;`).

mod cluster_label;
mod cluster_scenarios;
mod common;
mod config_cli;
mod config_ranges;
mod engine_budget;
mod fabric;
mod file_inputs;
mod handover;
mod history_config;
mod history_double_fault;
mod history_faults;
mod history_schema;
mod ib_scenarios;
mod identity_shares;
mod ingest_limits;
mod ingest_poison;
mod job_placement;
mod job_restart;
mod listeners;
mod log_format_env;
mod mtls;
mod nfs_silence;
mod node_clock;
mod replay_cli;
mod replay_topology;
mod runbook_quoting;
mod spine_scenarios;
mod storage_scenarios;
mod token_review;
mod topology_scale;
mod trust_window;
mod usage_report;
mod web_streams;
mod workload_scenarios;
mod xid_scenarios;

#[test]
fn every_test_takes_its_file_s_turn() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let missing = tests::tests_without_a_turn(&dir);
    assert!(missing.is_empty(), "tests without `let _turn = tests::one_file_at_a_time(file!());` as their first line: {missing:#?}");
}
