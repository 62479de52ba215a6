//! `node_lost` against a real `faultline-correlator serve`, with collectors
//! streaming 100 ms windows in real time over gRPC: a host whose clock runs
//! 40 s ahead (inside the default `max_future_s` of 120 s) does not make the
//! live hosts `node_lost`, and a host that really falls silent — the one
//! ahead or a normal one — is declared lost within its usual bound (three
//! windows), not 40 s later.
use crate::common;

use std::{
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use proto::v1::{
    candidates_client::CandidatesClient, ingest_client::IngestClient, SubscribeRequest, Window,
};
use tokio_stream::wrappers::ReceiverStream;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");
const LEN_MS: i64 = 100;
const AHEAD_MS: i64 = 40_000;
/// Three windows of silence plus the cadence of checks, with room for a
/// busy machine; the old code took 40 s or never.
const BOUND: Duration = Duration::from_millis(1500);

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve() -> (Kill, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let child = Command::new(BIN)
        .args([
            "serve",
            "--insecure",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let k = Kill(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (k, format!("http://127.0.0.1:{port}"))
}

/// `node_lost` incidents opened, with when they arrived.
type Opened = Arc<Mutex<Vec<(String, Instant)>>>;

async fn channel(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

async fn subscribe(url: &str) -> Opened {
    let mut c = CandidatesClient::new(channel(url).await);
    let mut s = c
        .subscribe(SubscribeRequest {
            kinds: vec!["node_lost".into()],
            ..SubscribeRequest::default()
        })
        .await
        .expect("subscribe")
        .into_inner();
    let got: Opened = Arc::default();
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok(Some(u)) = s.message().await {
            if u.state == "opened" {
                if let Ok(mut g) = g.lock() {
                    g.push((u.entity, Instant::now()));
                }
            }
        }
    });
    got
}

/// A collector of `host` whose clock is `skew_ms` off, streaming on its own
/// call.
struct Host {
    name: &'static str,
    skew_ms: i64,
    seq: u64,
    tx: Option<tokio::sync::mpsc::Sender<Window>>,
}

impl Host {
    async fn start(url: &str, name: &'static str, skew_ms: i64) -> Self {
        let mut c = IngestClient::new(channel(url).await);
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move { c.stream(ReceiverStream::new(rx)).await });
        Self {
            name,
            skew_ms,
            seq: 0,
            tx: Some(tx),
        }
    }

    async fn send(&mut self) {
        self.seq += 1;
        let mut w = common::window(self.name, self.seq, common::now_ms() + self.skew_ms);
        w.start_unix_ms = w.end_unix_ms - LEN_MS;
        if let Some(tx) = &self.tx {
            tx.send(w).await.expect("stream open");
        }
    }

    /// Falls silent; when.
    fn stop(&mut self) -> Instant {
        self.tx = None;
        Instant::now()
    }
}

/// Every live host sends one window per 100 ms for `d`.
async fn run(hosts: &mut [Host], d: Duration) {
    let mut tick = tokio::time::interval(Duration::from_millis(LEN_MS as u64));
    let end = Instant::now() + d;
    while Instant::now() < end {
        tick.tick().await;
        for h in hosts.iter_mut().filter(|h| h.tx.is_some()) {
            h.send().await;
        }
    }
}

fn lost(got: &Opened) -> Vec<(String, Instant)> {
    got.lock().map(|g| g.clone()).unwrap_or_default()
}

/// How long after `since` the incident for `host` opened.
fn latency(got: &Opened, host: &str, since: Instant) -> Option<Duration> {
    lost(got)
        .iter()
        .find(|(h, _)| h == host)
        .map(|(_, at)| at.saturating_duration_since(since))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_one_clock_40s_ahead_no_false_node_lost_and_silence_seen() {
    let _turn = tests::one_file_at_a_time(file!());
    let (_serve, url) = serve();
    let got = subscribe(&url).await;
    let mut hosts = vec![
        Host::start(&url, "a", 0).await,
        Host::start(&url, "b", AHEAD_MS).await,
    ];
    run(&mut hosts, Duration::from_secs(2)).await;
    assert_eq!(
        lost(&got).len(),
        0,
        "live hosts declared lost: {:?}",
        lost(&got)
    );
    let silent = hosts[1].stop();
    run(&mut hosts, BOUND + Duration::from_millis(500)).await;
    let took = latency(&got, "b", silent);
    println!("b (40 s ahead) silent: node_lost after {took:?}");
    assert!(took.is_some_and(|t| t <= BOUND), "b lost after {took:?}");
    let names: Vec<String> = lost(&got).into_iter().map(|(h, _)| h).collect();
    assert_eq!(names, ["b"], "only the silent host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_one_clock_40s_ahead_silent_hosts_lost_in_bound() {
    let _turn = tests::one_file_at_a_time(file!());
    let (_serve, url) = serve();
    let got = subscribe(&url).await;
    let mut hosts = vec![
        Host::start(&url, "a", 0).await,
        Host::start(&url, "b", AHEAD_MS).await,
        Host::start(&url, "c", 0).await,
    ];
    run(&mut hosts, Duration::from_secs(2)).await;
    assert_eq!(
        lost(&got).len(),
        0,
        "live hosts declared lost: {:?}",
        lost(&got)
    );
    // The host ahead falls silent: its last window's end used to hold every
    // check back for 40 s.
    let b_silent = hosts[1].stop();
    run(&mut hosts, BOUND + Duration::from_millis(500)).await;
    let b = latency(&got, "b", b_silent);
    let c_silent = hosts[2].stop();
    run(&mut hosts, BOUND + Duration::from_millis(500)).await;
    let c = latency(&got, "c", c_silent);
    println!("b (40 s ahead) silent: node_lost after {b:?}; c silent: after {c:?}");
    assert!(b.is_some_and(|t| t <= BOUND), "b lost after {b:?}");
    assert!(c.is_some_and(|t| t <= BOUND), "c lost after {c:?}");
    let names: Vec<String> = lost(&got).into_iter().map(|(h, _)| h).collect();
    assert_eq!(names, ["b", "c"], "only the silent hosts");
}
