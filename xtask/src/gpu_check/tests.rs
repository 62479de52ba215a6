//! Tests of the CUDA and NVML checks, GPU detection and the verdict, on
//! canned workload output, records, console lines and nvidia-ml-py readings.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
    time::Instant,
};

use serde_json::{json, Map};

use super::{
    cuda::*, detect::*, nvml::*, report::*, workload::*, Args, EXIT_CANNOT_RUN, EXIT_FAIL,
    EXIT_NO_GPU, EXIT_PASS, KERNEL_NAME, KERNEL_PTX, WORKLOAD_C,
};
const WORKLOAD_OUT: &str = "\
pid 4242
device 0 8.0 NVIDIA A100-SXM4-80GB
ptx sm_50
kernel faultline_vadd
count cuLaunchKernel 1000
count cuMemcpyHtoD_v2 20
bytes cuMemcpyHtoD_v2 83886080
count cuMemcpyDtoH_v2 10
bytes cuMemcpyDtoH_v2 41943040
count cuStreamSynchronize 10
count cuCtxSynchronize 1
count cuMemAlloc_v2 3
bytes cuMemAlloc_v2 12582912
count cuMemFree_v2 3
verify ok
done
";

/// Two windows as the collector records them (`--record`): the
/// workload's counts split across them, beside another process.
fn record() -> String {
    let w1 = json!({"origin": {"hostname": "n1", "instance": "i"}, "seq": 3,
    "start_unix_ms": 10_000, "end_unix_ms": 11_000,
    "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "lost": false,
              "power_w": 250.5, "power_limit_w": 400.0, "temp_c": 61, "sm_clock_mhz": 1410,
              "sm_clock_max_mhz": 1410}],
    "cuda": [
        {"pid": 4242, "device": 0, "launches": 600, "sync_calls": 6, "copy_bytes": 75497472,
         "errors": 0, "launches_sampled_fraction": 0.0},
        {"pid": 7, "device": 1, "launches": 99, "sync_calls": 1, "copy_bytes": 5, "errors": 2}
    ]});
    let w2 = json!({"origin": {"hostname": "n1", "instance": "i"}, "seq": 4,
        "start_unix_ms": 11_000, "end_unix_ms": 12_000,
        "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "lost": false,
                  "power_w": 262.0, "power_limit_w": 400.0, "temp_c": 63, "sm_clock_mhz": 1395,
                  "sm_clock_max_mhz": 1410}],
        "cuda": [{"pid": 4242, "device": 0, "launches": 400, "sync_calls": 5,
                  "copy_bytes": 50331648, "errors": 0}]});
    format!("{w1}\n{w2}\n")
}

const CONSOLE: &str = "\
probe cuLaunchKernel: attached
window 3: seq=3 exec events=2 total=3
  cuda pid=4242 gpu=0 kernel=faultline_vadd launches=600 (600.0/s) grid=[4096, 1, 1] block=[256, 1, 1] [uuid=GPU-a temp=61C]
  cuda pid=4242 gpu=0 call=cuMemcpyHtoD calls=12 bytes=50331648 wait_mean=0.650ms [uuid=GPU-a]
  cuda pid=4242 gpu=0 call=cuMemcpyDtoH calls=6 bytes=25165824 wait_mean=0.356ms
  cuda pid=4242 gpu=0 call=cuStreamSynchronize calls=6 wait_mean=0.015ms {job=1 rank=0}
  cuda pid=4242 gpu=0 call=cuMemAlloc calls=3 bytes=12582912 wait_mean=0.005ms
  cuda pid=7 gpu=1 kernel=other launches=99 (99.0/s) grid=[1, 1, 1] block=[1, 1, 1]
  cuda pid=7 gpu=1 call=cuEventSynchronize calls=1
window 4: seq=4
  cuda pid=4242 gpu=0 kernel=faultline_vadd launches=400 (400.0/s) grid=[4096, 1, 1] block=[256, 1, 1]
  cuda pid=4242 gpu=0 call=cuMemcpyHtoD calls=8 bytes=33554432
  cuda pid=4242 gpu=0 call=cuMemcpyDtoH calls=4 bytes=16777216
  cuda pid=4242 gpu=0 call=cuStreamSynchronize calls=4
  cuda pid=4242 gpu=0 call=cuCtxSynchronize calls=1
  cuda pid=4242 gpu=0 call=cuMemFree calls=3
";

fn reference() -> String {
    let mut s = String::from("{\"kind\": \"ready\", \"driver\": \"570.86.15\"}\n");
    s += "{\"kind\": \"gpu\", \"index\": 0, \"uuid\": \"GPU-a\", \"name\": \"A100\", \
          \"pci_bus_id\": \"00000000:18:00.0\", \"power_limit_w\": 400.0, \"sm_clock_max_mhz\": 1410}\n";
    for (t, p, c, clk) in [
        (9_500, 249.0, 61, 1410),
        (10_500, 252.0, 61, 1410),
        (11_200, 258.0, 62, 1395),
        (11_800, 263.0, 63, 1395),
        (12_400, 262.5, 63, 1395),
    ] {
        s += &format!(
            "{{\"kind\": \"sample\", \"t_ms\": {t}, \"index\": 0, \"uuid\": \"GPU-a\", \
             \"power_w\": {p}, \"temp_c\": {c}, \"sm_clock_mhz\": {clk}}}\n"
        );
    }
    s
}

fn failed(checks: &[Check]) -> Vec<&Check> {
    checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .collect()
}

#[test]
fn parses_the_workloads_own_counts() {
    let w = parse_workload(WORKLOAD_OUT).unwrap();
    assert_eq!(w.pid, 4242);
    assert_eq!(w.device, 0);
    assert_eq!(w.kernel, KERNEL_NAME);
    assert_eq!(w.ptx, "sm_50");
    assert_eq!(w.counts["cuLaunchKernel"], 1000);
    assert_eq!(w.counts["cuMemcpyHtoD_v2"], 20);
    assert_eq!(w.bytes["cuMemcpyDtoH_v2"], 41_943_040);
    assert_eq!(w.counts.len(), 7);
    assert_eq!(w.mismatches, Some(0));
    let bad = WORKLOAD_OUT.replace("verify ok", "verify mismatches=12");
    assert_eq!(parse_workload(&bad).unwrap().mismatches, Some(12));
    // Unfinished, failed or pid-less output is an error, not a count of 0.
    assert!(parse_workload(&WORKLOAD_OUT.replace("done\n", "")).is_err());
    let err = parse_workload(&WORKLOAD_OUT.replace("verify ok", "error cuModuleLoadData 218"))
        .unwrap_err();
    assert!(err.to_string().contains("cuModuleLoadData 218"), "{err}");
    assert!(parse_workload("count cuLaunchKernel 5\ndone\n").is_err());
    // The probe's `device` lines before the pid are not the run's device.
    let w = parse_workload(&format!("device 3 9.0 H100\n{WORKLOAD_OUT}")).unwrap();
    assert_eq!(w.device, 0);
}

#[test]
fn the_embedded_workload_prints_what_the_parser_reads() {
    for sym in [
        "cuLaunchKernel",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
    ] {
        assert!(WORKLOAD_C.contains(&format!("\"{sym}\"")), "{sym}");
    }
    for fmt in [
        "\"pid %d\\n\"",
        "\"count %s %llu\\n\"",
        "\"bytes %s %llu\\n\"",
        "\"done\\n\"",
    ] {
        assert!(WORKLOAD_C.contains(fmt), "{fmt}");
    }
    assert!(WORKLOAD_C.contains(&format!("#define KERNEL \"{KERNEL_NAME}\"")));
    assert!(KERNEL_PTX.contains(&format!(".visible .entry {KERNEL_NAME}(")));
    assert!(KERNEL_PTX.contains("\n.version 6.0\n.target sm_50\n"));
}

#[test]
fn sums_console_lines_of_the_workloads_pid() {
    let c = parse_console(CONSOLE, 4242);
    assert_eq!(c.kernels, BTreeMap::from([(KERNEL_NAME.to_string(), 1000)]));
    assert_eq!(c.calls["cuMemcpyHtoD"], (20, 83_886_080));
    assert_eq!(c.calls["cuMemcpyDtoH"], (10, 41_943_040));
    assert_eq!(c.calls["cuStreamSynchronize"], (10, 0));
    assert_eq!(c.calls["cuMemAlloc"], (3, 12_582_912));
    assert!(!c.calls.contains_key("cuEventSynchronize"), "pid 7's line");
    assert_eq!(c.devices, BTreeSet::from(["0".to_string()]));
}

#[test]
fn a_recorded_window_matching_the_workload_passes_every_cuda_check() {
    let w = parse_workload(WORKLOAD_OUT).unwrap();
    let windows = parse_record(&record()).unwrap();
    let rec = record_cuda(&windows, w.pid);
    assert_eq!(rec.launches, 1000);
    assert_eq!(rec.sync_calls, 11);
    assert_eq!(rec.copy_bytes, 125_829_120);
    assert_eq!(rec.windows, 2);
    let con = parse_console(CONSOLE, w.pid);
    let checks = cuda_checks(&w, &rec, &con, false);
    assert!(failed(&checks).is_empty(), "{}", table(&checks));
    assert!(checks.iter().all(|c| c.outcome == Outcome::Pass));
    // One per count and byte line, plus the rest.
    assert_eq!(checks.len(), 3 + 6 + 3 + 1 + 3 + 2);
}

#[test]
fn a_recorded_window_off_by_one_fails_the_check_that_names_it() {
    let w = parse_workload(WORKLOAD_OUT).unwrap();
    let windows = parse_record(&record().replace("\"launches\":400", "\"launches\":399")).unwrap();
    let rec = record_cuda(&windows, w.pid);
    let con = parse_console(
        &CONSOLE.replace("calls=4 bytes=16777216", "calls=3 bytes=16777216"),
        w.pid,
    );
    let checks = cuda_checks(&w, &rec, &con, false);
    let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["launches (record)", "cuMemcpyDtoH calls"],
        "{}",
        table(&checks)
    );
    let c = &checks[0];
    assert_eq!((c.expected.as_str(), c.observed.as_str()), ("1000", "999"));

    // A call the workload never made, a second kernel name, a sampled
    // estimate, an error and the wrong device are each failures.
    let con = parse_console(
        &format!(
            "{CONSOLE}  cuda pid=4242 gpu=1 call=cuEventSynchronize calls=1\n  cuda pid=4242 gpu=0 kernel=0x7f00 launches=1 (1/s)\n"
        ),
        w.pid,
    );
    let mut rec = record_cuda(&parse_record(&record()).unwrap(), w.pid);
    rec.sampled = true;
    rec.errors = 1;
    let checks = cuda_checks(&w, &rec, &con, false);
    let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "launches (record)",
            "kernel name recorded",
            "no calls the workload did not make",
            "call errors (record)",
            "device attributed"
        ],
        "{}",
        table(&checks)
    );
    // Nothing recorded at all is a failure, never a pass of 0 = 0.
    let none = cuda_checks(&w, &RecordCuda::default(), &ConsoleCuda::default(), false);
    assert!(none
        .iter()
        .filter(
            |c| !["no calls the workload did not make", "kernel result"].contains(&c.name.as_str())
        )
        .all(|c| c.outcome == Outcome::Fail));
}

#[test]
fn the_kernel_result_is_checked_on_a_gpu_and_skipped_on_the_stand_in() {
    let mut w = parse_workload(WORKLOAD_OUT).unwrap();
    w.mismatches = Some(5);
    let rec = record_cuda(&parse_record(&record()).unwrap(), w.pid);
    let con = parse_console(CONSOLE, w.pid);
    let result = |standin| {
        cuda_checks(&w, &rec, &con, standin)
            .into_iter()
            .find(|c| c.name == "kernel result")
            .unwrap()
            .outcome
    };
    assert_eq!(result(false), Outcome::Fail);
    assert_eq!(result(true), Outcome::Skip);
}

#[test]
fn nvml_tolerance_band() {
    let refs = [250.0, 262.0];
    assert!(within_band(250.0, &refs, POWER_TOL));
    // 5 % of 250 W = 12.5 W below, 5 % of 262 W = 13.1 W above.
    assert!(within_band(237.6, &refs, POWER_TOL));
    assert!(!within_band(237.4, &refs, POWER_TOL));
    assert!(within_band(275.0, &refs, POWER_TOL));
    assert!(!within_band(275.2, &refs, POWER_TOL));
    // At low power the absolute 5 W rules.
    assert!(within_band(25.0, &[30.0], POWER_TOL));
    assert!(!within_band(24.9, &[30.0], POWER_TOL));
    assert!(within_band(63.0, &[61.0], TEMP_TOL));
    assert!(!within_band(64.0, &[61.0], TEMP_TOL));
    assert!(within_band(1380.0, &[1410.0], CLOCK_TOL));
    assert!(
        within_band(1452.0, &[1410.0], CLOCK_TOL),
        "3 % of 1410 = 42.3 MHz"
    );
    assert!(!within_band(1453.0, &[1410.0], CLOCK_TOL));
    assert!(!within_band(1.0, &[], TEMP_TOL), "no reference, no pass");
    assert!(power_physical(0.5) && !power_physical(0.0) && !power_physical(2000.0));
    assert!(temp_physical(120.0) && !temp_physical(121.0) && !temp_physical(0.0));
    assert!(clock_physical(210.0) && !clock_physical(0.0));
}

#[test]
fn nvml_values_equal_to_nvidia_ml_py_pass() {
    let windows = parse_record(&record()).unwrap();
    let refs = parse_reference(&reference()).unwrap();
    assert_eq!(refs.driver.as_deref(), Some("570.86.15"));
    assert_eq!(refs.samples.len(), 5);
    let checks = nvml_checks(&collector_gpus(&windows), &refs);
    assert!(failed(&checks).is_empty(), "{}", table(&checks));
    assert_eq!(checks.len(), 1 + 6 + 2);
}

#[test]
fn nvml_values_off_or_unphysical_fail() {
    let refs = parse_reference(&reference()).unwrap();
    // 290 W against nvidia-ml-py's 258–263 W around the second window.
    let windows = parse_record(&record().replace("262.0", "290.0")).unwrap();
    let checks = nvml_checks(&collector_gpus(&windows), &refs);
    let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["gpu0 power = nvidia-ml-py"], "{}", table(&checks));
    // A temperature of 0 and a power limit that differs.
    let windows = parse_record(&record().replace("\"temp_c\":63", "\"temp_c\":0").replace(
        "\"power_limit_w\":400.0,\"power_w\":250.5",
        "\"power_limit_w\":350.0,\"power_w\":250.5",
    ))
    .unwrap();
    let checks = nvml_checks(&collector_gpus(&windows), &refs);
    let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpu0 temperature physical",
            "gpu0 temperature = nvidia-ml-py",
            "gpu0 power limit = nvidia-ml-py"
        ],
        "{}",
        table(&checks)
    );
    // Collector readings with no nvidia-ml-py reading near them.
    let mut far = refs.clone();
    for s in &mut far.samples {
        s.t_ms += 60_000;
    }
    let checks = nvml_checks(&collector_gpus(&parse_record(&record()).unwrap()), &far);
    assert_eq!(failed(&checks).len(), 3, "{}", table(&checks));
    // A GPU the collector did not report.
    let checks = nvml_checks(&[], &refs);
    assert!(
        checks.iter().all(|c| c.outcome == Outcome::Fail),
        "{}",
        table(&checks)
    );
}

#[test]
fn gpu_nodes_are_nvidia_and_a_number() {
    let dir = std::env::temp_dir().join(format!("gpu-check-dev-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    for n in ["nvidiactl", "nvidia-uvm", "nvidia-modeset", "null"] {
        fs::write(dir.join(n), "").unwrap();
    }
    assert!(nvidia_nodes(&dir).is_empty());
    let args = Args {
        out: None,
        timeout: 1,
        collector: None,
        no_build: false,
        device: 0,
        rounds: 1,
        launches: 1,
        elements: 1,
        python: None,
        cuda_library: None,
        nvml_library: None,
        no_nccl: false,
        nccl_library: None,
        cudart_library: None,
        nccl_devices: None,
    };
    assert!(matches!(detect(&args, &dir), Err(Halt::NoGpu(w)) if w.contains("/nvidia<N>")));
    fs::write(dir.join("nvidia0"), "").unwrap();
    fs::write(dir.join("nvidia7"), "").unwrap();
    assert_eq!(nvidia_nodes(&dir), ["nvidia0", "nvidia7"]);
    fs::remove_dir_all(&dir).unwrap();
    let args = Args {
        cuda_library: Some("/nonexistent/libcuda.so.1".into()),
        ..args
    };
    assert!(
        matches!(detect(&args, Path::new("/nonexistent")), Err(Halt::NoGpu(w)) if w.contains("not loadable"))
    );
}

#[test]
fn the_verdict_never_passes_without_a_gpu() {
    let mut r = Report {
        started: Instant::now(),
        started_unix_ms: 0,
        standin: false,
        facts: Map::new(),
        checks: Vec::new(),
        notes: Vec::new(),
    };
    let halt = Halt::NoGpu("no /dev/nvidia<N>".into());
    let (status, code, headline) = r.verdict(Some(&halt));
    assert_eq!((status, code), ("no_gpu", EXIT_NO_GPU));
    assert!(headline.contains("NO GPU") && headline.contains("not a pass"));
    let j = r.to_json(Some(&halt));
    assert_eq!(j["passed"], false);
    assert_eq!(j["gpu_present"], false);
    assert_eq!(r.verdict(None).1, EXIT_FAIL, "no check ran");
    r.checks.push(Check::new("x", true, 1, 1));
    assert_eq!(r.verdict(None).1, EXIT_PASS);
    r.checks.push(Check::new("y", false, 1, 2));
    assert_eq!(r.verdict(None).1, EXIT_FAIL);
    assert_eq!(
        r.verdict(Some(&Halt::CannotRun("root".into()))).1,
        EXIT_CANNOT_RUN
    );
}
