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
 * NVML_ERROR_NOT_SUPPORTED. nvmlDeviceGetRemappedRows returns remap_cor,
 * remap_unc (rows), remap_pending and remap_fail (0/1) the same way;
 * noremap=1 makes it NVML_ERROR_NOT_SUPPORTED (a GPU before Ampere). enc_util, dec_util (%) are the encoder and
 * decoder utilisation. nvlinks=N gives the GPU N NVLink links, link L
 * reporting nvl_replay, nvl_recovery, nvl_crc_flit, nvl_crc_data × (L + 1)
 * data-link replays, recoveries, flit and data CRC errors
 * (nvmlDeviceGetNvLinkErrorCounter), and NVLink data throughput counters
 * (field values NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB, per link by
 * scopeId or summed over the links for scopeId UINT_MAX) growing at
 * nvl_tx_kibps / nvl_rx_kibps KiB/s per link, stamped with the same clock;
 * without nvlinks NVLink queries return NVML_ERROR_NOT_SUPPORTED.
 * mem_used, mem_reserved (bytes) split the 80 GiB framebuffer like
 * nvmlDeviceGetMemoryInfo_v2 (free = total - reserved - used; defaults
 * 1 GiB used, 512 MiB reserved).
 * gpm=1 makes the GPU support GPM (nvmlGpmQueryDeviceSupport; without it
 * the GPM calls return NVML_ERROR_NOT_SUPPORTED): nvmlGpmMetricsGet between
 * two samples of the GPU returns gr_active, tensor_active, dram_active (%)
 * for GRAPHICS_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL and pcie_tx_mibs,
 * pcie_rx_mibs (MiB/s) for PCIE_TX_PER_SEC, PCIE_RX_PER_SEC as of the second
 * sample; other metrics are NVML_ERROR_NOT_SUPPORTED. Live GPM samples are
 * counted: FAKE_NVML_GPM_LOG names a file that gets "live=<n>" on every
 * nvmlGpmSampleFree and at nvmlShutdown, so a test sees leaks.
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
    /* A fresh scenario at each first init: one test process may run the
     * tests of several files (tests/it), each with a scenario of its own. */
    nlines = 0; nplines = 0; ngpus = 8;
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
static void gpm_log(void);
nvmlReturn_t nvmlShutdown(void) { if (inited) inited--; gpm_log(); return NVML_SUCCESS; }
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
    /* NVML_STRUCT_VERSION(Memory, 2) */
    if (!m || m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24))) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = 85899345920ULL;
    m->reserved = val(d->index, "mem_reserved", 512ULL << 20);
    m->used = val(d->index, "mem_used", 1ULL << 30);
    m->free = m->total - m->reserved - m->used;
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
    /* NVML_NVLINK_ERROR_DL_REPLAY, _RECOVERY, _CRC_FLIT, _CRC_DATA = 0..3 */
    static const char *const keys[] = {"nvl_replay", "nvl_recovery", "nvl_crc_flit", "nvl_crc_data"};
    if (counter < 0 || counter > 3) return NVML_ERROR_NOT_SUPPORTED;
    *v = val(d->index, keys[counter], 0) * (link + 1);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corrRows, unsigned *uncRows, unsigned *isPending, unsigned *failureOccurred) {
    CHECK(d);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    if (val(d->index, "noremap", 0)) return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = (unsigned)val(d->index, "remap_cor", 0);
    *uncRows = (unsigned)val(d->index, "remap_unc", 0);
    *isPending = val(d->index, "remap_pending", 0) ? 1 : 0;
    *failureOccurred = val(d->index, "remap_fail", 0) ? 1 : 0;
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
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *v) {
    CHECK(d);
    if (count < 0 || (count > 0 && !v)) return NVML_ERROR_INVALID_ARGUMENT;
    double t = now();
    for (int i = 0; i < count; i++) {
        v[i].timestamp = (long long)(t * 1e6);
        v[i].latencyUsec = 0;
        if (v[i].fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || v[i].fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) {
            unsigned long long links = val(d->index, "nvlinks", 0);
            unsigned scope = v[i].scopeId;
            if (!links) { v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
            if (scope != 0xFFFFFFFFu && scope >= links) { v[i].nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; continue; }
            unsigned long long per_link = val(d->index, v[i].fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? "nvl_tx_kibps" : "nvl_rx_kibps", 0);
            double kib = (double)per_link * t * (scope == 0xFFFFFFFFu ? (double)links : 1.0);
            v[i].valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
            v[i].value.ullVal = (unsigned long long)kib;
            v[i].nvmlReturn = NVML_SUCCESS;
        } else if (v[i].fieldId == NVML_FI_DEV_MEMORY_TEMP) {
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
        /* Blocks like the real library: until the next scheduled XID of a
         * registered GPU or the deadline, not in short polls (a 5 ms poll
         * woke the caller 200 times a second, and benchmarks counted that
         * as the collector's CPU). */
        double until = deadline;
        for (int i = 0; i < nlines; i++) {
            struct line *l = &lines[i];
            if (strcmp(l->key, "xid") || set->delivered[i]) continue;
            if (l->gpu < 0 || l->gpu >= MAXGPU || !(set->mask[l->gpu] & XID_EVENT)) continue;
            if (l->t < until) until = l->t;
        }
        double d = until - t;
        if (d < 0.0005) d = 0.0005;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { free(set); return NVML_SUCCESS; }

/* GPM (GPU performance monitoring, Hopper and later). */
struct gpm_sample { int gpu; double t; int filled; };
typedef struct gpm_sample *nvmlGpmSample_t;
typedef struct { unsigned version, isSupportedDevice; } nvmlGpmSupport_t;
typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
#define NVML_GPM_METRIC_MAX 210
typedef struct {
    unsigned version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
static long gpm_live;

static void gpm_log(void) {
    const char *p = getenv("FAKE_NVML_GPM_LOG");
    if (!p) return;
    FILE *f = fopen(p, "a");
    if (!f) return;
    fprintf(f, "live=%ld\n", gpm_live);
    fclose(f);
}

static int gpm_on(nvmlDevice_t d) { return val(d->index, "gpm", 0) != 0; }

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    CHECK(d);
    if (!s || s->version != 1) return NVML_ERROR_INVALID_ARGUMENT;
    s->isSupportedDevice = (unsigned)gpm_on(d);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    *s = calloc(1, sizeof(struct gpm_sample));
    if (!*s) return NVML_ERROR_INVALID_ARGUMENT;
    gpm_live++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    free(s);
    gpm_live--;
    gpm_log();
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s) {
    CHECK(d);
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_on(d)) return NVML_ERROR_NOT_SUPPORTED;
    s->gpu = d->index;
    s->t = now();
    s->filled = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!m || m->version != 1 || m->numMetrics > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t a = m->sample1, b = m->sample2;
    if (!a || !b || !a->filled || !b->filled || a->gpu != b->gpu || b->t <= a->t) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        const char *key = NULL;
        switch (x->metricId) {
        case 1: key = "gr_active"; break;      /* NVML_GPM_METRIC_GRAPHICS_UTIL */
        case 5: key = "tensor_active"; break;  /* NVML_GPM_METRIC_ANY_TENSOR_UTIL */
        case 10: key = "dram_active"; break;   /* NVML_GPM_METRIC_DRAM_BW_UTIL */
        case 20: key = "pcie_tx_mibs"; break;  /* NVML_GPM_METRIC_PCIE_TX_PER_SEC */
        case 21: key = "pcie_rx_mibs"; break;  /* NVML_GPM_METRIC_PCIE_RX_PER_SEC */
        }
        memset(&x->metricInfo, 0, sizeof x->metricInfo);
        if (!key) { x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; x->value = 0; continue; }
        /* The value at the second sample's time. */
        double t = b->t;
        unsigned long long v = 0;
        for (int j = 0; j < nlines; j++)
            if (lines[j].gpu == b->gpu && lines[j].t <= t && !strcmp(lines[j].key, key)) v = lines[j].value;
        x->value = (double)v;
        x->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}
