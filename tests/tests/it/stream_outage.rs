//! Collector → correlator over real gRPC on loopback, with real processes:
//! the correlator is killed under load and restarted, and every window
//! arrives exactly once and in order; with a tiny spool and no correlator,
//! the drop count equals what is missing.
use std::collections::BTreeSet;

use tests::stream::{
    correlator, free_port, recorded, summary_field, tmp, wait_recorded, Collector,
};

#[test]
fn correlator_outage_loses_nothing_and_duplicates_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("stream_outage") {
        return;
    }
    let dir = tmp("outage");
    let record = dir.join("ingest.jsonl");
    let ib = tests::FakeIb::new("outage");
    ib.active_port("mlx5_0", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());

    col.wait_seq(5);
    wait_recorded(&record, 5);
    // Kill the correlator under load; the collector keeps producing windows.
    corr.kill().expect("kill correlator");
    corr.wait().expect("reap");
    let down_at = col.last_seq;
    col.wait_seq(down_at + 15);
    corr = correlator(port, &record);
    let target = col.last_seq;
    wait_recorded(&record, target);
    let (final_seq, summary, _) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();

    let seqs = recorded(&record);
    let want: Vec<u64> = (1..=final_seq).collect();
    assert_eq!(
        seqs, want,
        "every window exactly once, in order ({summary})"
    );
    assert_eq!(summary_field(&summary, "dropped"), 0, "{summary}");
    assert_eq!(summary_field(&summary, "pending"), 0, "{summary}");
    assert!(
        summary_field(&summary, "connects") >= 2,
        "reconnected after the outage: {summary}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn spool_overflow_drop_count_equals_what_is_missing() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("stream_overflow") {
        return;
    }
    let dir = tmp("overflow");
    let record = dir.join("ingest.jsonl");
    // Several ports make each window ~2 KB, so a 6 KiB spool holds a few.
    let ib = tests::FakeIb::new("overflow");
    for p in 1..=4 {
        ib.active_port("mlx5_0", p);
        ib.active_port("mlx5_1", p);
    }
    let port = free_port();
    let mut col = Collector::start(port, &dir.join("spool"), 6 * 1024, ib.root());
    col.wait_seq(25);
    let corr_start = col.last_seq;
    let mut corr = correlator(port, &record);
    col.wait_seq(corr_start + 10);
    wait_recorded(&record, col.last_seq);
    let (final_seq, summary, _) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();

    let seqs = recorded(&record);
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates: {seqs:?}"
    );
    let got: BTreeSet<u64> = seqs.iter().copied().collect();
    let missing = (1..=final_seq).filter(|s| !got.contains(s)).count() as u64;
    let dropped = summary_field(&summary, "dropped");
    assert!(dropped > 0, "the spool overflowed: {summary}");
    assert_eq!(
        dropped, missing,
        "drop count equals the windows missing at the correlator ({summary}; got {seqs:?})"
    );
    assert_eq!(*seqs.last().expect("some windows"), final_seq);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
