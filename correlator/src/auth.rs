//! Who is calling: the correlator serves with mTLS (client certificates
//! signed by `--client-ca`), with bearer tokens over TLS (`--token-file`), or
//! — only when asked with `--insecure` — plaintext without authentication.
//! An interceptor layer authenticates every call of every service and puts
//! the caller's [`Peer`] into the request; ingest then lets a peer send
//! windows only for the host its certificate (DNS/IP SAN) or token names.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rustls_pki_types::{CertificateDer, ServerName};
use tonic::{
    transport::{Certificate, Identity, ServerTlsConfig},
    Request, Status,
};

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
    /// Serve plaintext without any authentication: anyone who can connect
    /// can send windows for any host and read all incidents.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "client_ca", "token_file"])]
    pub insecure: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("serve needs authentication: --tls-cert/--tls-key with --client-ca (mTLS) or --token-file, or an explicit --insecure (docs/security.md)")]
    NoMode,
    #[error("--tls-cert alone authenticates nobody: add --client-ca (mTLS) and/or --token-file, or use --insecure")]
    NoClientAuth,
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} line {line}: expected `HOST TOKEN`")]
    TokenLine { path: PathBuf, line: usize },
    #[error("{path}: no tokens")]
    NoTokens { path: PathBuf },
}

fn read(path: &Path) -> Result<Vec<u8>, AuthError> {
    std::fs::read(path).map_err(|source| AuthError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Token → host, from a `--token-file`.
pub fn parse_tokens(path: &Path, text: &str) -> Result<HashMap<String, String>, AuthError> {
    let mut tokens = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        match (f.next(), f.next(), f.next()) {
            (Some(host), Some(token), None) => {
                tokens.insert(token.to_string(), host.to_string());
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
        if self.client_ca.is_none() && self.token_file.is_none() {
            return Err(AuthError::NoClientAuth);
        }
        let mut tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(read(cert)?, read(key)?))
            .timeout(TLS_HANDSHAKE_TIMEOUT);
        if let Some(ca) = &self.client_ca {
            tls = tls
                .client_ca_root(Certificate::from_pem(read(ca)?))
                // With tokens too, a caller may come with a token instead.
                .client_auth_optional(self.token_file.is_some());
        }
        let tokens = match &self.token_file {
            Some(p) => parse_tokens(p, &String::from_utf8_lossy(&read(p)?))?,
            None => HashMap::new(),
        };
        Ok((
            Some(tls),
            Auth {
                insecure: false,
                tokens: Arc::new(tokens),
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

    /// For logs.
    pub fn describe(&self) -> String {
        match self {
            Peer::Anyone => "unauthenticated (--insecure)".into(),
            Peer::Cert(_) => "client certificate".into(),
            Peer::Token(h) => format!("token for {h}"),
        }
    }
}

/// The interceptor that authenticates every call.
#[derive(Clone, Debug)]
pub struct Auth {
    insecure: bool,
    tokens: Arc<HashMap<String, String>>,
}

impl Auth {
    pub fn insecure() -> Self {
        Self {
            insecure: true,
            tokens: Arc::new(HashMap::new()),
        }
    }

    fn identify<T>(&self, req: &Request<T>) -> Result<Peer, Status> {
        if self.insecure {
            return Ok(Peer::Anyone);
        }
        if let Some(h) = req.metadata().get("authorization") {
            let token = h
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            return match self.tokens.get(token) {
                Some(host) => Ok(Peer::Token(host.clone())),
                None => Err(refused("unknown bearer token")),
            };
        }
        // The TLS layer verified the chain against --client-ca.
        match req.peer_certs().as_ref().and_then(|c| c.first()) {
            Some(c) => Ok(Peer::Cert(Arc::new(c.clone().into_owned()))),
            None => Err(refused("no client certificate and no bearer token")),
        }
    }
}

fn refused(why: &str) -> Status {
    metrics::counter!("faultline_auth_refused_total").increment(1);
    Status::unauthenticated(format!(
        "{why}: this correlator needs a client certificate signed by its CA or a bearer token (docs/security.md)"
    ))
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let peer = self.identify(&req)?;
        req.extensions_mut().insert(peer);
        Ok(req)
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
