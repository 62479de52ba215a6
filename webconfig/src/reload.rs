//! The server's certificate and key, re-read when their files change (as
//! exporter-toolkit picks up renewed certificates without a restart): at
//! most once a second, on a handshake, the files' modification times are
//! compared; a changed pair is loaded and used from then on. A pair that
//! does not load (a half-written renewal, a key that does not fit) is
//! logged and the previous one kept, retried on the next change.
use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{
    crypto::CryptoProvider,
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use crate::Problem;

/// How often the files' times are looked at, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Largest PEM file read (a certificate chain or key).
pub(crate) const MAX_PEM: u64 = 1 << 20;

/// `cert` (a chain) and `key` (PEM) as one certified key; `what` names
/// them in errors (file names, or the inline keys).
pub(crate) fn certified(
    cert: &[u8],
    key: &[u8],
    what: (&str, &str),
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Problem> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Problem::new("tls_server_config.cert_file", format!("{}: {e}", what.0)))?;
    if chain.is_empty() {
        return Err(Problem::new(
            "tls_server_config.cert_file",
            format!("{}: no PEM certificate in it", what.0),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        Problem::new(
            "tls_server_config.key_file",
            format!("{}: no PEM private key in it ({e})", what.1),
        )
    })?;
    CertifiedKey::from_der(chain, key_der, provider).map_err(|e| {
        Problem::new(
            "tls_server_config.key_file",
            format!("{} does not fit {} ({e})", what.1, what.0),
        )
    })
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

struct Current {
    key: Arc<CertifiedKey>,
    stamp: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

/// The certificate rustls serves, reloaded from `files` when they change
/// (never for an inline `cert`/`key`).
pub(crate) struct Reloading {
    files: Option<(PathBuf, PathBuf)>,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

impl std::fmt::Debug for Reloading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Reloading {
    pub(crate) fn new(
        key: CertifiedKey,
        files: Option<(PathBuf, PathBuf)>,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        let stamp = files
            .as_ref()
            .map_or((None, None), |(c, k)| (modified(c), modified(k)));
        Self {
            files,
            provider,
            current: Mutex::new(Current {
                key: Arc::new(key),
                stamp,
                checked: Instant::now(),
            }),
        }
    }

    fn reload(&self, cur: &mut Current) {
        let Some((cert, key)) = &self.files else {
            return;
        };
        if cur.checked.elapsed() < CHECK_EVERY {
            return;
        }
        cur.checked = Instant::now();
        let stamp = (modified(cert), modified(key));
        if stamp == cur.stamp {
            return;
        }
        cur.stamp = stamp;
        let read = |p: &Path| proto::bounded_read::read(p, MAX_PEM);
        let loaded = match (read(cert), read(key)) {
            (Ok(c), Ok(k)) => certified(
                &c,
                &k,
                (&cert.display().to_string(), &key.display().to_string()),
                &self.provider,
            )
            .map_err(|p| format!("{}: {}", p.key, p.why)),
            (Err(e), _) => Err(format!("{}: {e}", cert.display())),
            (_, Err(e)) => Err(format!("{}: {e}", key.display())),
        };
        match loaded {
            Ok(k) => {
                cur.key = Arc::new(k);
                tracing::info!(cert = %cert.display(), "web config file: TLS certificate reloaded");
            }
            Err(why) => {
                metrics::counter!(crate::TLS_RELOAD_ERRORS.name).increment(1);
                tracing::error!(error = %why, "web config file: the changed TLS certificate or key does not load; serving the previous one");
            }
        }
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        self.reload(&mut cur);
        Some(cur.key.clone())
    }
}
