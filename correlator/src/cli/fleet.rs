//! `fleet`: one view over sharded correlators — every shard's incident
//! updates from NATS JetStream into one open list, history, web UI and
//! Alertmanager pusher (docs/scale-out.md).
use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, Result};
use proto::v1::CandidateUpdate;
use tokio::sync::broadcast;

use correlator::{config::FileConfig, engine::Engine, history, ingest};

// `fleet`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// The NATS server the shards publish their incident updates to.
    #[arg(long, value_name = "URL")]
    nats: String,
    /// The durable consumer of the incidents stream (one per fleet view).
    #[arg(long, value_name = "NAME", default_value = "faultline-fleet")]
    nats_consumer: String,
    /// Replicas of the incidents stream when this process creates it.
    #[arg(long, value_name = "N", default_value_t = 1)]
    nats_replicas: usize,
    /// Config file: `[history]`, `[web]` and `[alertmanager]` as for `serve`.
    #[arg(long, value_name = "FILE", env = correlator::config::CONFIG_ENV)]
    pub config: Option<PathBuf>,
    /// History database (overrides `[history] path`).
    #[arg(long = correlator::history::config::PATH.long(), value_name = "FILE")]
    history: Option<PathBuf>,
    /// Web UI and JSON API on this address (overrides `[web] listen`).
    #[arg(long = correlator::web::LISTEN.long(), value_name = "ADDR")]
    web: Option<SocketAddr>,
    /// Web config file in Prometheus exporter-toolkit's format (TLS, client
    /// certificates, basic auth) for the web UI and the metrics listener, as
    /// node_exporter's --web.config.file (overrides `[web] web_config_file`).
    #[arg(
        long = correlator::web::WEB_CONFIG_FILE.long(),
        value_name = "FILE",
        alias = "web.config.file"
    )]
    web_config_file: Option<PathBuf>,
    /// Alertmanager base URL (overrides `[alertmanager] url`).
    #[arg(long = correlator::alerts::config::URL.long(), value_name = "URL")]
    alertmanager: Option<String>,
    #[command(flatten)]
    creds: super::serve::NatsCredsArgs,
}

pub async fn fleet(a: FleetArgs) -> Result<()> {
    // Recorded from the start: what the history counts while it opens too.
    let _ = correlator::telemetry::handle();
    let creds = a.creds.credentials(&a.nats)?;
    if !vocab::nats::valid_shard(&a.nats_consumer) {
        anyhow::bail!(
            "--nats-consumer {:?}: must be one NATS name token",
            a.nats_consumer
        );
    }
    let mut file = match &a.config {
        Some(p) => correlator::config::load_file(p)?,
        None => FileConfig::default(),
    };
    if a.web_config_file.is_some() {
        file.web.web_config_file = a.web_config_file.clone();
    }
    let mut history_cfg = file.history.clone();
    if a.history.is_some() {
        history_cfg.path = a.history;
    }
    let mut am = file.alertmanager.clone();
    if let Some(u) = a.alertmanager {
        am.url = u;
    }
    if let Some((key, why)) = am.invalid() {
        anyhow::bail!("{key}: {why}");
    }
    // The shards, not this process, judge windows: the engine here only
    // takes the history's start; the open list is the history's own.
    let mut engine = Engine::default();
    let opened = match &history_cfg.path {
        Some(p) => Some(history::open(p, &history_cfg, &mut engine)?),
        None => None,
    };
    let restored = match &opened {
        Some(o) => o.open_incidents()?,
        None => Vec::new(),
    };
    let open: Arc<Mutex<Vec<CandidateUpdate>>> = Arc::new(Mutex::new(restored));
    let (utx, _) = broadcast::channel(8192);
    if let Some(o) = &opened {
        let recorder = o.recorder.clone();
        let mut rx = utx.subscribe();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(u) => recorder.update(&u),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        metrics::counter!(correlator::telemetry::HISTORY_DROPPED.name).increment(n);
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
    let acks = correlator::ack::start(
        file.web.operator_token()?,
        opened.as_ref(),
        utx.subscribe(),
        open.clone(),
    )?;
    if let Some(addr) = a.web.or(file.web.listen) {
        let app = correlator::web::AppState {
            history: opened.as_ref().map(|o| o.reader.clone()),
            updates: utx.clone(),
            open: open.clone(),
            ingest: None,
            acks: Some(acks.clone()),
        };
        correlator::web::serve_limited(addr, app, &file.web, std::future::pending()).await?;
    }
    if !am.url.is_empty() {
        correlator::alerts::spawn(am, utx.subscribe(), open.clone(), Some(acks))
            .context("[alertmanager] TLS files")?;
    }
    let task = ingest::fleet::consume(a.nats, creds, a.nats_consumer, a.nats_replicas, open, utx);
    tokio::select! {
        _ = task => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    if let Some(o) = &opened {
        o.recorder.flush().await;
    }
    Ok(())
}
