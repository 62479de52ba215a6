//! `subscribe`: a client of a running correlator's `Candidates` service,
//! printing candidate updates live.
use anyhow::{Context as _, Result};

// `subscribe`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct SubscribeArgs {
    /// Correlator URL.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    endpoint: String,
    /// Only these kinds (repeatable), e.g. ib_link_degraded.
    #[arg(long = "kind")]
    kinds: Vec<String>,
    /// Only entities of this host.
    #[arg(long, default_value = "")]
    host: String,
    /// Only incidents affecting this job.
    #[arg(long, default_value = "")]
    job: String,
    /// Only incidents of this cluster.
    #[arg(long, default_value = "")]
    cluster: String,
    /// Only candidates at least this confident (resolutions always pass).
    #[arg(long, default_value_t = 0.0)]
    min_confidence: f64,
    /// Print the incidents open now first, then the live updates
    /// (nothing missed between the two).
    #[arg(long)]
    with_open: bool,
    /// One JSON object per line instead of human-readable lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    auth: proto::client_tls::ClientAuth,
}

pub async fn subscribe(a: SubscribeArgs) -> Result<()> {
    let endpoint = a.endpoint;
    let (ep, token) = a
        .auth
        .endpoint(&endpoint)
        .with_context(|| format!("bad endpoint {endpoint}"))?;
    let channel = ep
        .connect()
        .await
        .with_context(|| format!("connecting to the correlator at {endpoint}"))?;
    let mut client =
        proto::v1::candidates_client::CandidatesClient::with_interceptor(channel, token);
    let mut stream = client
        .subscribe(proto::v1::SubscribeRequest {
            kinds: a.kinds,
            host: a.host,
            job: a.job,
            min_confidence: a.min_confidence,
            with_open: a.with_open,
            cluster: a.cluster,
        })
        .await
        .context("subscribe")?
        .into_inner();
    if proto::client_tls::is_plaintext(&endpoint) {
        eprintln!("subscribed to {endpoint} (INSECURE: plaintext, unauthenticated)");
    } else {
        eprintln!("subscribed to {endpoint}");
    }
    while let Some(u) = stream.message().await.context("candidate stream")? {
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
                    "kind": u.kind, "entity": u.entity, "confidence": u.confidence,
                    "evidence": u.evidence, "affected_jobs": u.affected_jobs, "runbook": u.runbook,
                    "cluster": u.cluster, "severity": u.severity,
                })
            );
        } else {
            let at = if u.cluster.is_empty() {
                String::new()
            } else {
                format!(" cluster={}", u.cluster)
            };
            let sev = if u.severity.is_empty() {
                "-"
            } else {
                u.severity.as_str()
            };
            println!(
                "{} {} {} {}{at} confidence={:.2} jobs=[{}] incident={}\n    evidence: {}\n    runbook: {}",
                u.state.to_uppercase(), sev, u.kind, u.entity, u.confidence,
                u.affected_jobs.join(","), u.incident_id, u.evidence.join("; "), u.runbook
            );
        }
    }
    Ok(())
}
