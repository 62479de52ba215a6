//! The Kubernetes API, for the authenticated defaults of the shipped
//! manifests (deploy/kubernetes, docs/kubernetes.md):
//!
//! * bearer tokens checked by the API server (`serve --token-review`): a
//!   collector presents its pod's projected service-account token (audience
//!   `faultline-correlator`, rotated by the kubelet); a `TokenReview` says
//!   whose it is and on which node the pod runs (the
//!   `authentication.kubernetes.io/node-name` extra, Kubernetes ≥ 1.30), and
//!   the token may then send windows for that node only. Answers are cached
//!   (accepted for [`ACCEPTED_TTL`], refused for [`REFUSED_TTL`], at most
//!   [`MAX_CACHED`] tokens) and at most [`MAX_IN_FLIGHT`] reviews run at once;
//! * the correlator's TLS server certificate (`faultline-correlator
//!   kube-tls`, its init container): made once on its volume, and its CA
//!   published in a ConfigMap the collectors mount ([`publish_ca`]).
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use rustls_pki_types::{pem::PemObject as _, CertificateDer, ServerName};
use tokio_rustls::{rustls, TlsConnector};

/// The node-name extra of a bound service-account token's review.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// How long a review that accepted a token is trusted.
pub const ACCEPTED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token is refused without asking again.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered.
pub const MAX_CACHED: usize = 10_000;
/// Reviews in flight; more callers get UNAVAILABLE and retry.
pub const MAX_IN_FLIGHT: usize = 16;
/// One review's deadline.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// `serve`'s TokenReview flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TokenReviewArgs {
    /// Accept Kubernetes service-account tokens (bearer, over TLS), checked
    /// with the API server's TokenReview: a token may send windows only for
    /// the node its pod runs on. Needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub token_review: bool,
    /// The audience the tokens must be issued for.
    #[arg(long, value_name = "AUDIENCE", default_value = "faultline-correlator")]
    pub token_audience: String,
    /// The service account whose tokens are accepted (repeatable).
    #[arg(
        long = "token-service-account",
        value_name = "USER",
        default_value = "system:serviceaccount:faultline:faultline-collector"
    )]
    pub token_service_accounts: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Where the Kubernetes API server is and how to reach it.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ApiArgs {
    /// The API server (default: in the cluster,
    /// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
    #[arg(long, value_name = "URL")]
    pub kube_api: Option<String>,
    /// The API server's CA.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub kube_ca: PathBuf,
    /// This pod's own token, sent to the API server (re-read for every
    /// review: the kubelet rotates it).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub kube_token_file: PathBuf,
}

/// The in-cluster file naming the pod's namespace.
pub const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "--token-review: no API server: set --kube-api or run in a pod (KUBERNETES_SERVICE_HOST)"
    )]
    NoApi,
    #[error("--kube-api {0}: give https://HOST:PORT")]
    BadUrl(String),
    #[error(transparent)]
    Pem(#[from] proto::client_tls::TlsError),
    #[error("--kube-ca {path}: {why}")]
    Ca { path: PathBuf, why: String },
    #[error("the Kubernetes API: {0}")]
    Api(String),
}

/// A connection recipe for the API server: address, TLS and this pod's token.
pub struct Api {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: TlsConnector,
    token_file: PathBuf,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Api {
    pub fn new(a: &ApiArgs) -> Result<Self, KubeError> {
        let url = match &a.kube_api {
            Some(u) => u.clone(),
            None => {
                let host =
                    std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| KubeError::NoApi)?;
                let port =
                    std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
                if host.contains(':') {
                    format!("https://[{host}]:{port}")
                } else {
                    format!("https://{host}:{port}")
                }
            }
        };
        let bad = || KubeError::BadUrl(url.clone());
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let authority = rest.split('/').next().unwrap_or("");
        let uri: tonic::codegen::http::Uri =
            format!("https://{authority}/").parse().map_err(|_| bad())?;
        let host = uri
            .host()
            .ok_or_else(bad)?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let server_name = ServerName::try_from(host.clone()).map_err(|_| bad())?;
        let pem = proto::client_tls::read_certificates(&a.kube_ca)?;
        let ca_err = |why: String| KubeError::Ca {
            path: a.kube_ca.clone(),
            why,
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&pem) {
            roots
                .add(c.map_err(|e| ca_err(e.to_string()))?)
                .map_err(|e| ca_err(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ca_err(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            host,
            port,
            server_name,
            tls: TlsConnector::from(Arc::new(cfg)),
            token_file: a.kube_token_file.clone(),
        })
    }

    /// One JSON request (`content_type` for the body); the status and the
    /// reply (at most 1 MiB).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, Vec<u8>), String> {
        let own = own_token(&self.token_file)?;
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connecting to {}:{}: {e}", self.host, self.port))?;
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("TLS with the API server: {e}"))?;
        let authority = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let bearer = format!("Bearer {own}");
        crate::http_client::exchange(
            tls,
            method,
            &authority,
            path,
            &[
                ("authorization", &bearer),
                ("accept", "application/json"),
                ("content-type", content_type),
            ],
            Some(body.to_string().into_bytes()),
            1 << 20,
        )
        .await
        .map_err(|e| e.to_string())
    }
}

/// Publishes `ca_pem` as `ca.crt` of the ConfigMap `name` in `namespace`
/// (a merge patch: the ConfigMap the manifests ship keeps its metadata).
pub async fn publish_ca(
    api: &Api,
    namespace: &str,
    name: &str,
    ca_pem: &str,
) -> Result<(), KubeError> {
    let path = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
    let patch = serde_json::json!({ "data": { "ca.crt": ca_pem } });
    let (status, reply) = api
        .request("PATCH", &path, "application/merge-patch+json", &patch)
        .await
        .map_err(KubeError::Api)?;
    match status {
        200..=299 => Ok(()),
        404 => Err(KubeError::Api(format!(
            "ConfigMap {namespace}/{name} does not exist: create it (deploy/kubernetes/correlator.yaml ships it)"
        ))),
        _ => Err(KubeError::Api(format!(
            "patching ConfigMap {namespace}/{name}: {status} {}",
            String::from_utf8_lossy(&reply).chars().take(300).collect::<String>()
        ))),
    }
}

/// The outcome of one token's review.
type Verdict = Result<String, String>;

/// Reviews tokens against the API server, with a bounded cache.
pub struct Reviewer {
    api: Api,
    audience: String,
    accounts: Vec<String>,
    cache: Mutex<HashMap<String, (Verdict, Instant)>>,
    in_flight: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer")
            .field("api", &self.api)
            .field("audience", &self.audience)
            .field("accounts", &self.accounts)
            .finish()
    }
}

/// Why a token was not accepted: `Unavailable` when the API server could
/// not be asked (the caller retries), `Refused` when it said no.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Unavailable(String),
    Refused(String),
}

impl Reviewer {
    pub fn new(a: &TokenReviewArgs) -> Result<Self, KubeError> {
        Ok(Self {
            api: Api::new(&a.api)?,
            audience: a.token_audience.clone(),
            accounts: a.token_service_accounts.clone(),
            cache: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        })
    }

    /// The node `token` may speak for.
    pub async fn node_of(&self, token: &str) -> Result<String, Refusal> {
        let now = Instant::now();
        if let Some((v, until)) = self.lock().get(token) {
            if now < *until {
                return v.clone().map_err(Refusal::Refused);
            }
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            count("busy");
            return Err(Refusal::Unavailable(
                "too many token reviews in flight; retry".into(),
            ));
        };
        let verdict = match tokio::time::timeout(REVIEW_TIMEOUT, self.review(token)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                count("error");
                tracing::warn!(error = %e, "token review failed");
                return Err(Refusal::Unavailable(format!("token review failed: {e}")));
            }
            Err(_) => {
                count("error");
                return Err(Refusal::Unavailable(format!(
                    "token review: no answer from the API server within {} s",
                    REVIEW_TIMEOUT.as_secs()
                )));
            }
        };
        count(if verdict.is_ok() {
            "accepted"
        } else {
            "refused"
        });
        let ttl = if verdict.is_ok() {
            ACCEPTED_TTL
        } else {
            REFUSED_TTL
        };
        {
            let mut c = self.lock();
            if c.len() >= MAX_CACHED {
                c.retain(|_, (_, until)| now < *until);
                if c.len() >= MAX_CACHED {
                    c.clear();
                }
            }
            c.insert(token.to_string(), (verdict.clone(), now + ttl));
        }
        verdict.map_err(Refusal::Refused)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Verdict, Instant)>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the API server; `Ok(verdict)` when it answered.
    async fn review(&self, token: &str) -> Result<Verdict, String> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": { "token": token, "audiences": [self.audience] },
        });
        let (status, reply) = self
            .api
            .request(
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                "application/json",
                &body,
            )
            .await?;
        if !(200..300).contains(&status) {
            return Err(format!(
                "the API server answered {status}: {}",
                String::from_utf8_lossy(&reply)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&reply).map_err(|e| format!("the API server's reply: {e}"))?;
        Ok(self.judge(&v))
    }

    /// A TokenReview's status as the node the token speaks for.
    fn judge(&self, review: &serde_json::Value) -> Verdict {
        let st = &review["status"];
        if st["authenticated"] != serde_json::Value::Bool(true) {
            let why = st["error"].as_str().unwrap_or("not authenticated");
            return Err(format!("the API server refused the token: {why}"));
        }
        if let Some(auds) = st["audiences"].as_array() {
            if !auds
                .iter()
                .any(|a| a.as_str() == Some(self.audience.as_str()))
            {
                return Err(format!("the token is not for audience {:?}", self.audience));
            }
        }
        let user = st["user"]["username"].as_str().unwrap_or("");
        if !self.accounts.iter().any(|a| a == user) {
            return Err(format!(
                "{user:?} is not an accepted service account (--token-service-account)"
            ));
        }
        match st["user"]["extra"][NODE_NAME_EXTRA]
            .as_array()
            .and_then(|v| v.first())
            .and_then(|n| n.as_str())
        {
            Some(node) if !node.is_empty() => Ok(node.to_string()),
            _ => Err(format!(
                "the token names no node ({NODE_NAME_EXTRA}): use a projected token of a pod on Kubernetes 1.30 or later"
            )),
        }
    }
}

fn count(result: &'static str) {
    metrics::counter!(crate::telemetry::TOKEN_REVIEWS.name, "result" => result).increment(1);
}

/// This pod's own token (first line), re-read each time.
fn own_token(path: &Path) -> Result<String, String> {
    let text = proto::bounded_read::read_to_string(path, 64 << 10)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let t = text.lines().next().unwrap_or("").trim().to_string();
    if t.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reviewer() -> Reviewer {
        let dir = std::env::temp_dir().join(format!("faultline-kube-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        crate::certs::write_pki(&crate::certs::CertsArgs {
            out: dir.clone(),
            server_names: vec!["127.0.0.1".into()],
            hosts: vec![],
            subscribers: vec![],
        })
        .expect("pki");
        Reviewer::new(&TokenReviewArgs {
            token_review: true,
            token_audience: "faultline-correlator".into(),
            token_service_accounts: vec![
                "system:serviceaccount:faultline:faultline-collector".into()
            ],
            api: ApiArgs {
                kube_api: Some("https://127.0.0.1:6443".into()),
                kube_ca: dir.join("ca.pem"),
                kube_token_file: dir.join("token"),
            },
        })
        .expect("reviewer")
    }

    #[test]
    fn a_review_binds_the_token_to_its_pods_node_only_for_the_collector_account() {
        let r = reviewer();
        let review = |auth: bool, user: &str, node: Option<&str>, aud: &str| {
            let mut extra = serde_json::json!({});
            if let Some(n) = node {
                extra[NODE_NAME_EXTRA] = serde_json::json!([n]);
            }
            r.judge(&serde_json::json!({"status": {
                "authenticated": auth,
                "audiences": [aud],
                "user": {"username": user, "extra": extra},
            }}))
        };
        let sa = "system:serviceaccount:faultline:faultline-collector";
        assert_eq!(
            review(true, sa, Some("gpu-007"), "faultline-correlator"),
            Ok("gpu-007".into())
        );
        assert!(review(false, sa, Some("gpu-007"), "faultline-correlator").is_err());
        assert!(review(
            true,
            "system:serviceaccount:default:default",
            Some("gpu-007"),
            "faultline-correlator"
        )
        .unwrap_err()
        .contains("not an accepted service account"));
        assert!(review(true, sa, None, "faultline-correlator")
            .unwrap_err()
            .contains("names no node"));
        assert!(review(true, sa, Some("gpu-007"), "kubernetes")
            .unwrap_err()
            .contains("audience"));
    }
}
