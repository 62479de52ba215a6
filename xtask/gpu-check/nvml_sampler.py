"""faultline gpu-check: the second NVML reader (nvidia-ml-py's pynvml).

    python nvml_sampler.py [LIBNVML] [INTERVAL_S] [MAX_S]

Prints JSON lines on stdout: one {"kind": "ready"} after nvmlInit, one
{"kind": "gpu"} per GPU with the values that do not change (UUID, PCI bus id,
enforced power limit, maximum SM clock), then {"kind": "sample"} lines every
INTERVAL_S seconds (default 0.2) with power, temperature and SM clock, stamped
with the Unix time in ms halfway through the reads, until standard input
closes or MAX_S seconds (default 600) pass. The same NVML calls as the
collector's (nvml-wrapper): nvmlDeviceGetPowerUsage, GetEnforcedPowerLimit,
GetTemperature(GPU), GetClockInfo(SM), GetMaxClockInfo(SM). LIBNVML (optional)
loads that libnvidia-ml.so.1 instead of the system's.
"""
import ctypes
import json
import sys
import threading
import time

import pynvml


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def read(f, *args):
    try:
        return f(*args)
    except pynvml.NVMLError:
        return None


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
    max_s = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
    if lib:
        # pynvml loads libnvidia-ml.so.1 only while nvmlLib is unset.
        pynvml.nvmlLib = ctypes.CDLL(lib)
    pynvml.nvmlInit()
    emit({"kind": "ready", "driver": read(lambda: text(pynvml.nvmlSystemGetDriverVersion()))})
    handles = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pci = read(pynvml.nvmlDeviceGetPciInfo, h)
        limit = read(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
        handles.append((i, text(pynvml.nvmlDeviceGetUUID(h)), h))
        emit({
            "kind": "gpu",
            "index": i,
            "uuid": handles[-1][1],
            "name": read(lambda: text(pynvml.nvmlDeviceGetName(h))),
            "pci_bus_id": text(pci.busId) if pci is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
            "sm_clock_max_mhz": read(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
        })
    stop = threading.Event()

    def wait_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    end = time.monotonic() + max_s
    while not stop.is_set() and time.monotonic() < end:
        for i, uuid, h in handles:
            t0 = time.time()
            power = read(pynvml.nvmlDeviceGetPowerUsage, h)
            temp = read(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
            clock = read(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
            t1 = time.time()
            emit({
                "kind": "sample",
                "t_ms": int((t0 + t1) * 500),
                "index": i,
                "uuid": uuid,
                "power_w": power / 1000.0 if power is not None else None,
                "temp_c": temp,
                "sm_clock_mhz": clock,
            })
        stop.wait(interval)
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
