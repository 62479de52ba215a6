//! The spool never makes new windows wait: the collector's real spool and
//! sender against a real `faultline-correlator serve`. A backlog of 200
//! spooled windows does not delay the next new window by more than about
//! one window period; windows stamped a day ahead (a bad RTC at boot) are
//! held aside and retried on a backoff while new windows keep flowing.
use std::time::{Duration, Instant};

use collector::stream::{spawn, SenderConfig, SenderStats, Spool};
use proto::v1::{Event, Origin, Window};
use tests::stream::{correlator_with, free_port, recorded_windows, tmp};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A window of `instance` ending at `end_ms`, about `pad` bytes big (a
/// busy node's window carries some kilobytes of events).
fn window(instance: &str, seq: u64, end_ms: i64, pad: usize) -> Window {
    Window {
        origin: Some(Origin {
            hostname: "n1".into(),
            boot_id: "b".into(),
            instance: instance.into(),
            machine_id: String::new(),
            cluster: String::new(),
        }),
        seq,
        start_unix_ms: end_ms - 1000,
        end_unix_ms: end_ms,
        events: (0..pad / 256)
            .map(|i| Event {
                detail: format!("event {i} {}", "x".repeat(240)),
                ..Event::default()
            })
            .collect(),
        ..Window::default()
    }
}

fn sender_config(port: u16, spool_dir: &std::path::Path) -> SenderConfig {
    SenderConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        spool_dir: spool_dir.to_path_buf(),
        spool_max_bytes: 64 << 20,
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        resume_every: Duration::from_secs(1),
        auth: collector::stream::tls::ClientAuth::default(),
        nats: Default::default(),
    }
}

/// Waits until the ingest log holds window `seq` of `instance`; returns
/// when it saw it.
async fn until_recorded(
    record: &std::path::Path,
    instance: &str,
    seq: u64,
    limit: Duration,
    stats: &SenderStats,
) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if recorded_windows(record)
            .iter()
            .any(|(i, s)| i == instance && *s == seq)
        {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "window {instance}/{seq} not recorded within {limit:?}: {}",
            stats.summary()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The previous run's instance (sorts first: instances start with their
/// start time) and the current one.
const OLD: &str = "0000000000000000001-7";
const NEW: &str = "1800000000000000000-8";

#[test]
fn a_backlog_of_200_windows_does_not_delay_a_new_window() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("backlog");
    let record = dir.join("ingest.jsonl");
    let spool_dir = dir.join("spool");
    let port = free_port();
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut corr = correlator_with(port, &record, &["--metrics-addr", &maddr]);
    let backlog = 200u64;
    let t0 = now_ms() - backlog as i64 * 1000;
    {
        let mut s = Spool::open(&spool_dir, 64 << 20).expect("spool");
        for seq in 1..=backlog {
            s.push(&window(OLD, seq, t0 + seq as i64 * 1000, 4096))
                .expect("spool a window");
        }
    }
    let rt = tests::runtime();
    let (took, stats) = rt.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (h, stats) =
            spawn(sender_config(port, &spool_dir), rx, Duration::from_secs(3)).expect("sender");
        // The new run's first window, produced while the backlog waits.
        let sent = Instant::now();
        tx.send(window(NEW, 1, now_ms(), 4096))
            .await
            .expect("input");
        let got = until_recorded(&record, NEW, 1, Duration::from_secs(20), &stats).await;
        let took = got - sent;
        // The backlog is delivered too, all of it.
        let all = until_recorded(&record, OLD, backlog, Duration::from_secs(20), &stats).await;
        eprintln!(
            "backlog of {backlog} delivered {:?} after the sender started",
            all - sent
        );
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("the sender ends within its drain time")
            .expect("sender task");
        (took, stats)
    });
    let _ = corr.kill();
    let _ = corr.wait();
    let windows = recorded_windows(&record);
    eprintln!(
        "new window recorded {took:?} after it was produced; {}",
        stats.summary()
    );
    let old: Vec<u64> = windows
        .iter()
        .filter(|(i, _)| i == OLD)
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(
        old,
        (1..=backlog).collect::<Vec<_>>(),
        "the backlog once each, in order"
    );
    assert_eq!(windows.iter().filter(|(i, _)| i == NEW).count(), 1);
    // One window period (1 s), with room for a loaded test machine.
    assert!(
        took < Duration::from_millis(1500),
        "the new window waited {took:?} behind a backlog of {backlog}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Retries of held windows within `elapsed` of the first refusal at most:
/// each wait is at least half of a cap doubling from 1 s.
fn retries_allowed(elapsed: Duration) -> u64 {
    let (mut at, mut half, mut n) = (0.0, 0.5, 0);
    loop {
        at += half;
        if at > elapsed.as_secs_f64() {
            return n;
        }
        n += 1;
        half = (half * 2.0).min(30.0);
    }
}

#[test]
fn day_ahead_windows_are_held_aside_while_new_windows_flow() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("future");
    let record = dir.join("ingest.jsonl");
    let spool_dir = dir.join("spool");
    let port = free_port();
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut corr = correlator_with(port, &record, &["--metrics-addr", &maddr]);
    // The previous run's windows, stamped a day ahead (a bad RTC at boot).
    let ahead = now_ms() + 86_400_000;
    {
        let mut s = Spool::open(&spool_dir, 64 << 20).expect("spool");
        for seq in 1..=5 {
            s.push(&window(OLD, seq, ahead + seq as i64 * 1000, 1024))
                .expect("spool a window");
        }
    }
    let rt = tests::runtime();
    let period = Duration::from_millis(500);
    let (lat, elapsed, stats) = rt.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let started = Instant::now();
        let (h, stats) =
            spawn(sender_config(port, &spool_dir), rx, Duration::from_secs(2)).expect("sender");
        let mut lat = Vec::new();
        for seq in 1..=6 {
            let at = started + period * seq as u32;
            tokio::time::sleep_until(at.into()).await;
            tx.send(window(NEW, seq, now_ms(), 1024))
                .await
                .expect("input");
            let got = until_recorded(&record, NEW, seq, Duration::from_secs(5), &stats).await;
            lat.push(got - at);
        }
        let elapsed = started.elapsed();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("the sender ends within its drain time")
            .expect("sender task");
        (lat, elapsed, stats)
    });
    let rejected = tests::metrics::counter(
        &maddr,
        "faultline_ingest_rejected_total",
        &[("reason", "clock_future")],
    );
    let _ = corr.kill();
    let _ = corr.wait();
    let n = |f: &std::sync::atomic::AtomicU64| f.load(std::sync::atomic::Ordering::Relaxed);
    let summary = stats.summary();
    eprintln!("latencies {lat:?}; clock_future refusals {rejected} in {elapsed:?}; {summary}");
    // New windows flow: each within two window periods.
    assert!(lat.iter().all(|l| *l < period * 2), "{lat:?} ({summary})");
    assert_eq!(
        recorded_windows(&record),
        (1..=6).map(|s| (NEW.to_string(), s)).collect::<Vec<_>>(),
        "only the new run's windows, once each and in order"
    );
    // The day-ahead windows: refused once on the stream, then only at
    // the backoff's pace (they used to be resent on every reconnect).
    let allowed = 1 + retries_allowed(elapsed);
    assert!(
        rejected >= 1 && rejected <= allowed,
        "{rejected} clock_future refusals in {elapsed:?}, the backoff allows {allowed} ({summary})"
    );
    assert_eq!(n(&stats.held_retries) + 1, rejected, "{summary}");
    assert_eq!(n(&stats.held), 5, "{summary}");
    assert_eq!(n(&stats.dropped), 0, "{summary}");
    assert_eq!(n(&stats.delivered), 6, "{summary}");
    // Still spooled for the next run (or for the limit to drop them).
    let left = Spool::open(&spool_dir, 64 << 20).expect("reopen");
    assert_eq!(left.len(), 5, "{:?}", left.names_after(None));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// Windows a little ahead: held, then delivered once the correlator's
/// clock catches up — unless a newer window of the same run went first
/// (the correlator starts a new origin's sequence at its first window, so
/// the earlier one would be a duplicate): that one is dropped, counted.
#[test]
fn a_held_window_is_delivered_when_the_clock_catches_up_or_dropped_when_superseded() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("future-catchup");
    let record = dir.join("ingest.jsonl");
    let spool_dir = dir.join("spool");
    let config = dir.join("correlator.toml");
    std::fs::write(&config, "[detect.limits]\nmax_future_s = 1\n").expect("config");
    let port = free_port();
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut corr = correlator_with(
        port,
        &record,
        &[
            "--metrics-addr",
            &maddr,
            "--config",
            config.to_str().expect("utf-8"),
        ],
    );
    let ahead = now_ms() + 2500;
    {
        let mut s = Spool::open(&spool_dir, 64 << 20).expect("spool");
        s.push(&window(OLD, 1, ahead, 256)).expect("spool a window");
    }
    let rt = tests::runtime();
    let stats = rt.block_on(async {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (h, stats) =
            spawn(sender_config(port, &spool_dir), rx, Duration::from_secs(2)).expect("sender");
        // The running instance: its first window stamped ahead too (the
        // clock was stepped back after it), the next ones right.
        tx.send(window(NEW, 1, ahead, 256)).await.expect("input");
        let sent = Instant::now();
        for seq in 2..=3 {
            tx.send(window(NEW, seq, now_ms(), 256))
                .await
                .expect("input");
        }
        let got = until_recorded(&record, NEW, 3, Duration::from_secs(5), &stats).await;
        // Not held up until the correlator's clock catches up (about 1.5 s).
        assert!(
            got - sent < Duration::from_secs(1),
            "NEW/3 took {:?} ({})",
            got - sent,
            stats.summary()
        );
        until_recorded(&record, OLD, 1, Duration::from_secs(10), &stats).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats.held.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            assert!(Instant::now() < deadline, "{}", stats.summary());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("the sender ends within its drain time")
            .expect("sender task");
        stats
    });
    let _ = corr.kill();
    let _ = corr.wait();
    let n = |f: &std::sync::atomic::AtomicU64| f.load(std::sync::atomic::Ordering::Relaxed);
    let summary = stats.summary();
    let windows = recorded_windows(&record);
    assert_eq!(
        windows,
        [(NEW, 2), (NEW, 3), (OLD, 1)].map(|(i, s)| (i.to_string(), s)),
        "{summary}"
    );
    assert_eq!(n(&stats.delivered), 3, "{summary}");
    assert_eq!(n(&stats.held_dropped), 1, "NEW/1, superseded: {summary}");
    assert_eq!(n(&stats.dropped), 1, "{summary}");
    assert!(Spool::open(&spool_dir, 64 << 20)
        .expect("reopen")
        .is_empty());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
