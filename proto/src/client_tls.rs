//! How a client (the collector's sender, a subscriber) reaches the
//! correlator: `https://` is TLS with the given CA (and, for mTLS, this
//! host's certificate and key), optionally with a bearer token; `http://` is
//! plaintext without authentication, which the collector logs loudly and the
//! subscriber prints ([`warn_if_plaintext`]). An `https://` URL
//! never falls back to plaintext: without a CA it is an error.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tonic::{
    metadata::MetadataValue,
    service::interceptor::InterceptedService,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
    Request, Status,
};

/// Client credentials (config keys `stream.tls_ca`, `stream.tls_cert`,
/// `stream.tls_key`, `stream.token_file`; flags `--ca`, `--cert`, `--key`,
/// `--token-file` of `faultline-correlator subscribe`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct ClientAuth {
    /// CA certificate (PEM) that signed the correlator's certificate.
    #[arg(long = "ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM); its DNS name must be the hostname
    /// the collector reports.
    #[arg(long = "cert", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This client's private key (PEM).
    #[arg(long = "key", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// File holding a bearer token (first line), sent as `authorization`.
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "{url}: not a valid correlator URL ({reason}); use http://HOST:PORT or https://HOST:PORT"
    )]
    Url { url: String, reason: String },
    #[error("{url}: https:// needs a CA certificate (stream.tls_ca / --ca); it never falls back to plaintext")]
    HttpsWithoutCa { url: String },
    #[error("{url}: TLS credentials are set but the URL is http:// (plaintext); use https://")]
    CredentialsOverPlaintext { url: String },
    #[error("the client certificate and key go together: set both tls_cert and tls_key (--cert and --key)")]
    HalfIdentity,
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no PEM certificate found in {path} (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("{path}: certificate {index} is not a valid X.509 certificate: {reason}")]
    BadCertificate {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error("no PEM private key found in {path} (expected -----BEGIN PRIVATE KEY----- or an RSA/EC key)")]
    NoPrivateKey { path: PathBuf },
    #[error("{path}: the token file is empty or its first line is not a valid header value")]
    BadToken { path: PathBuf },
    #[error("{url}: TLS setup failed: {reason}")]
    Setup { url: String, reason: String },
}

fn read(path: &Path, max: u64) -> Result<Vec<u8>, TlsError> {
    crate::bounded_read::read(path, max).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A PEM file of certificates (a chain or a CA bundle), read within
/// [`PEM_MAX`](crate::bounded_read::PEM_MAX) and checked to hold at least
/// one X.509 certificate: a wrong file is named here, not left to fail a
/// later handshake as "peer sent no certificates".
pub fn read_certificates(path: &Path) -> Result<Vec<u8>, TlsError> {
    use rustls_pki_types::{pem::PemObject as _, CertificateDer};
    let pem = read(path, crate::bounded_read::PEM_MAX)?;
    let mut found = 0;
    for (index, c) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        let bad = |reason: String| TlsError::BadCertificate {
            path: path.to_path_buf(),
            index: index + 1,
            reason,
        };
        let der = c.map_err(|e| bad(e.to_string()))?;
        webpki::EndEntityCert::try_from(&der).map_err(|e| bad(format!("{e:?}")))?;
        found += 1;
    }
    if found == 0 {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(pem)
}

/// A PEM private key file, read within the same bound and checked to hold a key.
pub fn read_private_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    use rustls_pki_types::{pem::PemObject as _, PrivateKeyDer};
    let pem = read(path, crate::bounded_read::PEM_MAX)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::NoPrivateKey {
        path: path.to_path_buf(),
    })?;
    Ok(pem)
}

impl ClientAuth {
    /// Checks the combination against `url` without reading any file.
    pub fn check(&self, url: &str) -> Result<(), TlsError> {
        let https = url.starts_with("https://");
        if !https && !url.starts_with("http://") {
            return Err(TlsError::Url {
                url: url.into(),
                reason: "scheme must be http or https".into(),
            });
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(TlsError::HalfIdentity);
        }
        let any = self.tls_ca.is_some() || self.tls_cert.is_some() || self.token_file.is_some();
        if https && self.tls_ca.is_none() {
            return Err(TlsError::HttpsWithoutCa { url: url.into() });
        }
        if !https && any {
            return Err(TlsError::CredentialsOverPlaintext { url: url.into() });
        }
        Ok(())
    }

    /// The endpoint for `url` with TLS configured from these files, and the
    /// bearer token (if any). Logs a warning for plaintext.
    pub fn endpoint(&self, url: &str) -> Result<(Endpoint, BearerToken), TlsError> {
        self.check(url)?;
        let mut ep = Endpoint::from_shared(url.to_string()).map_err(|e| TlsError::Url {
            url: url.into(),
            reason: e.to_string(),
        })?;
        if let Some(ca) = &self.tls_ca {
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(read_certificates(ca)?));
            if let (Some(c), Some(k)) = (&self.tls_cert, &self.tls_key) {
                tls = tls.identity(Identity::from_pem(
                    read_certificates(c)?,
                    read_private_key(k)?,
                ));
            }
            ep = ep.tls_config(tls).map_err(|e| TlsError::Setup {
                url: url.into(),
                reason: e.to_string(),
            })?;
        }
        Ok((ep, self.token()?))
    }
}

impl ClientAuth {
    /// The bearer token from `token_file` (its first line), if set.
    pub fn token(&self) -> Result<BearerToken, TlsError> {
        let Some(p) = &self.token_file else {
            return Ok(BearerToken(None));
        };
        let text = read(p, crate::bounded_read::TOKEN_FILE_MAX)?;
        let line = String::from_utf8_lossy(&text)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        MetadataValue::try_from(format!("Bearer {line}"))
            .ok()
            .filter(|_| !line.is_empty())
            .map(|v| BearerToken(Some(v)))
            .ok_or_else(|| TlsError::BadToken { path: p.clone() })
    }
}

/// Whether `url` is plaintext (`http://`).
pub fn is_plaintext(url: &str) -> bool {
    url.starts_with("http://")
}

/// Logs, once per process, that `url` is plaintext and unauthenticated
/// (the collector's sender calls it on every connect).
pub fn warn_if_plaintext(url: &str) {
    if !is_plaintext(url) {
        return;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            url,
            "INSECURE: plaintext to the correlator, no TLS and no authentication; \
             use https:// with stream.tls_ca (docs/security.md)"
        );
    });
}

/// Adds `authorization: Bearer …` to every call when a token is configured.
#[derive(Clone, Debug, Default)]
pub struct BearerToken(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A connected channel that carries the bearer token.
pub type AuthChannel = InterceptedService<Channel, BearerToken>;

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(ca: bool, cert: bool, key: bool, token: bool) -> ClientAuth {
        let p = |b: bool, s: &str| b.then(|| PathBuf::from(s));
        ClientAuth {
            tls_ca: p(ca, "ca.pem"),
            tls_cert: p(cert, "c.pem"),
            tls_key: p(key, "c.key"),
            token_file: p(token, "t"),
        }
    }

    #[test]
    fn https_never_means_plaintext() {
        assert!(matches!(
            auth(false, false, false, false).check("https://h:1"),
            Err(TlsError::HttpsWithoutCa { .. })
        ));
        assert!(matches!(
            auth(false, false, false, true).check("https://h:1"),
            Err(TlsError::HttpsWithoutCa { .. })
        ));
        assert!(auth(true, true, true, false).check("https://h:1").is_ok());
        assert!(auth(true, false, false, true).check("https://h:1").is_ok());
    }

    #[test]
    fn credentials_are_never_sent_in_plaintext() {
        for a in [
            auth(true, false, false, false),
            auth(false, false, false, true),
            auth(true, true, true, false),
        ] {
            assert!(matches!(
                a.check("http://h:1"),
                Err(TlsError::CredentialsOverPlaintext { .. })
            ));
        }
        assert!(auth(false, false, false, false).check("http://h:1").is_ok());
        assert!(matches!(
            auth(true, true, false, false).check("https://h:1"),
            Err(TlsError::HalfIdentity)
        ));
        assert!(matches!(
            auth(false, false, false, false).check("ftp://h:1"),
            Err(TlsError::Url { .. })
        ));
    }

    #[test]
    fn token_is_the_first_line_and_never_empty() {
        let dir = std::env::temp_dir().join(format!("faultline-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let t = dir.join("t");
        let a = ClientAuth {
            token_file: Some(t.clone()),
            ..ClientAuth::default()
        };
        std::fs::write(&t, "s3cret\nignored\n").expect("write");
        let tok = a.token().expect("token");
        assert_eq!(
            tok.0.as_ref().and_then(|v| v.to_str().ok()),
            Some("Bearer s3cret")
        );
        for bad in ["", "\n", "  \n"] {
            std::fs::write(&t, bad).expect("write");
            assert!(matches!(a.token(), Err(TlsError::BadToken { .. })));
        }
        std::fs::remove_file(&t).expect("rm");
        assert!(matches!(a.token(), Err(TlsError::Read { .. })));
        // Over http:// it is refused before the file is read.
        assert!(matches!(
            a.endpoint("http://127.0.0.1:1"),
            Err(TlsError::CredentialsOverPlaintext { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
