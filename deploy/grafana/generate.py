#!/usr/bin/env python3
"""Writes faultline's Grafana dashboards (deploy/grafana/*.json) from the
panel lists below: fleet overview, one host, one job, one link; and the
same dashboards as Kubernetes ConfigMaps for Grafana's dashboard sidecar
(deploy/kubernetes/dashboards/, label grafana_dashboard: "1", the
kube-prometheus-stack default), with that directory's kustomization.yaml.

Every expression reads faultline's own families (docs/metrics.md), never
only the dcgm-exporter copies (DCGM_FI_*, `[nvml] dcgm_compat`, off in the
Kubernetes config): tests/tests/it/deploy_prometheus.rs runs each one against
a real Prometheus that scraped a running collector and correlator, with
the copies on and off. Selectors: the scrape by Prometheus's `job`
(faultline-collector, faultline-correlator), the workload by `hpc_job`.
Grafana variables: $cluster (the `cluster` label a global view such as
Thanos or Mimir adds; "All" = `.*`, which also matches series without
it), $node (the collector target's `instance`: the node name under the
ServiceMonitor, host:port for a plain static target), $hpc_job (the
workload job), $device / $port (an HCA port), $__rate_interval.

Run: python3 deploy/grafana/generate.py   (rewrites the JSON and the ConfigMaps)
     python3 deploy/grafana/generate.py --check   (exit 1 if any differs)
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


def var_query(name, label, query, multi=True, all_value=".+", include_all=None):
    include_all = multi if include_all is None else include_all
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": include_all,
        "multi": multi,
        "allValue": all_value if include_all else None,
        "current": {"text": "All", "value": "$__all"} if include_all else {},
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

# The scrape jobs (ServiceMonitor jobLabel, or static scrape job names).
COLLECTOR_JOB = "faultline-collector"
CORRELATOR_JOB = "faultline-correlator"
C = f'job="{COLLECTOR_JOB}",cluster=~"$cluster"'
K = f'job="{CORRELATOR_JOB}",cluster=~"$cluster"'
BOTH = f'job=~"{COLLECTOR_JOB}|{CORRELATOR_JOB}",cluster=~"$cluster"'

# `cluster` where a global view adds it: "All" is `.*`, which matches a
# series without the label too, so one Prometheus per cluster needs nothing.
CLUSTER = [var_query("cluster", "cluster", f'label_values(up{{job=~"{COLLECTOR_JOB}|{CORRELATOR_JOB}"}}, cluster)', multi=False, all_value=".*", include_all=True)]

FLEET = dashboard(
    "faultline-fleet",
    "faultline / fleet",
    "Open incidents, faultline's own health and delivery, and the GPUs and links of every node.",
    CLUSTER,
    [
        panel(0, "Open incidents by kind", [(f"sum by (kind) (faultline_correlator_open_incidents{{{K}}})", "{{kind}}")]),
        panel(0, "Collector lag (wall clock − newest window)", [(f"max by (host) (faultline_correlator_collector_lag_seconds{{{K}}})", "{{host}}")], unit="s"),
        panel(0, "Windows received by the correlator", [(f"sum(rate(faultline_correlator_windows_total{{{K}}}[{RI}]))", "windows/s")], unit="ops"),
        panel(0, "Windows delivered per node", [(f"sum by (instance) (rate(faultline_windows_sent_total{{{C}}}[{RI}]))", "{{instance}}")], unit="ops"),
        panel(0, "Hottest GPU per node", [(f"max by (instance) (faultline_gpu_temperature_celsius{{{C}}})", "{{instance}}")], unit="celsius"),
        panel(0, "GPU power per node", [(f"sum by (instance) (faultline_gpu_power_watts{{{C}}})", "{{instance}}")], unit="watt"),
        panel(0, "GPUs with an active slowdown reason", [(f'count by (instance, reason) (faultline_gpu_throttle_reason{{{C},reason!="idle"}} == 1)', "{{instance}} {{reason}}")]),
        # The per-GPU event count exists from 0, so increase() sees the first
        # XID; the per-code series start at their first XID (no increase()).
        panel(0, "XIDs", [
            (f"sum by (instance) (increase(faultline_gpu_xid_events_total{{{C}}}[1h]))", "{{instance}} last hour"),
            (f"sum by (instance, xid) (faultline_gpu_xid_errors_total{{{C}}})", "{{instance}} XID {{xid}} since the collector started"),
        ]),
        panel(0, "Lost GPUs", [(f"sum by (instance) (faultline_gpu_lost{{{C}}})", "{{instance}}")]),
        panel(0, "Active InfiniBand ports per node", [(f"sum by (instance) (faultline_infiniband_state_id{{{C}}} == bool 4)", "{{instance}}")]),
        panel(0, "faultline targets up", [(f"sum by (job) (up{{{BOTH}}})", "{{job}} up"), (f"count by (job) (up{{{BOTH}}})", "{{job}} targets")]),
        panel(0, "faultline versions running", [(f"count by (job, version) (faultline_build_info{{{BOTH}}})", "{{job}} {{version}}")]),
    ],
)

NODE = [var_query("node", "node", f"label_values(up{{{C}}}, instance)")]
N = f'{C},instance=~"$node"'

HOST = dashboard(
    "faultline-host",
    "faultline / host",
    "One node: its GPUs, CUDA activity by job, block latency, InfiniBand ports, the collector's probes and its own cost.",
    CLUSTER + NODE,
    [
        panel(0, "GPU temperature", [(f"faultline_gpu_temperature_celsius{{{N}}}", "GPU {{gpu}}")], unit="celsius"),
        panel(0, "SM clock", [(f"faultline_gpu_sm_clock_hertz{{{N}}}", "GPU {{gpu}}")], unit="hertz"),
        panel(0, "Power", [(f"faultline_gpu_power_watts{{{N}}}", "GPU {{gpu}}")], unit="watt"),
        panel(0, "Utilisation", [(f"faultline_gpu_utilization_ratio{{{N}}}", "GPU {{gpu}}")], unit="percentunit"),
        panel(0, "Framebuffer used", [(f"faultline_gpu_memory_used_bytes{{{N}}}", "GPU {{gpu}}")], unit="bytes"),
        panel(0, "Active slowdown reasons", [(f'faultline_gpu_throttle_reason{{{N},reason!="idle"}} == 1', "GPU {{gpu}} {{reason}}")]),
        panel(0, "CUDA kernel launches by job and rank", [(f"sum by (hpc_job, rank, gpu) (rate(faultline_cuda_kernel_launches_total{{{N}}}[{RI}]))", "{{hpc_job}}/{{rank}} GPU {{gpu}}")], unit="ops"),
        panel(0, "Block I/O p99 latency", [(f"histogram_quantile(0.99, sum by (device, le) (rate(faultline_block_latency_seconds_bucket{{{N}}}[{RI}])))", "{{device}}")], unit="s"),
        panel(0, "InfiniBand received", [(f"sum by (device, port) (rate(faultline_infiniband_port_data_received_bytes_total{{{N}}}[{RI}]))", "{{device}}/{{port}}")], unit="Bps"),
        panel(0, "InfiniBand symbol errors", [(f"sum by (device, port) (increase(faultline_infiniband_symbol_error_total{{{N}}}[{RI}]))", "{{device}}/{{port}}")]),
        panel(0, "Probes attached", [(f"faultline_probe_attached{{{N}}}", "{{probe}}")]),
        panel(0, "Collector CPU (cores) and spool", [
            (f"rate(process_cpu_seconds_total{{{N}}}[{RI}])", "CPU"),
            (f"faultline_spool_bytes{{{N}}} / 1e6", "spool MB"),
        ]),
        panel(0, "Collector memory", [(f"process_resident_memory_bytes{{{N}}}", "resident")], unit="bytes"),
    ],
)

# One workload job at a time (its HCA joins need one job per HCA).
J = f'{C},hpc_job=~"$hpc_job"'
# The HCA counters joined to the job's HCAs (faultline_job_hca_info).
HCA = f"* on (cluster, instance, device) group_left (hpc_job) faultline_job_hca_info{{{J}}}"
JOB = dashboard(
    "faultline-job",
    "faultline / job",
    "One workload job (hpc_job): its step time beside its GPUs' clocks and slowdown reasons and its HCAs' errors.",
    CLUSTER + [var_query("hpc_job", "job", f'label_values({{__name__=~"faultline_gpu_workloads|faultline_job_step_seconds",{C},hpc_job!=""}}, hpc_job)', multi=False)],
    [
        panel(0, "Step time by rank (mean over the window)", [(f"faultline_job_step_seconds{{{J}}}", "rank {{rank}}")], unit="s"),
        panel(0, "Its GPUs' SM clock", [(f"faultline_gpu_sm_clock_hertz{{{J}}}", "{{instance}} GPU {{gpu}}")], unit="hertz"),
        panel(0, "Its GPUs' active slowdown reasons", [(f'faultline_gpu_throttle_reason{{{J},reason!="idle"}} == 1', "{{instance}} GPU {{gpu}} {{reason}}")]),
        panel(0, "Its GPUs' power", [(f"faultline_gpu_power_watts{{{J}}}", "{{instance}} GPU {{gpu}}")], unit="watt"),
        panel(0, "Its HCAs' symbol errors", [(f"sum by (instance, device, port) (increase(faultline_infiniband_symbol_error_total{{{C}}}[{RI}]) {HCA})", "{{instance}} {{device}}/{{port}}")]),
        panel(0, "Its HCAs' receive errors and link recoveries", [
            (f"sum by (instance, device, port) (increase(faultline_infiniband_port_errors_received_total{{{C}}}[{RI}]) {HCA})", "rcv errors {{instance}} {{device}}/{{port}}"),
            (f"sum by (instance, device, port) (increase(faultline_infiniband_link_error_recovery_total{{{C}}}[{RI}]) {HCA})", "recoveries {{instance}} {{device}}/{{port}}"),
        ]),
        panel(0, "Its CUDA kernel launches", [(f"sum by (instance, rank, gpu) (rate(faultline_cuda_kernel_launches_total{{{J}}}[{RI}]))", "{{instance}} rank {{rank}} GPU {{gpu}}")], unit="ops"),
        panel(0, "Workloads on its GPUs (> 1: shared)", [(f"faultline_gpu_workloads{{{J}}}", "{{instance}} GPU {{gpu}}")]),
    ],
)

L = f'{N},device=~"$device",port=~"$port"'
LINK = dashboard(
    "faultline-link",
    "faultline / link",
    "One InfiniBand/RoCE port: state, traffic, error counters, the jobs using it and the link incidents.",
    CLUSTER
    + NODE
    + [
        var_query("device", "HCA", f'label_values(faultline_infiniband_state_id{{{N}}}, device)'),
        var_query("port", "port", f'label_values(faultline_infiniband_state_id{{{N},device=~"$device"}}, port)'),
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
        panel(0, "Jobs using the HCA", [(f'faultline_job_hca_info{{{N},device=~"$device"}}', "{{hpc_job}}")]),
        panel(0, "Open link incidents (all links)", [(f'faultline_correlator_open_incidents{{{K},kind=~"ib_.*"}}', "{{kind}}")]),
    ],
)

DASHBOARDS = {
    "faultline-fleet.json": FLEET,
    "faultline-host.json": HOST,
    "faultline-job.json": JOB,
    "faultline-link.json": LINK,
}


K8S = HERE.parent / "kubernetes" / "dashboards"
GENERATED = "# Generated by deploy/grafana/generate.py: do not edit; edit the panel\n# lists there and run it.\n"


def configmap(name, text):
    """The dashboard as a ConfigMap Grafana's sidecar loads (kube-prometheus-stack:
    label grafana_dashboard "1", any namespace)."""
    body = "".join(("    " + l) if l.strip() else "\n" for l in text.splitlines(keepends=True))
    return (
        GENERATED
        + "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        + f"  name: {name.removesuffix('.json')}-dashboard\n"
        + "  namespace: faultline\n"
        + "  labels:\n    grafana_dashboard: \"1\"\n    app.kubernetes.io/part-of: faultline\n"
        + "  annotations:\n    # The folder, where the sidecar's folderAnnotation is set to grafana_folder.\n"
        + "    grafana_folder: faultline\n"
        + f"data:\n  {name}: |\n{body}"
    )


def kustomization(names):
    return (
        GENERATED
        + "# faultline's Grafana dashboards as ConfigMaps for Grafana's dashboard sidecar\n"
        + "# (kube-prometheus-stack: grafana.sidecar.dashboards, label grafana_dashboard\n"
        + "# \"1\", searchNamespace ALL). The base (..) includes this directory.\n"
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join(f"  - {n.removesuffix('.json')}.yaml\n" for n in names)
    )


def outputs():
    """Every generated file: path -> text."""
    out = {}
    for name, d in DASHBOARDS.items():
        text = json.dumps(d, indent=2, sort_keys=True) + "\n"
        out[HERE / name] = text
        out[K8S / (name.removesuffix(".json") + ".yaml")] = configmap(name, text)
    out[K8S / "kustomization.yaml"] = kustomization(DASHBOARDS)
    return out


def main():
    check = "--check" in sys.argv[1:]
    files = outputs()
    stale = []
    if check:
        for path, text in files.items():
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(HERE.parent.parent)))
        extra = [p for p in K8S.glob("*") if p not in files] if K8S.exists() else []
        stale += [f"{p.relative_to(HERE.parent.parent)} (not generated)" for p in extra]
    else:
        K8S.mkdir(exist_ok=True)
        for path, text in files.items():
            path.write_text(text)
    if stale:
        print("stale (run python3 deploy/grafana/generate.py): " + ", ".join(stale), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
