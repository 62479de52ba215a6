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
        println!("{}", shown(&u, a.json));
    }
    Ok(())
}

/// One update as printed: a JSON object (`--json`), or a line of state,
/// kind, entity and the rest (`severity=`: "-" from a correlator that does
/// not rate it; after the entity, so that scripts reading the first three
/// words keep working), then its evidence and runbook.
fn shown(u: &proto::v1::CandidateUpdate, json: bool) -> String {
    if json {
        return serde_json::json!({
            "ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
            "kind": u.kind, "entity": u.entity, "confidence": u.confidence,
            "evidence": u.evidence, "affected_jobs": u.affected_jobs, "runbook": u.runbook,
            "cluster": u.cluster, "severity": u.severity,
        })
        .to_string();
    }
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
    format!(
        "{} {} {}{at} severity={} confidence={:.2} jobs=[{}] incident={}\n    evidence: {}\n    runbook: {}",
        u.state.to_uppercase(),
        u.kind,
        u.entity,
        sev,
        u.confidence,
        u.affected_jobs.join(","),
        u.incident_id,
        u.evidence.join("; "),
        u.runbook
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_severity_is_printed() {
        let mut u = proto::v1::CandidateUpdate {
            state: "opened".into(),
            kind: "app_xid".into(),
            entity: "n1/gpu0".into(),
            incident_id: "i1".into(),
            severity: "warning".into(),
            ..Default::default()
        };
        let line = shown(&u, false);
        assert!(
            line.starts_with("OPENED app_xid n1/gpu0 severity=warning "),
            "{line}"
        );
        let j: serde_json::Value = serde_json::from_str(&shown(&u, true)).expect("json");
        assert_eq!(j["severity"], "warning");
        u.severity.clear();
        assert!(shown(&u, false).starts_with("OPENED app_xid n1/gpu0 severity=- "));
    }
}
