//! The web UI and its JSON API (docs/web.md), plus `/metrics` and
//! `/healthz`, on one HTTP/1 listener built on the axum/hyper that tonic
//! already brings. Pages are static HTML/JS/CSS embedded in the binary
//! (no CDN, no build step); they render from the API and update live from
//! `/api/stream` (server-sent events).
pub mod ack;
pub mod api;
pub mod events;
pub mod guard;
pub mod standby;
#[cfg(test)]
mod tests;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use proto::v1::CandidateUpdate;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use proto::{
    config_key::Key,
    listen::{HttpLimitsConfig, Listener},
};

use crate::{history, ingest::IngestState};

/// `--web ADDR`: the UI's address; unset, off.
pub const LISTEN: Key<&str> = Key {
    flag: Some("web"),
    ..Key::new(
        "web.listen",
        "",
        "Web UI, JSON API, /metrics and /healthz address",
    )
};
/// `--web-config-file FILE` (alias node_exporter's `--web.config.file`).
pub const WEB_CONFIG_FILE: Key<&str> = Key {
    flag: Some("web-config-file"),
    ..Key::new(
        "web.web_config_file",
        "",
        "Web config file in Prometheus exporter-toolkit's format",
    )
};
/// Open event streams in total.
pub const MAX_EVENT_STREAMS: Key<usize> = Key {
    min: Some(1),
    max: Some(proto::listen::MAX_CONNECTIONS),
    ..Key::new("web.max_event_streams", 32, "Open event streams in total")
};
/// Open event streams per client address.
pub const MAX_EVENT_STREAMS_PER_PEER: Key<usize> = Key {
    min: Some(1),
    max: Some(proto::listen::MAX_CONNECTIONS),
    ..Key::new(
        "web.max_event_streams_per_peer",
        4,
        "Open event streams per client address",
    )
};
/// A count out of its bounds (static: `ConfigError::Setting` holds a
/// `&'static str`; `tests::web_counts_are_refused_in_their_declared_bounds`
/// checks it).
const COUNT_WHY: &str = "must be within 1..=1048576";

/// `[web]` settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Address of the UI, API, `/metrics` and `/healthz` (off when unset;
    /// `--web ADDR` sets it too). A non-loopback address is logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// `[web.limits]`: connections and timeouts of the UI's listener and of
    /// `--metrics-addr` (docs/config.md).
    pub limits: HttpLimitsConfig,
    /// File holding the operator token that acknowledging an incident
    /// requires (`Authorization: Bearer <token>`; docs/alerting.md). Unset:
    /// acknowledging is off (the API answers 403).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_token_file: Option<std::path::PathBuf>,
    /// File holding the viewer token that clients beyond loopback need for
    /// the pages and `/api/*` (`Authorization: Bearer`, or HTTP Basic with
    /// the token as the password). Unset: only loopback clients may read
    /// them; `/healthz` and `/metrics` are open either way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
    /// Names the server answers to besides its own address, loopback and
    /// `localhost` (a `Host` header naming anything else gets 403: DNS
    /// rebinding), e.g. a Service's DNS names.
    pub allowed_hosts: Vec<String>,
    /// Web config file in Prometheus exporter-toolkit's format (TLS, client
    /// certificates, basic auth, headers) for this listener and
    /// `--metrics-addr` (docs/web.md, "Web config file"); unset: plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<std::path::PathBuf>,
    /// Open event streams (`/api/stream`) in total; a new one displaces the
    /// oldest.
    pub max_event_streams: usize,
    /// Open event streams per client address (same rule).
    pub max_event_streams_per_peer: usize,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen: None,
            limits: HttpLimitsConfig::default(),
            operator_token_file: None,
            token_file: None,
            allowed_hosts: Vec::new(),
            web_config_file: None,
            max_event_streams: MAX_EVENT_STREAMS.default,
            max_event_streams_per_peer: MAX_EVENT_STREAMS_PER_PEER.default,
        }
    }
}

/// Why the operator token cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("[web] {key} {path}: {why}")]
pub struct TokenFileError {
    key: &'static str,
    path: std::path::PathBuf,
    why: String,
}

impl WebConfig {
    /// The operator token, read from `operator_token_file` (at most 4 KiB;
    /// `None` when unset). An empty or unreadable file is an error.
    pub fn operator_token(&self) -> Result<Option<String>, TokenFileError> {
        read_token("operator_token_file", self.operator_token_file.as_deref())
    }

    /// The viewer token, read from `token_file` (same rules).
    pub fn viewer_token(&self) -> Result<Option<String>, TokenFileError> {
        read_token("token_file", self.token_file.as_deref())
    }

    /// The web config file, read and checked (`None` when unset).
    pub fn web_config(&self) -> Result<Option<webconfig::Web>, webconfig::WebConfigError> {
        self.web_config_file
            .as_deref()
            .map(webconfig::Web::load)
            .transpose()
    }
}

/// A token file: one line, at least 16 characters, at most 4 KiB.
fn read_token(
    key: &'static str,
    path: Option<&std::path::Path>,
) -> Result<Option<String>, TokenFileError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let err = |why: String| TokenFileError {
        key,
        path: path.to_path_buf(),
        why,
    };
    let bytes = proto::bounded_read::read(path, 4096).map_err(|e| err(e.to_string()))?;
    let token = String::from_utf8(bytes)
        .map_err(|_| err("not UTF-8 text".into()))?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(err("empty: put the token on one line".into()));
    }
    if token.len() < 16 {
        return Err(err(
            "shorter than 16 characters: use a long random token (e.g. `openssl rand -hex 32`)"
                .into(),
        ));
    }
    Ok(Some(token))
}

impl WebConfig {
    /// The first setting out of range, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        for (key, v) in [
            (MAX_EVENT_STREAMS, self.max_event_streams),
            (MAX_EVENT_STREAMS_PER_PEER, self.max_event_streams_per_peer),
        ] {
            if !key.contains(v) {
                return Some((key.path, COUNT_WHY));
            }
        }
        if self.allowed_hosts.len() > 256 || self.allowed_hosts.iter().any(|h| !host_name(h)) {
            return Some((
                "web.allowed_hosts",
                "must be at most 256 DNS names (letters, digits, '-', '.'; no port, no scheme)",
            ));
        }
        let (key, why) = self.limits.invalid()?;
        let key = match key {
            "max_connections" => "web.limits.max_connections",
            "max_connections_per_peer" => "web.limits.max_connections_per_peer",
            "handshake_timeout_s" => "web.limits.handshake_timeout_s",
            "header_timeout_s" => "web.limits.header_timeout_s",
            "body_timeout_s" => "web.limits.body_timeout_s",
            _ => "web.limits.idle_timeout_s",
        };
        Some((key, why))
    }
}

/// Whether `h` is a DNS name (an `allowed_hosts` entry).
fn host_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// What the handlers read.
#[derive(Clone)]
pub struct AppState {
    /// A reader connection to the history (queries run on blocking threads).
    pub history: Option<Arc<Mutex<history::Store>>>,
    /// Live updates from the engine.
    pub updates: broadcast::Sender<CandidateUpdate>,
    /// The engine's open incidents.
    pub open: Arc<Mutex<Vec<CandidateUpdate>>>,
    pub ingest: Option<IngestState>,
    /// Operator acknowledgements (`None`: acknowledging is off).
    pub acks: Option<Arc<crate::ack::Acks>>,
}

const SHELL: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The router: pages, assets, API, metrics, health, with the default
/// `[web]` settings and no viewer token.
pub fn router(state: AppState) -> Router {
    router_with(state, &WebConfig::default(), None)
}

/// The router within `cfg`'s guard (Host names, `viewer` token: [`guard`])
/// and event stream caps ([`events`]).
pub fn router_with(state: AppState, cfg: &WebConfig, viewer: Option<String>) -> Router {
    router_behind(state, cfg, viewer, None)
}

/// [`router_with`] behind `web`'s basic auth and headers: a request that
/// passes `basic_auth_users` counts as a viewer; a bearer token the guard
/// accepts (viewer or operator) passes without basic auth (docs/web.md).
fn router_behind(
    state: AppState,
    cfg: &WebConfig,
    viewer: Option<String>,
    web: Option<&webconfig::Web>,
) -> Router {
    let g = guard::Guard::new(&cfg.allowed_hosts, viewer, state.acks.clone());
    let streams = events::EventStreams::new(cfg.max_event_streams, cfg.max_event_streams_per_peer);
    let page = || get(|| async { asset("text/html; charset=utf-8", SHELL) });
    let app = Router::new()
        .route("/", page())
        .route("/incident", page())
        .route("/entity", page())
        .route("/fleet", page())
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .merge(api::routes())
        .merge(ack::routes())
        .layer(axum::Extension(streams))
        .with_state(state);
    guarded(app, g, web)
}

/// `app` within the web UI listener's guard `g` (Host names, tokens), behind
/// `web`'s basic auth and headers (`/healthz` open to probes).
fn guarded(app: Router, g: guard::Guard, web: Option<&webconfig::Web>) -> Router {
    let tokens = g.clone();
    let wrap = webconfig::Wrap {
        listener: "web",
        open: &["/healthz"],
        bearer: Some(Arc::new(move |auth: &str| tokens.token_ok(Some(auth)))),
    };
    let app = app.layer(axum::middleware::from_fn_with_state(g, guard::check));
    webconfig::wrap(app, web, wrap)
}

/// `app` behind `web`'s basic auth and headers as the metrics listener
/// (`serve --metrics-addr`; `/healthz` open to probes).
fn metrics_guarded(app: Router, web: Option<&webconfig::Web>) -> Router {
    let wrap = webconfig::Wrap {
        listener: "metrics",
        open: &["/healthz"],
        bearer: None,
    };
    webconfig::wrap(app, web, wrap)
}

/// A process's state with nothing but its metrics (the metrics listener, a
/// standby's listeners).
fn metrics_state(ingest: Option<IngestState>) -> AppState {
    let (updates, _) = broadcast::channel(1);
    AppState {
        history: None,
        updates,
        open: Arc::default(),
        ingest,
        acks: None,
    }
}

async fn metrics(axum::extract::State(s): axum::extract::State<AppState>) -> Response {
    let Some(h) = crate::telemetry::handle() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed in this process\n",
        )
            .into_response();
    };
    if let Some(i) = &s.ingest {
        let (_, duplicates, missing) = i.counters();
        crate::telemetry::ingest_counters(duplicates, missing);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        h.render(),
    )
        .into_response()
}

/// Binds `addr` (an error names it) and serves until `shutdown` completes,
/// with the default `[web.limits]`.
pub async fn serve(
    addr: SocketAddr,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    serve_limited(addr, state, &WebConfig::default(), shutdown).await
}

/// [`serve`] within `cfg` (`[web]`: its limits, guard and event stream caps;
/// its viewer token file is read here).
pub async fn serve_limited(
    addr: SocketAddr,
    state: AppState,
    cfg: &WebConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let viewer = cfg.viewer_token()?;
    let web = cfg.web_config()?;
    let basic = web.as_ref().is_some_and(webconfig::Web::basic_auth);
    if !addr.ip().is_loopback() && viewer.is_none() && !basic {
        tracing::warn!(%addr, "web UI beyond loopback without [web] token_file: its pages and /api answer 401 to non-loopback clients (only /healthz and /metrics are open)");
    }
    let app = router_behind(state, cfg, viewer, web.as_ref());
    let served = serve_router(addr, app, ("web UI", "web"), cfg, web.as_ref(), shutdown).await?;
    let scheme = web.as_ref().map_or("http", webconfig::Web::scheme);
    tracing::info!(%addr, basic_auth = basic, "web UI on {scheme}://{addr}/");
    Ok(served)
}

/// Only `/metrics` and `/healthz` (`serve --metrics-addr`), within `cfg`'s
/// limits, behind its web config file (`/healthz` open to probes).
pub async fn serve_metrics(
    addr: SocketAddr,
    ingest: IngestState,
    cfg: &WebConfig,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let web = cfg.web_config()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(metrics_state(Some(ingest)));
    let app = metrics_guarded(app, web.as_ref());
    let served = serve_router(
        addr,
        app,
        ("metrics", "metrics"),
        cfg,
        web.as_ref(),
        std::future::pending(),
    )
    .await?;
    let scheme = web.as_ref().map_or("http", webconfig::Web::scheme);
    tracing::info!(%addr, "metrics on {scheme}://{addr}/metrics");
    Ok(served)
}

/// Serves `app` on `addr` within `cfg.limits` (connection caps, handshake,
/// header and idle timeouts: [`proto::listen`]), over TLS when `web` has
/// it; `what` names it in errors and logs, and labels its connection metrics.
async fn serve_router(
    addr: SocketAddr,
    app: Router,
    (what, label): (&str, &'static str),
    cfg: &WebConfig,
    web: Option<&webconfig::Web>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use anyhow::Context as _;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} on {addr}: is another process using it?"))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "{what} on a non-loopback address: reachable from the network");
    }
    let limits = &cfg.limits;
    let (listen, timeouts) = (Listener::new(label, limits.limits(), 1), limits.http());
    let web = web.cloned();
    Ok(tokio::spawn(async move {
        webconfig::serve(listener, listen, timeouts, web.as_ref(), app, shutdown).await;
    }))
}

/// UI options of `faultline-correlator sim` (the README's demo).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct UiArgs {
    /// Serve the web UI on this address while the simulation runs.
    #[arg(long, value_name = "ADDR")]
    pub web: Option<SocketAddr>,
    /// History database for the simulation (default with --web: a
    /// temporary file, removed at exit).
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// After the simulated run, keep serving the UI until Ctrl-C.
    #[arg(long)]
    pub keep_serving: bool,
}

/// History and UI attached to an in-process correlator (the simulator).
pub struct Attached {
    pub opened: history::Opened,
    pub addr: SocketAddr,
    temp: Option<std::path::PathBuf>,
    keep_serving: bool,
    /// Ctrl-C during the run: closes and removes a temporary history, exits.
    on_interrupt: Option<tokio::task::JoinHandle<()>>,
}

/// Removes a temporary history database and its -wal, -shm and journal.
fn remove_history(db: &std::path::Path) {
    for suffix in ["", "-wal", "-shm", "-incidents"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

impl Attached {
    /// The engine hooks that feed the history.
    pub fn hooks(&self) -> crate::subscribe::Hooks {
        crate::subscribe::Hooks {
            history: Some(self.opened.recorder.clone()),
            fleet: None,
        }
    }

    /// At the end of the run: flushes the history, then (with
    /// `--keep-serving`) serves until Ctrl-C; closes the history and removes
    /// a temporary database (with its -wal, -shm and incident journal).
    pub async fn finish(self) {
        if let Some(h) = &self.on_interrupt {
            h.abort();
        }
        self.opened.recorder.flush().await;
        if self.keep_serving {
            println!(
                "simulation done; the web UI keeps serving at http://{}/ — press Ctrl-C to stop",
                self.addr
            );
            let _ = tokio::signal::ctrl_c().await;
        }
        // Closed first: removing the file under the running writer read as
        // "history database deleted while the correlator runs" (an ERROR on
        // every Ctrl-C of scripts/run.sh) and left the journal behind.
        self.opened.recorder.close().await;
        if let Some(t) = &self.temp {
            remove_history(t);
        }
    }
}

/// With `--web`: opens the history (restoring into `engine`) and starts
/// the UI; prints its address.
pub async fn attach(
    args: &UiArgs,
    engine: &mut crate::engine::Engine,
    updates: &broadcast::Sender<CandidateUpdate>,
    open: &Arc<Mutex<Vec<CandidateUpdate>>>,
    ingest: &IngestState,
) -> anyhow::Result<Option<Attached>> {
    let Some(addr) = args.web else {
        return Ok(None);
    };
    let temp = args.history.is_none().then(|| {
        std::env::temp_dir().join(format!("faultline-sim-history-{}.db", std::process::id()))
    });
    let path = args
        .history
        .clone()
        .or_else(|| temp.clone())
        .unwrap_or_default();
    let cfg = history::HistoryConfig::default();
    let opened = history::open(&path, &cfg, engine)?;
    let _ = crate::telemetry::handle();
    let state = AppState {
        history: Some(opened.reader.clone()),
        updates: updates.clone(),
        open: open.clone(),
        ingest: Some(ingest.clone()),
        acks: None,
    };
    serve(addr, state, std::future::pending()).await?;
    println!("web UI: http://{addr}/");
    // Ctrl-C before the run ends: the temporary history goes too (the
    // default SIGINT left the database and its 8 MiB journal in /tmp).
    let on_interrupt = temp.clone().map(|db| {
        let recorder = opened.recorder.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                recorder.close().await;
                remove_history(&db);
                std::process::exit(130);
            }
        })
    });
    Ok(Some(Attached {
        opened,
        addr,
        temp,
        keep_serving: args.keep_serving,
        on_interrupt,
    }))
}
