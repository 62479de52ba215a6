//! `tls_server_config` as a rustls server configuration (ring, as tonic's).
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls_pki_types::{pem::PemObject as _, CertificateDer};
use tokio_rustls::rustls;

use crate::{file::TlsServerConfig, reload, Problem};

use reload::MAX_PEM;

/// PEM text given inline (`cert`) or as a file (`cert_file`, relative to
/// the config file's directory, as exporter-toolkit resolves it).
fn pem(
    inline: Option<&String>,
    file: Option<&String>,
    keys: (&str, &str),
    dir: &Path,
) -> Result<Option<(Vec<u8>, String)>, Problem> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(Problem::new(
            format!("tls_server_config.{}", keys.0),
            format!("give either {} or {}, not both", keys.0, keys.1),
        )),
        (Some(text), None) => Ok(Some((text.clone().into_bytes(), keys.0.to_string()))),
        (None, Some(f)) => {
            let path: PathBuf = dir.join(f);
            let bytes = proto::bounded_read::read(&path, MAX_PEM).map_err(|e| {
                Problem::new(
                    format!("tls_server_config.{}", keys.1),
                    format!("{}: {e}", path.display()),
                )
            })?;
            Ok(Some((bytes, format!("{} {}", keys.1, path.display()))))
        }
        (None, None) => Ok(None),
    }
}

fn version(key: &str, v: Option<&String>) -> Result<Option<u8>, Problem> {
    match v.map(String::as_str) {
        None => Ok(None),
        Some("TLS12") => Ok(Some(12)),
        Some("TLS13") => Ok(Some(13)),
        Some(other) => Err(Problem::new(
            format!("tls_server_config.{key}"),
            format!("{other:?}: faultline speaks TLS12 and TLS13 only (rustls)"),
        )),
    }
}

/// The rustls server configuration of `t` (`None`: no certificate given,
/// plain HTTP, as exporter-toolkit treats an empty section).
pub fn server_config(
    t: &TlsServerConfig,
    dir: &Path,
) -> Result<Option<Arc<rustls::ServerConfig>>, Problem> {
    let cert = pem(
        t.cert.as_ref(),
        t.cert_file.as_ref(),
        ("cert", "cert_file"),
        dir,
    )?;
    let key = pem(
        t.key.as_ref(),
        t.key_file.as_ref(),
        ("key", "key_file"),
        dir,
    )?;
    let ca = pem(
        t.client_ca.as_ref(),
        t.client_ca_file.as_ref(),
        ("client_ca", "client_ca_file"),
        dir,
    )?;
    let (cert, key) = match (cert, key) {
        (None, None) if empty(t) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        (None, _) => {
            return Err(Problem::new(
                "tls_server_config.cert_file",
                "missing: TLS needs the server's certificate (cert_file or cert) and key",
            ))
        }
        (_, None) => {
            return Err(Problem::new(
                "tls_server_config.key_file",
                "missing: TLS needs the server's key (key_file or key) with its certificate",
            ))
        }
    };
    let versions = protocol_versions(t)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| Problem::new("tls_server_config.min_version", e.to_string()))?;
    let verifier = client_verifier(t, ca, provider.clone())?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let certified = reload::certified(&cert.0, &key.0, (&cert.1, &key.1), &provider)?;
    let files = match (&t.cert_file, &t.key_file) {
        (Some(c), Some(k)) => Some((dir.join(c), dir.join(k))),
        _ => None,
    };
    let resolver = reload::Reloading::new(certified, files, provider);
    let mut cfg = builder.with_cert_resolver(Arc::new(resolver));
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(cfg)))
}

/// Whether the section sets nothing (exporter-toolkit serves plain HTTP).
fn empty(t: &TlsServerConfig) -> bool {
    t.cert.is_none()
        && t.key.is_none()
        && t.client_ca.is_none()
        && t.cert_file.is_none()
        && t.key_file.is_none()
        && t.client_auth_type.is_none()
        && t.client_ca_file.is_none()
        && t.min_version.is_none()
        && t.max_version.is_none()
        && t.prefer_server_cipher_suites.is_none()
}

fn protocol_versions(
    t: &TlsServerConfig,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, Problem> {
    let min = version("min_version", t.min_version.as_ref())?.unwrap_or(12);
    let max = version("max_version", t.max_version.as_ref())?.unwrap_or(13);
    if min > max {
        return Err(Problem::new(
            "tls_server_config.min_version",
            "above max_version",
        ));
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (min..=max).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}

/// The client certificate policy (`client_auth_type`), Go's names.
fn client_verifier(
    t: &TlsServerConfig,
    ca: Option<(Vec<u8>, String)>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, Problem> {
    const KEY: &str = "tls_server_config.client_auth_type";
    let optional = match t.client_auth_type.as_deref().unwrap_or("NoClientCert") {
        "NoClientCert" => {
            if ca.is_some() {
                return Err(Problem::new(
                    KEY,
                    "client_ca_file is set but client_auth_type is NoClientCert: set RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
                ));
            }
            return Ok(None);
        }
        "RequireAndVerifyClientCert" => false,
        "VerifyClientCertIfGiven" => true,
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(Problem::new(
                KEY,
                "RequestClientCert and RequireAnyClientCert accept certificates nobody verified: not supported; use RequireAndVerifyClientCert with client_ca_file",
            ))
        }
        other => {
            return Err(Problem::new(
                KEY,
                format!("{other:?} is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
            ))
        }
    };
    let Some((pem, what)) = ca else {
        return Err(Problem::new(
            "tls_server_config.client_ca_file",
            "missing: verifying client certificates needs the CA that issued them",
        ));
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| {
            Problem::new("tls_server_config.client_ca_file", format!("{what}: {e}"))
        })?;
        roots.add(c).map_err(|e| {
            Problem::new("tls_server_config.client_ca_file", format!("{what}: {e}"))
        })?;
    }
    if roots.is_empty() {
        return Err(Problem::new(
            "tls_server_config.client_ca_file",
            format!("{what}: no PEM certificate in it"),
        ));
    }
    let b = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let b = if optional {
        b.allow_unauthenticated()
    } else {
        b
    };
    b.build()
        .map(Some)
        .map_err(|e| Problem::new("tls_server_config.client_ca_file", format!("{what}: {e}")))
}
