#!/usr/bin/env python3
"""Writes faultline's Grafana dashboards (deploy/grafana/*.json) from the
panel lists below: fleet overview, one host, one job, one link.

Every expression uses only metric names the collector and the correlator
export (docs/metrics.md); tests/tests/deploy_prometheus.rs runs each one
against a real Prometheus that scraped a running collector and correlator.
Grafana variables: $node (the scrape target's `instance`, which Prometheus
sets on every series of the target, DCGM_FI_* ones included: a plain
static scrape works with no relabelling; the ServiceMonitor sets it to the
node name for readability), $job
(the workload job), $device / $port (an HCA port), $__rate_interval.

Run: python3 deploy/grafana/generate.py   (rewrites the JSON files)
     python3 deploy/grafana/generate.py --check   (exit 1 if they differ)
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent

DS = {"type": "prometheus", "uid": "${datasource}"}


def var_datasource():
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }


def var_query(name, label, query, multi=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": multi,
        "multi": multi,
        "allValue": ".+",
        "current": {},
        "hide": 0,
        "sort": 1,
    }


def panel(pid, title, targets, unit="short", x=0, y=0, w=12, h=8, kind="timeseries", desc=""):
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": DS}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def layout(panels):
    """Two panels per row, in order."""
    out = []
    for i, p in enumerate(panels):
        p = dict(p)
        p["id"] = i + 1
        p["gridPos"] = {"x": (i % 2) * 12, "y": (i // 2) * 8, "w": 12, "h": 8}
        out.append(p)
    return out


def dashboard(uid, title, desc, variables, panels):
    return {
        "uid": uid,
        "title": title,
        "description": desc,
        "tags": ["faultline"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [var_datasource()] + variables},
        "annotations": {"list": []},
        "links": [
            {"title": "faultline", "type": "dashboards", "tags": ["faultline"], "asDropdown": True}
        ],
        "panels": layout(panels),
    }


RI = "$__rate_interval"

FLEET = dashboard(
    "faultline-fleet",
    "faultline / fleet",
    "Open incidents, collectors' delivery, and the GPUs and links of every node.",
    [],
    [
        panel(0, "Open incidents by kind", [("sum by (kind) (faultline_correlator_open_incidents)", "{{kind}}")]),
        panel(0, "Collector lag (wall clock − newest window)", [("max by (host) (faultline_correlator_collector_lag_seconds)", "{{host}}")], unit="s"),
        panel(0, "Windows received by the correlator", [(f"sum(rate(faultline_correlator_windows_total[{RI}]))", "windows/s")], unit="ops"),
        panel(0, "Windows delivered per node", [(f"sum by (instance) (rate(faultline_windows_sent_total[{RI}]))", "{{instance}}")], unit="ops"),
        panel(0, "Hottest GPU per node", [("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", "{{Hostname}}")], unit="celsius"),
        panel(0, "GPU power per node", [("sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)", "{{Hostname}}")], unit="watt"),
        panel(0, "GPUs with an active slowdown reason", [('count by (instance, reason) (faultline_gpu_throttle_reason{reason!="idle"} == 1)', "{{instance}} {{reason}}")]),
        # The per-GPU event count exists from 0, so increase() sees the first
        # XID; the per-code series start at their first XID (no increase()).
        panel(0, "XIDs", [
            ("sum by (instance) (increase(faultline_gpu_xid_events_total[1h]))", "{{instance}} last hour"),
            ("sum by (instance, xid) (faultline_gpu_xid_errors_total)", "{{instance}} XID {{xid}} since the collector started"),
        ]),
        panel(0, "Lost GPUs", [("sum by (instance) (faultline_gpu_lost)", "{{instance}}")]),
        panel(0, "Active InfiniBand ports per node", [("sum by (instance) (faultline_infiniband_state_id == bool 4)", "{{instance}}")]),
    ],
)

NODE = [var_query("node", "node", "label_values(faultline_probe_attached, instance)")]
N = 'instance=~"$node"'

HOST = dashboard(
    "faultline-host",
    "faultline / host",
    "One node: its GPUs (dcgm-exporter names), CUDA activity by job, block latency, InfiniBand ports, probes.",
    NODE,
    [
        panel(0, "GPU temperature", [(f"DCGM_FI_DEV_GPU_TEMP{{{N}}}", "GPU {{gpu}}")], unit="celsius"),
        panel(0, "SM clock", [(f"DCGM_FI_DEV_SM_CLOCK{{{N}}}", "GPU {{gpu}}")], unit="MHz"),
        panel(0, "Power", [(f"DCGM_FI_DEV_POWER_USAGE{{{N}}}", "GPU {{gpu}}")], unit="watt"),
        panel(0, "Utilisation", [(f"DCGM_FI_DEV_GPU_UTIL{{{N}}}", "GPU {{gpu}}")], unit="percent"),
        panel(0, "Framebuffer used", [(f"DCGM_FI_DEV_FB_USED{{{N}}}", "GPU {{gpu}}")], unit="decmbytes"),
        panel(0, "Active slowdown reasons", [(f'faultline_gpu_throttle_reason{{{N},reason!="idle"}} == 1', "GPU {{gpu}} {{reason}}")]),
        panel(0, "CUDA kernel launches by job and rank", [(f"sum by (job, rank, gpu) (rate(faultline_cuda_kernel_launches_total{{{N}}}[{RI}]))", "{{job}}/{{rank}} GPU {{gpu}}")], unit="ops"),
        panel(0, "Block I/O p99 latency", [(f"histogram_quantile(0.99, sum by (device, le) (rate(faultline_block_latency_seconds_bucket{{{N}}}[{RI}])))", "{{device}}")], unit="s"),
        panel(0, "InfiniBand received", [(f"sum by (device, port) (rate(faultline_infiniband_port_data_received_bytes_total{{{N}}}[{RI}]))", "{{device}}/{{port}}")], unit="Bps"),
        panel(0, "InfiniBand symbol errors", [(f"sum by (device, port) (increase(faultline_infiniband_symbol_error_total{{{N}}}[{RI}]))", "{{device}}/{{port}}")]),
        panel(0, "Probes attached", [(f"faultline_probe_attached{{{N}}}", "{{probe}}")]),
    ],
)

J = 'job=~"$job"'
JOB = dashboard(
    "faultline-job",
    "faultline / job",
    "One workload job: its step time beside its GPUs' clocks and slowdown reasons and its HCAs' errors.",
    [var_query("job", "job", "label_values(faultline_job_step_seconds, job)")],
    [
        panel(0, "Step time by rank (mean over the window)", [(f"faultline_job_step_seconds{{{J}}}", "rank {{rank}}")], unit="s"),
        panel(0, "Its GPUs' SM clock", [(f"faultline_gpu_sm_clock_mhz{{{J}}}", "{{instance}} GPU {{gpu}}")], unit="MHz"),
        panel(0, "Its GPUs' clock event reasons (bitmask)", [(f'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{hpc_job=~"$job"}}', "{{Hostname}} GPU {{gpu}}")]),
        panel(0, "Its GPUs' power", [(f"faultline_gpu_power_watts{{{J}}}", "{{instance}} GPU {{gpu}}")], unit="watt"),
        panel(0, "Its HCAs' symbol errors", [(f"sum by (instance, device, port) (increase(faultline_infiniband_symbol_error_total[{RI}]) * on (instance, device) group_left (job) faultline_job_hca_info{{{J}}})", "{{instance}} {{device}}/{{port}}")]),
        panel(0, "Its HCAs' receive errors and link recoveries", [
            (f"sum by (instance, device, port) (increase(faultline_infiniband_port_errors_received_total[{RI}]) * on (instance, device) group_left (job) faultline_job_hca_info{{{J}}})", "rcv errors {{instance}} {{device}}/{{port}}"),
            (f"sum by (instance, device, port) (increase(faultline_infiniband_link_error_recovery_total[{RI}]) * on (instance, device) group_left (job) faultline_job_hca_info{{{J}}})", "recoveries {{instance}} {{device}}/{{port}}"),
        ]),
        panel(0, "Its CUDA kernel launches", [(f"sum by (instance, rank, gpu) (rate(faultline_cuda_kernel_launches_total{{{J}}}[{RI}]))", "{{instance}} rank {{rank}} GPU {{gpu}}")], unit="ops"),
        panel(0, "Workloads on its GPUs (> 1: shared)", [(f"faultline_gpu_workloads{{{J}}}", "{{instance}} GPU {{gpu}}")]),
    ],
)

L = 'instance=~"$node",device=~"$device",port=~"$port"'
LINK = dashboard(
    "faultline-link",
    "faultline / link",
    "One InfiniBand/RoCE port: state, traffic, error counters, the jobs using it and the link incidents.",
    NODE
    + [
        var_query("device", "HCA", 'label_values(faultline_infiniband_state_id{instance=~"$node"}, device)'),
        var_query("port", "port", 'label_values(faultline_infiniband_state_id{instance=~"$node",device=~"$device"}, port)'),
    ],
    [
        panel(0, "Port state (4 = ACTIVE)", [(f"faultline_infiniband_state_id{{{L}}}", "{{instance}} {{device}}/{{port}}"), (f"faultline_infiniband_physical_state_id{{{L}}}", "phys {{instance}} {{device}}/{{port}}")]),
        panel(0, "Traffic", [
            (f"rate(faultline_infiniband_port_data_transmitted_bytes_total{{{L}}}[{RI}])", "tx {{instance}} {{device}}/{{port}}"),
            (f"rate(faultline_infiniband_port_data_received_bytes_total{{{L}}}[{RI}])", "rx {{instance}} {{device}}/{{port}}"),
        ], unit="Bps"),
        panel(0, "Symbol errors", [(f"increase(faultline_infiniband_symbol_error_total{{{L}}}[{RI}])", "{{instance}} {{device}}/{{port}}")]),
        panel(0, "Link downed / error recovery", [
            (f"increase(faultline_infiniband_link_downed_total{{{L}}}[{RI}])", "downed {{instance}} {{device}}/{{port}}"),
            (f"increase(faultline_infiniband_link_error_recovery_total{{{L}}}[{RI}])", "recovery {{instance}} {{device}}/{{port}}"),
        ]),
        panel(0, "Receive errors", [(f"increase(faultline_infiniband_port_errors_received_total{{{L}}}[{RI}])", "{{instance}} {{device}}/{{port}}")]),
        panel(0, "Transmit wait (congestion)", [(f"rate(faultline_infiniband_port_transmit_wait_total{{{L}}}[{RI}])", "{{instance}} {{device}}/{{port}}")]),
        panel(0, "Jobs using the HCA", [('faultline_job_hca_info{instance=~"$node",device=~"$device"}', "{{job}}")]),
        panel(0, "Open link incidents (all links)", [('faultline_correlator_open_incidents{kind=~"ib_.*"}', "{{kind}}")]),
    ],
)

DASHBOARDS = {
    "faultline-fleet.json": FLEET,
    "faultline-host.json": HOST,
    "faultline-job.json": JOB,
    "faultline-link.json": LINK,
}


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, d in DASHBOARDS.items():
        text = json.dumps(d, indent=2, sort_keys=True) + "\n"
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale dashboards (run deploy/grafana/generate.py): " + ", ".join(stale), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
