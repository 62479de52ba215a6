//! Judges the guest's console log: each check names what it proves and
//! prints the numbers it saw.
use std::collections::BTreeMap;

use serde_json::Value;

/// rxe's retransmit/sequence-error counters (`hw_counters/`).
const RXE_ERROR_COUNTERS: &[&str] = &[
    "completer_retry_err",
    "rcvd_seq_err",
    "retry_exceeded_err",
    "duplicate_request",
    "out_of_seq_request",
];

/// The guest's port the scenario degrades (netem acts on veth0's egress).
const PORT: &str = "rxe-guest/rxe0/1";

pub struct Check {
    pub name: &'static str,
    pub pass: bool,
    pub detail: String,
}

/// Why a check failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// What the check reads is not in the guest's log.
    #[error("{0}")]
    Missing(&'static str),
    /// The log has it, but it does not show what the check proves: the
    /// numbers seen.
    #[error("{0}")]
    Observed(String),
}

/// A check's result: what it saw when it passed, or why it failed.
type Verdict = Result<String, Failure>;

#[derive(Default)]
pub struct Report(Vec<Check>);

impl Report {
    fn add(&mut self, name: &'static str, r: Verdict) {
        let (pass, detail) = match r {
            Ok(d) => (true, d),
            Err(e) => (false, e.to_string()),
        };
        self.0.push(Check { name, pass, detail });
    }
    pub fn passed(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|c| c.pass)
    }
    pub fn failed(&self) -> usize {
        self.0.iter().filter(|c| !c.pass).count()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn print(&self) {
        println!("\n{:<22} {:<5} detail", "check", "");
        for c in &self.0 {
            println!(
                "{:<22} {:<5} {}",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.detail
            );
        }
        println!();
    }
    pub fn to_json(&self) -> Value {
        Value::Array(
            self.0
                .iter()
                .map(|c| serde_json::json!({"name": c.name, "pass": c.pass, "detail": c.detail}))
                .collect(),
        )
    }
}

/// The text between `=== BEGIN name` and `=== END name`.
pub fn section<'a>(log: &'a str, name: &str) -> Option<&'a str> {
    let begin = format!("=== BEGIN {name}\n");
    let end = format!("=== END {name}");
    let s = log.find(&begin)? + begin.len();
    let e = log[s..].find(&end)? + s;
    Some(&log[s..e])
}

/// Guest time (ms) of each `=== STEP <unix s> <name>` line, by name.
pub fn steps(log: &str) -> BTreeMap<String, i64> {
    log.lines()
        .filter_map(|l| l.split_once("=== STEP ").map(|(_, r)| r))
        .filter_map(|r| {
            let (t, name) = r.split_once(' ')?;
            Some((name.trim().to_string(), t.parse::<i64>().ok()? * 1000))
        })
        .collect()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `key: value (n)` → n, from `ibv_devinfo -v` output for port 1.
pub fn devinfo_field(devinfo: &str, key: &str) -> Option<String> {
    let start = devinfo
        .lines()
        .position(|l| l.trim().starts_with("port:"))?;
    devinfo
        .lines()
        .skip(start + 1)
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| {
            let v = v.trim();
            match (v.rfind('('), v.rfind(')')) {
                (Some(a), Some(b)) if b > a => v[a + 1..b].to_string(),
                _ => v.to_string(),
            }
        })
}

/// `k=v` pairs of the collector's `rdma: rxe0/1 state=4 ...` line.
pub fn collector_port_line(log: &str, port: &str) -> Option<BTreeMap<String, String>> {
    let l = log
        .lines()
        .find(|l| l.starts_with(&format!("rdma: {port} ")))?;
    Some(
        l.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Per-window deltas of one port's `hw_counters`: (window end ms, deltas).
fn hw_deltas(windows: &[Value], hca: &str) -> Vec<(i64, BTreeMap<String, u64>)> {
    let mut prev: Option<BTreeMap<String, u64>> = None;
    let mut out = Vec::new();
    for w in windows {
        let end = w["end_unix_ms"].as_i64().unwrap_or(0);
        let Some(p) = w["ib_ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["hca"] == hca))
        else {
            continue;
        };
        let cur: BTreeMap<String, u64> = p["hw_counters"]
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), u(v))).collect())
            .unwrap_or_default();
        if let Some(pr) = &prev {
            let d = cur
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(*pr.get(k).unwrap_or(v))))
                .collect();
            out.push((end, d));
        }
        prev = Some(cur);
    }
    out
}

fn errors(d: &BTreeMap<String, u64>) -> u64 {
    RXE_ERROR_COUNTERS.iter().filter_map(|c| d.get(*c)).sum()
}

/// Errors per packet moved in a window (retries happen on a healthy
/// emulated link too; what loss changes is their share of the traffic).
fn error_rate(d: &BTreeMap<String, u64>) -> f64 {
    let pkts = d.get("sent_pkts").copied().unwrap_or(0) + d.get("rcvd_pkts").copied().unwrap_or(0);
    errors(d) as f64 / pkts.max(1) as f64
}

pub fn judge(log: &str, window_s: u32) -> Report {
    let mut r = Report::default();
    let win_ms = i64::from(window_s) * 1000;
    let done = log.contains("=== GUEST DONE");
    r.add(
        "guest_completed",
        if done {
            Ok("the scenario ran to its end and the guest powered off".into())
        } else {
            Err(Failure::Missing(
                "no `=== GUEST DONE`: the guest crashed or timed out",
            ))
        },
    );
    let st = steps(log);
    let collector_log = section(log, "collector.log").unwrap_or("");
    let windows = json_lines(section(log, "windows.jsonl").unwrap_or(""));
    let candidates = json_lines(section(log, "candidates.jsonl").unwrap_or(""));
    let metrics = section(log, "metrics").unwrap_or("");

    // 1. Probes attached inside the guest's kernel.
    r.add("verbs_probes_attached", probes_attached(collector_log));

    // 2. sysfs hw_counters (no counters/ on rxe) rising with the traffic.
    let rxe0 = hw_deltas(&windows, "rxe0");
    r.add(
        "sysfs_hw_counters",
        hw_counters(&windows, &rxe0, &st, window_s),
    );

    // 3. rdma-sys enumeration matches ibv_devinfo.
    let devinfo = section(log, "ibv_devinfo").unwrap_or("");
    r.add("rdma_sys_enumeration", enumeration(collector_log, devinfo));

    // 4. Async events on link down/up.
    r.add("async_events", async_events(&windows, &st));

    // 5. Completions and posts counted by the uprobes for the perftest client.
    r.add("verbs_completions", completions(metrics));

    // 6. Error completions attributed to the killed server's client.
    r.add("error_completions", error_completions(log, &windows));

    // 7. The headline: ib_link_degraded for rxe0 within 2 windows, resolved.
    r.add(
        "ib_link_degraded",
        incident(&candidates, &rxe0, &st, win_ms),
    );
    r
}

fn probes_attached(collector_log: &str) -> Verdict {
    let wanted = [
        "verbs:poll_cq",
        "verbs:post_send",
        "verbs:post_recv",
        "verbs:ibv_modify_qp",
        "verbs:ibv_get_async_event",
    ];
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|p| !collector_log.contains(&format!("probe {p}: attached")))
        .collect();
    if missing.is_empty() {
        Ok("poll_cq/post_send/post_recv through rxe's ops table; ibv_modify_qp, ibv_get_async_event by symbol".into())
    } else {
        Err(Failure::Observed(format!(
            "not attached: {}",
            missing.join(", ")
        )))
    }
}

/// rxe0's `hw_counters/sent_pkts` per window: near idle before the
/// traffic, far above that with it; no `counters/` directory on rxe.
fn hw_counters(
    windows: &[Value],
    rxe0: &[(i64, BTreeMap<String, u64>)],
    st: &BTreeMap<String, i64>,
    window_s: u32,
) -> Verdict {
    let win_ms = i64::from(window_s) * 1000;
    let (t0, t1) = (
        st.get("traffic start").copied().unwrap_or(0),
        st.get("loss on").copied().unwrap_or(0),
    );
    let idle_before: Vec<u64> = rxe0
        .iter()
        .filter(|(e, _)| *e <= t0)
        .map(|(_, d)| d.get("sent_pkts").copied().unwrap_or(0))
        .collect();
    let busy: Vec<u64> = rxe0
        .iter()
        .filter(|(e, _)| *e > t0 + win_ms && *e <= t1)
        .map(|(_, d)| d.get("sent_pkts").copied().unwrap_or(0))
        .collect();
    let no_counters_dir = windows.iter().all(|w| {
        w["ib_ports"].as_array().is_none_or(|ps| {
            ps.iter()
                .all(|p| p["counters"].as_object().is_none_or(|o| o.is_empty()))
        })
    });
    let idle_max = idle_before.iter().copied().max().unwrap_or(0);
    let busy_min = busy.iter().copied().min().unwrap_or(0);
    if !busy.is_empty() && busy_min > 1000 && busy_min > 10 * idle_max.max(1) && no_counters_dir {
        Ok(format!(
            "rxe0 hw_counters/sent_pkts per {window_s} s window: idle max {idle_max}, with traffic min {busy_min} over {} windows; no counters/ directory",
            busy.len()
        ))
    } else {
        Err(Failure::Observed(format!(
            "sent_pkts idle {idle_before:?}, traffic {busy:?}, counters/ empty: {no_counters_dir}"
        )))
    }
}

/// `IBV_EVENT_PORT_ERR` for the port after the link went down, and
/// `IBV_EVENT_PORT_ACTIVE` after it came up.
fn async_events(windows: &[Value], st: &BTreeMap<String, i64>) -> Verdict {
    let (down, up) = (
        st.get("link down").copied().unwrap_or(i64::MAX),
        st.get("link up").copied().unwrap_or(i64::MAX),
    );
    let events: Vec<(i64, String)> = windows
        .iter()
        .flat_map(|w| w["events"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["kind"] == "rdma_async" && e["entity"] == PORT)
        .map(|e| {
            (
                e["unix_ms"].as_i64().unwrap_or(0),
                e["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let port_err = events
        .iter()
        .find(|(t, d)| d == "IBV_EVENT_PORT_ERR" && *t >= down);
    let port_active = events
        .iter()
        .find(|(t, d)| d == "IBV_EVENT_PORT_ACTIVE" && *t >= up);
    match (port_err, port_active) {
        (Some(e), Some(a)) => Ok(format!(
            "{PORT}: IBV_EVENT_PORT_ERR {:.1} s after `ip link set veth0 down`, IBV_EVENT_PORT_ACTIVE {:.1} s after up",
            (e.0 - down) as f64 / 1000.0,
            (a.0 - up) as f64 / 1000.0
        )),
        _ => Err(Failure::Observed(format!(
            "rdma_async events for {PORT}: {events:?}"
        ))),
    }
}

fn enumeration(collector_log: &str, devinfo: &str) -> Verdict {
    let Some(c) = collector_port_line(collector_log, "rxe0/1") else {
        return Err(Failure::Missing(
            "no `rdma: rxe0/1 ...` line from the collector",
        ));
    };
    let link_layer = match devinfo_field(devinfo, "link_layer").as_deref() {
        Some("Ethernet") => "2".to_string(),
        Some("InfiniBand") => "1".to_string(),
        other => format!("{other:?}"),
    };
    let pairs = [
        ("state", devinfo_field(devinfo, "state")),
        ("phys_state", devinfo_field(devinfo, "phys_state")),
        ("lid", devinfo_field(devinfo, "port_lid")),
        ("mtu_enum", devinfo_field(devinfo, "active_mtu")),
        ("width", devinfo_field(devinfo, "active_width")),
        ("speed", devinfo_field(devinfo, "active_speed")),
        ("link_layer", Some(link_layer)),
    ];
    let mut diffs = Vec::new();
    let mut same = Vec::new();
    for (k, want) in pairs {
        let got = c.get(k).cloned();
        if got.is_some() && got == want {
            same.push(format!("{k}={}", got.unwrap_or_default()));
        } else {
            diffs.push(format!("{k}: collector {got:?}, ibv_devinfo {want:?}"));
        }
    }
    if diffs.is_empty() {
        Ok(format!(
            "rxe0 port 1 equal to ibv_devinfo -v: {}",
            same.join(" ")
        ))
    } else {
        Err(Failure::Observed(diffs.join("; ")))
    }
}

/// `name{labels} value` lines of a Prometheus text page.
fn samples<'a>(metrics: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| {
            let (lbl, v) = l.rsplit_once(' ')?;
            Some((lbl, v.parse().ok()?))
        })
        .collect()
}

fn label<'a>(sample: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("{key}=\"");
    let s = sample.find(&k)? + k.len();
    let e = sample[s..].find('"')? + s;
    Some(&sample[s..e])
}

/// The phase-1 client's job in the guest (`SLURM_JOB_ID` in guest-init.sh).
const CLIENT_JOB: &str = "4242";

fn completions(metrics: &str) -> Verdict {
    // The phase-1 client's series (job 4242, rank 0): it exited long before
    // the scrape, so this also shows that its last counts are kept.
    let of_client = |name: &str, key: &str, want: &str| {
        samples(metrics, name)
            .into_iter()
            .find(|(l, _)| {
                label(l, "hpc_job") == Some(CLIENT_JOB)
                    && label(l, "rank") == Some("0")
                    && label(l, key) == Some(want)
            })
            .map(|(_, v)| v)
    };
    let done = of_client(
        "faultline_verbs_completions_total",
        "status",
        "IBV_WC_SUCCESS",
    )
    .ok_or(Failure::Missing(
        "no successful completions counted for the client's job",
    ))?;
    let posted = of_client("faultline_verbs_posted_work_requests_total", "dir", "send").ok_or(
        Failure::Missing("no posted send work requests for the client's job"),
    )?;
    let bytes = of_client("faultline_verbs_posted_bytes_total", "dir", "send").unwrap_or(0.0);
    // ib_write_bw signals every write (CQ moderation 1) and keeps at most its
    // TX depth (128) outstanding; 65536-byte messages.
    let outstanding = posted - done;
    if done > 1000.0 && (0.0..=128.0).contains(&outstanding) && bytes == posted * 65536.0 {
        Ok(format!(
            "job {CLIENT_JOB} rank 0 (exited before the scrape): {done} IBV_WC_SUCCESS completions, {posted} writes posted ({outstanding} outstanding at the end, TX depth 128), {bytes} bytes = {posted} x 65536"
        ))
    } else {
        Err(Failure::Observed(format!(
            "job {CLIENT_JOB} rank 0: {done} completions, {posted} posted, {bytes} bytes"
        )))
    }
}

fn error_completions(log: &str, windows: &[Value]) -> Verdict {
    let client_pid: u64 = log
        .lines()
        .find_map(|l| {
            l.split_once("=== CLIENT_PID ")
                .map(|(_, p)| p.trim().parse().ok())
        })
        .flatten()
        .ok_or(Failure::Missing("no CLIENT_PID line"))?;
    let client_log = section(log, "bw-client2").unwrap_or("");
    let qpn = client_log
        .lines()
        .find_map(|l| l.trim().strip_prefix("local address:"))
        .and_then(|l| l.split("QPN").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .ok_or(Failure::Missing("no local QPN in the client's output"))?;
    let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
    for w in windows {
        for v in w["verbs"].as_array().into_iter().flatten() {
            if u(&v["pid"]) == client_pid && u(&v["qp"]) == qpn {
                *by_status
                    .entry(v["status"].as_str().unwrap_or("?").to_string())
                    .or_default() += u(&v["count"]);
            }
        }
    }
    let errs: u64 = ["IBV_WC_RETRY_EXC_ERR", "IBV_WC_WR_FLUSH_ERR"]
        .iter()
        .filter_map(|s| by_status.get(*s))
        .sum();
    // The client's QP must be on rxe0, so its traffic crossed veth0.
    let qps = section(log, "qps").unwrap_or("");
    let device = qps
        .lines()
        .find(|l| {
            l.contains(&format!(" lqpn {qpn} ")) && l.contains(&format!(" pid {client_pid} "))
        })
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|d| d.split('/').next())
        .unwrap_or("unknown device");
    if errs > 0 && device == "rxe0" {
        Ok(format!(
            "client pid {client_pid} QP {qpn:#x} ({device}) after its server was killed: {by_status:?}"
        ))
    } else {
        Err(Failure::Observed(format!(
            "client pid {client_pid} QP {qpn:#x} ({device}): {by_status:?}"
        )))
    }
}

fn incident(
    candidates: &[Value],
    rxe0: &[(i64, BTreeMap<String, u64>)],
    st: &BTreeMap<String, i64>,
    win_ms: i64,
) -> Verdict {
    let (t0, on, off) = (
        st.get("traffic start").copied().unwrap_or(0),
        st.get("loss on")
            .copied()
            .ok_or(Failure::Missing("no `loss on` step"))?,
        st.get("loss off")
            .copied()
            .ok_or(Failure::Missing("no `loss off` step"))?,
    );
    // Healthy windows: with traffic, before the loss.
    let healthy_max = rxe0
        .iter()
        .filter(|(e, _)| *e > t0 + win_ms && *e <= on)
        .map(|(_, d)| error_rate(d))
        .fold(0.0, f64::max);
    // Counters moved: the first window after the loss started whose errors
    // per packet exceed every healthy window's.
    let moved = rxe0
        .iter()
        .find(|(e, d)| *e > on && errors(d) > 0 && error_rate(d) > healthy_max)
        .map(|(e, d)| (*e, errors(d), error_rate(d)))
        .ok_or_else(|| {
            Failure::Observed(format!(
                "rxe0's errors per packet never exceeded the healthy maximum {healthy_max:.2e}"
            ))
        })?;
    let degraded: Vec<&Value> = candidates
        .iter()
        .filter(|c| c["kind"] == "ib_link_degraded" && c["entity"] == PORT)
        .collect();
    let early: Vec<i64> = candidates
        .iter()
        .filter(|c| c["kind"] == "ib_link_degraded" && c["state"] == "opened")
        .filter_map(|c| c["ts"].as_i64())
        .filter(|&t| t <= on)
        .collect();
    if !early.is_empty() {
        return Err(Failure::Observed(format!(
            "ib_link_degraded opened during the healthy baseline at {early:?}"
        )));
    }
    let opened = degraded
        .iter()
        .find(|c| c["state"] == "opened")
        .ok_or(Failure::Missing("no ib_link_degraded opened for rxe0"))?;
    let opened_ts = opened["ts"].as_i64().unwrap_or(0);
    let id = opened["incident_id"].as_str().unwrap_or("");
    let lag_windows = (opened_ts - moved.0) / win_ms + 1;
    if lag_windows > 2 {
        return Err(Failure::Observed(format!(
            "opened {:.1} s after the counters moved: window {lag_windows}, not within 2",
            (opened_ts - moved.0) as f64 / 1000.0
        )));
    }
    let evidence: Vec<String> = opened["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect();
    let named: Vec<&String> = evidence
        .iter()
        .filter(|e| {
            RXE_ERROR_COUNTERS
                .iter()
                .any(|c| e.starts_with(&format!("{c} +")))
        })
        .collect();
    if named.is_empty() {
        return Err(Failure::Observed(format!(
            "evidence names no counter: {evidence:?}"
        )));
    }
    let resolved = degraded
        .iter()
        .find(|c| c["state"] == "resolved" && c["incident_id"] == id)
        .ok_or(Failure::Missing(
            "the incident was not resolved after the loss was removed",
        ))?;
    let resolved_ts = resolved["ts"].as_i64().unwrap_or(0);
    if resolved_ts <= off {
        return Err(Failure::Observed(format!(
            "resolved at {resolved_ts}, before the loss was removed at {off}"
        )));
    }
    Ok(format!(
        "counters moved in the window ending {:.1} s after netem loss started ({} errors, {:.1e} per packet vs healthy max {healthy_max:.1e}); incident {id} opened in window {lag_windows} with evidence {named:?}; resolved {:.1} s after the loss was removed",
        (moved.0 - on) as f64 / 1000.0,
        moved.1,
        moved.2,
        (resolved_ts - off) as f64 / 1000.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_steps_and_devinfo() {
        let log = "noise\n=== STEP 100 traffic start\n=== BEGIN a\nx\ny\n=== END a\n=== STEP 102 loss on\n";
        assert_eq!(section(log, "a"), Some("x\ny\n"));
        assert_eq!(section(log, "b"), None);
        assert_eq!(steps(log)["loss on"], 102_000);
        let dev = "hca_id: rxe0\n\ttransport:\tInfiniBand (0)\n\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tactive_mtu:\t\t1024 (3)\n\t\t\tlink_layer:\t\tEthernet\n";
        assert_eq!(devinfo_field(dev, "state").as_deref(), Some("4"));
        assert_eq!(devinfo_field(dev, "active_mtu").as_deref(), Some("3"));
        assert_eq!(
            devinfo_field(dev, "link_layer").as_deref(),
            Some("Ethernet")
        );
        let c = collector_port_line("rdma: rxe0/1 state=4 lid=0\n", "rxe0/1").unwrap();
        assert_eq!(c["state"], "4");
    }

    #[test]
    fn an_empty_log_fails_every_check() {
        let r = judge("", 2);
        assert!(!r.passed());
        assert_eq!(r.failed(), r.len());
    }
}
