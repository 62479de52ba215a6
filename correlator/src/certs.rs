//! `faultline-correlator certs`: a test PKI for mTLS — a CA, the
//! correlator's server certificate and one client certificate per host
//! (its DNS name is the hostname the collector reports), plus subscriber
//! certificates, which name no host (no subject alternative name at all: a
//! subscriber can read incidents but never send windows, whatever its name).
//! For production, use the site's CA (docs/security.md).
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

#[derive(Debug, clap::Args)]
pub struct CertsArgs {
    /// Directory to write into (created): ca.pem, ca.key, server.pem,
    /// server.key, HOST.pem/HOST.key per host, NAME.pem/NAME.key per subscriber.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Names (DNS or IP) of the correlator's server certificate, repeatable.
    #[arg(long = "server-name", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    pub server_names: Vec<String>,
    /// A collector host to issue a client certificate for, repeatable.
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// A subscriber (client certificate that names no collector host), repeatable.
    #[arg(long = "subscriber", default_values_t = ["subscriber".to_string()])]
    pub subscribers: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("certificate for {name:?}: {source}")]
    Generate {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{name:?} is not a usable file name for a certificate")]
    BadName { name: String },
    #[error("{name:?} is both a --host and a --subscriber: a subscriber's certificate must not be a host's")]
    SubscriberIsHost { name: String },
}

fn write(path: &Path, text: &str, private: bool) -> Result<(), CertsError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| CertsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if private {
        o.mode(0o600);
    }
    let mut f = o.open(path).map_err(err)?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(err)
}

fn gen(name: &str) -> impl FnOnce(rcgen::Error) -> CertsError + '_ {
    move |source| CertsError::Generate {
        name: name.to_string(),
        source,
    }
}

fn params(cn: &str, sans: &[String]) -> Result<CertificateParams, CertsError> {
    let mut p = CertificateParams::new(sans.to_vec()).map_err(|source| CertsError::Generate {
        name: cn.into(),
        source,
    })?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    Ok(p)
}

/// Writes the PKI; returns the files written.
pub fn write_pki(args: &CertsArgs) -> Result<Vec<PathBuf>, CertsError> {
    if let Some(s) = args.subscribers.iter().find(|s| args.hosts.contains(s)) {
        return Err(CertsError::SubscriberIsHost { name: s.clone() });
    }
    std::fs::create_dir_all(&args.out).map_err(|source| CertsError::Write {
        path: args.out.clone(),
        source,
    })?;
    let mut written = Vec::new();
    let mut emit = |stem: &str, cert: &str, key: &str| -> Result<(), CertsError> {
        if stem.is_empty() || stem.contains('/') || stem.starts_with('.') {
            return Err(CertsError::BadName { name: stem.into() });
        }
        let c = args.out.join(format!("{stem}.pem"));
        let k = args.out.join(format!("{stem}.key"));
        write(&c, cert, false)?;
        write(&k, key, true)?;
        written.extend([c, k]);
        Ok(())
    };
    let ca_key = KeyPair::generate().map_err(gen("ca"))?;
    let mut ca = params("faultline test CA", &[])?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(gen("ca"))?;
    emit("ca", &ca_cert.pem(), &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = |stem: &str, sans: &[String], usage| -> Result<(), CertsError> {
        let key = KeyPair::generate().map_err(gen(stem))?;
        let mut p = params(stem, sans)?;
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &issuer).map_err(gen(stem))?;
        emit(stem, &cert.pem(), &key.serialize_pem())
    };
    leaf(
        "server",
        &args.server_names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    for h in &args.hosts {
        leaf(
            h,
            std::slice::from_ref(h),
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
    }
    for s in &args.subscribers {
        // No DNS or IP name: it cannot speak for any host.
        leaf(s, &[], ExtendedKeyUsagePurpose::ClientAuth)?;
    }
    Ok(written)
}

/// The correlator's own server certificate in `dir` (`server.pem`,
/// `server.key`, `ca.pem`): reused when all three are there, else a new CA
/// and a server certificate for `names` are written (remove the directory
/// to issue new ones). Whether it wrote them.
pub fn ensure_server_pki(dir: &Path, names: &[String]) -> Result<bool, CertsError> {
    if ["server.pem", "server.key", "ca.pem"]
        .iter()
        .all(|f| dir.join(f).is_file())
    {
        return Ok(false);
    }
    write_pki(&CertsArgs {
        out: dir.to_path_buf(),
        server_names: names.to_vec(),
        hosts: Vec::new(),
        subscribers: Vec::new(),
    })?;
    Ok(true)
}
