//! CUDA windows: per-process/device/kernel launch rates and per-call
//! counts, bytes and wait times, from cumulative probe aggregates. Pure (no
//! aya), so the simulator and tests can use it.
use std::{collections::BTreeMap, fmt::Write as _, time::Instant};

use collector_common::{
    block::LAT_BUCKETS,
    cuda::{call, CallKey, CallStats, LaunchKey, LaunchStats},
};

use crate::storage::{bucket_upper_ns, quantile_ns};

/// Cumulative CUDA aggregates as read at `taken`.
#[derive(Clone, Debug)]
pub struct CudaSnapshot {
    pub taken: Instant,
    pub launches: BTreeMap<LaunchKey, LaunchStats>,
    pub calls: BTreeMap<CallKey, CallStats>,
    /// (pid, `CUfunction`) → kernel name.
    pub names: BTreeMap<(u32, u64), String>,
}

impl CudaSnapshot {
    pub fn empty(taken: Instant) -> Self {
        Self {
            taken,
            launches: BTreeMap::new(),
            calls: BTreeMap::new(),
            names: BTreeMap::new(),
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
            e.launches += v.launches;
            e.launches_ex += v.launches_ex;
            e.launches_cooperative += v.launches_cooperative;
            e.blocks += v.blocks;
            e.threads += v.threads;
            e.shared_mem_bytes += v.shared_mem_bytes;
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

/// Prometheus text for the CUDA metrics.
pub fn render_prometheus(snap: &CudaSnapshot) -> String {
    let mut s = String::new();
    s.push_str(
        "# HELP faultline_cuda_kernel_launches_total Kernel launches per process, GPU and kernel.\n\
         # TYPE faultline_cuda_kernel_launches_total counter\n",
    );
    let mut launches: BTreeMap<(u32, String, String), u64> = BTreeMap::new();
    for (k, v) in &snap.launches {
        *launches
            .entry((k.pid, device_label(k.device), snap.kernel_name(k)))
            .or_default() += v.launches;
    }
    for ((pid, gpu, kernel), n) in &launches {
        let kernel = kernel.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            s,
            "faultline_cuda_kernel_launches_total{{pid=\"{pid}\",gpu=\"{gpu}\",kernel=\"{kernel}\"}} {n}"
        );
    }
    s.push_str(
        "# HELP faultline_cuda_calls_total Driver API calls per process, GPU and call.\n\
         # TYPE faultline_cuda_calls_total counter\n",
    );
    for (k, v) in &snap.calls {
        let _ = writeln!(
            s,
            "faultline_cuda_calls_total{{pid=\"{}\",gpu=\"{}\",call=\"{}\"}} {}",
            k.pid,
            device_label(k.device),
            call::name(k.kind),
            v.calls
        );
    }
    s.push_str(
        "# HELP faultline_cuda_call_errors_total Calls that returned a non-zero CUresult.\n\
         # TYPE faultline_cuda_call_errors_total counter\n",
    );
    for (k, v) in snap.calls.iter().filter(|(_, v)| v.errors > 0) {
        let _ = writeln!(
            s,
            "faultline_cuda_call_errors_total{{pid=\"{}\",gpu=\"{}\",call=\"{}\"}} {}",
            k.pid,
            device_label(k.device),
            call::name(k.kind),
            v.errors
        );
    }
    s.push_str(
        "# HELP faultline_cuda_copy_bytes_total Bytes passed to cuMemcpy* calls.\n\
         # TYPE faultline_cuda_copy_bytes_total counter\n",
    );
    for (k, v) in snap.calls.iter().filter(|(k, _)| {
        matches!(
            k.kind,
            call::MEMCPY_HTOD
                | call::MEMCPY_DTOH
                | call::MEMCPY_ASYNC
                | call::MEMCPY_HTOD_ASYNC
                | call::MEMCPY_DTOH_ASYNC
        )
    }) {
        let _ = writeln!(
            s,
            "faultline_cuda_copy_bytes_total{{pid=\"{}\",gpu=\"{}\",call=\"{}\"}} {}",
            k.pid,
            device_label(k.device),
            call::name(k.kind),
            v.bytes
        );
    }
    // Wait-time histogram per GPU and call, summed over processes (bounded cardinality).
    let mut waits: BTreeMap<(String, &'static str), CallStats> = BTreeMap::new();
    for (k, v) in snap.calls.iter().filter(|(_, v)| v.timed > 0) {
        let e = waits
            .entry((device_label(k.device), call::name(k.kind)))
            .or_insert(CallStats::ZERO);
        e.timed += v.timed;
        e.dur_sum_ns += v.dur_sum_ns;
        for (a, b) in e.hist.iter_mut().zip(v.hist.iter()) {
            *a += b;
        }
    }
    s.push_str(
        "# HELP faultline_cuda_call_duration_seconds Entry-to-return time of blocking driver calls.\n\
         # TYPE faultline_cuda_call_duration_seconds histogram\n",
    );
    for ((gpu, c), v) in &waits {
        let mut cum = 0;
        for (b, n) in v.hist.iter().enumerate().take(LAT_BUCKETS - 1) {
            cum += n;
            let _ = writeln!(
                s,
                "faultline_cuda_call_duration_seconds_bucket{{gpu=\"{gpu}\",call=\"{c}\",le=\"{:e}\"}} {cum}",
                bucket_upper_ns(b) as f64 / 1e9
            );
        }
        let _ = writeln!(
            s,
            "faultline_cuda_call_duration_seconds_bucket{{gpu=\"{gpu}\",call=\"{c}\",le=\"+Inf\"}} {t}\n\
             faultline_cuda_call_duration_seconds_sum{{gpu=\"{gpu}\",call=\"{c}\"}} {}\n\
             faultline_cuda_call_duration_seconds_count{{gpu=\"{gpu}\",call=\"{c}\"}} {t}",
            v.dur_sum_ns as f64 / 1e9,
            t = v.timed
        );
    }
    s
}

/// p50/p99 of a call's wait histogram, seconds.
pub fn wait_quantiles(v: &CallStats) -> Option<(f64, f64)> {
    Some((
        quantile_ns(&v.hist, 0.5)? / 1e9,
        quantile_ns(&v.hist, 0.99)? / 1e9,
    ))
}
