/*
 * Stand-in for libnvidia-ml.so.1 implementing the subset of the NVML C API
 * faultline samples, with NVML's signatures and return codes. GPUs follow a
 * scenario file named by FAKE_NVML_SCENARIO, one line per change:
 *
 *   <seconds since nvmlInit> gpu=<index> key=value ...
 *
 * keys: temp (C), power_mw, limit_mw, sm_clock, mem_clock (MHz), throttle
 * (hex mask of clock event reasons), util_gpu, util_mem (%), ecc_sbe, ecc_dbe
 * (volatile counts), replay, xid (an XID event at that time), lost=1 (the GPU
 * falls off the bus: every call on it returns NVML_ERROR_GPU_IS_LOST), regfail=1
 * (event registration on it fails), nouuid=1 (its UUID query fails),
 * energy_mj (the total-energy counter; without it the counter grows at 300 W).
 * A line `<seconds> gpu=<index> proc=<pid> sm=<pct> mem=<bytes>` puts a
 * process on the GPU from that time (compute processes with their used
 * memory; per-process SM utilisation samples), `gone=1` instead of sm/mem
 * takes it off again.
 * Values hold until changed. FAKE_NVML_GPUS sets the GPU count (default 8).
 * mem_temp (C), remap_cor, remap_unc, remap_fail (remapped rows) are served
 * through nvmlDeviceGetFieldValues; other field values return
 * NVML_ERROR_NOT_SUPPORTED. enc_util, dec_util (%) are the encoder and
 * decoder utilisation. nvlinks=N gives the GPU N NVLink links, link L
 * reporting nvl_replay × (L + 1) data-link replays; without it NVLink
 * queries return NVML_ERROR_NOT_SUPPORTED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15

#define MAXGPU 16
#define MAXLINES 4096
#define XID_EVENT 8ULL

struct gpu { int index; };
typedef struct gpu *nvmlDevice_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId; } nvmlEventData_t;
struct evset { unsigned long long mask[MAXGPU]; int delivered[MAXLINES]; };
typedef struct evset *nvmlEventSet_t;

struct line { double t; int gpu; char key[16]; unsigned long long value; };
static struct line lines[MAXLINES];
static int nlines, inited, ngpus = 8;
#define MAXPROCS 256
struct pline { double t; int gpu; unsigned pid, sm, gone; unsigned long long mem; };
static struct pline plines[MAXPROCS];
static int nplines;
static struct gpu gpus[MAXGPU];
static struct timespec t0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec - t0.tv_sec) + (ts.tv_nsec - t0.tv_nsec) / 1e9;
}

static void load_scenario(void) {
    const char *n = getenv("FAKE_NVML_GPUS");
    if (n) { ngpus = atoi(n); if (ngpus < 0) ngpus = 0; if (ngpus > MAXGPU) ngpus = MAXGPU; }
    for (int i = 0; i < MAXGPU; i++) gpus[i].index = i;
    const char *path = getenv("FAKE_NVML_SCENARIO");
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[1024];
    while (fgets(buf, sizeof buf, f)) {
        double t; int g; int off = 0;
        if (buf[0] == '#' || sscanf(buf, "%lf gpu=%d%n", &t, &g, &off) != 2) continue;
        char *p = buf + off;
        unsigned pid, a = 0; unsigned long long b = 0; int pused = 0;
        if (sscanf(p, " proc=%u%n", &pid, &pused) == 1) {
            if (nplines >= MAXPROCS) continue;
            struct pline *q = &plines[nplines++];
            q->t = t; q->gpu = g; q->pid = pid; q->sm = 0; q->mem = 0; q->gone = 0;
            p += pused;
            if (sscanf(p, " gone=%u", &a) == 1) { q->gone = a; continue; }
            if (sscanf(p, " sm=%u mem=%llu", &a, &b) == 2) { q->sm = a; q->mem = b; }
            continue;
        }
        char key[16]; char val[64]; int used;
        while (sscanf(p, " %15[a-z_]=%63s%n", key, val, &used) == 2 && nlines < MAXLINES) {
            struct line *l = &lines[nlines++];
            l->t = t; l->gpu = g;
            strcpy(l->key, key);
            l->value = strtoull(val, NULL, 0);
            p += used;
        }
    }
    fclose(f);
}

/* Current value of key for gpu, or dflt. */
static unsigned long long val(int gpu, const char *key, unsigned long long dflt) {
    double t = now();
    unsigned long long v = dflt;
    for (int i = 0; i < nlines; i++)
        if (lines[i].gpu == gpu && lines[i].t <= t && !strcmp(lines[i].key, key)) v = lines[i].value;
    return v;
}

static nvmlReturn_t check(nvmlDevice_t d) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (val(d->index, "lost", 0)) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}
#define CHECK(d) do { nvmlReturn_t r_ = check(d); if (r_) return r_; } while (0)

nvmlReturn_t nvmlInit_v2(void) {
    if (!inited++) { clock_gettime(CLOCK_MONOTONIC, &t0); load_scenario(); }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) { if (inited) inited--; return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 3: return "Not Supported";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)ngpus;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!d || i >= (unsigned)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &gpus[i];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    CHECK(d);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)d->index;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len) {
    CHECK(d);
    if (val(d->index, "nouuid", 0)) return NVML_ERROR_NOT_SUPPORTED;
    if (len < 48) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(uuid, len, "GPU-fa0171e0-0000-4000-8000-%012d", d->index);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len) {
    CHECK(d);
    snprintf(name, len, "Fake H100 80GB HBM3");
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    CHECK(d);
    memset(p, 0, sizeof *p);
    p->bus = 0x18 + (unsigned)d->index;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", p->bus);
    p->pciDeviceId = 0x233010de;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *m) { CHECK(d); *m = (unsigned)d->index; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw) { CHECK(d); *mw = (unsigned)val(d->index, "power_mw", 300000); return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *mw) { CHECK(d); *mw = (unsigned)val(d->index, "limit_mw", 700000); return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t) {
    CHECK(d);
    if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
    *t = (unsigned)val(d->index, "temp", 45);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    CHECK(d);
    *mhz = (unsigned)(type == 2 ? val(d->index, "mem_clock", 2619) : val(d->index, "sm_clock", 1980));
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    CHECK(d);
    *mhz = type == 2 ? 2619 : 1980;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    CHECK(d);
    *r = val(d->index, "throttle", 0);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    return nvmlDeviceGetCurrentClocksThrottleReasons(d, r);
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    CHECK(d);
    u->gpu = (unsigned)val(d->index, "util_gpu", 0);
    u->memory = (unsigned)val(d->index, "util_mem", 0);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    CHECK(d);
    m->total = 85899345920ULL;
    m->reserved = 0;
    m->used = val(d->index, "mem_used", 1ULL << 30);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType, unsigned long long *c) {
    CHECK(d);
    if (counterType != 0) return NVML_ERROR_NOT_SUPPORTED;
    *c = errorType == 1 ? val(d->index, "ecc_dbe", 0) : val(d->index, "ecc_sbe", 0);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned *v) { CHECK(d); *v = (unsigned)val(d->index, "replay", 0); return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *kbs) {
    CHECK(d);
    *kbs = (unsigned)(counter == 0 ? val(d->index, "pcie_tx_kbs", 1000) : val(d->index, "pcie_rx_kbs", 2000));
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    CHECK(d);
    unsigned long long set = val(d->index, "energy_mj", ~0ULL);
    *mj = set != ~0ULL ? set : (unsigned long long)(now() * 300000.0) + 1000000ULL;
    return NVML_SUCCESS;
}

/* The processes on gpu now: the latest line per pid with t <= now, unless gone. */
static int procs_now(int gpu, struct pline *out[], int max) {
    double t = now();
    int n = 0;
    for (int i = 0; i < nplines; i++) {
        struct pline *q = &plines[i];
        if (q->gpu != gpu || q->t > t) continue;
        int j = 0;
        while (j < n && out[j]->pid != q->pid) j++;
        if (j == n) { if (n >= max) continue; n++; }
        out[j] = q;
    }
    int m = 0;
    for (int i = 0; i < n; i++) if (!out[i]->gone) out[m++] = out[i];
    return m;
}

typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
/* NVML: with too small a buffer, the count needed and NVML_ERROR_INSUFFICIENT_SIZE. */
static nvmlReturn_t running(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos) {
    CHECK(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    struct pline *ps[MAXPROCS];
    int n = procs_now(d->index, ps, MAXPROCS);
    if (*count < (unsigned)n || (!infos && n > 0)) { *count = (unsigned)n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (int i = 0; i < n; i++) {
        infos[i].pid = ps[i]->pid;
        infos[i].usedGpuMemory = ps[i]->mem;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos) { return running(d, count, infos); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos) { return running(d, count, infos); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos) { return running(d, count, infos); }

typedef struct { unsigned pid; unsigned long long timeStamp; unsigned smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;
/* One sample per process with non-zero SM utilisation, stamped now (us). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned *count, unsigned long long last_seen) {
    CHECK(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    struct pline *ps[MAXPROCS];
    int all = procs_now(d->index, ps, MAXPROCS), n = 0;
    for (int i = 0; i < all; i++) if (ps[i]->sm > 0) ps[n++] = ps[i];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long stamp = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    if (stamp <= last_seen) n = 0;
    if (n == 0) { *count = 0; return 6; /* NVML_ERROR_NOT_FOUND */ }
    if (!u || *count < (unsigned)n) { *count = (unsigned)n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (int i = 0; i < n; i++) {
        u[i].pid = ps[i]->pid;
        u[i].timeStamp = stamp;
        u[i].smUtil = ps[i]->sm;
        u[i].memUtil = 0;
        u[i].encUtil = 0;
        u[i].decUtil = 0;
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned link, int counter, unsigned long long *v) {
    CHECK(d);
    unsigned long long links = val(d->index, "nvlinks", 0);
    if (!links) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= links || !v) return NVML_ERROR_INVALID_ARGUMENT;
    /* NVML_NVLINK_ERROR_DL_REPLAY = 0 */
    *v = counter == 0 ? val(d->index, "nvl_replay", 0) * (link + 1) : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned *u, unsigned *period) {
    CHECK(d);
    *u = (unsigned)val(d->index, "enc_util", 0);
    *period = 167000;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned *u, unsigned *period) {
    CHECK(d);
    *u = (unsigned)val(d->index, "dec_util", 0);
    *period = 167000;
    return NVML_SUCCESS;
}
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    union { double dVal; unsigned uiVal; unsigned long long ullVal; } value;
} nvmlFieldValue_t;
#define NVML_FI_DEV_MEMORY_TEMP 82
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *v) {
    CHECK(d);
    if (count < 0 || (count > 0 && !v)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        v[i].timestamp = (long long)(now() * 1e6);
        v[i].latencyUsec = 0;
        if (v[i].fieldId == NVML_FI_DEV_MEMORY_TEMP) {
            v[i].valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v[i].value.uiVal = (unsigned)val(d->index, "mem_temp", 50);
            v[i].nvmlReturn = NVML_SUCCESS;
        } else if (v[i].fieldId == 142 || v[i].fieldId == 143 || v[i].fieldId == 145) {
            /* NVML_FI_DEV_REMAPPED_COR / _UNC / _FAILURE */
            const char *k = v[i].fieldId == 142 ? "remap_cor" : v[i].fieldId == 143 ? "remap_unc" : "remap_fail";
            v[i].valueType = 1;
            v[i].value.uiVal = (unsigned)val(d->index, k, 0);
            v[i].nvmlReturn = NVML_SUCCESS;
        } else {
            v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned len) {
    if (!version || len < 10) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(version, len, "550.54.15");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *t) { CHECK(d); *t = XID_EVENT | 3ULL; return NVML_SUCCESS; }

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof(struct evset));
    return *set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    CHECK(d);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (val(d->index, "regfail", 0)) return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->index] |= types;
    return NVML_SUCCESS;
}
/* Delivers each scripted XID whose time has come, once per set. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    double deadline = now() + timeout_ms / 1000.0;
    for (;;) {
        double t = now();
        for (int i = 0; i < nlines; i++) {
            struct line *l = &lines[i];
            if (strcmp(l->key, "xid") || l->t > t || set->delivered[i]) continue;
            if (l->gpu < 0 || l->gpu >= MAXGPU || !(set->mask[l->gpu] & XID_EVENT)) continue;
            set->delivered[i] = 1;
            memset(data, 0, sizeof *data);
            data->device = &gpus[l->gpu];
            data->eventType = XID_EVENT;
            data->eventData = l->value;
            return NVML_SUCCESS;
        }
        if (t >= deadline) return NVML_ERROR_TIMEOUT;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { free(set); return NVML_SUCCESS; }
