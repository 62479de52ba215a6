//! The simulator's integration tests, linked into one binary (one link
//! instead of one per file). Each former test file is a module here; a test's
//! name starts with its file's (`cargo test -p sim --test it -- web_ui::`).
//!
//! Tests of two files never run at the same time, as when each file was a
//! binary of its own: every test opens with
//! `let _turn = tests::one_file_at_a_time(file!());` ([`tests::turns`]), and
//! [`every_test_takes_its_file_s_turn`] fails on one that does not. Helpers
//! shared by several files are modules here too (`use crate::common;`).

mod alertmanager;
mod common;
mod gpu_faults;
mod history;
mod nccl;
mod nccl_wait;
mod nfs_faults;
mod persistent;
mod prometheus_rules;
mod scenario;
mod sim;
mod sim_cli;
mod slow_ramp;
mod speed_cli;
mod web_ui;

#[test]
fn every_test_takes_its_file_s_turn() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let missing = tests::tests_without_a_turn(&dir);
    assert!(missing.is_empty(), "tests without `let _turn = tests::one_file_at_a_time(file!());` as their first line: {missing:#?}");
}
