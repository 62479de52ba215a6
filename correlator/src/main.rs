//! `faultline-correlator`: ingests collector windows and streams root-cause candidates.
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{parser::ValueSource, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use correlator::{config::ConfigError, logging::LogFormat};

mod cli;

use cli::{fleet, nats_auth, replay, reports, serve, subscribe};

/// faultline's correlator.
#[derive(Debug, Parser)]
#[command(name = "faultline-correlator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr: `text`, or `json` (one object per line) for a
    /// log shipper [the config file's `log_format`, default text].
    #[arg(
        long = correlator::config::LOG_FORMAT.long(),
        global = true,
        value_enum,
        value_name = "FORMAT",
        env = correlator::config::LOG_FORMAT.env_var()
    )]
    log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the ingest API.
    Serve(serve::ServeArgs),
    /// One view over sharded correlators: every shard's incident updates
    /// from NATS JetStream into one open list, history, web UI and
    /// Alertmanager (docs/scale-out.md).
    Fleet(fleet::FleetArgs),
    /// NATS credentials for the scale-out path: an nkey per collector host,
    /// correlator shard and fleet view, and the nats-server `auth.conf`
    /// that allows each only its role (docs/scale-out.md, trust). Seeds
    /// already in DIR are kept.
    NatsAuth(nats_auth::NatsAuthArgs),
    /// Incidents from the history database, newest first.
    Incidents(reports::IncidentsArgs),
    /// Recurring offenders: entities with repeated incidents (replacement candidates).
    Offenders(reports::OffendersArgs),
    /// Usage per job or team for chargeback, from the history database
    /// (hourly sums of the collectors' usage rows); unattributed usage is its
    /// own line and `TOTAL` the sum of all lines.
    Usage(reports::UsageArgs),
    /// Write a test PKI for mTLS (CA, server and per-host client certificates).
    Certs(correlator::certs::CertsArgs),
    /// Acknowledge an open incident through a running correlator's web
    /// API (its notifications stop; it stays open and keeps explaining its
    /// symptoms), or clear an acknowledgement (`--clear`).
    Ack(correlator::ack::cli::AckArgs),
    /// Kubernetes init step of the correlator (deploy/kubernetes): its TLS
    /// server certificate in DIR (made once: a CA and a certificate for
    /// --server-name), and that CA published as `ca.crt` of a ConfigMap the
    /// collectors mount to verify the correlator.
    KubeTls(KubeTlsArgs),
    /// Check a config file and print the effective settings (defaults filled
    /// in) as TOML: exit 0 when valid, 2 with one line naming the problem.
    /// The file as `FILE` or `--config FILE`, as `faultline-collector
    /// check-config` takes it.
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        /// The config file (the same as `FILE`; `FILE` wins over the
        /// environment variable).
        #[arg(long, value_name = "FILE", env = correlator::config::CONFIG_ENV)]
        config: Option<std::path::PathBuf>,
    },
    /// Subscribe to a running correlator and print candidate updates live.
    Subscribe(subscribe::SubscribeArgs),
    /// Replay windows (JSON lines, docs/replay.md) through the detectors,
    /// with the inputs `serve` judges with (`--config`, `--topology`,
    /// `--cluster`), and print candidate updates as JSON lines.
    Replay(replay::ReplayArgs),
}

// `kube-tls`'s arguments (no doc comment: the variant's is its help).
#[derive(Debug, clap::Args)]
struct KubeTlsArgs {
    /// Directory of `server.pem`, `server.key` and `ca.pem` (on the
    /// correlator's volume, so they survive restarts).
    #[arg(long, value_name = "DIR")]
    dir: std::path::PathBuf,
    /// DNS names (or IPs) of the server certificate, repeatable.
    #[arg(long = "server-name", required = true)]
    server_names: Vec<String>,
    /// The ConfigMap that receives `ca.crt`.
    #[arg(long, value_name = "NAME", default_value = "faultline-correlator-ca")]
    configmap: String,
    /// Its namespace (default: this pod's).
    #[arg(long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    #[command(flatten)]
    api: correlator::kube::ApiArgs,
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config_from_env = matches.subcommand().is_some_and(|(_, sub)| {
        sub.try_contains_id("config").is_ok()
            && sub.value_source("config") == Some(ValueSource::EnvVariable)
    });
    let format = match log_format(&cli, config_from_env) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("faultline-correlator: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    correlator::logging::init_as("info", format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultline-correlator: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli, config_from_env)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `replay … | head`: the reader left; stop quietly, as Unix tools do.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) || e
                .downcast_ref::<correlator::replay::ReplayError>()
                .is_some_and(|r| {
                    matches!(r, correlator::replay::ReplayError::Io { error, .. }
                        if error.kind() == std::io::ErrorKind::BrokenPipe)
                });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("faultline-correlator: error: {e:#}");
            if e.downcast_ref::<correlator::replay::ReplayError>()
                .is_some_and(|r| matches!(r, correlator::replay::ReplayError::Invalid { .. }))
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// `--log-format` (or its variable), else the daemon's config file's
/// `log_format`. `serve`'s and `fleet`'s file is read here first, so that
/// one from `FAULTLINE_CONFIG` that cannot be used is named with the
/// variable (the command reads it again).
fn log_format(cli: &Cli, config_from_env: bool) -> Result<LogFormat, ConfigError> {
    let path = match &cli.command {
        Command::Serve(a) => a.config.as_deref(),
        Command::Fleet(a) => a.config.as_deref(),
        _ => None,
    };
    let file = match path {
        Some(p) if config_from_env => Some(correlator::config::load_file_from_env(p)?),
        Some(p) => Some(correlator::config::load_file(p)?),
        None => None,
    };
    Ok(cli
        .log_format
        .or(file.map(|f| f.log_format))
        .unwrap_or_default())
}

async fn run(cli: Cli, config_from_env: bool) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve::serve(args).await?,
        Command::Fleet(args) => fleet::fleet(args).await?,
        Command::NatsAuth(args) => {
            for p in nats_auth::run(&args)? {
                println!("{}", p.display());
            }
        }
        Command::Subscribe(args) => subscribe::subscribe(args).await?,
        Command::Certs(args) => {
            for p in correlator::certs::write_pki(&args)? {
                println!("{}", p.display());
            }
        }
        Command::KubeTls(args) => kube_tls(args).await?,
        Command::Ack(args) => println!("{}", correlator::ack::cli::run(&args).await?),
        Command::Incidents(args) => reports::incidents(args)?,
        Command::Offenders(args) => reports::offenders(args)?,
        Command::Usage(args) => reports::usage(args)?,
        Command::CheckConfig { file, config } => check_config(file, config, config_from_env)?,
        Command::Replay(args) => replay::run(args)?,
    }
    Ok(())
}

/// `kube-tls`: the server certificate (made once) and its CA published.
async fn kube_tls(a: KubeTlsArgs) -> Result<()> {
    let made = correlator::certs::ensure_server_pki(&a.dir, &a.server_names)?;
    let ca = proto::client_tls::read_certificates(&a.dir.join("ca.pem"))?;
    let namespace = match a.namespace {
        Some(n) => n,
        None => proto::bounded_read::read_to_string(
            std::path::Path::new(correlator::kube::NAMESPACE_FILE),
            4096,
        )
        .with_context(|| {
            format!(
                "reading this pod's namespace from {} (or give --namespace)",
                correlator::kube::NAMESPACE_FILE
            )
        })?
        .trim()
        .to_string(),
    };
    let api = correlator::kube::Api::new(&a.api)?;
    correlator::kube::publish_ca(
        &api,
        &namespace,
        &a.configmap,
        &String::from_utf8_lossy(&ca),
    )
    .await?;
    println!(
        "{} the server certificate in {}; its CA is ca.crt of ConfigMap {namespace}/{}",
        if made { "wrote" } else { "kept" },
        a.dir.display(),
        a.configmap
    );
    Ok(())
}

/// `check-config`: exit 0 and the effective settings, or 2 and the problem.
fn check_config(
    file: Option<std::path::PathBuf>,
    config: Option<std::path::PathBuf>,
    config_from_env: bool,
) -> Result<()> {
    // `FILE` wins over `FAULTLINE_CONFIG` (a file given on the command line).
    let from_env = config_from_env && file.is_none();
    let config = if config_from_env && file.is_some() {
        None
    } else {
        config
    };
    let file = match (file, config) {
        (Some(f), Some(c)) if f != c => {
            eprintln!(
                "faultline-correlator: check-config: two config files ({} and --config {}); give one",
                f.display(),
                c.display()
            );
            std::process::exit(2);
        }
        (Some(f), _) | (None, Some(f)) => f,
        (None, None) => {
            eprintln!("faultline-correlator: check-config needs the config file: check-config FILE (or --config FILE)");
            std::process::exit(2);
        }
    };
    let loaded = if from_env {
        correlator::config::load_file_from_env(&file)
    } else {
        correlator::config::load_file(&file)
    };
    let cfg = match loaded {
        Ok(c) => c,
        Err(e) => {
            eprintln!("faultline-correlator: error: {e:#}");
            std::process::exit(2);
        }
    };
    // The web config file it names is checked too (certificates, hashes).
    if let Err(e) = cfg.web.web_config() {
        eprintln!("faultline-correlator: error: [web] web_config_file: {e}");
        std::process::exit(2);
    }
    let text = cfg.to_toml().context("printing the settings")?;
    println!(
        "# {}: valid; effective settings\n{text}# config ok",
        file.display()
    );
    Ok(())
}
