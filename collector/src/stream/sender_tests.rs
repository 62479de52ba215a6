//! The sender's unit tests: backoff, resume consistency, outage logging.
use super::*;

#[test]
fn backoff_is_full_jitter_under_a_doubling_cap() {
    let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let mut caps = Vec::new();
    let mut waits = Vec::new();
    for _ in 0..10 {
        caps.push(b.cap().as_millis());
        waits.push(b.next_wait());
    }
    assert_eq!(
        caps,
        [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
    );
    for (w, c) in waits.iter().zip(&caps) {
        assert!(w.as_millis() <= *c, "{w:?} > {c}");
    }
    // Full jitter: over many draws at the cap, waits cover [0, cap]
    // (the old "[d/2, d]" never went below half).
    let draws: Vec<Duration> = (0..2000).map(|_| b.next_wait()).collect();
    let below_half = draws.iter().filter(|d| d.as_secs_f64() < 5.0).count();
    assert!(
        (800..1200).contains(&below_half),
        "{below_half} of 2000 below half"
    );
    assert!(draws.iter().any(|d| d.as_secs_f64() < 0.5));
    b.reset();
    assert_eq!(b.cap(), Duration::from_millis(100));
}

#[test]
fn a_resume_beyond_the_newest_spooled_window_is_inconsistent() {
    let spool: Vec<String> = (5..=10).map(|s| format!("i1~{s:020}.win")).collect();
    assert!(!check_resume("i1", 7, &spool));
    assert!(!check_resume("i1", 10, &spool));
    assert!(check_resume("i1", u64::MAX, &spool));
    assert!(check_resume("i1", 11, &spool));
    // Another instance's windows say nothing about i1.
    assert!(!check_resume("i2", 99, &spool));
}

/// Log lines, one `String` per formatted event, sent to the test.
#[derive(Clone)]
struct Lines(tokio::sync::mpsc::UnboundedSender<String>);

impl std::io::Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(String::from_utf8_lossy(b).into_owned());
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_unreachable_correlator_is_a_warning_once_per_outage_not_per_retry() {
    let (log_tx, mut log_rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || Lines(log_tx.clone()))
        .finish();
    let dir = std::env::temp_dir().join(format!("faultline-outage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A port nothing listens on: every connect is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let cfg = SenderConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        spool_dir: dir.clone(),
        spool_max_bytes: 1 << 20,
        backoff_min: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        resume_every: Duration::from_secs(1),
        auth: super::super::tls::ClientAuth::default(),
    };
    let lines: Vec<String> = tracing::subscriber::with_default(sub, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (tx, rx) = mpsc::channel(4);
            let (h, _stats) = spawn(cfg, rx, Duration::ZERO).expect("spawn");
            // Wait (on the log itself) for five failed attempts.
            let mut seen = Vec::new();
            while seen
                .iter()
                .filter(|l: &&String| l.contains("unreachable"))
                .count()
                < 5
            {
                seen.push(log_rx.recv().await.expect("log lines"));
            }
            drop(tx);
            h.abort();
            seen
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    let warns: Vec<_> = lines
        .iter()
        .filter(|l| l.contains(" WARN collector::stream::sender:"))
        .collect();
    assert_eq!(warns.len(), 1, "{lines:#?}");
    assert!(warns[0].contains("correlator unreachable"), "{warns:?}");
    let debug = lines
        .iter()
        .filter(|l| l.contains(" DEBUG ") && l.contains("correlator still unreachable"))
        .count();
    assert!(debug >= 4, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("attempts=5")), "{lines:#?}");
}
