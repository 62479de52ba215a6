//! `serve`: the ingest and `Candidates` gRPC services, with the engine
//! task, the history, the web UI, `/metrics` and Alertmanager delivery that
//! the config file and the flags turn on.
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, Result};
use proto::v1::{ingest_server::IngestServer, CandidateUpdate, Window};
use tokio::sync::{broadcast, mpsc};

use correlator::{
    config::FileConfig, engine::Engine, history, ingest, limits::LimitsConfig, web::WebConfig,
};

/// Largest `--topology` file read (~1M links of three endpoints).
const MAX_TOPOLOGY_BYTES: u64 = 64 << 20;

// `serve`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Binding a non-loopback address exposes the
    /// service to the network; the log says so.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Append every accepted window to this JSON-lines ingest log; on
    /// start the log restores each collector's last sequence number.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Per-stream limit in windows per second (0 = unlimited); a stream
    /// over it is ended with RESOURCE_EXHAUSTED and the collector resumes.
    #[arg(long, default_value_t = 1000)]
    max_windows_per_sec: u32,
    /// Fabric topology: `ibnetdiscover`'s output, or lines
    /// `LINK ENDPOINT [ENDPOINT]` with endpoints `<host>/<hca>/<port>` or
    /// `<switch>[<port>]`; both HCA ends of a link become one entity, and
    /// ports behind one switch flagged together one incident on the switch.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Config file (TOML): detection thresholds under `[detect.ib]`,
    /// `[detect.storage]`, `[detect.incidents]` (docs/detection.md),
    /// `[history]`, `[web]` and `[alertmanager]` (docs/config.md).
    #[arg(long, value_name = "FILE", env = correlator::config::CONFIG_ENV)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    security: Box<correlator::auth::ServeSecurity>,
    /// Serve Prometheus metrics (refusals, drops, forgotten state;
    /// docs/metrics.md) on this address; unset = none.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// History database (overrides `[history] path`): incidents and
    /// series survive restarts; open incidents come back open.
    #[arg(long = correlator::history::config::PATH.long(), value_name = "FILE")]
    history: Option<PathBuf>,
    /// Web UI, JSON API, `/metrics` and `/healthz` on this address
    /// (overrides `[web] listen`).
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
    /// Alertmanager base URL, e.g. http://127.0.0.1:9093 (overrides
    /// `[alertmanager] url`).
    #[arg(long = correlator::alerts::config::URL.long(), value_name = "URL")]
    alertmanager: Option<String>,
    /// The cluster label of incidents from collectors that name none
    /// (overrides the file's `cluster`; a collector's own wins).
    #[arg(
        long = correlator::config::CLUSTER.long(),
        value_name = "NAME",
        env = correlator::config::CLUSTER.env_var()
    )]
    cluster: Option<String>,
    #[command(flatten)]
    nats: Box<NatsArgs>,
}

/// Consuming windows from NATS JetStream (docs/scale-out.md).
#[derive(Debug, clap::Args)]
struct NatsArgs {
    /// Also take windows from this NATS server's JetStream stream
    /// (`nats://HOST:4222`), besides gRPC ingest.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// The JetStream stream of windows.
    #[arg(long, value_name = "NAME", default_value = vocab::nats::DEFAULT_STREAM)]
    nats_stream: String,
    /// The subject prefix the collectors publish under.
    #[arg(long, value_name = "PREFIX", default_value = vocab::nats::DEFAULT_PREFIX)]
    nats_subject: String,
    /// This correlator's shards (comma-separated shard keys); unset = all.
    /// Several need nats-server 2.10.
    #[arg(long, value_name = "SHARD,...", value_delimiter = ',')]
    nats_shards: Vec<String>,
    /// The durable consumer: one name per shard set, the same for a
    /// shard's active correlator and its standby.
    #[arg(long, value_name = "NAME", default_value = "faultline-correlator")]
    nats_consumer: String,
    /// Seconds the shard lease lasts without renewal: a standby takes the
    /// shard over this long (and a quarter more at most) after the active
    /// process stops.
    #[arg(long, value_name = "SECONDS", default_value_t = 3.0)]
    nats_lease_s: f64,
    /// Replicas of the stream and the shard state buckets when this
    /// process creates them (servers of the JetStream cluster; at most 5).
    #[arg(long, value_name = "N", default_value_t = 1)]
    nats_replicas: usize,
    /// The windows stream's size bound in bytes when this process creates
    /// it (it holds only windows no shard has taken yet).
    #[arg(long, value_name = "BYTES", default_value_t = vocab::nats::DEFAULT_MAX_BYTES)]
    nats_max_bytes: i64,
    /// Seconds between writes of the detectors' baselines to NATS, for a
    /// standby taking the shard over (0 = never).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    nats_baselines_s: f64,
    #[command(flatten)]
    creds: NatsCredsArgs,
}

/// Credentials to NATS (`faultline-correlator nats-auth` writes them;
/// docs/scale-out.md, trust).
#[derive(Debug, clap::Args)]
pub struct NatsCredsArgs {
    /// CA certificate (PEM) of the NATS servers: TLS required.
    #[arg(long, value_name = "FILE")]
    nats_ca: Option<PathBuf>,
    /// This process's nkey seed file (its shard's, or the fleet view's);
    /// needs --nats-ca.
    #[arg(long, value_name = "FILE")]
    nats_nkey_file: Option<PathBuf>,
}

impl NatsCredsArgs {
    /// The credentials, checked against `url`.
    pub fn credentials(&self, url: &str) -> Result<ingest::nats::Credentials> {
        let c = ingest::nats::Credentials {
            ca: self.nats_ca.clone(),
            nkey_file: self.nats_nkey_file.clone(),
        };
        c.check("--nats", url).map_err(anyhow::Error::msg)?;
        if let Some(f) = &c.nkey_file {
            ingest::nats::read_seed(f)?;
        }
        Ok(c)
    }
}

impl NatsArgs {
    fn ingest(&self, max_future_s: f64) -> Result<Option<ingest::nats::NatsIngest>> {
        let Some(url) = &self.nats else {
            if self.creds.nats_ca.is_some() || self.creds.nats_nkey_file.is_some() {
                anyhow::bail!("--nats-ca and --nats-nkey-file need --nats");
            }
            return Ok(None);
        };
        let creds = self.creds.credentials(url)?;
        for (what, v) in [
            ("--nats-stream", &self.nats_stream),
            ("--nats-consumer", &self.nats_consumer),
        ] {
            if !vocab::nats::valid_shard(v) {
                anyhow::bail!(
                    "{what} {v:?}: must be one NATS name token (no '.', '*', '>', white space)"
                );
            }
        }
        if self.nats_max_bytes != -1 && self.nats_max_bytes < 1 << 20 {
            anyhow::bail!(
                "--nats-max-bytes {}: must be -1 (the server's store limit) or at least 1048576",
                self.nats_max_bytes
            );
        }
        if !(1..=5).contains(&self.nats_replicas) {
            anyhow::bail!("--nats-replicas {}: must be in [1, 5]", self.nats_replicas);
        }
        if !(0.0..=86_400.0).contains(&self.nats_baselines_s) {
            anyhow::bail!(
                "--nats-baselines-s {}: must be in [0, 86400]",
                self.nats_baselines_s
            );
        }
        if !(0.2..=600.0).contains(&self.nats_lease_s) {
            anyhow::bail!(
                "--nats-lease-s {}: must be in [0.2, 600]",
                self.nats_lease_s
            );
        }
        if let Some(s) = self
            .nats_shards
            .iter()
            .find(|s| !vocab::nats::valid_shard(s))
        {
            anyhow::bail!(
                "--nats-shards: {s:?} is not one subject token (no '.', '*', '>', white space)"
            );
        }
        Ok(Some(ingest::nats::NatsIngest {
            url: url.clone(),
            creds,
            max_future: std::time::Duration::from_secs_f64(max_future_s.clamp(0.0, 1e9)),
            stream: self.nats_stream.clone(),
            prefix: self.nats_subject.clone(),
            shards: self.nats_shards.clone(),
            consumer: self.nats_consumer.clone(),
            replicas: self.nats_replicas,
            max_bytes: self.nats_max_bytes,
            ack_wait: std::time::Duration::from_secs_f64(self.nats_lease_s.max(1.0)),
        }))
    }
}

/// What the engine task shares with the services: accepted windows in,
/// updates out, and the open incidents.
struct Channels {
    windows: mpsc::Sender<Window>,
    updates: broadcast::Sender<CandidateUpdate>,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
}

pub async fn serve(a: ServeArgs) -> Result<()> {
    // Metrics are recorded from the start, whether or not served (on
    // `--metrics-addr` alone and on the web UI's `/metrics`): what the
    // history records while it opens counts too.
    let _ = correlator::telemetry::handle();
    let (tls, auth) = a.security.build()?;
    let mut file = match &a.config {
        Some(p) => correlator::config::load_file(p)?,
        None => FileConfig::default(),
    };
    if a.web_config_file.is_some() {
        file.web.web_config_file = a.web_config_file.clone();
    }
    let cfg = file.detect.clone();
    let mut history_cfg = file.history.clone();
    if a.history.is_some() {
        history_cfg.path = a.history;
    }
    let web = a.web.or(file.web.listen);
    let mut am = file.alertmanager.clone();
    if let Some(u) = a.alertmanager {
        am.url = u;
    }
    if let Some((key, why)) = am.invalid() {
        anyhow::bail!("{key}: {why}");
    }
    let nats = a.nats.ingest(cfg.limits.max_future_s)?;
    let mut engine = Engine::new(&cfg, topology(a.topology.as_deref())?);
    engine.set_cluster(&cluster(a.cluster.as_ref().or(file.cluster.as_ref()))?);
    if cfg.limits.max_future_s > 0.0 {
        // Windows on real clocks: liveness is judged on arrival time
        // too, so one host's clock cannot move everyone's deadlines.
        engine.node.set_arrival_clock(vocab::time::now_unix_ms);
    }
    let opened = match &history_cfg.path {
        Some(p) => {
            let o = history::open(p, &history_cfg, &mut engine)?;
            tracing::info!(path = %p.display(), restored_open_incidents = o.restored, "history opened");
            Some(o)
        }
        None => None,
    };
    // With NATS: one active process per shard; a standby waits here for
    // the lease, then takes over the shard's open incidents.
    let standby = (web, a.metrics_addr, &file.web);
    let shard = take_shard(nats.as_ref(), a.nats.nats_lease_s, &mut engine, standby).await?;
    let fleet = shard_link(nats.as_ref(), shard.as_ref(), a.nats.nats_baselines_s).await?;
    let state = match &a.record {
        Some(p) => ingest::IngestState::with_log(p, cfg.limits.clone())?,
        None => ingest::IngestState::new(cfg.limits.clone()),
    };
    let (wtx, wrx) = mpsc::channel(4096);
    let (utx, _) = broadcast::channel(4096);
    let open = Arc::new(Mutex::new(Vec::new()));
    if let Some(addr) = a.metrics_addr {
        correlator::web::serve_metrics(addr, state.clone(), &file.web).await?;
    }
    let _engine = correlator::subscribe::spawn_engine_with(
        engine,
        wrx,
        utx.clone(),
        open.clone(),
        correlator::subscribe::Hooks {
            history: opened.as_ref().map(|o| o.recorder.clone()),
            fleet,
        },
    );
    let acks = correlator::ack::start(
        file.web.operator_token()?,
        opened.as_ref(),
        utx.subscribe(),
        open.clone(),
    )?;
    if let Some(addr) = web {
        let app = correlator::web::AppState {
            history: opened.as_ref().map(|o| o.reader.clone()),
            updates: utx.clone(),
            open: open.clone(),
            ingest: Some(state.clone()),
            acks: Some(acks.clone()),
        };
        correlator::web::serve_limited(addr, app, &file.web, std::future::pending()).await?;
    }
    if !am.url.is_empty() {
        correlator::alerts::spawn(am, utx.subscribe(), open.clone(), Some(acks.clone()))
            .context("[alertmanager] TLS files")?;
    }
    if let Some(n) = nats {
        start_nats(n, shard.as_ref(), &utx, &state, &wtx).await?;
    }
    let channels = Channels {
        windows: wtx,
        updates: utx,
        open,
    };
    let grpc = Grpc {
        listen: a.listen,
        tls,
        auth,
        limits: &cfg.limits,
        max_windows_per_sec: a.max_windows_per_sec,
    };
    grpc.serve(state.clone(), channels).await?;
    let (accepted, duplicates, missing) = state.counters();
    if let Some(o) = &opened {
        o.recorder.flush().await;
    }
    let rejected = format!("{:?}", state.rejected());
    tracing::info!(accepted, duplicates, missing, rejected, "stopped");
    Ok(())
}

/// With NATS: waits for the shard's lease (a standby waits here, serving
/// `/healthz` and `/metrics` on the web UI's and metrics addresses of
/// `standby`: [`correlator::web::standby`]), then restores the shard's open
/// incidents into `engine`.
async fn take_shard(
    nats: Option<&ingest::nats::NatsIngest>,
    lease_s: f64,
    engine: &mut Engine,
    standby: (Option<SocketAddr>, Option<SocketAddr>, &WebConfig),
) -> Result<Option<ingest::shard::ShardState>> {
    let Some(n) = nats else {
        return Ok(None);
    };
    let lease = std::time::Duration::from_secs_f64(lease_s);
    let s = ingest::shard::ShardState::connect((&n.url, &n.creds), &n.consumer, lease, n.replicas)
        .await?;
    let active =
        metrics::gauge!(correlator::telemetry::SHARD_ACTIVE.name, "consumer" => n.consumer.clone());
    active.set(0.0);
    let (web, metrics_addr, web_cfg) = standby;
    let listeners =
        correlator::web::standby::serve(web, metrics_addr, &n.consumer, web_cfg).await?;
    let rev = s.acquire().await?;
    // Its sockets closed before the real listeners bind the same addresses.
    listeners.end().await;
    active.set(1.0);
    let restored = ingest::shard::restore(engine, s.open_incidents().await?);
    let baselines = s.baselines().await?;
    let hosts = baselines.len();
    engine.restore_baselines(baselines);
    tracing::info!(restored, baselines_of_hosts = hosts, consumer = %n.consumer, "shard's open incidents and baselines taken from NATS");
    s.keep(rev).await?;
    Ok(Some(s))
}

/// Sharded: the link through which the engine takes the other shards'
/// summaries and gives its own, and its baselines for a standby.
async fn shard_link(
    nats: Option<&ingest::nats::NatsIngest>,
    shard: Option<&ingest::shard::ShardState>,
    baselines_s: f64,
) -> Result<Option<Box<dyn correlator::subscribe::ShardLink>>> {
    let (Some(n), Some(s)) = (nats, shard) else {
        return Ok(None);
    };
    let link = ingest::summaries::start(
        s.context().clone(),
        (&n.stream, &n.consumer),
        n.replicas,
        std::time::Duration::from_secs_f64(baselines_s),
    )
    .await?;
    Ok(Some(Box::new(link)))
}

/// With NATS: mirrors the open incidents for a standby, publishes the
/// updates for the fleet view and consumes the shard's windows.
async fn start_nats(
    n: ingest::nats::NatsIngest,
    shard: Option<&ingest::shard::ShardState>,
    utx: &broadcast::Sender<CandidateUpdate>,
    state: &ingest::IngestState,
    wtx: &mpsc::Sender<Window>,
) -> Result<()> {
    if let Some(s) = shard {
        s.mirror(utx.subscribe()).await?;
    }
    // The fleet view (`faultline-correlator fleet`) reads these.
    ingest::fleet::publish_updates(
        n.url.clone(),
        n.creds.clone(),
        n.consumer.clone(),
        n.replicas,
        utx.subscribe(),
    );
    tracing::info!(url = %n.url, shards = ?n.filters(), "NATS ingest on");
    ingest::nats::spawn(n, state.clone(), wtx.clone());
    Ok(())
}

/// The cluster label (`--cluster` or the file's), checked; empty when unset
/// (`serve` and `replay`).
pub fn cluster(name: Option<&String>) -> Result<String> {
    match name {
        Some(c) if !vocab::nats::valid_cluster(c) => {
            anyhow::bail!("--cluster {c:?}: 1 to 64 letters, digits, '-' or '_'")
        }
        Some(c) => Ok(c.clone()),
        None => Ok(String::new()),
    }
}

/// The fabric topology of `--topology`, none without it (`serve` and
/// `replay`).
pub fn topology(path: Option<&Path>) -> Result<correlator::engine::ib::Topology> {
    let Some(p) = path else {
        return Ok(Default::default());
    };
    let text = proto::bounded_read::read_to_string(p, MAX_TOPOLOGY_BYTES)
        .with_context(|| format!("reading the topology {}", p.display()))?;
    let map = correlator::engine::ib::parse_topology(&text)
        .map_err(|e| anyhow::anyhow!("topology {}: {e}", p.display()))?;
    let (links, switches, uplinks, skipped) = map.counts();
    tracing::info!(links, switches, uplinks, "fabric topology loaded");
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "topology: CAs without a `<host> <hca>` node description left out (rdma-ndd's default \"%h %d\" names them)"
        );
    }
    Ok(map)
}

/// The gRPC listener and its settings.
struct Grpc<'a> {
    listen: SocketAddr,
    tls: Option<tonic::transport::ServerTlsConfig>,
    auth: correlator::auth::Auth,
    limits: &'a LimitsConfig,
    max_windows_per_sec: u32,
}

impl Grpc<'_> {
    /// Serves ingest and `Candidates` until Ctrl-C or SIGTERM.
    async fn serve(self, state: ingest::IngestState, c: Channels) -> Result<()> {
        let listen = self.listen;
        if !listen.ip().is_loopback() {
            tracing::warn!(%listen, "listening on a non-loopback address: reachable from the network");
        }
        tracing::info!(%listen, tls = self.tls.is_some(), "serving");
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = self.tls {
            server = server.tls_config(tls).context("TLS setup")?;
        }
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let grpc = correlator::conn::grpc(self.limits);
        server
            .max_concurrent_streams(Some(self.limits.max_streams_per_connection))
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
            .layer(self.auth.layer())
            // Inside the authentication: only authenticated streams keep
            // a connection from being closed as idle.
            .layer(correlator::conn::ActivityLayer(grpc.clone()))
            .add_service(
                IngestServer::new(ingest::IngestService {
                    state,
                    engine: Some(c.windows),
                    max_windows_per_sec: self.max_windows_per_sec,
                })
                .max_decoding_message_size(ingest::MAX_WINDOW_BYTES),
            )
            .add_service(proto::v1::candidates_server::CandidatesServer::new(
                correlator::subscribe::CandidatesService {
                    updates: c.updates,
                    open: c.open,
                },
            ))
            .serve_with_incoming_shutdown(correlator::conn::incoming(listener, grpc), shutdown())
            .await
            .with_context(|| format!("serving on {listen}"))
    }
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
