#!/usr/bin/env python3
"""A training loop or a model server reporting through the OpenTelemetry SDK.

Used by collector/tests/it/otlp_python.rs against faultline's OTLP receiver:
it records deterministic values, exports them every 0.3 s over OTLP gRPC,
HTTP/protobuf or HTTP/JSON (`http-json`: the opentelemetry-exporter-otlp-json-http
package, installed in its own venv), shuts the SDK down (which flushes) and
prints on stdout, as one JSON object, what it recorded, for the test to
compare. The exporters read the standard variables too, e.g.
OTEL_EXPORTER_OTLP_COMPRESSION=gzip.

  workload.py train --protocol grpc --endpoint 127.0.0.1:4317 --job 4242 --rank 3
  workload.py serve --protocol http --endpoint http://127.0.0.1:4318/v1/metrics
  workload.py serve --protocol http-json --endpoint http://127.0.0.1:4318/v1/metrics

`loop` is a stand-in training loop in real time for the end-to-end tests
(tests/tests/it/workload_e2e.rs): every step takes --step-s seconds, times the
factor written in --slow-file while that file exists, and its measured
duration is recorded; it runs until killed.
"""
import argparse
import json
import os
import statistics
import time

from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

STEP_BOUNDS = [0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]


def exporter(protocol, endpoint, **kw):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, insecure=True, **kw)
    if protocol == "http-json":
        from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, **kw)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=endpoint, **kw)


def provider(args, resource, views=(), delta=False):
    kw = {}
    if delta:
        kw["preferred_temporality"] = {Histogram: AggregationTemporality.DELTA}
    reader = PeriodicExportingMetricReader(
        exporter(args.protocol, args.endpoint, **kw), export_interval_millis=300
    )
    return MeterProvider(metric_readers=[reader], resource=resource, views=list(views))


def rank_provider(args, service):
    """A training rank's meter provider (job, rank and pid as resource
    attributes) and its step-duration histogram (seconds)."""
    resource = Resource.create(
        {
            "service.name": service,
            "process.pid": os.getpid(),
            "slurm.job.id": args.job,
            "rank": args.rank,
        }
    )
    mp = provider(args, resource)
    steps = mp.get_meter("train_loop").create_histogram(
        "faultline.train.step.duration",
        unit="s",
        explicit_bucket_boundaries_advisory=STEP_BOUNDS,
    )
    return mp, steps


def train(args):
    """Step durations (a cumulative histogram in seconds) of one rank."""
    mp, steps = rank_provider(args, "faultline-e2e-train")
    ckpt = mp.get_meter("train_loop").create_histogram(
        "checkpoint.save.duration", unit="ms"
    )
    values = []
    for i in range(args.steps):
        v = 0.08 + 0.02 * (i % 7)
        steps.record(v)
        values.append(v)
        if i % 20 == 19:
            ckpt.record(1500.0)
        # Spread the steps over several export intervals (cumulative → delta).
        time.sleep(0.01)
    mp.shutdown()
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "count": len(values),
                "mean": statistics.fmean(values),
                "max": max(values),
                "checkpoints": args.steps // 20,
            }
        )
    )


def run_loop(args):
    """Measured step durations of one rank, until killed."""
    mp, steps = rank_provider(args, "faultline-e2e-loop")
    print("loop started", flush=True)
    while True:
        factor = 1.0
        try:
            with open(args.slow_file) as f:
                factor = float(f.read().strip() or "1")
        except (OSError, ValueError):
            pass
        t0 = time.monotonic()
        time.sleep(args.step_s * factor)
        steps.record(time.monotonic() - t0)


def serve(args):
    """GenAI server latencies per model (delta; TTFT as an exponential histogram)."""
    resource = Resource.create(
        {"service.name": "faultline-e2e-serve", "process.pid": os.getpid()}
    )
    views = [
        View(
            instrument_name="gen_ai.server.time_to_first_token",
            aggregation=ExponentialBucketHistogramAggregation(),
        )
    ]
    mp = provider(args, resource, views, delta=True)
    meter = mp.get_meter("model_server")
    ttft = meter.create_histogram("gen_ai.server.time_to_first_token", unit="s")
    req = meter.create_histogram(
        "gen_ai.server.request.duration",
        unit="s",
        explicit_bucket_boundaries_advisory=[0.5, 1.0, 2.0, 4.0, 8.0],
    )
    tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
    out = {"pid": os.getpid(), "models": {}}
    for model, base in [("llama-3-8b", 0.05), ("mixtral-8x7b", 0.2)]:
        attrs = {"gen_ai.request.model": model, "gen_ai.provider.name": "vllm"}
        firsts, durations, toks = [], [], 0
        for i in range(args.steps):
            t = base * (1 + (i % 10) / 10)
            ttft.record(t, attrs)
            d = t * 10
            req.record(d, attrs)
            tokens.record(100 + i, {**attrs, "gen_ai.token.type": "output"})
            firsts.append(t)
            durations.append(d)
            toks += 100 + i
            time.sleep(0.005)
        out["models"][model] = {
            "ttft_count": len(firsts),
            "ttft_sum": sum(firsts),
            "ttft_p50": statistics.median(firsts),
            "request_sum": sum(durations),
            "tokens": toks,
        }
    mp.shutdown()
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "serve", "loop"])
    p.add_argument("--protocol", choices=["grpc", "http", "http-json"], required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--job", default="4242")
    p.add_argument("--rank", type=int, default=3)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--slow-file", default="")
    args = p.parse_args()
    {"train": train, "serve": serve, "loop": run_loop}[args.mode](args)


if __name__ == "__main__":
    main()
