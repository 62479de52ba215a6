//! `basic_auth_users` and `http_server_config.headers` as an axum
//! middleware: a request without valid credentials gets 401 with
//! `WWW-Authenticate: Basic`, counted in
//! `faultline_web_auth_failures_total{listener,reason}`.
//!
//! bcrypt is slow by design (cost 10: tens of milliseconds): a verified
//! user and password are remembered (their SHA-256, at most [`CACHE`]
//! pairs), as exporter-toolkit does, so a scrape every few seconds costs one
//! hash; hashes run on blocking threads, at most [`CONCURRENT`] at a time,
//! so a flood of wrong passwords cannot take every core. An unknown user
//! costs one hash too (against another user's hash), so that timing does
//! not tell which names exist.
use std::{
    collections::{BTreeMap, HashSet},
    str::FromStr as _,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{
    extract::{Request, State},
    http::{header, HeaderName, HeaderValue, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use sha2::Digest as _;
use tokio::sync::Semaphore;

use crate::Problem;

/// Verified (user, password) pairs remembered.
pub const CACHE: usize = 256;
/// bcrypt verifications running at once.
pub const CONCURRENT: usize = 2;

/// The users and their bcrypt hashes.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    cache: Mutex<HashSet<[u8; 32]>>,
    permits: Semaphore,
}

impl BasicAuth {
    /// Checks every hash is bcrypt's (`$2a$`, `$2b$`, `$2y$`).
    pub fn new(users: BTreeMap<String, String>) -> Result<Self, Problem> {
        for (user, hash) in &users {
            let key = format!("basic_auth_users.{user}");
            if user.is_empty() || user.contains(':') {
                return Err(Problem::new(
                    key,
                    "a user name must be non-empty and without ':'",
                ));
            }
            if bcrypt::HashParts::from_str(hash).is_err() {
                return Err(Problem::new(
                    key,
                    "not a bcrypt hash (make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)",
                ));
            }
        }
        Ok(Self {
            users,
            cache: Mutex::new(HashSet::new()),
            permits: Semaphore::new(CONCURRENT),
        })
    }

    /// Whether `password` is `user`'s.
    pub async fn verify(&self, user: &str, password: &str) -> bool {
        let (known, hash) = match self.users.get(user) {
            Some(h) => (true, h.clone()),
            // Costs what a known user costs; never succeeds.
            None => match self.users.values().next() {
                Some(h) => (false, h.clone()),
                None => return false,
            },
        };
        let mut d = sha2::Sha256::new();
        for part in [user.as_bytes(), password.as_bytes(), hash.as_bytes()] {
            d.update((part.len() as u64).to_le_bytes());
            d.update(part);
        }
        let key: [u8; 32] = d.finalize().into();
        if known && self.cache().contains(&key) {
            return true;
        }
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || {
            // Not the truncating verify: bytes past bcrypt's 72 count.
            bcrypt::non_truncating_verify(password, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if ok && known {
            let mut c = self.cache();
            if c.len() >= CACHE {
                c.clear();
            }
            c.insert(key);
        }
        ok && known
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// In a request's extensions once `basic_auth_users` admitted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
}

/// Whether an `Authorization: Bearer …` header is one the server accepts
/// by other means (the correlator's viewer and operator tokens); such a
/// request passes without basic auth.
pub type BearerCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The middleware's state.
#[derive(Clone)]
pub struct Gate {
    pub(crate) auth: Option<Arc<BasicAuth>>,
    pub(crate) headers: Arc<Vec<(HeaderName, HeaderValue)>>,
    pub(crate) listener: &'static str,
    /// Paths served without credentials (health probes).
    pub(crate) open: &'static [&'static str],
    pub(crate) bearer: Option<BearerCheck>,
}

/// Why credentials were refused (the metric's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    Missing,
    Malformed,
    Wrong,
}

impl Gate {
    async fn admit(
        &self,
        auth: &BasicAuth,
        value: Option<HeaderValue>,
    ) -> Result<Option<String>, Refused> {
        let Some(value) = value else {
            return Err(Refused::Missing);
        };
        let value = value.to_str().map_err(|_| Refused::Malformed)?.trim();
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            return match &self.bearer {
                Some(check) if check(value) => Ok(None),
                Some(_) => Err(Refused::Wrong),
                None => Err(Refused::Malformed),
            };
        }
        if !scheme.eq_ignore_ascii_case("basic") || rest.len() > 4096 {
            return Err(Refused::Malformed);
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .map_err(|_| Refused::Malformed)?;
        let text = String::from_utf8(raw).map_err(|_| Refused::Malformed)?;
        let (user, password) = text.split_once(':').ok_or(Refused::Malformed)?;
        if auth.verify(user, password).await {
            Ok(Some(user.to_string()))
        } else {
            Err(Refused::Wrong)
        }
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn gate(State(g): State<Gate>, mut req: Request, next: Next) -> Response {
    let guarded = g
        .auth
        .as_ref()
        .filter(|_| !g.open.contains(&req.uri().path()));
    let mut resp = match guarded {
        None => next.run(req).await,
        Some(auth) => match g
            .admit(auth, req.headers().get(header::AUTHORIZATION).cloned())
            .await
        {
            Ok(user) => {
                if let Some(user) = user {
                    req.extensions_mut().insert(Authenticated { user });
                }
                next.run(req).await
            }
            Err(why) => refuse(g.listener, why),
        },
    };
    for (name, value) in g.headers.iter() {
        resp.headers_mut().insert(name.clone(), value.clone());
    }
    resp
}

fn refuse(listener: &'static str, why: Refused) -> Response {
    let reason = match why {
        Refused::Missing => "missing",
        Refused::Malformed => "malformed",
        Refused::Wrong => "wrong",
    };
    metrics::counter!(crate::AUTH_FAILURES.name, "listener" => listener, "reason" => reason)
        .increment(1);
    tracing::debug!(listener, reason, "basic auth refused");
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"faultline\", charset=\"UTF-8\"",
        )],
        "401 Unauthorized: this endpoint needs HTTP basic auth (basic_auth_users of the web config file)\n",
    )
        .into_response()
}
