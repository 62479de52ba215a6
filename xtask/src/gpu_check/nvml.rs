//! NVML: the collector's GPU readings against nvidia-ml-py's.
use std::collections::BTreeSet;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{
    cuda::{f, u},
    report::Check,
};

/// How far a collector reading may lie outside the range of nvidia-ml-py's
/// readings of the same GPU taken within [`REF_SLACK_MS`] of the collector's
/// window: the two readers never sample at the same instant, and NVML's
/// values move between reads (power is a running average refreshed every
/// few tens of ms, the SM clock steps with load, the temperature by a
/// degree). The band is `[min − tol(min), max + tol(max)]` over those
/// readings, `tol(x) = max(abs, rel × |x|)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
}

impl Tolerance {
    pub fn of(self, x: f64) -> f64 {
        self.abs.max(self.rel * x.abs())
    }
}

/// Power: 5 W or 5 %.
pub const POWER_TOL: Tolerance = Tolerance {
    abs: 5.0,
    rel: 0.05,
};
/// Temperature: 2 °C (integer readings; a die moves slowly).
pub const TEMP_TOL: Tolerance = Tolerance { abs: 2.0, rel: 0.0 };
/// SM clock: 30 MHz or 3 % (two clock bins).
pub const CLOCK_TOL: Tolerance = Tolerance {
    abs: 30.0,
    rel: 0.03,
};
/// nvidia-ml-py readings from this long before a window's start to this
/// long after its end (the collector reads NVML when it closes a window).
pub const REF_SLACK_MS: i64 = 1000;
/// Windows that must have been compared per GPU and value.
pub const MIN_COMPARED: usize = 2;
/// The power limit and the maximum SM clock are read, not measured: equal
/// (power limits to the mW NVML reports).
const LIMIT_EPS_W: f64 = 0.0005;

/// Physical ranges: power in (0, 2000) W, temperature in (0, 120] °C, the
/// SM clock above 0 MHz.
pub fn power_physical(w: f64) -> bool {
    w > 0.0 && w < 2000.0
}
pub fn temp_physical(c: f64) -> bool {
    c > 0.0 && c <= 120.0
}
pub fn clock_physical(mhz: f64) -> bool {
    mhz > 0.0
}

/// Whether `v` lies in the tolerance band around `refs` (false without refs).
pub fn within_band(v: f64, refs: &[f64], tol: Tolerance) -> bool {
    let Some(lo) = refs.iter().copied().reduce(f64::min) else {
        return false;
    };
    let hi = refs.iter().copied().fold(lo, f64::max);
    v >= lo - tol.of(lo) && v <= hi + tol.of(hi)
}

/// One GPU row of one recorded window (`Window.gpus[]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectorGpu {
    pub start_ms: i64,
    pub end_ms: i64,
    pub index: u64,
    pub uuid: String,
    pub pci_bus_id: String,
    pub lost: bool,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temp_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
}

pub fn collector_gpus(windows: &[Value]) -> Vec<CollectorGpu> {
    let mut out = Vec::new();
    for w in windows {
        let start_ms = w.get("start_unix_ms").and_then(Value::as_i64).unwrap_or(0);
        let end_ms = w.get("end_unix_ms").and_then(Value::as_i64).unwrap_or(0);
        for g in w
            .get("gpus")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            out.push(CollectorGpu {
                start_ms,
                end_ms,
                index: u(g, "index"),
                uuid: s("uuid"),
                pci_bus_id: s("pci_bus_id"),
                lost: g.get("lost").and_then(Value::as_bool).unwrap_or(false),
                power_w: f(g, "power_w"),
                power_limit_w: f(g, "power_limit_w"),
                temp_c: f(g, "temp_c"),
                sm_clock_mhz: f(g, "sm_clock_mhz"),
                sm_clock_max_mhz: f(g, "sm_clock_max_mhz"),
            });
        }
    }
    out
}

/// nvidia-ml-py's view: the GPUs and the readings over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reference {
    pub driver: Option<String>,
    pub gpus: Vec<RefGpu>,
    pub samples: Vec<RefSample>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefGpu {
    pub index: u64,
    pub uuid: String,
    pub pci_bus_id: String,
    pub power_limit_w: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefSample {
    pub t_ms: i64,
    pub uuid: String,
    pub power_w: Option<f64>,
    pub temp_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

/// The sampler's JSON lines (`nvml_sampler.py`).
pub fn parse_reference(text: &str) -> Result<Reference> {
    let mut r = Reference::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("nvidia-ml-py line {}: {line:?}", i + 1))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match v.get("kind").and_then(Value::as_str) {
            Some("ready") => r.driver = v.get("driver").and_then(Value::as_str).map(str::to_string),
            Some("gpu") => r.gpus.push(RefGpu {
                index: u(&v, "index"),
                uuid: s("uuid"),
                pci_bus_id: s("pci_bus_id"),
                power_limit_w: f(&v, "power_limit_w"),
                sm_clock_max_mhz: f(&v, "sm_clock_max_mhz"),
            }),
            Some("sample") => r.samples.push(RefSample {
                t_ms: v.get("t_ms").and_then(Value::as_i64).unwrap_or(0),
                uuid: s("uuid"),
                power_w: f(&v, "power_w"),
                temp_c: f(&v, "temp_c"),
                sm_clock_mhz: f(&v, "sm_clock_mhz"),
            }),
            _ => {}
        }
    }
    Ok(r)
}

/// A value NVML measures, how to read it from both readers, its physical
/// range and its tolerance.
#[derive(Clone, Copy)]
struct Measure {
    what: &'static str,
    unit: &'static str,
    get: fn(&CollectorGpu) -> Option<f64>,
    get_ref: fn(&RefSample) -> Option<f64>,
    physical: fn(f64) -> bool,
    range: &'static str,
    tol: Tolerance,
}

const MEASURES: [Measure; 3] = [
    Measure {
        what: "power",
        unit: "W",
        get: |s| s.power_w,
        get_ref: |r| r.power_w,
        physical: power_physical,
        range: "0 < W < 2000",
        tol: POWER_TOL,
    },
    Measure {
        what: "temperature",
        unit: "°C",
        get: |s| s.temp_c,
        get_ref: |r| r.temp_c,
        physical: temp_physical,
        range: "0 < °C ≤ 120",
        tol: TEMP_TOL,
    },
    Measure {
        what: "SM clock",
        unit: "MHz",
        get: |s| s.sm_clock_mhz,
        get_ref: |r| r.sm_clock_mhz,
        physical: clock_physical,
        range: "> 0 MHz",
        tol: CLOCK_TOL,
    },
];

/// One measured value: physical in every window, and inside nvidia-ml-py's
/// band in every window that has reference readings (at least
/// [`MIN_COMPARED`] of them).
fn measured(
    v: &mut Vec<Check>,
    gpu: &str,
    m: &Measure,
    samples: &[&CollectorGpu],
    refs: &[&RefSample],
) {
    let Measure {
        what,
        unit,
        get,
        get_ref,
        physical,
        range,
        tol,
    } = *m;
    let vals: Vec<f64> = samples.iter().filter_map(|s| get(s)).collect();
    let missing = samples.len() - vals.len();
    let bad: Vec<f64> = vals.iter().copied().filter(|x| !physical(*x)).collect();
    let lo = vals.iter().copied().reduce(f64::min);
    let hi = vals.iter().copied().reduce(f64::max);
    v.push(Check::new(
        format!("{gpu} {what} physical"),
        !vals.is_empty() && missing == 0 && bad.is_empty(),
        range,
        match (lo, hi) {
            (Some(lo), Some(hi)) if bad.is_empty() && missing == 0 && lo == hi => {
                format!("{lo} {unit} in {} windows", vals.len())
            }
            (Some(lo), Some(hi)) if bad.is_empty() && missing == 0 => {
                format!("{lo}–{hi} {unit} in {} windows", vals.len())
            }
            (Some(_), Some(_)) if missing > 0 => {
                format!("missing in {missing} of {} windows", samples.len())
            }
            (Some(_), Some(_)) => format!("{bad:?} {unit}"),
            _ => "not reported".into(),
        },
    ));
    let (mut compared, mut worst) = (0usize, None::<String>);
    for s in samples {
        let Some(x) = get(s) else { continue };
        let near: Vec<f64> = refs
            .iter()
            .filter(|r| r.t_ms >= s.start_ms - REF_SLACK_MS && r.t_ms <= s.end_ms + REF_SLACK_MS)
            .filter_map(|r| get_ref(r))
            .collect();
        if near.is_empty() {
            continue;
        }
        compared += 1;
        if worst.is_none() && !within_band(x, &near, tol) {
            let lo = near.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = near.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            worst = Some(format!(
                "window ending {}: {x} {unit} vs nvidia-ml-py {lo}–{hi} {unit}",
                s.end_ms
            ));
        }
    }
    let expected = format!("within {}", describe_tol(tol, unit));
    v.push(match worst {
        Some(w) => Check::new(format!("{gpu} {what} = nvidia-ml-py"), false, expected, w),
        None if compared < MIN_COMPARED => Check::new(
            format!("{gpu} {what} = nvidia-ml-py"),
            false,
            expected,
            format!("only {compared} windows with readings from both"),
        ),
        None => Check::new(
            format!("{gpu} {what} = nvidia-ml-py"),
            true,
            expected,
            format!("{compared} of {compared} windows"),
        ),
    });
}

fn describe_tol(t: Tolerance, unit: &str) -> String {
    if t.rel > 0.0 {
        format!("±max({} {unit}, {}%)", t.abs, t.rel * 100.0)
    } else {
        format!("±{} {unit}", t.abs)
    }
}

/// The collector's GPUs are nvidia-ml-py's (index, UUID, PCI bus id); per
/// GPU, power, temperature and SM clock physical and equal to
/// nvidia-ml-py's within [`POWER_TOL`], [`TEMP_TOL`], [`CLOCK_TOL`]; the
/// power limit and maximum SM clock equal.
pub fn nvml_checks(col: &[CollectorGpu], reference: &Reference) -> Vec<Check> {
    let mut v = Vec::new();
    let ident = |i: u64, uuid: &str, pci: &str| format!("{i}:{uuid}@{}", pci.to_ascii_lowercase());
    let theirs: BTreeSet<String> = reference
        .gpus
        .iter()
        .map(|g| ident(g.index, &g.uuid, &g.pci_bus_id))
        .collect();
    let ours: BTreeSet<String> = col
        .iter()
        .map(|g| ident(g.index, &g.uuid, &g.pci_bus_id))
        .collect();
    v.push(Check::new(
        "NVML GPUs = nvidia-ml-py's",
        !theirs.is_empty() && ours == theirs,
        format!(
            "{} GPU(s): {}",
            theirs.len(),
            theirs.iter().cloned().collect::<Vec<_>>().join(" ")
        ),
        if ours.is_empty() {
            "no GPU in any window".into()
        } else {
            format!(
                "{} GPU(s): {}",
                ours.len(),
                ours.iter().cloned().collect::<Vec<_>>().join(" ")
            )
        },
    ));
    for g in &reference.gpus {
        let name = format!("gpu{}", g.index);
        let samples: Vec<&CollectorGpu> = col.iter().filter(|c| c.uuid == g.uuid).collect();
        let refs: Vec<&RefSample> = reference
            .samples
            .iter()
            .filter(|r| r.uuid == g.uuid)
            .collect();
        let lost = samples.iter().filter(|s| s.lost).count();
        if lost > 0 {
            v.push(Check::new(
                format!("{name} not lost"),
                false,
                "present",
                format!("lost in {lost} windows"),
            ));
        }
        for m in &MEASURES {
            measured(&mut v, &name, m, &samples, &refs);
        }
        for (what, ours, theirs, unit, eps) in [
            (
                "power limit",
                samples.iter().map(|s| s.power_limit_w).collect::<Vec<_>>(),
                g.power_limit_w,
                "W",
                LIMIT_EPS_W,
            ),
            (
                "max SM clock",
                samples.iter().map(|s| s.sm_clock_max_mhz).collect(),
                g.sm_clock_max_mhz,
                "MHz",
                0.0,
            ),
        ] {
            let distinct: BTreeSet<String> = ours
                .iter()
                .map(|o| o.map_or_else(|| "none".into(), |x| format!("{x}")))
                .collect();
            let pass = theirs.is_some_and(|t| {
                !ours.is_empty() && ours.iter().all(|o| o.is_some_and(|x| (x - t).abs() <= eps))
            });
            v.push(Check::new(
                format!("{name} {what} = nvidia-ml-py"),
                pass,
                theirs.map_or_else(
                    || "nvidia-ml-py read none".into(),
                    |t| format!("{t} {unit}"),
                ),
                if ours.is_empty() {
                    "not reported".into()
                } else {
                    format!(
                        "{} {unit}",
                        distinct.into_iter().collect::<Vec<_>>().join(", ")
                    )
                },
            ));
        }
    }
    v
}
