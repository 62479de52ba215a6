//! Two faults at once (docs/history.md, "Two faults at once"): the disk
//! under the history fills (a small tmpfs, filled), a host falls silent and
//! its `node_lost` reaches a subscriber of the real `faultline-correlator
//! serve`, and the correlator is killed with SIGKILL while the database
//! still cannot take the incident. The incident was in memory only; now it
//! is in the incident journal (reserved at start), so the restarted
//! correlator, on the disk still full, has it open under the same id, and
//! the database holds it once space returns.
use crate::common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use correlator::history::{HistoryConfig, Store};
use proto::v1::{
    candidates_client::CandidatesClient, ingest_client::IngestClient, CandidateUpdate,
    OpenIncidentsRequest, SubscribeRequest, Window,
};
use tokio_stream::wrappers::ReceiverStream;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");
const LEN_MS: i64 = 100;

/// A tmpfs of `size` at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount a tmpfs on {}", dir.display());
        Self(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `path` with `path` until ENOSPC.
fn fill(path: &Path) -> u64 {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    while f.write_all(&[0]).is_ok() {
        n += 1;
    }
    let _ = f.sync_all();
    n
}

struct Serve(Child, String);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` with its history at `db`, its log in `log`.
fn serve(db: &Path, log: &Path) -> Serve {
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
        .arg("--history")
        .arg(db)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("serve");
    let mut s = Serve(child, format!("http://127.0.0.1:{port}"));
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(st)) = s.0.try_wait() {
            panic!(
                "serve exited ({st}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

async fn channel(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

/// Every `opened` update a subscriber receives, signalled on arrival.
async fn subscribe(
    url: &str,
) -> (
    Arc<Mutex<Vec<CandidateUpdate>>>,
    tokio::sync::mpsc::Receiver<()>,
) {
    let mut c = CandidatesClient::new(channel(url).await);
    let mut s = c
        .subscribe(SubscribeRequest::default())
        .await
        .expect("subscribe")
        .into_inner();
    let got = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok(Some(u)) = s.message().await {
            if u.state == "opened" {
                g.lock().expect("lock").push(u);
                let _ = tx.try_send(());
            }
        }
    });
    (got, rx)
}

/// A collector of `host` streaming 100 ms windows on its own call.
async fn host(url: &str, name: &'static str) -> tokio::sync::mpsc::Sender<Window> {
    let mut c = IngestClient::new(channel(url).await);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move { c.stream(ReceiverStream::new(rx)).await });
    let _ = name;
    tx
}

async fn send(tx: &tokio::sync::mpsc::Sender<Window>, name: &str, seq: u64) {
    let mut w = common::window(name, seq, common::now_ms());
    w.start_unix_ms = w.end_unix_ms - LEN_MS;
    tx.send(w).await.expect("stream open");
}

/// The incident's state in the database file, read without the journal.
fn state_in_db(db: &Path, id: &str) -> Option<String> {
    let st = Store::open_reader(db, &HistoryConfig::default()).ok()?;
    st.incident(id).ok().flatten().map(|(r, _)| r.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_then_kill_9_loses_no_incident_a_subscriber_was_sent() {
    let _turn = tests::one_file_at_a_time(file!());
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let top = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("history_double_fault_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&top);
    let fs = top.join("fs");
    std::fs::create_dir_all(&fs).expect("dir");
    let _tmpfs = Tmpfs::mount(&fs, "24m");
    let db = fs.join("history.db");

    let first = serve(&db, &top.join("first.log"));
    let (got, mut arrived) = subscribe(&first.1).await;
    let (a, b) = (host(&first.1, "a").await, host(&first.1, "b").await);
    let mut tick = tokio::time::interval(Duration::from_millis(LEN_MS as u64));
    let mut seq = 0;
    for _ in 0..10 {
        tick.tick().await;
        seq += 1;
        send(&a, "a", seq).await;
        send(&b, "b", seq).await;
    }
    let filled = fill(&fs.join("filler"));
    // b falls silent: node_lost, sent to the subscriber.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    let lost = loop {
        tokio::select! {
            _ = tick.tick() => {
                seq += 1;
                send(&a, "a", seq).await;
            }
            _ = arrived.recv() => {}
        }
        let g = got.lock().expect("lock").clone();
        if let Some(u) = g
            .into_iter()
            .find(|u| u.kind == "node_lost" && u.entity == "b")
        {
            break u;
        }
        assert!(Instant::now() < deadline, "no node_lost for b");
    };
    // The writer has tried (and failed) at least once more; then SIGKILL.
    for _ in 0..3 {
        tick.tick().await;
        seq += 1;
        send(&a, "a", seq).await;
    }
    drop(first);
    assert_ne!(
        state_in_db(&db, &lost.incident_id).as_deref(),
        Some("open"),
        "the disk was not full ({filled} bytes of filler): the database took the incident"
    );

    // Restarted on the disk still full: the incident is open, same id.
    let second = serve(&db, &top.join("second.log"));
    let mut c = CandidatesClient::new(channel(&second.1).await);
    let open = c
        .open_incidents(OpenIncidentsRequest::default())
        .await
        .expect("open incidents")
        .into_inner()
        .incidents;
    let log = std::fs::read_to_string(top.join("second.log")).unwrap_or_default();
    assert!(
        open.iter().any(|u| u.incident_id == lost.incident_id),
        "{} lost: open after restart {:?}\n{log}",
        lost.incident_id,
        open.iter().map(|u| &u.incident_id).collect::<Vec<_>>()
    );
    // Space returns: the writer puts it in the database (it retries every
    // second).
    std::fs::remove_file(fs.join("filler")).expect("free the disk");
    let deadline = Instant::now() + Duration::from_secs(8);
    while state_in_db(&db, &lost.incident_id).as_deref() != Some("open") {
        assert!(
            Instant::now() < deadline,
            "not in the database after space returned"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(second);
    drop(_tmpfs);
    let _ = std::fs::remove_dir_all(&top);
}
