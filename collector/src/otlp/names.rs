//! Metric name → signal: the documented defaults (training names and the
//! GenAI semantic conventions) plus the `otlp.names` mapping, and the OTLP
//! `unit` → seconds factor for the time signals.
use std::collections::{BTreeMap, HashMap};

/// What a metric measures, as it travels in the window: `StepSeconds` fills
/// `Window.steps`, every other signal a `Window.workload` sample whose
/// `signal` is [`Signal::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    StepSeconds,
    TtftSeconds,
    TpotSeconds,
    RequestSeconds,
    Tokens,
    CheckpointSeconds,
    Throughput,
    QueueDepth,
}

impl Signal {
    pub const ALL: [Self; 8] = [
        Self::StepSeconds,
        Self::TtftSeconds,
        Self::TpotSeconds,
        Self::RequestSeconds,
        Self::Tokens,
        Self::CheckpointSeconds,
        Self::Throughput,
        Self::QueueDepth,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::StepSeconds => "step_seconds",
            Self::TtftSeconds => "ttft_seconds",
            Self::TpotSeconds => "tpot_seconds",
            Self::RequestSeconds => "request_seconds",
            Self::Tokens => "tokens",
            Self::CheckpointSeconds => "checkpoint_seconds",
            Self::Throughput => "throughput",
            Self::QueueDepth => "queue_depth",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Durations: their values are converted to seconds by the metric's unit.
    pub fn is_time(self) -> bool {
        matches!(
            self,
            Self::StepSeconds
                | Self::TtftSeconds
                | Self::TpotSeconds
                | Self::RequestSeconds
                | Self::CheckpointSeconds
        )
    }
}

/// The default names (see `docs/otlp.md`).
pub const DEFAULT_NAMES: &[(&str, Signal)] = &[
    // Training step duration.
    ("faultline.train.step.duration", Signal::StepSeconds),
    ("train.step.duration", Signal::StepSeconds),
    ("training.step.duration", Signal::StepSeconds),
    ("training.step_time", Signal::StepSeconds),
    ("train.step_time", Signal::StepSeconds),
    // Checkpoint save duration.
    (
        "faultline.train.checkpoint.duration",
        Signal::CheckpointSeconds,
    ),
    ("train.checkpoint.duration", Signal::CheckpointSeconds),
    ("training.checkpoint.duration", Signal::CheckpointSeconds),
    ("checkpoint.save.duration", Signal::CheckpointSeconds),
    // Training throughput (tokens or samples per second).
    ("faultline.train.throughput", Signal::Throughput),
    ("train.tokens_per_second", Signal::Throughput),
    ("train.samples_per_second", Signal::Throughput),
    ("training.throughput", Signal::Throughput),
    // Inference, GenAI semantic conventions.
    ("gen_ai.server.time_to_first_token", Signal::TtftSeconds),
    ("gen_ai.server.time_per_output_token", Signal::TpotSeconds),
    ("gen_ai.server.request.duration", Signal::RequestSeconds),
    ("gen_ai.client.token.usage", Signal::Tokens),
    ("faultline.inference.queue.depth", Signal::QueueDepth),
];

/// Resolves metric names: the configured mapping first, then the defaults.
#[derive(Clone, Debug)]
pub struct Names {
    map: HashMap<String, Signal>,
}

impl Default for Names {
    fn default() -> Self {
        Self::new(&BTreeMap::new())
    }
}

impl Names {
    /// `extra` is `otlp.names` (already validated); an unknown signal in it is ignored.
    pub fn new(extra: &BTreeMap<String, String>) -> Self {
        let mut map: HashMap<String, Signal> = DEFAULT_NAMES
            .iter()
            .map(|&(n, s)| (n.to_string(), s))
            .collect();
        for (name, signal) in extra {
            if let Some(s) = Signal::parse(signal) {
                map.insert(name.clone(), s);
            }
        }
        Self { map }
    }

    pub fn signal(&self, metric: &str) -> Option<Signal> {
        self.map.get(metric).copied()
    }
}

/// Seconds per unit for a time metric's OTLP `unit` (UCUM); an empty unit
/// is seconds (the GenAI conventions use `s`). `None`: not a time unit.
pub fn seconds_per_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "" | "s" | "sec" | "seconds" => 1.0,
        "ms" | "milliseconds" => 1e-3,
        "us" | "µs" | "μs" | "microseconds" => 1e-6,
        "ns" | "nanoseconds" => 1e-9,
        "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_config_override_and_units() {
        let n = Names::default();
        assert_eq!(
            n.signal("gen_ai.server.time_to_first_token"),
            Some(Signal::TtftSeconds)
        );
        assert_eq!(n.signal("training.step_time"), Some(Signal::StepSeconds));
        assert_eq!(n.signal("http.server.duration"), None);
        let extra = BTreeMap::from([
            ("my_step".to_string(), "step_seconds".to_string()),
            (
                "train.step_time".to_string(),
                "checkpoint_seconds".to_string(),
            ),
        ]);
        let n = Names::new(&extra);
        assert_eq!(n.signal("my_step"), Some(Signal::StepSeconds));
        assert_eq!(n.signal("train.step_time"), Some(Signal::CheckpointSeconds));
        assert_eq!(seconds_per_unit("ms"), Some(1e-3));
        assert_eq!(seconds_per_unit("us"), Some(1e-6));
        assert_eq!(seconds_per_unit(""), Some(1.0));
        assert_eq!(seconds_per_unit("{token}"), None);
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.as_str()), Some(s));
        }
    }
}
