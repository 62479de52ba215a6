//! The collector's eBPF object carries no benchmark: the 8 MiB ring-drain
//! ring and the benchmark programs were in it, created and attached-ready on
//! every node while nothing read them. They are an object of their own.
fn has(object: &[u8], name: &str) -> bool {
    object.windows(name.len()).any(|w| w == name.as_bytes())
}

#[test]
fn benchmarks_live_in_their_own_object() {
    let _turn = tests::one_file_at_a_time(file!());
    let prod = collector::probes::probes_object();
    let bench = collector::probes::bench_object();
    if prod.is_empty() {
        assert!(!tests_in_ci(), "FAULTLINE_EBPF_STUB objects in CI");
        return;
    }
    for name in [
        "BENCH_RING",
        "bench_ring_producer",
        "bench_empty_uprobe",
        "BENCH_TGID",
    ] {
        assert!(!has(prod, name), "{name} in the collector's object");
        assert!(has(bench, name), "{name} missing from the bench object");
    }
    // The production object still has its own.
    for name in [
        "EXEC_EVENTS",
        "BLOCK_AGG",
        "CUDA_LAUNCH_AGG",
        "VERBS_WC",
        "STATS",
    ] {
        assert!(
            has(prod, name),
            "{name} missing from the collector's object"
        );
    }
}

fn tests_in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| v == "true")
}
