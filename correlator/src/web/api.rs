//! The JSON API behind every page (docs/web.md). Queries run on blocking
//! threads against the history's reader connection.
use std::{net::IpAddr, sync::Arc};

use axum::{
    extract::{Extension, Path, Query, State},
    http::StatusCode,
    response::{
        sse::{Event, KeepAlive, Sse},
        IntoResponse, Response,
    },
    routing::get,
    Json, Router,
};
use serde::{Deserialize, Serialize};
use tokio_stream::{wrappers::BroadcastStream, StreamExt as _};

use super::{
    events::{Displaceable, EventStreams},
    AppState,
};
use crate::history::{samples::band_of, IncidentFilter, SeriesPoint, Store};

/// Points per drawn series at most.
const POINTS: usize = 600;
/// Time drawn before an incident opened and after it resolved.
const MARGIN_MS: i64 = 5 * 60_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/incidents", get(incidents))
        .route("/api/incidents/{id}", get(incident))
        .route("/api/open", get(open))
        .route("/api/entity", get(entity))
        .route("/api/offenders", get(offenders))
        .route("/api/stream", get(stream))
}

/// An API error: status and a message for the operator.
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// Runs `f` on the history reader in a blocking thread.
pub(super) async fn with_store<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce(&Store) -> Result<T, crate::history::HistoryError> + Send + 'static,
) -> Result<T, ApiError> {
    let Some(h) = s.history.clone() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "history is off: set `[history] path` (or `--history FILE`)".into(),
        ));
    };
    tokio::task::spawn_blocking(move || {
        let g = h.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&g)
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn incidents(
    State(s): State<AppState>,
    Query(f): Query<IncidentFilter>,
) -> Result<Response, ApiError> {
    let rows = with_store(&s, move |st| st.incidents(&f)).await?;
    Ok(Json(serde_json::json!({ "incidents": rows })).into_response())
}

async fn open(State(s): State<AppState>) -> Response {
    let open = s.open.lock().map(|o| o.clone()).unwrap_or_default();
    Json(serde_json::json!({ "incidents": open })).into_response()
}

/// One drawn series: an entity's signal, and the band it is judged against.
#[derive(Debug, Serialize)]
pub struct Panel {
    pub entity: String,
    pub signal: String,
    /// Resolution of the points (ms; 0 = raw windows).
    pub res: i64,
    pub points: Vec<SeriesPoint>,
    /// The fleet band (`median`, `p10`, `p90`) for a banded signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<Band>,
}

#[derive(Debug, Serialize)]
pub struct Band {
    pub entity: String,
    pub median: Vec<SeriesPoint>,
    pub p10: Vec<SeriesPoint>,
    pub p90: Vec<SeriesPoint>,
}

/// Panels of every signal of `entity` over `[from, to)`.
fn panels(
    st: &Store,
    entity: &str,
    from: i64,
    to: i64,
) -> Result<Vec<Panel>, crate::history::HistoryError> {
    let signals = st.signals(entity)?;
    let banded = band_of(&signals);
    let mut out = Vec::new();
    for sig in signals {
        let (res, points) = st.series(entity, &sig, from, to, POINTS)?;
        let band = match banded {
            Some((b, bs)) if bs == sig => {
                let q = |n: &str| {
                    st.series(b, &format!("{sig}.{n}"), from, to, POINTS)
                        .map(|r| r.1)
                };
                Some(Band {
                    entity: b.to_string(),
                    median: q("median")?,
                    p10: q("p10")?,
                    p90: q("p90")?,
                })
            }
            _ => None,
        };
        out.push(Panel {
            entity: entity.to_string(),
            signal: sig,
            res,
            points,
            band,
        });
    }
    Ok(out)
}

async fn incident(State(s): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let found = with_store(&s, move |st| {
        let Some((row, updates)) = st.incident(&id)? else {
            return Ok(None);
        };
        // Five minutes either side, within what was recorded.
        let span = st.span(&row.entity)?;
        let from = (row.opened_ms - MARGIN_MS).max(span.map_or(i64::MIN, |s| s.0));
        let last = span.map_or(row.updated_ms, |s| s.1).max(row.updated_ms) + 1;
        let to = match row.resolved_ms {
            Some(r) => (r + MARGIN_MS).min(last.max(r + 1)),
            None => last,
        };
        let mut all = panels(st, &row.entity, from, to)?;
        for j in &row.jobs {
            all.extend(panels(st, j, from, to)?);
        }
        let acks = st.acks_of(&row.id)?;
        Ok(Some(serde_json::json!({
            "incident": row, "updates": updates, "from": from, "to": to, "panels": all,
            "acks": acks,
        })))
    })
    .await?;
    match found {
        Some(mut v) => {
            // The acknowledgement in force now (`null` when none).
            let now = vocab::time::now_unix_ms();
            let id = v["incident"]["id"].as_str().unwrap_or_default().to_string();
            v["ack"] = serde_json::json!(s.acks.as_deref().and_then(|a| a.get(&id, now)));
            Ok(Json(v).into_response())
        }
        None => Err(ApiError(StatusCode::NOT_FOUND, "no such incident".into())),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EntityQuery {
    name: String,
    /// Unix ms; default: one hour before the entity's latest sample.
    from: i64,
    to: i64,
}

async fn entity(
    State(s): State<AppState>,
    Query(q): Query<EntityQuery>,
) -> Result<Response, ApiError> {
    if q.name.is_empty() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "give ?name=ENTITY".into(),
        ));
    }
    let v = with_store(&s, move |st| {
        let latest = st.latest_ts(&q.name)?.unwrap_or(0);
        let to = if q.to > 0 { q.to } else { latest + 1 };
        let from = if q.from > 0 { q.from } else { to - 3_600_000 };
        // A host's page also lists its entities' incidents.
        let mut incidents = st.incidents(&IncidentFilter {
            entity: q.name.clone(),
            limit: 1000,
            ..IncidentFilter::default()
        })?;
        if !q.name.contains('/') {
            incidents.extend(
                st.incidents(&IncidentFilter {
                    host: q.name.clone(),
                    limit: 1000,
                    ..IncidentFilter::default()
                })?
                .into_iter()
                .filter(|i| i.entity != q.name),
            );
            incidents.sort_by_key(|i| std::cmp::Reverse(i.opened_ms));
        }
        let mut jobs = st.incidents(&IncidentFilter {
            job: q.name.clone(),
            limit: 1000,
            ..IncidentFilter::default()
        })?;
        jobs.retain(|j| j.entity != q.name);
        Ok(serde_json::json!({
            "entity": q.name, "from": from, "to": to,
            "panels": panels(st, &q.name, from, to)?,
            "incidents": incidents, "affected_by": jobs,
            "entities": st.entities_under(&q.name, 500)?,
        }))
    })
    .await?;
    Ok(Json(v).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(default)]
struct OffenderQuery {
    /// Unix ms; default: 30 days before now.
    since_ms: i64,
    min: u64,
    limit: usize,
}

impl Default for OffenderQuery {
    fn default() -> Self {
        Self {
            since_ms: 0,
            min: 2,
            limit: 100,
        }
    }
}

/// Unix ms now: `vocab::time`'s, at the path the simulator's tests use.
pub use vocab::time::now_unix_ms as now_ms;

async fn offenders(
    State(s): State<AppState>,
    Query(q): Query<OffenderQuery>,
) -> Result<Response, ApiError> {
    let since = if q.since_ms > 0 {
        q.since_ms
    } else {
        vocab::time::now_unix_ms() - 30 * 86_400_000
    };
    let rows = with_store(&s, move |st| {
        st.offenders(since, q.min, q.limit.clamp(1, 1000))
    })
    .await?;
    Ok(Json(serde_json::json!({ "since_ms": since, "offenders": rows })).into_response())
}

/// Incident updates as server-sent events (`event: incident`, JSON data),
/// within the caps of [`super::events`].
async fn stream(
    State(s): State<AppState>,
    streams: Option<Extension<Arc<EventStreams>>>,
    addrs: Option<Extension<proto::listen::Addrs>>,
) -> Response {
    let streams = match streams {
        Some(Extension(s)) => s,
        None => EventStreams::new(1, 1),
    };
    let ip = addrs.map_or(IpAddr::from([0, 0, 0, 0]), |Extension(a)| a.peer.ip());
    let ticket = streams.join(ip);
    let rx = s.updates.subscribe();
    let st = BroadcastStream::new(rx).filter_map(|r| match r {
        Ok(u) => Event::default()
            .event("incident")
            .json_data(&u)
            .ok()
            .map(Ok),
        // A slow page missed updates: it reloads the list.
        Err(_) => Some(Ok(Event::default().event("lagged").data("reload"))),
    });
    let mut r = Sse::new(Displaceable::new(st, ticket))
        .keep_alive(KeepAlive::default())
        .into_response();
    // Never activity that keeps other clients out (proto::listen::Yields);
    // its connection closes with it (a displaced stream frees its slot).
    r.extensions_mut().insert(proto::listen::Yields);
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}
