//! A switch fault judged live and replayed (issue 48 item 7): a real
//! `faultline-correlator serve --topology T --cluster lab1 --record R` takes
//! the windows of a fabric whose spine's four uplinks degrade together over
//! gRPC; `replay --topology T --cluster lab1` of the same windows, and of
//! serve's own record `R`, prints the same updates (ids, states, kinds,
//! entities, cluster, severity, confidence, evidence) as the live
//! subscription got: one incident on `switch:spine01`. Before, `replay` took
//! neither `--topology` nor a cluster, so the fault replayed as port
//! incidents under other ids.
use crate::fabric;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use proto::v1::{
    candidates_client::CandidatesClient, ingest_client::IngestClient, SubscribeRequest, Window,
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");
const SPINE: [&str; 4] = ["spine01[1]", "spine01[2]", "spine01[3]", "spine01[4]"];

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fields compared between the live stream and the replay.
fn row(v: &serde_json::Value) -> serde_json::Value {
    let keys = [
        "ts",
        "incident_id",
        "state",
        "kind",
        "entity",
        "cluster",
        "severity",
        "confidence",
        "evidence",
        "affected_jobs",
    ];
    keys.iter()
        .map(|k| (k.to_string(), v[*k].clone()))
        .collect()
}

fn live_row(u: &proto::v1::CandidateUpdate) -> serde_json::Value {
    row(&serde_json::json!({
        "ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
        "kind": u.kind, "entity": u.entity, "cluster": u.cluster, "severity": u.severity,
        "confidence": u.confidence, "evidence": u.evidence, "affected_jobs": u.affected_jobs,
    }))
}

/// `replay FILE args…`: its update rows.
fn replay(file: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(BIN)
        .arg("replay")
        .arg(file)
        .args(args)
        .output()
        .expect("run replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| row(&serde_json::from_str(l).expect("JSON line")))
        .collect()
}

/// The fault's windows: healthy 3 ticks, the spine's uplinks at BER 1e-11
/// for 8, healthy 10; ending an hour ago (inside serve's clock checks).
fn windows() -> Vec<Window> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let mut f = fabric::Fabric::at((now - 3_600_000) / 10_000 * 10_000);
    let mut all = Vec::new();
    for i in 0..21 {
        all.extend(f.next(if (3..11).contains(&i) { &SPINE } else { &[] }));
    }
    all
}

fn serve(dir: &Path, topology: &Path) -> (Kill, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let child = Command::new(BIN)
        .args(["serve", "--insecure", "--cluster", "lab1", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--topology")
        .arg(topology)
        .arg("--record")
        .arg(dir.join("record.jsonl"))
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

/// Sends `ws` on one ingest stream (in order) and collects the live
/// updates until there are `want` of them (or 20 s passed).
async fn live(url: &str, ws: Vec<Window>, want: usize) -> Vec<serde_json::Value> {
    let ch = tonic::transport::Endpoint::from_shared(url.to_string())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut sub = CandidatesClient::new(ch.clone())
        .subscribe(SubscribeRequest::default())
        .await
        .expect("subscribe")
        .into_inner();
    let n = ws.len() as u64;
    let summary = IngestClient::new(ch)
        .stream(tokio_stream::iter(ws))
        .await
        .expect("ingest")
        .into_inner();
    assert_eq!(summary.accepted, n, "{summary:?}");
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < want {
        match tokio::time::timeout_at(deadline, sub.message()).await {
            Ok(Ok(Some(u))) => got.push(live_row(&u)),
            _ => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_fault_replayed_with_the_topology_gives_the_live_result() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::scratch_dir("replay-topo");
    let topo = dir.join("fabric.topo");
    std::fs::write(&topo, fabric::topology_text()).expect("topology");
    let ws = windows();
    let file = dir.join("windows.jsonl");
    let text: String = ws
        .iter()
        .map(|w| serde_json::to_string(w).expect("JSON") + "\n")
        .collect();
    std::fs::write(&file, text).expect("windows");

    let t = topo.to_str().expect("path");
    let replayed = replay(&file, &["--topology", t, "--cluster", "lab1"]);
    let entities: std::collections::BTreeSet<&str> = replayed
        .iter()
        .filter_map(|r| r["entity"].as_str())
        .collect();
    assert!(entities.contains("switch:spine01"), "{replayed:#?}");
    assert!(replayed.iter().all(|r| r["cluster"] == "lab1"));

    let (_serve, url) = serve(&dir, &topo);
    let live = live(&url, ws, replayed.len()).await;
    println!("{} updates live and replayed", live.len());
    assert_eq!(live, replayed, "live (left) and replayed (right) differ");

    // serve's own record of the stream replays to the same result.
    let recorded = replay(
        &dir.join("record.jsonl"),
        &["--topology", t, "--cluster", "lab1"],
    );
    assert_eq!(recorded, live);

    // Without the topology the same windows are judged otherwise: no
    // switch incident (what replay alone could do before).
    let bare = replay(&file, &["--cluster", "lab1"]);
    assert!(
        bare.iter().all(|r| r["entity"] != "switch:spine01") && !bare.is_empty(),
        "{bare:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
