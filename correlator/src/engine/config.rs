//! Every detection threshold, with its unit and default, as the `[detect]`
//! part of the correlator's config file (`faultline-correlator serve
//! --config FILE`). `docs/detection.md` gives the anchor of each default.
//!
//! Defaults come from physics and public operating points (IBTA's BER
//! limit, NVIDIA UFM/ibdiagnet practice, NVMe/SSD/HDD latency classes), not
//! from what makes the simulator pass.
use serde::{Deserialize, Serialize};

/// All detector settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    pub ib: IbConfig,
    pub storage: StorageConfig,
    pub workload: WorkloadConfig,
    pub interference: InterferenceConfig,
    pub nccl: NcclConfig,
    pub incidents: IncidentConfig,
    pub limits: LimitsConfig,
}

/// NCCL communicators (`collective_hang`, inferred step time; the
/// anchors are in `engine::nccl` and docs/detection.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NcclConfig {
    pub enabled: bool,
    /// A communicator is hung when every rank has been silent this many of
    /// its median intervals between collectives (a memoryless cadence stays
    /// silent that long with probability e^-20) ...
    pub hang_intervals: f64,
    /// ... and at least this many seconds (window and clock granularity).
    pub hang_min_s: f64,
    /// Seconds after which a communicator nobody reports is forgotten.
    pub forget_s: f64,
    /// Communicators and ranks per communicator tracked (more are dropped, counted).
    pub max_communicators: usize,
    pub max_ranks: usize,
    /// Ranks tracked over all communicators together (memory bound).
    pub max_ranks_total: usize,
    /// A rank that issues a communicator's collectives this share of its
    /// interval after its fastest peer on the same host holds up the job
    /// by at least that share: a straggler (`engine::nccl_lag`) ...
    pub straggler_lag_fraction: f64,
    /// ... when the lag is also at least this many seconds (above the
    /// scheduling and data-loader jitter between ranks of one host).
    pub straggler_lag_min_s: f64,
}

impl Default for NcclConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            hang_intervals: 20.0,
            hang_min_s: 1.0,
            forget_s: 600.0,
            max_communicators: 4096,
            max_ranks: 16_384,
            max_ranks_total: 262_144,
            straggler_lag_fraction: 0.3,
            straggler_lag_min_s: 0.01,
        }
    }
}

/// Interference between tenants on a shared resource (`interference`;
/// docs/detection.md gives each anchor).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct InterferenceConfig {
    pub enabled: bool,
    /// GPU busy fraction (NVML utilisation) at which a time-sliced GPU has
    /// no idle slots left for another context.
    pub gpu_saturation: f64,
    /// Port bytes over line rate at which a link queues (M/M/1 waiting time
    /// ρ/(1−ρ) = 4 service times at 0.8).
    pub fabric_saturation: f64,
    /// Mean requests in flight (Little's law: Σ latency / window) at which a
    /// device is never idle (iostat's %util = 100 %).
    pub storage_saturation: f64,
    /// The aggressor's load since the victim's onset over its own before.
    pub jump_ratio: f64,
    /// The aggressor's share of the resource's utilisation rise.
    pub min_share: f64,
    /// The victim's own usage per step may have grown by at most this
    /// fraction of its slowdown (else it is its own change).
    pub own_change: f64,
    /// Windows of history per (host, resource, job).
    pub history: usize,
    /// (host, resource, job) series kept.
    pub max_series: usize,
    /// Of those, at most this many per host: a host that reports usage of
    /// thousands of jobs cannot take the others' room.
    pub max_series_per_host: usize,
}

impl Default for InterferenceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            gpu_saturation: 0.9,
            fabric_saturation: 0.8,
            storage_saturation: 1.0,
            jump_ratio: 2.0,
            min_share: 0.5,
            own_change: 0.5,
            history: 128,
            max_series: 200_000,
            max_series_per_host: 8192,
        }
    }
}

/// Bounds on what the correlator accepts and keeps (docs/security.md): every
/// refusal or drop is counted (`faultline_ingest_rejected_total`,
/// `faultline_engine_dropped_total`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// A window may be at most this many sequence numbers past its origin's last.
    pub max_seq_jump: u64,
    /// Sequence numbers an origin may skip (windows it says it lost) per
    /// minute of wall-clock time; unused allowance accumulates up to
    /// `max_seq_jump`, so chained jumps cannot move a sequence further
    /// (0 = no budget, only `max_seq_jump` per window).
    pub max_seq_skip_per_min: u64,
    /// Seconds a window's end may lie ahead of the correlator's clock (0 = no check).
    pub max_future_s: f64,
    /// Seconds a window's end may lie behind the correlator's clock (0 = no check).
    pub max_past_s: f64,
    /// Distinct hosts tracked; windows of further hosts are refused.
    pub max_hosts: usize,
    /// Collector runs remembered per host (least recently seen forgotten first).
    pub max_origins_per_host: usize,
    /// Hosts silent this long (seconds) are forgotten by ingest (0 = never).
    pub idle_forget_s: f64,
    /// Distinct jobs judged per window; the rest of the window's job data is dropped.
    pub max_jobs_per_window: usize,
    /// Step samples (ranks) judged per window.
    pub max_ranks_per_window: usize,
    /// IB ports, GPUs and block devices (each) judged per window.
    pub max_entities_per_window: usize,
    /// Events (XIDs, RDMA async events, port state changes) judged per window.
    pub max_events_per_window: usize,
    /// CUDA, verbs, workload, usage and NCCL Inspector rows (each) judged
    /// per window.
    pub max_rows_per_window: usize,
    /// Distinct IB ports, GPUs and block devices (together) remembered per
    /// host; rows naming further new ones are dropped until the host is
    /// forgotten (`idle_forget_s`).
    pub max_entities_per_host: usize,
    /// Open incidents; findings that would open more are dropped.
    pub max_open_incidents: usize,
    /// Open incidents charged to one host (the host whose window raised
    /// them; a `node_lost` to the lost host), so that one host's flood of
    /// findings cannot fill `max_open_incidents` for everyone.
    pub max_open_incidents_per_host: usize,
    /// Client connections in total; further ones are closed at accept.
    pub max_connections: usize,
    /// Client connections per remote address.
    pub max_connections_per_peer: usize,
    /// Concurrent gRPC streams per connection (HTTP/2 SETTINGS).
    pub max_streams_per_connection: u32,
    /// Seconds a new connection has to send its first 24 bytes (HTTP/2
    /// preface or TLS ClientHello).
    pub handshake_timeout_s: f64,
    /// Seconds a connection may stay open without an authenticated gRPC
    /// stream in progress: an HTTP/2 client that sends the preface and
    /// answers PINGs but opens no stream is closed after this.
    pub idle_connection_timeout_s: f64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_seq_jump: 1_000_000,
            max_seq_skip_per_min: 6000,
            max_future_s: 120.0,
            max_past_s: 7.0 * 86_400.0,
            max_hosts: 100_000,
            max_origins_per_host: 64,
            idle_forget_s: 86_400.0,
            max_jobs_per_window: 1024,
            max_ranks_per_window: 16_384,
            max_entities_per_window: 1024,
            max_events_per_window: 1024,
            max_rows_per_window: 16_384,
            max_entities_per_host: 4096,
            max_open_incidents: 10_000,
            max_open_incidents_per_host: 256,
            max_connections: 1000,
            max_connections_per_peer: 256,
            max_streams_per_connection: 64,
            handshake_timeout_s: 5.0,
            idle_connection_timeout_s: 20.0,
        }
    }
}

impl LimitsConfig {
    /// The connection part.
    pub fn conn(&self) -> crate::conn::ConnLimits {
        let idle = proto::listen::seconds(self.idle_connection_timeout_s);
        crate::conn::ConnLimits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            handshake_timeout: proto::listen::seconds(self.handshake_timeout_s),
            idle_timeout: idle,
            write_timeout: idle,
        }
    }

    /// The ingest part.
    pub fn ingest(&self) -> crate::ingest::IngestLimits {
        crate::ingest::IngestLimits {
            max_seq_jump: self.max_seq_jump,
            max_seq_skip_per_min: self.max_seq_skip_per_min,
            max_future_s: self.max_future_s,
            max_past_s: self.max_past_s,
            max_hosts: self.max_hosts,
            max_origins_per_host: self.max_origins_per_host,
            idle_forget_s: self.idle_forget_s,
        }
    }
}

/// Workload symptoms: a job's step time and a model server's latency
/// against their own history (a change-point in per-step/per-request units,
/// so the window length does not matter), and how they join a root cause.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Smallest step-time increase (fraction) reported as a job slowdown.
    pub min_slowdown: f64,
    /// Smallest increase (fraction) of a model's mean time to first token,
    /// time per output token or request duration reported as a latency
    /// regression.
    pub min_latency_increase: f64,
    /// How many standard errors (of the mean log step time or latency over
    /// the elevated run) the increase must reach: 5 is a one-sided tail of
    /// ~3e-7 per test.
    pub z: f64,
    /// Seconds the increase must last (event time, not windows).
    pub min_persist_s: f64,
    /// Seconds a symptom waits for an infrastructure cause before it opens
    /// its own `job_slowdown` / `inference_latency` incident.
    pub explain_grace_s: f64,
    /// Observations (steps or requests) the own history needs before it
    /// judges.
    pub warm_observations: u64,
    /// Floor of the per-observation noise (standard deviation of the log
    /// step time): a perfectly steady synthetic job does not make a 1 %
    /// wobble significant.
    pub min_noise: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            min_slowdown: 0.10,
            min_latency_increase: 0.25,
            z: 5.0,
            min_persist_s: 20.0,
            explain_grace_s: 20.0,
            warm_observations: 30,
            min_noise: 0.02,
        }
    }
}

/// InfiniBand/RoCE link judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IbConfig {
    /// Reference bit error rate (errors per bit signalled) a healthy port is
    /// assumed not to exceed; the floor of the fabric baseline.
    pub reference_ber: f64,
    /// Absolute alarm line (errors per bit): a port significantly above it is
    /// degraded even when the whole fabric is that bad.
    pub alarm_ber: f64,
    /// Seconds of history the BER and retry tests sum over (at least one
    /// window, whatever the window length).
    pub horizon_s: f64,
    /// One-sided Poisson tail probability below which a port's errors are
    /// significant (per port, per window, per test).
    pub significance: f64,
    /// Tail probability below which an already degraded port stays degraded
    /// (hysteresis: looser than `significance`).
    pub clear_significance: f64,
    /// Reference transport retries (hw_counters retransmit/timeout/sequence
    /// errors) per packet sent and received.
    pub retry_reference_per_packet: f64,
    /// A port's own history (median of recent normal windows) times this is
    /// its retry reference, for links that are noisy when healthy
    /// (emulated RoCE).
    pub own_history_factor: f64,
    /// Ports with an estimate needed before the fabric's median is used as a
    /// baseline.
    pub min_peers: usize,
    /// Downs of one port within this many seconds make it flapping.
    pub flap_horizon_s: f64,
    /// Downs (state transitions or `link_downed` increments) within
    /// `flap_horizon_s` that make a port flapping.
    pub flap_downs: usize,
}

impl Default for IbConfig {
    fn default() -> Self {
        Self {
            reference_ber: 1e-14,
            alarm_ber: 1e-12,
            horizon_s: 60.0,
            significance: 1e-9,
            clear_significance: 1e-3,
            retry_reference_per_packet: 1e-5,
            own_history_factor: 10.0,
            min_peers: 4,
            flap_horizon_s: 600.0,
            flap_downs: 2,
        }
    }
}

/// Latency floors of one device class, in milliseconds: below them nothing
/// is slow, whatever its peers do.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassFloor {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Block device latency judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Requests per window below which a device's latency is not judged.
    pub min_requests: u64,
    /// Timed requests per window below which its p99 is not judged (the
    /// p99 of fewer requests is little more than their maximum).
    pub min_requests_p99: u64,
    /// A device is slow when its p50 or p99 is this many times its class
    /// peers' median …
    pub peer_ratio: f64,
    /// … and this many times its own history (once it has one).
    pub own_ratio: f64,
    /// Devices of a class needed for a peer comparison; with fewer, a device
    /// is judged against its own history only.
    pub min_peers: usize,
    /// Consecutive slow windows before an incident opens.
    pub persist_windows: u32,
    pub nvme: ClassFloor,
    pub ssd: ClassFloor,
    pub hdd: ClassFloor,
    pub network: ClassFloor,
    /// Loop, device-mapper, zram and unknown devices.
    pub other: ClassFloor,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            min_requests: 10,
            min_requests_p99: 200,
            peer_ratio: 2.0,
            own_ratio: 2.5,
            min_peers: 4,
            persist_windows: 2,
            nvme: ClassFloor {
                p50_ms: 0.2,
                p99_ms: 2.0,
            },
            ssd: ClassFloor {
                p50_ms: 0.5,
                p99_ms: 5.0,
            },
            hdd: ClassFloor {
                p50_ms: 10.0,
                p99_ms: 100.0,
            },
            network: ClassFloor {
                p50_ms: 2.0,
                p99_ms: 50.0,
            },
            other: ClassFloor {
                p50_ms: 1.0,
                p99_ms: 20.0,
            },
        }
    }
}

impl StorageConfig {
    /// Floors of a wire device class ("nvme", "ssd", "hdd", "network", …).
    pub fn floor(&self, class: &str) -> ClassFloor {
        match class {
            "nvme" => self.nvme,
            "ssd" => self.ssd,
            "hdd" => self.hdd,
            "network" => self.network,
            _ => self.other,
        }
    }
}

/// From findings to incidents.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IncidentConfig {
    /// Seconds without a finding before an incident resolves …
    pub quiet_s: f64,
    /// … and at least this many of the host's windows.
    pub quiet_windows: u32,
    /// Confidence change worth an `updated`.
    pub update_delta: f64,
}

impl Default for IncidentConfig {
    fn default() -> Self {
        Self {
            quiet_s: 30.0,
            quiet_windows: 2,
            update_delta: 0.05,
        }
    }
}

/// A setting outside its valid range.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("detect.{key} = {value}: {why}")]
pub struct InvalidSetting {
    pub key: &'static str,
    pub value: String,
    pub why: &'static str,
}

impl DetectConfig {
    /// Checks every value's range; the first bad one is the error.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let prob = |key: &'static str, v: f64| {
            if v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err(InvalidSetting {
                    key,
                    value: v.to_string(),
                    why: "must be a probability strictly between 0 and 1",
                })
            }
        };
        let pos = |key: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(InvalidSetting {
                    key,
                    value: v.to_string(),
                    why: "must be a positive number",
                })
            }
        };
        let ib = &self.ib;
        prob("ib.reference_ber", ib.reference_ber)?;
        prob("ib.alarm_ber", ib.alarm_ber)?;
        if ib.alarm_ber < ib.reference_ber {
            return Err(InvalidSetting {
                key: "ib.alarm_ber",
                value: ib.alarm_ber.to_string(),
                why: "must not be below ib.reference_ber",
            });
        }
        pos("ib.horizon_s", ib.horizon_s)?;
        prob("ib.significance", ib.significance)?;
        prob("ib.clear_significance", ib.clear_significance)?;
        if ib.clear_significance < ib.significance {
            return Err(InvalidSetting {
                key: "ib.clear_significance",
                value: ib.clear_significance.to_string(),
                why: "must not be stricter (smaller) than ib.significance",
            });
        }
        prob(
            "ib.retry_reference_per_packet",
            ib.retry_reference_per_packet,
        )?;
        pos("ib.own_history_factor", ib.own_history_factor)?;
        pos("ib.flap_horizon_s", ib.flap_horizon_s)?;
        if ib.flap_downs < 2 {
            return Err(InvalidSetting {
                key: "ib.flap_downs",
                value: ib.flap_downs.to_string(),
                why: "must be at least 2 (one down is ib_link_down)",
            });
        }
        let st = &self.storage;
        pos("storage.peer_ratio", st.peer_ratio)?;
        pos("storage.own_ratio", st.own_ratio)?;
        if st.persist_windows == 0 {
            return Err(InvalidSetting {
                key: "storage.persist_windows",
                value: "0".into(),
                why: "must be at least 1",
            });
        }
        for (key, f) in [
            ("storage.nvme", st.nvme),
            ("storage.ssd", st.ssd),
            ("storage.hdd", st.hdd),
            ("storage.network", st.network),
            ("storage.other", st.other),
        ] {
            pos(key, f.p50_ms)?;
            pos(key, f.p99_ms)?;
        }
        let wl = &self.workload;
        pos("workload.min_slowdown", wl.min_slowdown)?;
        pos("workload.min_latency_increase", wl.min_latency_increase)?;
        pos("workload.z", wl.z)?;
        pos("workload.min_persist_s", wl.min_persist_s)?;
        pos(
            "nccl.straggler_lag_fraction",
            self.nccl.straggler_lag_fraction,
        )?;
        pos("nccl.straggler_lag_min_s", self.nccl.straggler_lag_min_s)?;
        pos("workload.min_noise", wl.min_noise)?;
        if !(wl.explain_grace_s.is_finite() && wl.explain_grace_s >= 0.0) {
            return Err(InvalidSetting {
                key: "workload.explain_grace_s",
                value: wl.explain_grace_s.to_string(),
                why: "must be 0 or a positive number of seconds",
            });
        }
        let it = &self.interference;
        prob("interference.gpu_saturation", it.gpu_saturation)?;
        pos("interference.fabric_saturation", it.fabric_saturation)?;
        pos("interference.storage_saturation", it.storage_saturation)?;
        pos("interference.jump_ratio", it.jump_ratio)?;
        prob("interference.min_share", it.min_share)?;
        pos("interference.own_change", it.own_change)?;
        if it.history < 4 || it.max_series == 0 || it.max_series_per_host == 0 {
            return Err(InvalidSetting {
                key: "interference.history",
                value: it.history.to_string(),
                why: "history must be at least 4 windows, max_series and max_series_per_host at least 1",
            });
        }
        pos("incidents.quiet_s", self.incidents.quiet_s)?;
        let l = &self.limits;
        for (key, v) in [
            ("limits.max_future_s", l.max_future_s),
            ("limits.max_past_s", l.max_past_s),
            ("limits.idle_forget_s", l.idle_forget_s),
        ] {
            if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                return Err(InvalidSetting {
                    key,
                    value: v.to_string(),
                    why: "must be 0 (no check) or a number of seconds up to 1e9",
                });
            }
        }
        for (key, v) in [
            ("limits.handshake_timeout_s", l.handshake_timeout_s),
            (
                "limits.idle_connection_timeout_s",
                l.idle_connection_timeout_s,
            ),
        ] {
            if !proto::listen::valid_timeout(v) {
                return Err(InvalidSetting {
                    key,
                    value: v.to_string(),
                    why: "must be a number of seconds in (0, 3600]",
                });
            }
        }
        for (key, v) in [
            ("limits.max_connections", l.max_connections),
            (
                "limits.max_connections_per_peer",
                l.max_connections_per_peer,
            ),
        ] {
            if !proto::listen::valid_count(v) {
                return Err(InvalidSetting {
                    key,
                    value: v.to_string(),
                    why: "must be within 1..=1048576",
                });
            }
        }
        for (key, v) in [
            ("limits.max_seq_jump", l.max_seq_jump as usize),
            ("limits.max_hosts", l.max_hosts),
            ("limits.max_origins_per_host", l.max_origins_per_host),
            ("limits.max_jobs_per_window", l.max_jobs_per_window),
            ("limits.max_ranks_per_window", l.max_ranks_per_window),
            ("limits.max_entities_per_window", l.max_entities_per_window),
            ("limits.max_events_per_window", l.max_events_per_window),
            ("limits.max_rows_per_window", l.max_rows_per_window),
            ("limits.max_entities_per_host", l.max_entities_per_host),
            ("limits.max_open_incidents", l.max_open_incidents),
            (
                "limits.max_open_incidents_per_host",
                l.max_open_incidents_per_host,
            ),
            ("limits.max_connections", l.max_connections),
            (
                "limits.max_connections_per_peer",
                l.max_connections_per_peer,
            ),
            (
                "limits.max_streams_per_connection",
                l.max_streams_per_connection as usize,
            ),
        ] {
            if v == 0 {
                return Err(InvalidSetting {
                    key,
                    value: "0".into(),
                    why: "must be at least 1",
                });
            }
        }
        Ok(())
    }
}

/// The correlator's config file: `[detect.ib]`, `[detect.storage]` and
/// `[detect.incidents]` tables; every key optional (defaults above).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub detect: DetectConfig,
    /// `[history]`: the incident and series database (docs/history.md).
    pub history: crate::history::HistoryConfig,
    /// `[web]`: the UI, API, `/metrics` and `/healthz` (docs/web.md).
    pub web: crate::web::WebConfig,
    /// `[alertmanager]`: incident delivery (docs/alerting.md).
    pub alertmanager: crate::alerts::AlertmanagerConfig,
}

/// Why the config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The cause is in the message (not a `source`), so that a chain printer
    // (`{:#}`) does not repeat it.
    #[error("cannot read the config file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config file {path}: {key}: {why}")]
    Setting {
        path: String,
        key: &'static str,
        why: &'static str,
    },
    #[error("config file {path}: {setting}")]
    Invalid {
        path: String,
        setting: InvalidSetting,
    },
}

/// Parses and validates a config file's text (`path` names it in errors).
pub fn parse(text: &str, path: &str) -> Result<DetectConfig, ConfigError> {
    parse_file(text, path).map(|f| f.detect)
}

/// Parses and validates every table of a config file.
pub fn parse_file(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
    let f: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    let invalid = |setting| ConfigError::Invalid {
        path: path.to_string(),
        setting,
    };
    f.detect.validate().map_err(invalid)?;
    if let Some((key, why)) = f
        .history
        .invalid()
        .or_else(|| f.web.invalid())
        .or_else(|| f.alertmanager.invalid())
    {
        return Err(ConfigError::Setting {
            path: path.to_string(),
            key,
            why,
        });
    }
    Ok(f)
}

/// Reads, parses and validates every table of a config file.
pub fn load_file(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
    let shown = path.display().to_string();
    // `/dev/zero` or a FIFO given as the config is refused, not read forever.
    let text = proto::bounded_read::read_to_string(path, proto::bounded_read::CONFIG_MAX).map_err(
        |error| ConfigError::Read {
            path: shown.clone(),
            error,
        },
    )?;
    parse_file(&text, &shown)
}

/// Reads, parses and validates a config file.
pub fn load(path: &std::path::Path) -> Result<DetectConfig, ConfigError> {
    load_file(path).map(|f| f.detect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        DetectConfig::default().validate().unwrap();
        let mut c = DetectConfig::default();
        c.ib.alarm_ber = 1e-16;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "ib.alarm_ber");
        let mut c = DetectConfig::default();
        c.ib.significance = 0.0;
        assert_eq!(c.validate().unwrap_err().key, "ib.significance");
        let mut c = DetectConfig::default();
        c.ib.flap_downs = 1;
        assert_eq!(c.validate().unwrap_err().key, "ib.flap_downs");
    }

    #[test]
    fn workload_keys_and_errors_said_once() {
        let c = parse("[detect.workload]\nmin_slowdown = 0.2\n", "w.toml").unwrap();
        assert_eq!(c.workload.min_slowdown, 0.2);
        assert_eq!(c.workload.z, 5.0);
        let e = parse("[detect.workload]\nz = -1\n", "w.toml").unwrap_err();
        // A chain printer (`{:#}`) adds each source: the cause must be in
        // the message only, or the operator reads it twice.
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(
            e.to_string(),
            "config file w.toml: detect.workload.z = -1: must be a positive number"
        );
        let e = load(std::path::Path::new("/nonexistent/faultline.toml")).unwrap_err();
        assert!(std::error::Error::source(&e).is_none());
        assert!(e
            .to_string()
            .starts_with("cannot read the config file /nonexistent/faultline.toml: "));
    }

    #[test]
    fn file_sets_keys_and_names_mistakes() {
        let c = parse(
            "[detect.ib]\nreference_ber = 1e-15\n[detect.storage.nvme]\np50_ms = 0.3\np99_ms = 3.0\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.ib.reference_ber, 1e-15);
        assert_eq!(c.ib.alarm_ber, 1e-12);
        assert_eq!(c.storage.nvme.p50_ms, 0.3);
        let e = parse("[detect.ib]\nreference_bear = 1e-15\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("reference_bear"), "{e}");
        let e = parse("[detect.ib]\nsignificance = 2.0\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("detect.ib.significance = 2"), "{e}");
        assert_eq!(parse("", "x.toml").unwrap(), DetectConfig::default());
    }
}
