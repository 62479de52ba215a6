//! Who is calling: the correlator serves with mTLS (client certificates
//! signed by `--client-ca`), with bearer tokens over TLS (`--token-file`, or
//! Kubernetes service-account tokens checked by the API server with
//! `--token-review`, [`crate::kube`]), or — only when asked with
//! `--insecure` — plaintext without authentication. One layer
//! ([`AuthLayer`]) authenticates every call of every service and puts the
//! caller's [`Peer`] into the request; ingest then lets a peer send windows
//! only for the host its certificate (DNS/IP SAN) or token names.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rustls_pki_types::{CertificateDer, ServerName};
use tonic::{
    codegen::http,
    transport::{
        server::{TcpConnectInfo, TlsConnectInfo},
        Certificate, Identity, ServerTlsConfig,
    },
    Request, Status,
};

use crate::kube::{Refusal, Reviewer, TokenReviewArgs};

/// `serve`'s security flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ServeSecurity {
    /// Server certificate (PEM); with `--tls-key` the service speaks TLS.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: mTLS. A collector may only
    /// send windows for the hostname its certificate names.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Bearer tokens, one `HOST TOKEN` per line (`#` comments): a caller
    /// presenting TOKEN may send windows for HOST only. Needs TLS.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub token_review: TokenReviewArgs,
    /// Serve plaintext without any authentication: anyone who can connect
    /// can send windows for any host and read all incidents.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "client_ca", "token_file", "token_review"])]
    pub insecure: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("serve needs authentication: --tls-cert/--tls-key with --client-ca (mTLS), --token-file or --token-review, or an explicit --insecure (docs/security.md)")]
    NoMode,
    #[error("--tls-cert alone authenticates nobody: add --client-ca (mTLS), --token-file and/or --token-review, or use --insecure")]
    NoClientAuth,
    #[error(transparent)]
    Kube(#[from] crate::kube::KubeError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Pem(#[from] proto::client_tls::TlsError),
    #[error("{path} line {line}: expected `HOST TOKEN`")]
    TokenLine { path: PathBuf, line: usize },
    #[error("{path} line {line}: this token is already on line {first} (for {first_host:?}): every host needs its own token")]
    DuplicateToken {
        path: PathBuf,
        line: usize,
        first: usize,
        first_host: String,
    },
    #[error("{path}: no tokens")]
    NoTokens { path: PathBuf },
}

/// A `--token-file`, read within [`TOKEN_FILE_MAX`](proto::bounded_read::TOKEN_FILE_MAX).
fn read_tokens(path: &Path) -> Result<String, AuthError> {
    proto::bounded_read::read_to_string(path, proto::bounded_read::TOKEN_FILE_MAX).map_err(
        |source| AuthError::Read {
            path: path.to_path_buf(),
            source,
        },
    )
}

/// Token → host, from a `--token-file`. A token listed twice is an error:
/// it would silently bind to whichever host came last.
pub fn parse_tokens(path: &Path, text: &str) -> Result<HashMap<String, String>, AuthError> {
    let mut tokens = HashMap::new();
    let mut line_of: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        match (f.next(), f.next(), f.next()) {
            (Some(host), Some(token), None) => {
                if let Some(first_host) = tokens.insert(token.to_string(), host.to_string()) {
                    return Err(AuthError::DuplicateToken {
                        path: path.to_path_buf(),
                        line: i + 1,
                        first: line_of.get(token).copied().unwrap_or(0),
                        first_host,
                    });
                }
                line_of.insert(token.to_string(), i + 1);
            }
            _ => {
                return Err(AuthError::TokenLine {
                    path: path.to_path_buf(),
                    line: i + 1,
                })
            }
        }
    }
    if tokens.is_empty() {
        return Err(AuthError::NoTokens {
            path: path.to_path_buf(),
        });
    }
    Ok(tokens)
}

/// TLS handshakes that do not finish within this are dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

impl ServeSecurity {
    /// The server's TLS config (none for `--insecure`) and the authenticator.
    pub fn build(&self) -> Result<(Option<ServerTlsConfig>, Auth), AuthError> {
        if self.insecure {
            tracing::warn!(
                "INSECURE: serving plaintext without authentication (--insecure): any local or \
                 network client can send windows for any host and read every incident"
            );
            return Ok((None, Auth::insecure()));
        }
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Err(AuthError::NoMode);
        };
        let review = self.token_review.token_review;
        if self.client_ca.is_none() && self.token_file.is_none() && !review {
            return Err(AuthError::NoClientAuth);
        }
        use proto::client_tls::{read_certificates, read_private_key};
        let mut tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(
                read_certificates(cert)?,
                read_private_key(key)?,
            ))
            .timeout(TLS_HANDSHAKE_TIMEOUT);
        if let Some(ca) = &self.client_ca {
            tls = tls
                .client_ca_root(Certificate::from_pem(read_certificates(ca)?))
                // With tokens too, a caller may come with a token instead.
                .client_auth_optional(self.token_file.is_some() || review);
        }
        let tokens = match &self.token_file {
            Some(p) => parse_tokens(p, &read_tokens(p)?)?,
            None => HashMap::new(),
        };
        let reviewer = if review {
            Some(Arc::new(Reviewer::new(&self.token_review)?))
        } else {
            None
        };
        Ok((
            Some(tls),
            Auth {
                insecure: false,
                tokens: Arc::new(tokens),
                reviewer,
            },
        ))
    }
}

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub enum Peer {
    /// `--insecure` (or a server built without the auth layer, like the
    /// in-process simulator): may speak for any host.
    Anyone,
    /// A client certificate verified against `--client-ca`.
    Cert(Arc<CertificateDer<'static>>),
    /// A bearer token bound to this host.
    Token(String),
}

impl Peer {
    /// The peer of a request (`Anyone` when no auth layer ran).
    pub fn of<T>(req: &Request<T>) -> Peer {
        req.extensions()
            .get::<Peer>()
            .cloned()
            .unwrap_or(Peer::Anyone)
    }

    /// Whether this peer may send windows for `host`: the certificate names
    /// it (DNS or IP subject alternative name) or the token is bound to it.
    pub fn may_speak_for(&self, host: &str) -> bool {
        match self {
            Peer::Anyone => true,
            Peer::Token(h) => h == host,
            Peer::Cert(der) => {
                let Ok(name) = ServerName::try_from(host) else {
                    return false;
                };
                webpki::EndEntityCert::try_from(der.as_ref())
                    .and_then(|c| c.verify_is_valid_for_subject_name(&name))
                    .is_ok()
            }
        }
    }

    /// The authenticated identity, for the per-identity connection and
    /// stream caps (`[detect.limits]`, [`crate::conn`]): a client
    /// certificate's subject and DNS names (the whole certificate when it has
    /// neither), a token's host. `None` for [`Peer::Anyone`]: without
    /// authentication there are no identities, only addresses.
    pub fn identity(&self) -> Option<u64> {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match self {
            Peer::Anyone => return None,
            Peer::Token(host) => ("token", host).hash(&mut h),
            Peer::Cert(der) => match webpki::EndEntityCert::try_from(der.as_ref()) {
                Ok(c) => {
                    let names: Vec<&str> = c.valid_dns_names().collect();
                    if c.subject().is_empty() && names.is_empty() {
                        ("cert-der", der.as_ref().as_ref()).hash(&mut h);
                    } else {
                        ("cert", c.subject(), names).hash(&mut h);
                    }
                }
                Err(_) => ("cert-der", der.as_ref().as_ref()).hash(&mut h),
            },
        }
        Some(h.finish())
    }

    /// For logs.
    pub fn describe(&self) -> String {
        match self {
            Peer::Anyone => "unauthenticated (--insecure)".into(),
            Peer::Cert(_) => "client certificate".into(),
            Peer::Token(h) => format!("token for {h}"),
        }
    }
}

/// What a request presents: the `authorization: Bearer` token (empty when
/// the header is malformed) and the TLS client certificates.
#[derive(Debug, Default)]
pub struct Credentials {
    pub bearer: Option<String>,
    pub certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl Credentials {
    pub fn of<B>(req: &http::Request<B>) -> Self {
        Self {
            bearer: req.headers().get("authorization").map(|h| {
                h.to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or("")
                    .to_string()
            }),
            certs: req
                .extensions()
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(TlsConnectInfo::peer_certs),
        }
    }
}

/// Authenticates every call (see [`AuthLayer`]).
#[derive(Clone, Debug)]
pub struct Auth {
    insecure: bool,
    tokens: Arc<HashMap<String, String>>,
    reviewer: Option<Arc<Reviewer>>,
}

impl Auth {
    pub fn insecure() -> Self {
        Self {
            insecure: true,
            tokens: Arc::new(HashMap::new()),
            reviewer: None,
        }
    }

    /// The caller: its bearer token (from `--token-file`, or reviewed by
    /// the API server), else its verified client certificate.
    pub async fn identify(&self, c: Credentials) -> Result<Peer, Status> {
        if self.insecure {
            return Ok(Peer::Anyone);
        }
        if let Some(token) = c.bearer {
            let token = token.as_str();
            if let Some(host) = self.tokens.get(token) {
                return Ok(Peer::Token(host.clone()));
            }
            return match &self.reviewer {
                Some(r) if !token.is_empty() => match r.node_of(token).await {
                    Ok(node) => Ok(Peer::Token(node)),
                    Err(Refusal::Refused(why)) => Err(refused(&why)),
                    Err(Refusal::Unavailable(why)) => Err(Status::unavailable(why)),
                },
                _ => Err(refused("unknown bearer token")),
            };
        }
        // The TLS layer verified the chain against --client-ca.
        match c.certs.as_ref().and_then(|c| c.first()) {
            Some(c) => Ok(Peer::Cert(Arc::new(c.clone().into_owned()))),
            None => Err(refused("no client certificate and no bearer token")),
        }
    }

    /// The layer for `tonic::transport::Server::layer`.
    pub fn layer(self) -> AuthLayer {
        AuthLayer(self)
    }
}

fn refused(why: &str) -> Status {
    metrics::counter!(crate::telemetry::AUTH_REFUSED.name).increment(1);
    Status::unauthenticated(format!(
        "{why}: this correlator needs a client certificate signed by its CA or a bearer token (docs/security.md)"
    ))
}

/// A tower layer that authenticates every call before any service sees it
/// (an async one: a token review waits on the API server): the caller's
/// [`Peer`] goes into the request, a refusal is answered at once.
#[derive(Clone, Debug)]
pub struct AuthLayer(Auth);

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: self.0.clone(),
        }
    }
}

/// See [`AuthLayer`].
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    auth: Auth,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tonic::codegen::Service<http::Request<B>> for AuthService<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // The clone that was made ready is the one to call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        let creds = Credentials::of(&req);
        Box::pin(async move {
            match auth.identify(creds).await {
                Ok(peer) => {
                    req.extensions_mut().insert(peer);
                    inner.call(req).await
                }
                Err(status) => Ok(status.into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_lines() {
        let p = Path::new("t");
        let t = parse_tokens(p, "# c\nn1 abc\n\n n2  def \n").expect("ok");
        assert_eq!(t.get("abc").map(String::as_str), Some("n1"));
        assert_eq!(t.get("def").map(String::as_str), Some("n2"));
        assert!(matches!(
            parse_tokens(p, "n1\n"),
            Err(AuthError::TokenLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_tokens(p, "n1 a b\n"),
            Err(AuthError::TokenLine { .. })
        ));
        assert!(matches!(
            parse_tokens(p, "# only\n"),
            Err(AuthError::NoTokens { .. })
        ));
    }

    #[test]
    fn a_token_listed_twice_is_refused_not_bound_to_the_last_host() {
        let e = parse_tokens(Path::new("t"), "n1 same\nn2 other\nn3 same\n").unwrap_err();
        assert!(
            matches!(&e, AuthError::DuplicateToken { line: 3, first: 1, first_host, .. } if first_host == "n1"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "t line 3: this token is already on line 1 (for \"n1\"): every host needs its own token"
        );
        // Two tokens for one host (a rotation) are fine.
        assert_eq!(
            parse_tokens(Path::new("t"), "n1 a\nn1 b\n").unwrap().len(),
            2
        );
    }

    #[test]
    fn no_mode_is_an_error() {
        assert!(matches!(
            ServeSecurity::default().build(),
            Err(AuthError::NoMode)
        ));
        let only_cert = ServeSecurity {
            tls_cert: Some("c".into()),
            tls_key: Some("k".into()),
            ..ServeSecurity::default()
        };
        assert!(matches!(only_cert.build(), Err(AuthError::NoClientAuth)));
    }

    #[test]
    fn token_peer_speaks_only_for_its_host() {
        let p = Peer::Token("n1".into());
        assert!(p.may_speak_for("n1"));
        assert!(!p.may_speak_for("n2"));
        assert!(Peer::Anyone.may_speak_for("n2"));
    }
}
