//! CUDA windows: per-process/device/kernel launch rates and per-call
//! counts, bytes and wait times, from cumulative probe aggregates. Pure (no
//! aya), so the simulator and tests can use it.
//!
//! The family: [`probe`] reads the in-kernel aggregates and the event ring,
//! [`source`] runs each window, [`wire`] builds the rows, this file renders
//! the `/metrics` families (`faultline_cuda_*`), [`section`] is `[cuda]`.
//! The bounded-overhead launch mode: [`launch_control`] decides the duty
//! cycle from the budget ([`crate::launch_budget`]) and the cost of one hit
//! ([`calibrate`]); the attach itself and the duty-cycled links are in
//! `probes` (`probes/cuda.rs`, `launch_duty`), which `Probes::load` runs.
use std::{collections::BTreeMap, fmt::Write as _, time::Instant};

use collector_common::cuda::{call, CallKey, CallStats, LaunchKey, LaunchStats};
use vocab::hist::quantile_ns;

use crate::prom_text::Text;

use proto::metric::Family;

pub const CUDA_KERNEL_LAUNCHES: Family = Family::counter(
    "faultline_cuda_kernel_launches_total",
    &["hpc_job", "rank", "gpu"],
    "Kernel launches per job, rank and GPU (all kernels)",
);
pub const CUDA_CALLS: Family = Family::counter(
    "faultline_cuda_calls_total",
    &["hpc_job", "rank", "gpu", "call"],
    "Driver API calls per job, rank, GPU and call",
);
pub const CUDA_CALL_ERRORS: Family = Family::counter(
    "faultline_cuda_call_errors_total",
    &["hpc_job", "rank", "gpu", "call"],
    "Calls that returned a non-zero CUresult",
);
pub const CUDA_COPY_BYTES: Family = Family::counter(
    "faultline_cuda_copy_bytes_total",
    &["hpc_job", "rank", "gpu", "call"],
    "Bytes passed to cuMemcpy* calls",
);
pub const CUDA_CALL_DURATION_SECONDS: Family = Family::histogram(
    "faultline_cuda_call_duration_seconds",
    &["gpu", "call"],
    "Entry-to-return time of blocking driver calls",
);

/// The families above, for `crate::metrics_catalog`.
pub const FAMILIES: &[&Family] = &[
    &CUDA_KERNEL_LAUNCHES,
    &CUDA_CALLS,
    &CUDA_CALL_ERRORS,
    &CUDA_COPY_BYTES,
    &CUDA_CALL_DURATION_SECONDS,
];

#[cfg(feature = "probes")]
pub mod calibrate;
#[cfg(feature = "probes")]
pub mod launch_control;
#[cfg(feature = "probes")]
pub mod probe;
pub mod section;
#[cfg(agent)]
pub mod source;
pub mod wire;

#[cfg(feature = "probes")]
pub use calibrate::{measure_uprobe_hit_ns, HitCalibrator};
pub use section::CudaSection;

/// Cumulative CUDA aggregates as read at `taken`.
#[derive(Clone, Debug)]
pub struct CudaSnapshot {
    pub taken: Instant,
    pub launches: BTreeMap<LaunchKey, LaunchStats>,
    pub calls: BTreeMap<CallKey, CallStats>,
    /// (pid, `CUfunction`) → kernel name.
    pub names: BTreeMap<(u32, u64), String>,
    /// 1 when the launch probes counted all the time since the previous
    /// snapshot (exact); below 1 the launch counters are estimates
    /// (bounded-overhead mode, `crate::launch_budget`) and this is the
    /// attached share of each duty period.
    pub launch_fraction: f64,
}

impl CudaSnapshot {
    pub fn empty(taken: Instant) -> Self {
        Self {
            taken,
            launches: BTreeMap::new(),
            calls: BTreeMap::new(),
            names: BTreeMap::new(),
            launch_fraction: 1.0,
        }
    }

    /// Kernel name of a launch key, or the handle in hex.
    pub fn kernel_name(&self, k: &LaunchKey) -> String {
        self.names
            .get(&(k.pid, k.func))
            .cloned()
            .unwrap_or_else(|| format!("0x{:x}", k.func))
    }

    /// Launches per kernel name for one process (all devices).
    pub fn launches_by_name(&self, pid: u32) -> BTreeMap<String, LaunchStats> {
        let mut out: BTreeMap<String, LaunchStats> = BTreeMap::new();
        for (k, v) in self.launches.iter().filter(|(k, _)| k.pid == pid) {
            let e = out.entry(self.kernel_name(k)).or_default();
            add_launches(e, v);
            e.last_grid = v.last_grid;
            e.last_block = v.last_block;
        }
        out
    }

    /// Call totals for one process and kind (all devices).
    pub fn call_total(&self, pid: u32, kind: u32) -> CallStats {
        let mut t = CallStats::ZERO;
        for (k, v) in &self.calls {
            if k.pid == pid && k.kind == kind {
                t.calls += v.calls;
                t.errors += v.errors;
                t.bytes += v.bytes;
                t.dur_sum_ns += v.dur_sum_ns;
                t.dur_max_ns = t.dur_max_ns.max(v.dur_max_ns);
                t.timed += v.timed;
                if v.last_error != 0 {
                    t.last_error = v.last_error;
                }
                for (a, b) in t.hist.iter_mut().zip(v.hist.iter()) {
                    *a += b;
                }
            }
        }
        t
    }
}

/// Decodes a NUL-terminated name buffer.
pub fn name_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn device_label(d: i32) -> String {
    if d < 0 {
        "unknown".into()
    } else {
        d.to_string()
    }
}

/// One console line of a CUDA window, with the process and GPU it is about
/// (so the agent can attribute it without parsing the text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaLine {
    pub pid: u32,
    /// CUDA device ordinal, -1 when unknown.
    pub device: i32,
    pub text: String,
}

/// Adds `v`'s launch counts into `into` (the `last_*` shapes are the caller's choice).
pub fn add_launches(into: &mut LaunchStats, v: &LaunchStats) {
    into.launches += v.launches;
    into.launches_ex += v.launches_ex;
    into.launches_cooperative += v.launches_cooperative;
    into.blocks += v.blocks;
    into.threads += v.threads;
    into.shared_mem_bytes += v.shared_mem_bytes;
}

/// Human-readable lines for what changed between two snapshots.
pub fn window_lines(prev: &CudaSnapshot, cur: &CudaSnapshot) -> Vec<CudaLine> {
    let secs = cur
        .taken
        .saturating_duration_since(prev.taken)
        .as_secs_f64()
        .max(1e-9);
    let mut out = Vec::new();
    for (k, v) in &cur.launches {
        let before = prev.launches.get(k).map_or(0, |p| p.launches);
        let n = v.launches.saturating_sub(before);
        if n > 0 {
            out.push(CudaLine {
                pid: k.pid,
                device: k.device,
                text: format!(
                    "cuda pid={} gpu={} kernel={} launches={n} ({:.1}/s) grid={:?} block={:?}",
                    k.pid,
                    device_label(k.device),
                    cur.kernel_name(k),
                    n as f64 / secs,
                    v.last_grid,
                    v.last_block
                ),
            });
        }
    }
    for (k, v) in &cur.calls {
        let p = prev.calls.get(k);
        let n = v.calls.saturating_sub(p.map_or(0, |p| p.calls));
        if n == 0 {
            continue;
        }
        let bytes = v.bytes.saturating_sub(p.map_or(0, |p| p.bytes));
        let errors = v.errors.saturating_sub(p.map_or(0, |p| p.errors));
        let mut line = format!(
            "cuda pid={} gpu={} call={} calls={n}",
            k.pid,
            device_label(k.device),
            call::name(k.kind)
        );
        if bytes > 0 {
            let _ = write!(line, " bytes={bytes}");
        }
        let timed = v.timed.saturating_sub(p.map_or(0, |p| p.timed));
        if timed > 0 {
            let sum = v.dur_sum_ns.saturating_sub(p.map_or(0, |p| p.dur_sum_ns));
            let _ = write!(line, " wait_mean={:.3}ms", sum as f64 / timed as f64 / 1e6);
        }
        if errors > 0 {
            let _ = write!(line, " errors={errors} last_error={}", v.last_error);
        }
        out.push(CudaLine {
            pid: k.pid,
            device: k.device,
            text: line,
        });
    }
    out
}

/// Prometheus text for the CUDA metrics. Series are keyed by the
/// process's job and rank (`who(pid)`; empty when unknown) and GPU, never by
/// pid or kernel name: those grow without bound on a busy node, and stay
/// on the wire and the console instead.
pub fn render_prometheus(snap: &CudaSnapshot, who: impl FnMut(u32) -> (String, String)) -> String {
    CudaSeries::of(snap, |_| true, who).render()
}

/// (job, rank, gpu, call) → (calls, errors, copy bytes).
type CallSeriesKey = (String, String, String, &'static str);

/// The exported CUDA series, summed over processes: what [`render_prometheus`]
/// writes, kept apart so that the series of processes that exited can be
/// added to the live ones (the exported counters never go backwards).
#[derive(Clone, Debug, Default)]
pub struct CudaSeries {
    /// (job, rank, gpu) → launches.
    pub launches: BTreeMap<(String, String, String), u64>,
    pub calls: BTreeMap<CallSeriesKey, (u64, u64, u64)>,
    /// Wait-time histogram per GPU and call, summed over processes (bounded
    /// cardinality).
    pub waits: BTreeMap<(String, &'static str), CallStats>,
}

impl CudaSeries {
    /// The series of the processes `keep` selects.
    pub fn of(
        snap: &CudaSnapshot,
        keep: impl Fn(u32) -> bool,
        mut who: impl FnMut(u32) -> (String, String),
    ) -> Self {
        let mut ids: BTreeMap<u32, (String, String)> = BTreeMap::new();
        let mut id = |pid: u32| ids.entry(pid).or_insert_with(|| who(pid)).clone();
        let mut out = Self::default();
        for (k, v) in snap.launches.iter().filter(|(k, _)| keep(k.pid)) {
            let (job, rank) = id(k.pid);
            *out.launches
                .entry((job, rank, device_label(k.device)))
                .or_default() += v.launches;
        }
        for (k, v) in snap.calls.iter().filter(|(k, _)| keep(k.pid)) {
            let (job, rank) = id(k.pid);
            let bytes = if call::is_copy(k.kind) { v.bytes } else { 0 };
            add_call(
                out.calls
                    .entry((job, rank, device_label(k.device), call::name(k.kind)))
                    .or_default(),
                (v.calls, v.errors, bytes),
            );
            if v.timed > 0 {
                add_waits(
                    out.waits
                        .entry((device_label(k.device), call::name(k.kind)))
                        .or_insert(CallStats::ZERO),
                    v,
                );
            }
        }
        out
    }

    /// Adds `other`'s counts to these.
    pub fn absorb(&mut self, other: &CudaSeries) {
        for (k, n) in &other.launches {
            *self.launches.entry(k.clone()).or_default() += n;
        }
        for (k, v) in &other.calls {
            add_call(self.calls.entry(k.clone()).or_default(), *v);
        }
        for (k, v) in &other.waits {
            add_waits(self.waits.entry(k.clone()).or_insert(CallStats::ZERO), v);
        }
    }

    /// Drops the per-job series of `(job, rank)` pairs (the per-GPU wait
    /// histograms stay).
    pub fn forget(&mut self, pairs: &std::collections::BTreeSet<(String, String)>) {
        let gone = |job: &String, rank: &String| pairs.contains(&(job.clone(), rank.clone()));
        self.launches.retain(|(j, r, _), _| !gone(j, r));
        self.calls.retain(|(j, r, _, _), _| !gone(j, r));
    }

    /// `(job, rank)` pairs with a per-job series.
    pub fn jobs(&self) -> std::collections::BTreeSet<(String, String)> {
        let l = self.launches.keys().map(|(j, r, _)| (j.clone(), r.clone()));
        l.chain(self.calls.keys().map(|(j, r, _, _)| (j.clone(), r.clone())))
            .collect()
    }

    pub fn render(&self) -> String {
        let mut t = Text::new();
        for ((job, rank, gpu), n) in &self.launches {
            t.add(
                &CUDA_KERNEL_LAUNCHES,
                &[("hpc_job", job), ("rank", rank), ("gpu", gpu)],
                n,
            );
        }
        for ((job, rank, gpu, c), (n, errors, bytes)) in &self.calls {
            let l: &[(&str, &str)] = &[("hpc_job", job), ("rank", rank), ("gpu", gpu), ("call", c)];
            t.add(&CUDA_CALLS, l, n);
            if *errors > 0 {
                t.add(&CUDA_CALL_ERRORS, l, errors);
            }
            if *bytes > 0 {
                t.add(&CUDA_COPY_BYTES, l, bytes);
            }
        }
        for ((gpu, c), v) in &self.waits {
            t.add_log2_ns_histogram(
                &CUDA_CALL_DURATION_SECONDS,
                &[("gpu", gpu), ("call", c)],
                &v.hist,
                v.dur_sum_ns,
                v.timed,
            );
        }
        t.render()
    }
}

fn add_call(e: &mut (u64, u64, u64), (calls, errors, bytes): (u64, u64, u64)) {
    e.0 += calls;
    e.1 += errors;
    e.2 += bytes;
}

fn add_waits(e: &mut CallStats, v: &CallStats) {
    e.timed += v.timed;
    e.dur_sum_ns += v.dur_sum_ns;
    for (a, b) in e.hist.iter_mut().zip(v.hist.iter()) {
        *a += b;
    }
}

/// p50/p99 of a call's wait histogram, seconds.
pub fn wait_quantiles(v: &CallStats) -> Option<(f64, f64)> {
    Some((
        quantile_ns(&v.hist, 0.5)? / 1e9,
        quantile_ns(&v.hist, 0.99)? / 1e9,
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Device-to-device and peer copies are copy kinds of their own: their
    /// bytes reach the console line, the `call`-labelled copy-bytes series
    /// and the window row's (and so usage's) copy bytes.
    #[test]
    fn device_to_device_and_peer_copies_count_as_copies_of_their_own_kinds() {
        let t0 = Instant::now();
        let prev = CudaSnapshot::empty(t0);
        let mut cur = CudaSnapshot::empty(t0 + Duration::from_secs(1));
        for (kind, calls, bytes) in [
            (call::MEMCPY_HTOD, 2, 8192),
            (call::MEMCPY_DTOD, 3, 3 * 2500),
            (call::MEMCPY_DTOD_ASYNC, 4, 4 * 2200),
            (call::MEMCPY_PEER, 5, 5 * 1900),
            (call::MEMCPY_PEER_ASYNC, 6, 6 * 1600),
            (call::STREAM_SYNC, 7, 0),
        ] {
            let mut s = CallStats::ZERO;
            s.calls = calls;
            s.bytes = bytes;
            let key = CallKey {
                pid: 42,
                device: 1,
                kind,
                _pad: 0,
            };
            cur.calls.insert(key, s);
        }
        let lines: Vec<String> = window_lines(&prev, &cur)
            .into_iter()
            .map(|l| l.text)
            .collect();
        for want in [
            "cuda pid=42 gpu=1 call=cuMemcpyDtoD calls=3 bytes=7500",
            "cuda pid=42 gpu=1 call=cuMemcpyDtoDAsync calls=4 bytes=8800",
            "cuda pid=42 gpu=1 call=cuMemcpyPeer calls=5 bytes=9500",
            "cuda pid=42 gpu=1 call=cuMemcpyPeerAsync calls=6 bytes=9600",
        ] {
            assert!(lines.iter().any(|l| l == want), "{want}: {lines:?}");
        }

        let text = render_prometheus(&cur, |_| ("j".into(), "0".into()));
        for (c, calls, bytes) in [
            ("cuMemcpyDtoD", 3, 7500),
            ("cuMemcpyDtoDAsync", 4, 8800),
            ("cuMemcpyPeer", 5, 9500),
            ("cuMemcpyPeerAsync", 6, 9600),
        ] {
            let l = format!("hpc_job=\"j\",rank=\"0\",gpu=\"1\",call=\"{c}\"");
            assert!(
                text.contains(&format!("faultline_cuda_calls_total{{{l}}} {calls}\n")),
                "{c}: {text}"
            );
            assert!(
                text.contains(&format!("faultline_cuda_copy_bytes_total{{{l}}} {bytes}\n")),
                "{c}: {text}"
            );
        }

        let dir = std::env::temp_dir().join(format!("faultline-cuda-rows-{}", std::process::id()));
        let mut ids = crate::identity::IdentityCache::new(&dir, 8);
        let rows = wire::rows(&prev, &cur, &mut ids);
        assert_eq!(rows.len(), 1);
        // All copies, host and device alike; the sync is not a copy.
        assert_eq!(rows[0].copy_bytes, 8192 + 7500 + 8800 + 9500 + 9600);
        assert_eq!(rows[0].sync_calls, 7);
    }
}
