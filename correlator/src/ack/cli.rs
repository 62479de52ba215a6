//! `faultline-correlator ack`: acknowledge an open incident (or clear its
//! acknowledgement) through a running correlator's web API.
use std::{path::PathBuf, time::Duration};

/// Arguments of `faultline-correlator ack`.
#[derive(Debug, clap::Args)]
pub struct AckArgs {
    /// The incident's id (the web UI, `incidents`, the alert's `incident_id`).
    pub id: String,
    /// The correlator's web address (its `--web`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub web: String,
    /// File holding the operator token (the correlator's
    /// `[web] operator_token_file`).
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// Who acknowledges.
    #[arg(long)]
    pub by: String,
    /// Why (required to set; optional to clear).
    #[arg(long, default_value = "")]
    pub why: String,
    /// For how long (`30m`, `4h`, `2d`); default: until the incident resolves.
    #[arg(long = "for", value_name = "AGE")]
    pub for_: Option<String>,
    /// Clear the acknowledgement instead (notifications resume).
    #[arg(long)]
    pub clear: bool,
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum AckCliError {
    #[error("reading the operator token {path}: {source}")]
    Token {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--for {0}")]
    For(String),
    #[error(transparent)]
    Http(#[from] crate::http_client::HttpError),
    #[error("--by/--why: {0}")]
    Invalid(#[from] super::AckError),
    #[error("the correlator refused (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
}

/// Sends the request; the correlator's answer as one line.
pub async fn run(a: &AckArgs) -> Result<String, AckCliError> {
    // Checked here too, before any request: the same rules as the server's.
    super::check_by(&a.by)?;
    super::check_why(&a.why, !a.clear)?;
    let token = std::fs::read_to_string(&a.token_file).map_err(|source| AckCliError::Token {
        path: a.token_file.clone(),
        source,
    })?;
    let for_s = match &a.for_ {
        None => 0,
        Some(s) => crate::history::report::parse_age(s)
            .map(|ms| u64::try_from(ms / 1000).unwrap_or(0))
            .map_err(AckCliError::For)?,
    };
    let url = format!("{}/api/incidents/{}/ack", a.web.trim_end_matches('/'), a.id);
    let body = if a.clear {
        serde_json::json!({ "by": a.by, "why": a.why })
    } else {
        serde_json::json!({ "by": a.by, "why": a.why, "for_s": for_s })
    };
    let method = if a.clear { "DELETE" } else { "POST" };
    let bearer = format!("Bearer {}", token.trim());
    let (status, reply) = crate::http_client::request_with_headers(
        method,
        &url,
        Some(body.to_string().into_bytes()),
        Duration::from_secs(10),
        &[("authorization", &bearer)],
    )
    .await?;
    let v: serde_json::Value = serde_json::from_slice(&reply).unwrap_or_default();
    if !(200..300).contains(&status) {
        return Err(AckCliError::Refused {
            status,
            message: v["error"].as_str().map_or_else(
                || String::from_utf8_lossy(&reply).into_owned(),
                str::to_string,
            ),
        });
    }
    Ok(if a.clear {
        format!("{}: acknowledgement cleared; notifications resume", a.id)
    } else {
        match v["ack"]["until_ms"].as_i64() {
            Some(u) => format!(
                "{}: acknowledged by {} until {} UTC",
                a.id,
                a.by,
                vocab::time::utc(u)
            ),
            None => format!("{}: acknowledged by {} until it resolves", a.id, a.by),
        }
    })
}
