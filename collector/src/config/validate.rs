//! [`FileConfig::validate`]: every value the sections' types cannot rule
//! out, refused with the key it belongs to. The bounds are the keys'
//! declarations in each section's file ([`proto::config_key::Key`]); this
//! file holds none of its own.
use proto::config_key::Key;

use super::{
    collector::WINDOW_SECS,
    error::ConfigError,
    values::{parse_listen_addr, seconds},
    FileConfig,
};
use crate::{
    cuda::section::LAUNCH_BUDGET,
    ib::FilterError,
    lustre::section::MAX_TARGETS,
    nccl::section::{MAX_JOB_TOTALS, RESCAN_S, RETAIN_EXITED_S},
    nfs::section::MAX_MOUNTS,
    otlp::SectionError,
    stream::{
        check_endpoint,
        section::{
            NATS_BUCKETS, NATS_MAX_BYTES, NATS_MAX_BYTES_SERVERS, NATS_REPLICAS, NATS_STREAM,
            NATS_SUBJECT, SPOOL_MAX_BYTES,
        },
    },
    switches::section::{INTERVAL_S, MAX_PORTS, TIMEOUT_S},
    usage::section::{MAX_JOBS, MAX_TEAMS},
};

/// `v` as seconds within `key`'s bounds, or the error naming the key.
fn secs(key: &Key<f64>, v: f64) -> Result<(), ConfigError> {
    seconds(v, key.lo(), key.hi())
        .map(drop)
        .map_err(|e| ConfigError::invalid(key.path, e))
}

/// `v` within `key`'s bounds, or `must be <bounds>` naming the key.
fn within<T: Copy + PartialOrd + std::fmt::Display>(key: &Key<T>, v: T) -> Result<(), ConfigError> {
    if key.contains(v) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        key.path,
        format_args!("must be {}", key.range_text()),
    ))
}

impl From<FilterError> for ConfigError {
    fn from(e: FilterError) -> Self {
        Self::invalid(e.key(), e)
    }
}

impl From<SectionError> for ConfigError {
    fn from(e: SectionError) -> Self {
        Self::invalid(e.key(), e)
    }
}

impl FileConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_collector()?;
        self.validate_stream()?;
        secs(&RESCAN_S, self.nccl.rescan_s)?;
        secs(&RETAIN_EXITED_S, self.nccl.retain_exited_s)?;
        within(&MAX_JOB_TOTALS, self.nccl.max_job_totals)?;
        // A NaN budget compared false everywhere: never duty-cycled
        // (`contains` refuses NaN).
        if !LAUNCH_BUDGET.contains(self.cuda.launch_budget) {
            return Err(ConfigError::invalid(
                LAUNCH_BUDGET.path,
                format_args!(
                    "must be a share of CPU time {} (0 = always exact)",
                    LAUNCH_BUDGET.range_text()
                ),
            ));
        }
        self.ib.filter()?;
        if let Some((key, why)) = self.kmsg.problem() {
            return Err(ConfigError::invalid(key, why));
        }
        {
            use crate::kmsg::section::{JOIN_S, MAX_EVENTS, MAX_LINE_BYTES, MAX_RECORDS};
            within(&MAX_RECORDS, self.kmsg.max_records)?;
            within(&MAX_LINE_BYTES, self.kmsg.max_line_bytes)?;
            within(&MAX_EVENTS, self.kmsg.max_events)?;
            if !JOIN_S.contains(self.kmsg.join_s) {
                return Err(ConfigError::invalid(
                    JOIN_S.path,
                    format_args!("must be {} seconds", JOIN_S.range_text()),
                ));
            }
        }
        self.otlp.validate()?;
        self.validate_usage()?;
        within(&MAX_MOUNTS, self.nfs.max_mounts)?;
        if self.nfs.mountstats.trim().is_empty() {
            return Err(ConfigError::invalid(
                "nfs.mountstats",
                "must name a file under collector.proc_root (self/mountstats, 1/mountstats)",
            ));
        }
        if !self.stream.shard.is_empty() && !vocab::nats::valid_shard(&self.stream.shard) {
            return Err(ConfigError::invalid(
                "stream.shard",
                "must be one NATS subject token: no '.', '*', '>' or white space (a leaf switch's name, say)",
            ));
        }
        let s = &self.stream;
        if s.nats_max_bytes != NATS_MAX_BYTES_SERVERS && !NATS_MAX_BYTES.contains(s.nats_max_bytes)
        {
            return Err(ConfigError::invalid(
                NATS_MAX_BYTES.path,
                format_args!(
                    "must be {NATS_MAX_BYTES_SERVERS} (the server's store limit) or {} (1 MiB)",
                    NATS_MAX_BYTES.range_text()
                ),
            ));
        }
        if !NATS_REPLICAS.contains(s.nats_replicas) {
            return Err(ConfigError::invalid(
                NATS_REPLICAS.path,
                format_args!("must be {} (JetStream's limit)", NATS_REPLICAS.range_text()),
            ));
        }
        if !NATS_BUCKETS.contains(s.nats_buckets) {
            return Err(ConfigError::invalid(
                NATS_BUCKETS.path,
                format_args!("must be {}", NATS_BUCKETS.range_text()),
            ));
        }
        if self.stream.nats_stream.is_empty() || !vocab::nats::valid_shard(&self.stream.nats_stream)
        {
            return Err(ConfigError::invalid(
                NATS_STREAM.path,
                "must be a JetStream stream name: not empty, no '.', '*', '>' or white space",
            ));
        }
        if self.stream.nats_subject.is_empty()
            || self
                .stream
                .nats_subject
                .split('.')
                .any(|t| !vocab::nats::valid_shard(t))
        {
            return Err(ConfigError::invalid(
                NATS_SUBJECT.path,
                "must be dot-separated subject tokens without '*', '>' or white space",
            ));
        }
        within(&MAX_PORTS, self.switches.max_ports)?;
        secs(&INTERVAL_S, self.switches.interval_s)?;
        secs(&TIMEOUT_S, self.switches.timeout_s)?;
        within(&MAX_TARGETS, self.lustre.max_targets)?;
        if self.lustre.enabled && self.lustre.roots.is_empty() {
            return Err(ConfigError::invalid(
                "lustre.roots",
                "must name at least one directory with the client's osc/ and mdc/ (/sys/kernel/debug/lustre, /proc/fs/lustre), or set lustre.enabled = false",
            ));
        }
        if self.lustre.mounts.trim().is_empty() {
            return Err(ConfigError::invalid(
                "lustre.mounts",
                "must name a file under collector.proc_root (self/mounts, 1/mounts)",
            ));
        }
        if let Some(p) = &self.verbs.provider {
            p.target()
                .map_err(|e| ConfigError::invalid("verbs.provider", e))?;
        }
        Ok(())
    }

    fn validate_collector(&self) -> Result<(), ConfigError> {
        let c = &self.collector;
        seconds(c.window_secs, WINDOW_SECS.lo(), WINDOW_SECS.hi())
            .map_err(|e| ConfigError::invalid(WINDOW_SECS.path, e))?;
        parse_listen_addr(&c.metrics_addr).map_err(|e| {
            ConfigError::invalid(
                "collector.metrics_addr",
                format_args!("{:?} is not HOST:PORT or :PORT ({e})", c.metrics_addr),
            )
        })?;
        if let Some(p) = &c.web_config_file {
            webconfig::Web::load(p)
                .map_err(|e| ConfigError::invalid("collector.web_config_file", e))?;
        }
        if let Some(name) = &c.cluster {
            if !vocab::nats::valid_cluster(name) {
                return Err(ConfigError::invalid(
                    "collector.cluster",
                    format_args!(
                        "{name:?} is not a cluster name: 1 to 64 letters, digits, '-' or '_' (it is a NATS subject token and a Prometheus label value)"
                    ),
                ));
            }
        }
        if !matches!(c.log_format.as_str(), "text" | "json") {
            return Err(ConfigError::invalid(
                "collector.log_format",
                format_args!("{:?} is not \"text\" or \"json\"", c.log_format),
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&c.log).is_err() {
            return Err(ConfigError::invalid(
                "collector.log",
                format_args!("{:?} is not a valid log filter", c.log),
            ));
        }
        Ok(())
    }

    fn validate_stream(&self) -> Result<(), ConfigError> {
        if let Some(e) = &self.stream.endpoint {
            check_endpoint(e).map_err(|why| {
                ConfigError::invalid(
                    "stream.endpoint",
                    format_args!("{e:?} {why}; use a URL like http://127.0.0.1:50051"),
                )
            })?;
            if e.starts_with("nats://") {
                let s = &self.stream;
                if s.tls_ca.is_some()
                    || s.tls_cert.is_some()
                    || s.tls_key.is_some()
                    || s.token_file.is_some()
                {
                    return Err(ConfigError::invalid(
                        "stream.endpoint",
                        "tls_ca, tls_cert, tls_key and token_file are for an https:// correlator; a nats:// endpoint takes nats_ca and nats_nkey_file",
                    ));
                }
                self.validate_nats_credentials(e)?;
            } else if self.stream.nats_ca.is_some() || self.stream.nats_nkey_file.is_some() {
                return Err(ConfigError::invalid(
                    "stream.nats_ca",
                    "nats_ca and nats_nkey_file are for a nats:// endpoint",
                ));
            } else {
                self.stream
                    .auth()
                    .check(e)
                    .map_err(|err| ConfigError::invalid("stream.endpoint", err))?;
            }
        }
        let bytes = self.stream.spool_max_bytes;
        if !SPOOL_MAX_BYTES.contains(bytes) {
            return Err(ConfigError::invalid(
                SPOOL_MAX_BYTES.path,
                format_args!("must be {}, got {bytes}", SPOOL_MAX_BYTES.range_text()),
            ));
        }
        Ok(())
    }

    /// NATS credentials: an nkey only over TLS, and never beside a
    /// password in the URL.
    fn validate_nats_credentials(&self, endpoint: &str) -> Result<(), ConfigError> {
        let s = &self.stream;
        if let Some(f) = &s.nats_nkey_file {
            if s.nats_ca.is_none() {
                return Err(ConfigError::invalid(
                    "stream.nats_nkey_file",
                    format_args!("{} needs stream.nats_ca: the nkey authenticates this host only over TLS to the NATS servers (docs/scale-out.md)", f.display()),
                ));
            }
            let authority = endpoint
                .trim_start_matches("nats://")
                .split('/')
                .next()
                .unwrap_or_default();
            if authority.contains('@') {
                return Err(ConfigError::invalid(
                    "stream.endpoint",
                    "a user or password in the nats:// URL beside stream.nats_nkey_file: use one credential (the nkey)",
                ));
            }
        }
        Ok(())
    }

    fn validate_usage(&self) -> Result<(), ConfigError> {
        let jobs = self.usage.max_jobs;
        if !MAX_JOBS.contains(jobs) {
            let (lo, hi) = (
                MAX_JOBS.min.unwrap_or(0),
                MAX_JOBS.max.unwrap_or(usize::MAX),
            );
            return Err(ConfigError::invalid(
                MAX_JOBS.path,
                format_args!("must be within {lo}..={hi}, got {jobs}"),
            ));
        }
        if self.usage.teams.len() > MAX_TEAMS {
            return Err(ConfigError::invalid(
                "usage.teams",
                format_args!(
                    "at most {MAX_TEAMS} job → team entries, got {}",
                    self.usage.teams.len()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod nats_tests {
    use crate::config::FileConfig;

    fn parse(stream: &str) -> Result<FileConfig, String> {
        FileConfig::parse(&format!("[stream]\n{stream}"), "c.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn an_nkey_needs_tls_to_nats_and_no_password_beside_it() {
        let url = "endpoint = \"nats://n:4222\"\n";
        let ca = "nats_ca = \"/ca.pem\"\n";
        let nk = "nats_nkey_file = \"/h.nk\"\n";
        assert!(parse(&format!("{url}{ca}{nk}")).is_ok());
        let e = parse(&format!("{url}{nk}")).expect_err("no CA");
        assert!(
            e.contains("stream.nats_nkey_file") && e.contains("nats_ca"),
            "{e}"
        );
        let e = parse(&format!("endpoint = \"nats://u:p@n:4222\"\n{ca}{nk}")).expect_err("two");
        assert!(e.contains("stream.endpoint"), "{e}");
        let e = parse(&format!(
            "endpoint = \"https://c:50051\"\ntls_ca = \"/x\"\n{ca}"
        ))
        .expect_err("https");
        assert!(e.contains("stream.nats_ca"), "{e}");
        // TLS without an nkey: allowed (a server authenticating otherwise).
        assert!(parse(&format!("{url}{ca}")).is_ok());
    }
}
