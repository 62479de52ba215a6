//! The collector's integration tests, linked into one binary (one link
//! instead of one per file). Each former test file is a module here; a test's
//! name starts with its file's (`cargo test -p collector --test it -- cli::`).
//!
//! Tests of two files never run at the same time, as when each file was a
//! binary of its own: every test opens with
//! `let _turn = tests::one_file_at_a_time(file!());` ([`tests::turns`]), and
//! [`every_test_takes_its_file_s_turn`] fails on one that does not. Helpers
//! shared by several files are modules here too (`use crate::common;`).

mod cli;
mod config_secrets;
mod memlock;
mod objects;
#[cfg(feature = "otlp")]
mod otlp_counters;
mod otlp_listener_limits;
mod otlp_nccl_inspector;
mod otlp_python;
mod otlp_receiver;
mod shutdown;
#[cfg(feature = "rdma")]
mod verbs_abi;

#[test]
fn every_test_takes_its_file_s_turn() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let missing = tests::tests_without_a_turn(&dir);
    assert!(missing.is_empty(), "tests without `let _turn = tests::one_file_at_a_time(file!());` as their first line: {missing:#?}");
}
