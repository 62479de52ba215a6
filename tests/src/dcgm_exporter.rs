//! dcgm-exporter's own files, kept verbatim in `tests/data/dcgm-exporter`
//! (source, commit and licence in the README there): its default counters
//! CSV and its Grafana dashboard, and what the GPU tests do with them —
//! read the series of a `/metrics` text, and evaluate the dashboard's
//! metric selectors on it the way Prometheus would on the scraped series.
use std::path::PathBuf;

use regex::Regex;

/// The fields of the default counters CSV that NVML cannot supply, and why.
pub const NOT_FROM_NVML: &[(&str, &str)] = &[(
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "the license state of a vGPU guest; a bare-metal or passthrough GPU has none (dcgm-exporter leaves it blank there too)",
)];

/// dcgm-exporter's device labels, in its order.
pub const DEVICE_LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
];

pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/dcgm-exporter")
}

/// One line of the counters CSV.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    /// `gauge`, `counter` or `label`.
    pub kind: String,
    pub help: String,
}

impl Counter {
    /// The unit the help text names, "(in MHz)" → "MHz".
    pub fn unit(&self) -> Option<&str> {
        let (_, rest) = self.help.split_once("(in ")?;
        rest.split_once(')').map(|(u, _)| u.trim())
    }
}

/// The enabled fields of `etc/default-counters.csv` (comment lines skipped).
pub fn default_counters() -> Vec<Counter> {
    let text = std::fs::read_to_string(data_dir().join("default-counters.csv"))
        .expect("tests/data/dcgm-exporter/default-counters.csv");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut f = l.splitn(3, ',').map(str::trim);
            Counter {
                name: f.next().unwrap_or_default().to_string(),
                kind: f.next().unwrap_or_default().to_string(),
                help: f.next().unwrap_or_default().to_string(),
            }
        })
        .collect()
}

/// A panel of the dashboard with its PromQL expressions.
#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub exprs: Vec<String>,
}

/// The panels of `grafana/dcgm-exporter-dashboard.json`, and its query
/// variables as (name, `label_values(...)` query).
pub fn dashboard() -> (Vec<Panel>, Vec<(String, String)>) {
    let text = std::fs::read_to_string(data_dir().join("dcgm-exporter-dashboard.json"))
        .expect("tests/data/dcgm-exporter/dcgm-exporter-dashboard.json");
    let d: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .map(|p| Panel {
            title: p["title"].as_str().unwrap_or_default().to_string(),
            exprs: p["targets"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(|t| t["expr"].as_str())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    let vars = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_string(),
                v["query"].as_str()?.to_string(),
            ))
        })
        .collect();
    (panels, vars)
}

/// An expression with the dashboard's variables at their "All" value.
pub fn all_values(expr: &str) -> String {
    expr.replace("$instance", ".+").replace("$gpu", ".+")
}

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of a text exposition, labels in their order.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)),
                None => (series, Vec::new()),
            };
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// `a="x",b="y\"z"` → [(a, x), (b, y"z)].
fn parse_labels(mut rest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some((k, r)) = rest.split_once("=\"") {
        let mut v = String::new();
        let mut end = r.len();
        let mut chars = r.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        v.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => v.push(c),
            }
        }
        out.push((k.trim_start_matches(',').trim().to_string(), v));
        rest = &r[end..];
    }
    out
}

/// A PromQL instant-vector selector: a metric name and label matchers.
#[derive(Clone, Debug)]
pub struct Selector {
    pub name: String,
    /// (label, operator, value) with `=`, `!=`, `=~`, `!~`.
    pub matchers: Vec<(String, String, String)>,
}

impl Selector {
    /// Whether `s`, with the scrape's target labels `target` added, is
    /// selected (regular expressions fully anchored, as PromQL's).
    pub fn selects(&self, s: &Sample, target: &[(&str, &str)]) -> bool {
        if s.name != self.name {
            return false;
        }
        self.matchers.iter().all(|(k, op, v)| {
            let got = s
                .label(k)
                .or_else(|| target.iter().find(|(n, _)| n == k).map(|(_, v)| *v))
                .unwrap_or("");
            let re = || Regex::new(&format!("^(?:{v})$")).expect("matcher regex");
            match op.as_str() {
                "=" => got == v,
                "!=" => got != v,
                "=~" => re().is_match(got),
                "!~" => !re().is_match(got),
                other => panic!("matcher operator {other}"),
            }
        })
    }
}

/// The selectors of the `DCGM_*` metrics an expression reads.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let name = Regex::new(r"\b(DCGM_[A-Z0-9_]+)\s*(\{[^}]*\})?").expect("regex");
    let matcher = Regex::new(r#"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)""#)
        .expect("regex");
    name.captures_iter(expr)
        .map(|c| Selector {
            name: c[1].to_string(),
            matchers: c
                .get(2)
                .map(|m| {
                    matcher
                        .captures_iter(m.as_str())
                        .map(|x| (x[1].to_string(), x[2].to_string(), x[3].to_string()))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// `label_values(METRIC, LABEL)` → (METRIC, LABEL).
pub fn label_values(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (m, l) = inner.rsplit_once(',')?;
    Some((m.trim().to_string(), l.trim().to_string()))
}
