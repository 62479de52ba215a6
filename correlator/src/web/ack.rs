//! Acknowledgement endpoints (docs/web.md): set and clear with the operator
//! token, list the ones in force. Each change is recorded in the history.
use axum::{
    extract::{DefaultBodyLimit, Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use serde::Deserialize;

use super::{api::ApiError, AppState};
use crate::{
    ack::{AckError, AckRequest, Acks},
    history::AckRow,
};

/// Largest request body (a `by`, a `why` and a duration).
const MAX_BODY: usize = 4096;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/acks", get(list))
        .route("/api/incidents/{id}/ack", post(set).delete(clear))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

fn refused(e: AckError) -> ApiError {
    let reason = match &e {
        AckError::Off => "off",
        AckError::Unauthorized => "unauthorized",
        AckError::NotOpen(_) | AckError::NotAcked(_) => "not_found",
        AckError::Full => "full",
        AckError::BadBy | AckError::BadWhy | AckError::BadFor | AckError::Unprintable { .. } => {
            "invalid"
        }
    };
    metrics::counter!(crate::telemetry::ACKS_REFUSED.name, "reason" => reason).increment(1);
    let status = match e {
        AckError::Off => StatusCode::FORBIDDEN,
        AckError::Unauthorized => StatusCode::UNAUTHORIZED,
        AckError::NotOpen(_) | AckError::NotAcked(_) => StatusCode::NOT_FOUND,
        AckError::Full => StatusCode::TOO_MANY_REQUESTS,
        AckError::BadBy | AckError::BadWhy | AckError::BadFor | AckError::Unprintable { .. } => {
            StatusCode::BAD_REQUEST
        }
    };
    ApiError(status, e.to_string())
}

/// The registry, after the token check.
fn authorized<'a>(s: &'a AppState, headers: &HeaderMap) -> Result<&'a Acks, ApiError> {
    let acks = s.acks.as_deref().ok_or_else(|| refused(AckError::Off))?;
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    acks.authorize(auth).map_err(refused)?;
    Ok(acks)
}

/// A JSON body, or a 400 naming what is wrong with it.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        metrics::counter!(crate::telemetry::ACKS_REFUSED.name, "reason" => "invalid").increment(1);
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("body: {e} (give {{\"by\": …, \"why\": …, \"for_s\": seconds or 0}})"),
        )
    })
}

/// Writes `row` to the history when there is one; whether it was written.
async fn record(s: &AppState, row: AckRow) -> bool {
    if s.history.is_none() {
        return false;
    }
    match super::api::with_store(s, move |st| st.record_ack(&row)).await {
        Ok(()) => true,
        Err(e) => {
            metrics::counter!(crate::telemetry::ACKS_UNRECORDED.name).increment(1);
            tracing::warn!(error = %e.1, "acknowledgement in force but not recorded in the history");
            false
        }
    }
}

async fn set(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let acks = authorized(&s, &headers)?;
    let req: AckRequest = body(&bytes)?;
    let now = vocab::time::now_unix_ms();
    let ack = req.ack(&id, now).map_err(refused)?;
    let open = s.open.lock().map(|o| o.clone()).unwrap_or_default();
    acks.set(ack.clone(), &open).map_err(refused)?;
    tracing::info!(incident = %id, by = %ack.by, why = %ack.why, until_ms = ?ack.until_ms, "incident acknowledged");
    let recorded = record(&s, ack.set_row()).await;
    Ok(Json(serde_json::json!({ "ack": ack, "recorded": recorded })).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ClearRequest {
    by: String,
    why: String,
}

async fn clear(
    State(s): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let acks = authorized(&s, &headers)?;
    let req: ClearRequest = if bytes.is_empty() {
        ClearRequest::default()
    } else {
        body(&bytes)?
    };
    // Who clears is kept like who set, checked the same way.
    crate::ack::check_by(&req.by).map_err(refused)?;
    crate::ack::check_why(&req.why, false).map_err(refused)?;
    let now = vocab::time::now_unix_ms();
    let gone = acks.clear(&id, &req.by, now).map_err(refused)?;
    tracing::info!(incident = %id, by = %req.by, "acknowledgement cleared");
    let recorded = record(
        &s,
        AckRow {
            incident_id: id,
            ts_ms: now,
            action: "cleared".into(),
            by: req.by,
            why: req.why,
            until_ms: None,
        },
    )
    .await;
    Ok(Json(serde_json::json!({ "cleared": gone, "recorded": recorded })).into_response())
}

async fn list(State(s): State<AppState>) -> Response {
    let now = vocab::time::now_unix_ms();
    let acks = s
        .acks
        .as_deref()
        .map(|a| a.current(now))
        .unwrap_or_default();
    Json(serde_json::json!({ "acks": acks })).into_response()
}
