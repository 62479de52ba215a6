//! `faultline-correlator`: ingests collector windows and streams root-cause candidates.
use std::{net::SocketAddr, process::ExitCode};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use proto::v1::ingest_server::IngestServer;

use correlator::ingest;

/// faultline's correlator.
#[derive(Debug, Parser)]
#[command(name = "faultline-correlator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the ingest API.
    Serve {
        /// Address to listen on. Binding a non-loopback address exposes the
        /// service to the network; the log says so.
        #[arg(long, default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
        /// Append every accepted window to this JSON-lines ingest log; on
        /// start the log restores each collector's last sequence number.
        #[arg(long, value_name = "FILE")]
        record: Option<std::path::PathBuf>,
        /// Per-stream limit in windows per second (0 = unlimited); a stream
        /// over it is ended with RESOURCE_EXHAUSTED and the collector resumes.
        #[arg(long, default_value_t = 1000)]
        max_windows_per_sec: u32,
        /// Fabric topology: lines `LINK ENDPOINT [ENDPOINT]` with endpoints
        /// `<host>/<hca>/<port>`; both ends of a link become one entity.
        #[arg(long, value_name = "FILE")]
        topology: Option<std::path::PathBuf>,
        /// Config file (TOML): detection thresholds under `[detect.ib]`,
        /// `[detect.storage]`, `[detect.incidents]` (docs/detection.md),
        /// `[history]`, `[web]` and `[alertmanager]` (docs/config.md).
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        #[command(flatten)]
        security: Box<correlator::auth::ServeSecurity>,
        /// Serve Prometheus metrics (refusals, drops, forgotten state;
        /// docs/metrics.md) on this address; unset = none.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<SocketAddr>,
        /// History database (overrides `[history] path`): incidents and
        /// series survive restarts; open incidents come back open.
        #[arg(long, value_name = "FILE")]
        history: Option<std::path::PathBuf>,
        /// Web UI, JSON API, `/metrics` and `/healthz` on this address
        /// (overrides `[web] listen`).
        #[arg(long, value_name = "ADDR")]
        web: Option<SocketAddr>,
        /// Alertmanager base URL, e.g. http://127.0.0.1:9093 (overrides
        /// `[alertmanager] url`).
        #[arg(long, value_name = "URL")]
        alertmanager: Option<String>,
    },
    /// Incidents from the history database, newest first.
    Incidents {
        #[command(flatten)]
        db: HistoryArgs,
        /// Only open incidents.
        #[arg(long)]
        open: bool,
        /// Only incidents opened within this age (e.g. 7d, 12h, 30m).
        #[arg(long, value_name = "AGE")]
        since: Option<String>,
        /// Only incidents of this entity (e.g. n017/mlx5_2/1).
        #[arg(long)]
        entity: Option<String>,
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Only incidents affecting this job.
        #[arg(long)]
        job: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 200)]
        limit: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Recurring offenders: entities with repeated incidents (replacement candidates).
    Offenders {
        #[command(flatten)]
        db: HistoryArgs,
        /// Over this period.
        #[arg(long, value_name = "AGE", default_value = "30d")]
        since: String,
        /// At least this many incidents.
        #[arg(long, default_value_t = 2)]
        min: u64,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Usage per job or team for chargeback, from the history database
    /// (hourly sums of the collectors' usage rows); unattributed usage is its
    /// own line and `TOTAL` the sum of all lines.
    Usage {
        #[command(flatten)]
        db: HistoryArgs,
        /// Over this period (e.g. 30d, 12h), from the start of its first hour.
        #[arg(long, value_name = "AGE", default_value = "30d")]
        since: String,
        /// One line per job or per team.
        #[arg(long, value_enum, default_value = "team")]
        by: correlator::history::usage::By,
        /// CSV with a header line.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Write a test PKI for mTLS (CA, server and per-host client certificates).
    Certs(correlator::certs::CertsArgs),
    /// Kubernetes init step of the correlator (deploy/kubernetes): its TLS
    /// server certificate in DIR (made once: a CA and a certificate for
    /// --server-name), and that CA published as `ca.crt` of a ConfigMap the
    /// collectors mount to verify the correlator.
    KubeTls {
        /// Directory of `server.pem`, `server.key` and `ca.pem` (on the
        /// correlator's volume, so they survive restarts).
        #[arg(long, value_name = "DIR")]
        dir: std::path::PathBuf,
        /// DNS names (or IPs) of the server certificate, repeatable.
        #[arg(long = "server-name", required = true)]
        server_names: Vec<String>,
        /// The ConfigMap that receives `ca.crt`.
        #[arg(long, value_name = "NAME", default_value = "faultline-correlator-ca")]
        configmap: String,
        /// Its namespace (default: this pod's).
        #[arg(long, value_name = "NAMESPACE")]
        namespace: Option<String>,
        #[command(flatten)]
        api: correlator::kube::ApiArgs,
    },
    /// Check a config file and print the effective settings (defaults filled
    /// in) as TOML: exit 0 when valid, 2 with one line naming the problem.
    /// The file as `FILE` or `--config FILE`, as `faultline-collector
    /// check-config` takes it.
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        /// The config file (the same as `FILE`).
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
    },
    /// Subscribe to a running correlator and print candidate updates live.
    Subscribe {
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
    },
    /// Replay windows (JSON lines, docs/replay.md) through the detectors and
    /// print candidate updates as JSON lines.
    Replay {
        file: std::path::PathBuf,
        /// Count and skip invalid lines instead of stopping at the first.
        #[arg(long)]
        skip_invalid: bool,
        /// Config file with detection thresholds, as for `serve`.
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
    },
}

/// Where the history database is, for the CLI's history commands.
#[derive(Debug, clap::Args)]
struct HistoryArgs {
    /// History database file.
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,
    /// Or the correlator's config file (its `[history] path`).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

impl HistoryArgs {
    fn open(&self) -> Result<correlator::history::Store> {
        let file = match &self.config {
            Some(p) => correlator::engine::config::load_file(p)?,
            None => correlator::engine::config::FileConfig::default(),
        };
        let path = self.history.clone().or(file.history.path.clone()).context(
            "no history database: give --history FILE or --config FILE with `[history] path`",
        )?;
        Ok(correlator::history::Store::open_reader(
            &path,
            &file.history,
        )?)
    }
}

/// Largest `--topology` file read (~1M links of three endpoints).
const MAX_TOPOLOGY_BYTES: u64 = 64 << 20;

/// Detection settings from `--config`, defaults without one.
fn detect_config(path: Option<&std::path::Path>) -> Result<correlator::engine::DetectConfig> {
    match path {
        Some(p) => Ok(correlator::engine::config::load(p)?),
        None => Ok(correlator::engine::DetectConfig::default()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    correlator::logging::init("info");
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultline-correlator: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `replay … | head`: the reader left; stop quietly, as Unix tools do.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) || e
                .downcast_ref::<correlator::replay::ReplayError>()
                .is_some_and(|r| {
                    matches!(r, correlator::replay::ReplayError::Io { error, .. }
                        if error.kind() == std::io::ErrorKind::BrokenPipe)
                });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("faultline-correlator: error: {e:#}");
            if e.downcast_ref::<correlator::replay::ReplayError>()
                .is_some_and(|r| matches!(r, correlator::replay::ReplayError::Invalid { .. }))
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve {
            listen,
            record,
            max_windows_per_sec,
            topology,
            config,
            history,
            web,
            alertmanager,
            security,
            metrics_addr,
        } => {
            let (tls, auth) = security.build()?;
            let file = match &config {
                Some(p) => correlator::engine::config::load_file(p)?,
                None => correlator::engine::config::FileConfig::default(),
            };
            let cfg = file.detect.clone();
            let mut history_cfg = file.history.clone();
            if history.is_some() {
                history_cfg.path = history;
            }
            let web = web.or(file.web.listen);
            let mut am = file.alertmanager.clone();
            if let Some(u) = alertmanager {
                am.url = u;
            }
            if let Some((key, why)) = am.invalid() {
                anyhow::bail!("{key}: {why}");
            }
            let map = match &topology {
                Some(p) => {
                    let text = proto::bounded_read::read_to_string(p, MAX_TOPOLOGY_BYTES)
                        .with_context(|| format!("reading the topology {}", p.display()))?;
                    let map = correlator::engine::ib::parse_topology(&text)
                        .map_err(|e| anyhow::anyhow!("topology {}: {e}", p.display()))?;
                    tracing::info!(links = map.len(), "fabric topology loaded");
                    map
                }
                None => std::collections::HashMap::new(),
            };
            let mut engine = correlator::engine::Engine::new(&cfg, map);
            if cfg.limits.max_future_s > 0.0 {
                // Windows on real clocks: liveness is judged on arrival time
                // too, so one host's clock cannot move everyone's deadlines.
                engine
                    .node
                    .set_arrival_clock(correlator::engine::node::wall_ms);
            }
            let opened = match &history_cfg.path {
                Some(p) => {
                    let o = correlator::history::open(p, &history_cfg, &mut engine)?;
                    tracing::info!(path = %p.display(), restored_open_incidents = o.restored, "history opened");
                    Some(o)
                }
                None => None,
            };
            let state = match &record {
                Some(p) => ingest::IngestState::with_log(p, cfg.limits.ingest())?,
                None => ingest::IngestState::new(cfg.limits.ingest()),
            };
            let (wtx, wrx) = tokio::sync::mpsc::channel(4096);
            let (utx, _) = tokio::sync::broadcast::channel(4096);
            let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            // Metrics are recorded from the start, whether or not served:
            // on `--metrics-addr` alone and on the web UI's `/metrics`.
            let _ = correlator::telemetry::handle();
            if let Some(addr) = metrics_addr {
                correlator::web::serve_metrics(addr, state.clone(), &file.web.limits).await?;
            }
            let _engine = correlator::subscribe::spawn_engine_with(
                engine,
                wrx,
                utx.clone(),
                open.clone(),
                correlator::subscribe::Hooks {
                    history: opened.as_ref().map(|o| o.recorder.clone()),
                },
            );
            if let Some(addr) = web {
                let app = correlator::web::AppState {
                    history: opened.as_ref().map(|o| o.reader.clone()),
                    updates: utx.clone(),
                    open: open.clone(),
                    ingest: Some(state.clone()),
                };
                correlator::web::serve_limited(addr, app, &file.web.limits, std::future::pending())
                    .await?;
                tracing::info!("web UI on http://{addr}/");
            }
            if !am.url.is_empty() {
                correlator::alerts::spawn(am, utx.subscribe(), open.clone())
                    .context("[alertmanager] TLS files")?;
            }
            if !listen.ip().is_loopback() {
                tracing::warn!(%listen, "listening on a non-loopback address: reachable from the network");
            }
            tracing::info!(%listen, tls = tls.is_some(), "serving");
            let mut server = tonic::transport::Server::builder();
            if let Some(tls) = tls {
                server = server.tls_config(tls).context("TLS setup")?;
            }
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let grpc = correlator::conn::grpc(cfg.limits.conn());
            server
                .max_concurrent_streams(Some(cfg.limits.max_streams_per_connection))
                .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
                .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
                .layer(auth.layer())
                // Inside the authentication: only authenticated streams keep
                // a connection from being closed as idle.
                .layer(correlator::conn::ActivityLayer(grpc.clone()))
                .add_service(
                    IngestServer::new(ingest::IngestService {
                        state: state.clone(),
                        engine: Some(wtx),
                        max_windows_per_sec,
                    })
                    .max_decoding_message_size(ingest::MAX_WINDOW_BYTES),
                )
                .add_service(proto::v1::candidates_server::CandidatesServer::new(
                    correlator::subscribe::CandidatesService { updates: utx, open },
                ))
                .serve_with_incoming_shutdown(correlator::conn::incoming(listener, grpc), async {
                    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
                    }
                })
                .await
                .with_context(|| format!("serving on {listen}"))?;
            let (accepted, duplicates, missing) = state.counters();
            if let Some(o) = &opened {
                o.recorder.flush().await;
            }
            let rejected = format!("{:?}", state.rejected());
            tracing::info!(accepted, duplicates, missing, rejected, "stopped");
        }
        Command::Subscribe {
            endpoint,
            kinds,
            host,
            job,
            min_confidence,
            with_open,
            json,
            auth,
        } => {
            let (ep, token) = auth
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
                    kinds,
                    host,
                    job,
                    min_confidence,
                    with_open,
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
                if json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
                            "kind": u.kind, "entity": u.entity, "confidence": u.confidence,
                            "evidence": u.evidence, "affected_jobs": u.affected_jobs, "runbook": u.runbook,
                        })
                    );
                } else {
                    println!(
                        "{} {} {} confidence={:.2} jobs=[{}] incident={}\n    evidence: {}\n    runbook: {}",
                        u.state.to_uppercase(), u.kind, u.entity, u.confidence,
                        u.affected_jobs.join(","), u.incident_id, u.evidence.join("; "), u.runbook
                    );
                }
            }
        }
        Command::Certs(args) => {
            for p in correlator::certs::write_pki(&args)? {
                println!("{}", p.display());
            }
        }
        Command::KubeTls {
            dir,
            server_names,
            configmap,
            namespace,
            api,
        } => {
            let made = correlator::certs::ensure_server_pki(&dir, &server_names)?;
            let ca = proto::client_tls::read_certificates(&dir.join("ca.pem"))?;
            let namespace = match namespace {
                Some(n) => n,
                None => proto::bounded_read::read_to_string(
                    std::path::Path::new(correlator::kube::NAMESPACE_FILE),
                    4096,
                )
                .with_context(|| {
                    format!(
                        "reading this pod's namespace from {} (or give --namespace)",
                        correlator::kube::NAMESPACE_FILE
                    )
                })?
                .trim()
                .to_string(),
            };
            let api = correlator::kube::Api::new(&api)?;
            correlator::kube::publish_ca(
                &api,
                &namespace,
                &configmap,
                &String::from_utf8_lossy(&ca),
            )
            .await?;
            println!(
                "{} the server certificate in {}; its CA is ca.crt of ConfigMap {namespace}/{configmap}",
                if made { "wrote" } else { "kept" },
                dir.display()
            );
        }
        Command::Incidents {
            db,
            open,
            since,
            entity,
            kind,
            job,
            limit,
            json,
        } => {
            let since_ms = match since {
                Some(a) => {
                    correlator::web::api::now_ms()
                        - correlator::history::report::parse_age(&a)
                            .map_err(|e| anyhow::anyhow!("--since {e}"))?
                }
                None => 0,
            };
            let rows = db.open()?.incidents(&correlator::history::IncidentFilter {
                state: if open { "open".into() } else { String::new() },
                since_ms,
                entity: entity.unwrap_or_default(),
                kind: kind.unwrap_or_default(),
                job: job.unwrap_or_default(),
                limit,
                ..Default::default()
            })?;
            correlator::history::report::incidents(&mut std::io::stdout().lock(), &rows, json)?;
        }
        Command::Offenders {
            db,
            since,
            min,
            json,
        } => {
            let age = correlator::history::report::parse_age(&since)
                .map_err(|e| anyhow::anyhow!("--since {e}"))?;
            let rows = db
                .open()?
                .offenders(correlator::web::api::now_ms() - age, min, 1000)?;
            correlator::history::report::offenders(&mut std::io::stdout().lock(), &rows, json)?;
        }
        Command::Usage {
            db,
            since,
            by,
            csv,
            json,
        } => {
            use correlator::history::usage::{report, Format};
            let age = correlator::history::report::parse_age(&since)
                .map_err(|e| anyhow::anyhow!("--since {e}"))?;
            let rows = db.open()?.usage(correlator::web::api::now_ms() - age, by)?;
            let f = if csv {
                Format::Csv
            } else if json {
                Format::Json
            } else {
                Format::Table
            };
            report(&mut std::io::stdout().lock(), &rows, f)?;
        }
        Command::CheckConfig { file, config } => {
            let file = match (file, config) {
                (Some(f), Some(c)) if f != c => {
                    eprintln!(
                        "faultline-correlator: check-config: two config files ({} and --config {}); give one",
                        f.display(),
                        c.display()
                    );
                    std::process::exit(2);
                }
                (Some(f), _) | (None, Some(f)) => f,
                (None, None) => {
                    eprintln!("faultline-correlator: check-config needs the config file: check-config FILE (or --config FILE)");
                    std::process::exit(2);
                }
            };
            let cfg = match correlator::engine::config::load_file(&file) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("faultline-correlator: error: {e:#}");
                    std::process::exit(2);
                }
            };
            let text = toml::to_string(&cfg).context("printing the settings")?;
            println!(
                "# {}: valid; effective settings\n{text}# config ok",
                file.display()
            );
        }
        Command::Replay {
            file,
            skip_invalid,
            config,
        } => {
            let cfg = detect_config(config.as_deref())?;
            let mut engine =
                correlator::engine::Engine::new(&cfg, std::collections::HashMap::new());
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let stats = correlator::replay::replay(&file, &mut engine, skip_invalid, &mut out)?;
            eprintln!(
                "replayed {} windows: {} updates, {} duplicates, {} invalid lines skipped",
                stats.windows, stats.updates, stats.duplicates, stats.skipped_invalid
            );
        }
    }
    Ok(())
}
