//! The sender's unit tests: backoff, resume consistency, outage logging, the order of sending.
use super::super::held::Held;
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

/// A sender aimed at a port nothing listens on (every connect is refused at
/// once), with `backoff` as both its minimum and maximum backoff and `drain`
/// as its drain time. `script` gets the input and the log lines (at debug)
/// and returns what it collected; the sender is aborted afterwards.
fn against_a_closed_port<F, Fut>(backoff: Duration, drain: Duration, script: F) -> Vec<String>
where
    F: FnOnce(
        mpsc::Sender<Window>,
        JoinHandle<()>,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let (log_tx, log_rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || Lines(log_tx.clone()))
        .finish();
    let dir = std::env::temp_dir().join(format!(
        "faultline-outage-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let cfg = SenderConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        spool_dir: dir.clone(),
        spool_max_bytes: 1 << 20,
        backoff_min: backoff,
        backoff_max: backoff,
        resume_every: Duration::from_secs(1),
        auth: super::super::tls::ClientAuth::default(),
        nats: Default::default(),
    };
    let lines = tracing::subscriber::with_default(sub, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (tx, rx) = mpsc::channel(4);
            let (h, _stats) = spawn(cfg, rx, drain).expect("spawn");
            script(tx, h, log_rx).await
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    lines
}

/// Log lines until `n` of them mention an unreachable correlator.
async fn until_unreachable(
    log: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    n: usize,
) -> Vec<String> {
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|l: &&String| l.contains("unreachable"))
        .count()
        < n
    {
        seen.push(log.recv().await.expect("log lines"));
    }
    seen
}

#[test]
fn an_unreachable_correlator_is_a_warning_once_per_outage_not_per_retry() {
    let lines = against_a_closed_port(
        Duration::from_millis(5),
        Duration::ZERO,
        |tx, h, mut log| async move {
            let seen = until_unreachable(&mut log, 5).await;
            drop(tx);
            h.abort();
            seen
        },
    );
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

/// Shutdown in the middle of a long backoff: the drain time is spent
/// retrying at `DRAIN_RETRY`, not sitting out the backoff (a correlator that
/// came back just before the SIGTERM used to miss the collector's last
/// windows whenever the backoff outlasted the drain time).
#[test]
fn shutdown_cuts_a_long_backoff_short_and_retries_through_the_drain_time() {
    let drain = Duration::from_secs(1);
    let mut took = Duration::ZERO;
    let lines = against_a_closed_port(Duration::from_secs(60), drain, |tx, h, mut log| {
        let took = &mut took;
        async move {
            // The first refusal puts the sender into a backoff of up to 60 s.
            let mut seen = until_unreachable(&mut log, 1).await;
            // One window to deliver (an empty spool ends the drain at once).
            let w = Window {
                origin: Some(proto::v1::Origin {
                    hostname: "n1".into(),
                    instance: "i1".into(),
                    ..Default::default()
                }),
                seq: 1,
                ..Window::default()
            };
            tx.send(w).await.expect("sender input");
            let asked = tokio::time::Instant::now();
            drop(tx);
            tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("the sender outlived its drain time")
                .expect("sender task");
            *took = asked.elapsed();
            while let Ok(l) = log.try_recv() {
                seen.push(l);
            }
            seen
        }
    });
    let retries = lines
        .iter()
        .filter(|l| l.contains("correlator still unreachable"))
        .count();
    // 1 s at one attempt per ≤ 100 ms (refused at once): about ten.
    assert!(
        retries >= 5,
        "{retries} attempts in the drain time: {lines:#?}"
    );
    assert!(
        took >= drain && took < drain + Duration::from_secs(2),
        "sender returned after {took:?}, drain {drain:?}"
    );
}

/// A sender on a spool in `dir`, never started (its order of sending is
/// looked at directly).
fn idle_sender(dir: &std::path::Path) -> Sender {
    let (_tx, rx) = mpsc::channel(1);
    Sender {
        cfg: SenderConfig {
            endpoint: "http://127.0.0.1:1".into(),
            spool_dir: dir.to_path_buf(),
            spool_max_bytes: 1 << 20,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            resume_every: Duration::from_secs(1),
            auth: super::super::tls::ClientAuth::default(),
            nats: Default::default(),
        },
        spool: Spool::open(dir, 1 << 20).expect("spool"),
        stats: Arc::new(SenderStats::default()),
        rx,
        closing: None,
        drain: Duration::ZERO,
        in_flight: Default::default(),
        evicted_sent: Default::default(),
        quarantined_seen: 0,
        unreachable: 0,
        refused_now: 0,
        held_now: 0,
        held: Held::default(),
        running: None,
    }
}

fn win(inst: &str, seq: u64, end_ms: i64) -> Window {
    Window {
        origin: Some(proto::v1::Origin {
            hostname: "n1".into(),
            instance: inst.into(),
            ..Default::default()
        }),
        seq,
        end_unix_ms: end_ms,
        ..Window::default()
    }
}

/// The order a stream sends in: the running instance's windows first, in
/// sequence order, then earlier runs' backlog; held windows, and windows
/// ending at or after a window refused as from the future, are skipped.
#[tokio::test]
async fn the_running_instance_goes_ahead_of_the_backlog_and_held_windows_are_skipped() {
    let dir = std::env::temp_dir().join(format!("faultline-order-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = idle_sender(&dir);
    // Earlier runs (one of them sorting after the running one: its clock
    // was ahead at start).
    for seq in 1..=3 {
        s.spool
            .push(&win("a", seq, 1000 + seq as i64))
            .expect("push");
        s.spool
            .push(&win("z", seq, 9000 + seq as i64))
            .expect("push");
    }
    s.push(win("m", 1, 5000));
    s.push(win("m", 2, 5001));
    let mut c = super::super::order::Cursor::default();
    let mut order = Vec::new();
    while let Some(n) = s.next_unsent(&mut c) {
        c.sent(&n, s.running.as_deref());
        order.push(n);
        if order.len() == 3 {
            // A new window arrives mid-backlog: it goes next.
            s.push(win("m", 3, 5002));
        }
    }
    let names = |v: &[(&str, u64)]| -> Vec<String> {
        v.iter()
            .map(|(i, q)| super::super::spool::name_of(i, *q))
            .collect()
    };
    assert_eq!(
        order,
        names(&[
            ("m", 1),
            ("m", 2),
            ("a", 1),
            ("m", 3),
            ("a", 2),
            ("a", 3),
            ("z", 1),
            ("z", 2),
            ("z", 3)
        ])
    );
    // z/1 refused as from the future: z/2 and z/3 end later, so they are
    // held without being sent; a/… and m/… still go.
    let z1 = super::super::spool::name_of("z", 1);
    let entry = s.spool.entry(&z1).expect("spooled");
    s.held.hold(&z1, entry, true, tokio::time::Instant::now());
    let mut c = super::super::order::Cursor::default();
    let mut order = Vec::new();
    while let Some(n) = s.next_unsent(&mut c) {
        c.sent(&n, s.running.as_deref());
        order.push(n);
    }
    assert_eq!(
        order,
        names(&[("m", 1), ("m", 2), ("m", 3), ("a", 1), ("a", 2), ("a", 3)])
    );
    assert_eq!(s.held.len(), 3);
    assert_eq!(s.stats.held.load(Ordering::Relaxed), 3);
    // Delivered up to a/3 and z/3 by Resume: held windows stay.
    assert_eq!(s.spool.remove_upto("z", 3, |n| s.held.contains(n)), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
