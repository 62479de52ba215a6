//! Block probes against real I/O on a loop device: faultline's counts and
//! bytes per op must equal the kernel's own accounting in
//! `/sys/block/loopN/stat` over the same interval, and its window rows must
//! reach the wire with the device's class and latency histogram.
use collector::{
    block::{make_dev, quantile_ns, BlockSnapshot, BlockWindow, Names},
    probes::{BlockAttach, BlockMode, ProbeOptions, Probes},
};
use collector_common::{
    block::{op, BlockStats},
    stat,
};

/// Options that load the block probes alone, on the BTF path or the classic one.
fn block_only(block_btf: bool) -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: true,
        block_btf,
        cuda: false,
        verbs: false,
        ..ProbeOptions::default()
    }
}

/// The loop device's number as the probes key it.
fn dev_of(lo: &tests::LoopDevice) -> u32 {
    let (ma, mi) = lo.major_minor().expect("major:minor");
    make_dev(ma, mi)
}

/// Faultline's totals for op `o` of device `dev` between two snapshots.
fn op_delta(before: &BlockSnapshot, after: &BlockSnapshot, dev: u32, o: u32) -> BlockStats {
    collector::block::delta(
        Some(&before.device_op_total(dev, o)),
        &after.device_op_total(dev, o),
    )
}

/// The BTF-enabled raw tracepoints keyed by the request pointer (the
/// default on a kernel with BTF, as this one has).
#[test]
fn block_counts_and_bytes_equal_the_kernels_accounting() {
    let _turn = tests::one_file_at_a_time(file!());
    counts_equal_the_kernels_accounting(true, BlockAttach::Btf);
}

/// The classic tracepoints keyed by (dev, sector, op), the fallback for
/// kernels without BTF, forced with `[block] btf = false`.
#[test]
fn classic_tracepoint_fallback_equals_the_kernels_accounting() {
    let _turn = tests::one_file_at_a_time(file!());
    counts_equal_the_kernels_accounting(false, BlockAttach::Classic);
}

#[allow(clippy::unwrap_used)] // a test body, like the #[test] fns (clippy.toml)
fn counts_equal_the_kernels_accounting(block_btf: bool, want: BlockAttach) {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_probe") {
        return;
    }
    tests::runtime().block_on(async {
        let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
        let dev = dev_of(&lo);

        let probes = Probes::load(&block_only(block_btf)).expect("load probes");
        assert!(probes.block_active(), "{:?}", probes.status());
        assert_eq!(probes.block_attach(), want);
        // Two programs per request on BTF (start, complete); classically
        // also block_io_done (the count) and block_rq_issue (flushes).
        let attached: Vec<_> = [
            "block_io_start",
            "block_io_done",
            "block_rq_issue",
            "block_rq_complete",
        ]
        .into_iter()
        .filter(|p| probes.is_attached(p))
        .collect();
        let expected = match want {
            BlockAttach::Btf => vec!["block_io_start", "block_rq_complete"],
            BlockAttach::Classic => vec![
                "block_io_start",
                "block_io_done",
                "block_rq_issue",
                "block_rq_complete",
            ],
        };
        assert_eq!(attached, expected, "{:?}", probes.status());

        let k_before = lo.stat().unwrap();
        let f_before = probes.block_snapshot().unwrap();
        let issued = tests::direct_io_workload(&lo.path, 40, 4096, 24, 16384, 10, 3).unwrap();
        let k = lo.stat().unwrap().since(&k_before);
        let f_after = probes.block_snapshot().unwrap();
        eprintln!("issued {issued:?}\nkernel {k:?}");

        let f = |o: u32| op_delta(&f_before, &f_after, dev, o);
        let (r, w, fl, d) = (f(op::READ), f(op::WRITE), f(op::FLUSH), f(op::DISCARD));
        eprintln!(
            "faultline read {}/{} write {}/{} flush {}/{} discard {}/{}",
            r.requests, r.bytes, w.requests, w.bytes, fl.requests, fl.bytes, d.requests, d.bytes
        );
        assert_eq!(r.requests, k.read_ios, "read requests");
        assert_eq!(r.bytes, k.read_sectors * 512, "read bytes");
        assert_eq!(w.requests, k.write_ios, "write requests");
        assert_eq!(w.bytes, k.write_sectors * 512, "write bytes");
        assert_eq!(fl.requests, k.flush_ios, "flush requests");
        assert_eq!(d.requests, k.discard_ios, "discard requests");
        assert_eq!(d.bytes, k.discard_sectors * 512, "discard bytes");
        // And the kernel saw what the workload did (no merges with this stride).
        assert_eq!(k.read_ios, issued.reads);
        // Each fsync sends an empty REQ_PREFLUSH write, which the kernel counts
        // as a write (0 bytes) and turns into one flush request.
        assert_eq!(k.write_ios, issued.writes + issued.flushes);
        assert_eq!(k.flush_ios, issued.flushes);
        assert_eq!(k.discard_ios, issued.discards);
        assert_eq!(k.discard_sectors * 512, issued.discard_bytes);
        assert_eq!(k.read_sectors * 512, issued.read_bytes);
        assert_eq!(k.write_sectors * 512, issued.write_bytes);

        assert_eq!(fl.timed, fl.requests, "flush requests timed from issue");
        // Every request finished: none left in the in-flight records (on
        // the BTF path: slots released at done, counted through the mapping).
        assert_eq!(
            f_after.inflight.get(&dev).copied().unwrap_or(0),
            0,
            "{:?}",
            f_after.inflight
        );
        for (name, s) in [("read", &r), ("write", &w)] {
            assert_eq!(s.timed, s.requests, "{name}: every request timed");
            let p50 = quantile_ns(&s.hist, 0.5).unwrap();
            let max = s.latency_max_ns as f64;
            assert!(p50 > 0.0, "{name}: p50 {p50}");
            assert!(max > 0.0 && max < 10e9, "{name} max {max}");
            let mean = s.latency_sum_ns as f64 / s.timed as f64;
            assert!(mean > 0.0 && mean <= max, "{name}: mean {mean} max {max}");
        }

        // The window view over the same interval names the device and the
        // test's own cgroup as submitter.
        let mut names = Names::system();
        let win = BlockWindow::between(&f_before, &f_after, &mut names);
        let own = tests::own_cgroup_id().unwrap();
        let own_path = names.cgroup(own);
        let rows: Vec<_> = win.rows.iter().filter(|r| r.device == lo.name).collect();
        assert!(!rows.is_empty(), "{win:?}");
        let reads: u64 = rows
            .iter()
            .filter(|r| r.op == "read")
            .map(|r| r.requests)
            .sum();
        assert_eq!(reads, k.read_ios);
        let ours = rows
            .iter()
            .find(|r| r.op == "write" && r.cgroup == own_path)
            .expect("writes attributed to the test's cgroup");
        assert_eq!(ours.requests, issued.writes + issued.flushes);
        for row in &rows {
            if matches!(row.op, "read" | "write") {
                let (p50, p99, max) = (row.p50_s.unwrap(), row.p99_s.unwrap(), row.max_s.unwrap());
                assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{row:?}");
            }
        }
        assert!(ours.iops > 0.0 && ours.bytes_per_sec > 0.0, "{ours:?}");
        assert_eq!(ours.bytes, issued.write_bytes);

        // On the wire: a loop device is "virtual", and each row's histogram
        // (trimmed of empty tail buckets) counts its timed requests, which
        // here are all of them: every request was issued after the attach.
        let wire = collector::block::wire::rows(&win);
        let wire: Vec<_> = wire.iter().filter(|b| b.device == lo.name).collect();
        assert_eq!(wire.len(), rows.len());
        for (b, row) in wire.iter().zip(&rows) {
            // `job` is the cgroup's job id, as CUDA rows name it (not the path).
            assert_eq!(
                (b.op.as_str(), b.job.clone()),
                (row.op, collector::block::cgroup_job(&row.cgroup))
            );
            assert_eq!(b.latency_sum_ns, row.latency_sum_ns, "{b:?}");
            assert_eq!(b.device_class, "virtual", "{b:?}");
            assert_eq!(row.timed, b.requests, "{b:?}");
            assert_eq!(b.hist.iter().sum::<u64>(), row.timed, "{b:?}");
            assert_ne!(b.hist.last(), Some(&0), "{b:?}");
        }
    });
}

/// Mode RQ, the path of kernels before 6.5 (no `block_io_start`): requests
/// timed from issue to completion, on both attaches, forced on this kernel.
/// Counts and bytes still equal the stat's, and every request is timed: an
/// fsync's empty PREFLUSH write is never issued to the driver (the flush
/// machinery sends its flush instead), so it ends without a record and is
/// timed from the kernel's start stamp (on the BTF path; classically it is
/// counted untimed).
#[test]
fn mode_rq_counts_equal_the_kernels_accounting() {
    let _turn = tests::one_file_at_a_time(file!());
    for (block_btf, want) in [(true, BlockAttach::Btf), (false, BlockAttach::Classic)] {
        tests::runtime().block_on(async { mode_rq_counts(block_btf, want) });
    }
}

#[allow(clippy::unwrap_used)] // a test helper, like the #[test] fns (clippy.toml)
fn mode_rq_counts(block_btf: bool, want: BlockAttach) {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_mode_rq") {
        return;
    }
    let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
    let dev = dev_of(&lo);
    let probes = Probes::load(&ProbeOptions {
        block_mode: Some(BlockMode::Rq),
        ..block_only(block_btf)
    })
    .expect("load probes");
    assert_eq!(
        (probes.block_attach(), probes.block_mode()),
        (want, BlockMode::Rq)
    );
    assert!(probes.block_active(), "{:?}", probes.status());
    assert!(!probes.is_attached("block_io_start") && !probes.is_attached("block_io_done"));
    let k_before = lo.stat().unwrap();
    let f_before = probes.block_snapshot().unwrap();
    let issued = tests::direct_io_workload(&lo.path, 40, 4096, 24, 16384, 10, 3).unwrap();
    let k = lo.stat().unwrap().since(&k_before);
    let f_after = probes.block_snapshot().unwrap();
    let f = |o: u32| op_delta(&f_before, &f_after, dev, o);
    let (r, w, fl, d) = (f(op::READ), f(op::WRITE), f(op::FLUSH), f(op::DISCARD));
    eprintln!(
        "{want:?}: kernel {k:?}; faultline read {}/{} write {}/{} ({} timed) flush {} discard {}/{}",
        r.requests, r.bytes, w.requests, w.bytes, w.timed, fl.requests, d.requests, d.bytes
    );
    assert_eq!(
        (r.requests, r.bytes),
        (k.read_ios, k.read_sectors * 512),
        "{want:?} reads"
    );
    assert_eq!(
        (w.requests, w.bytes),
        (k.write_ios, k.write_sectors * 512),
        "{want:?} writes"
    );
    assert_eq!(
        (d.requests, d.bytes),
        (k.discard_ios, k.discard_sectors * 512),
        "{want:?} discards"
    );
    assert_eq!(fl.requests, k.flush_ios, "{want:?} flushes");
    assert_eq!(
        (r.timed, fl.timed, d.timed),
        (r.requests, fl.requests, d.requests)
    );
    let fsyncs = match want {
        BlockAttach::Btf => 0,
        BlockAttach::Classic => issued.flushes,
    };
    assert_eq!(w.timed + fsyncs, w.requests, "{want:?}: writes timed");
}

/// A `REQ_FUA` write on a device with a write-back cache and no FUA (a loop
/// device) is sent as its data and then a flush, and its request completes
/// twice: once for the data, once when the flush sequence ends. The kernel
/// counts it as one write (and the flush as one); so must faultline, on both
/// paths.
#[test]
fn fua_writes_count_once_as_the_kernel_counts_them() {
    let _turn = tests::one_file_at_a_time(file!());
    for (block_btf, want) in [(true, BlockAttach::Btf), (false, BlockAttach::Classic)] {
        tests::runtime().block_on(async { fua_writes_count_once(block_btf, want) });
    }
}

#[allow(clippy::unwrap_used)] // a test helper, like the #[test] fns (clippy.toml)
fn fua_writes_count_once(block_btf: bool, want: BlockAttach) {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_fua") {
        return;
    }
    let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
    let dev = dev_of(&lo);
    let probes = Probes::load(&block_only(block_btf)).expect("load probes");
    assert_eq!(probes.block_attach(), want);
    let n = 100;
    let k_before = lo.stat().unwrap();
    let f_before = probes.block_snapshot().unwrap();
    let bytes = tests::dsync_writes(&lo.path, n, 8192).unwrap();
    let k = lo.stat().unwrap().since(&k_before);
    let f_after = probes.block_snapshot().unwrap();
    let f = |o: u32| op_delta(&f_before, &f_after, dev, o);
    let (w, fl) = (f(op::WRITE), f(op::FLUSH));
    eprintln!(
        "{want:?}: kernel {k:?}; faultline write {}/{} ({} timed) flush {}",
        w.requests, w.bytes, w.timed, fl.requests
    );
    // Each write is the FUA write (its data, then a post-flush) and the
    // fsync that `RWF_DSYNC` adds on a block device (an empty PREFLUSH
    // write: a flush, then the write's end): 2 writes and 2 flushes.
    assert_eq!((k.write_ios, k.write_sectors * 512), (2 * n, bytes));
    assert_eq!(k.flush_ios, 2 * n, "{k:?}");
    assert_eq!(
        (w.requests, w.bytes),
        (k.write_ios, bytes),
        "{want:?} writes"
    );
    assert_eq!(fl.requests, k.flush_ios, "{want:?} flushes");
    assert_eq!(
        (w.timed, fl.timed),
        (w.requests, fl.requests),
        "{want:?} timed"
    );
}

/// What `n` synchronous 4 KiB reads of `lo` looked like with the BTF
/// probes loaded: the kernel's stat, faultline's read totals for the device
/// and the `STATS[BLOCK_UNTIMED]` increase, all over the same interval.
#[allow(clippy::unwrap_used)] // a test helper, like the #[test] fns (clippy.toml)
fn btf_reads(lo: &tests::LoopDevice, n: u64) -> (tests::DiskStat, BlockStats, u64, u64) {
    let dev = dev_of(lo);
    let probes = Probes::load(&block_only(true)).expect("load probes");
    assert_eq!(probes.block_attach(), BlockAttach::Btf);
    let k_before = lo.stat().unwrap();
    let s_before = probes.kernel_stats().unwrap();
    let f_before = probes.block_snapshot().unwrap();
    let missed = |p: &Probes| -> u64 {
        p.recursion_misses()
            .iter()
            .filter(|(name, _)| name == "block_btf_rq_complete")
            .map(|m| m.1)
            .sum()
    };
    let m_before = missed(&probes);
    let issued = tests::direct_io_workload(&lo.path, 0, 4096, n, 4096, 0, 0).unwrap();
    assert_eq!(issued.reads, n);
    // The last completion's counts can land a moment after the reader is
    // woken (seen once under a loaded CI: 1,999 of 2,000 completed at the
    // first reading): read until every issued request is completed (or
    // skipped), for at most 2 s, and judge what is there then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let s = probes.kernel_stats().unwrap();
        let d = |i: u32| s[i as usize] - s_before[i as usize];
        let done = d(stat::BLOCK_COMPLETED) + missed(&probes) - m_before >= d(stat::BLOCK_ISSUED);
        if done || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let k = lo.stat().unwrap().since(&k_before);
    let s_after = probes.kernel_stats().unwrap();
    let f_after = probes.block_snapshot().unwrap();
    let ours = op_delta(&f_before, &f_after, dev, op::READ);
    let untimed = s_after[stat::BLOCK_UNTIMED as usize] - s_before[stat::BLOCK_UNTIMED as usize];
    let misses = missed(&probes) - m_before;
    let d = |i: u32| s_after[i as usize] - s_before[i as usize];
    eprintln!(
        "kernel {k:?}; faultline {} reads, {} timed ({} ns), {untimed} untimed, {misses} completions the kernel skipped (recursion); all devices: {} issued, {} completed, {} partial, {} unmatched, {} start-map full, {} aggregate-map full",
        ours.requests, ours.timed, ours.latency_sum_ns,
        d(stat::BLOCK_ISSUED), d(stat::BLOCK_COMPLETED), d(stat::BLOCK_PARTIAL), d(stat::BLOCK_UNMATCHED),
        d(stat::BLOCK_START_MAP_FULL), d(stat::BLOCK_AGG_MAP_FULL)
    );
    (k, ours, untimed, misses)
}

/// The BTF programs time a request from the kernel's own start stamp
/// (`rq->start_time_ns`, the one behind the stat's time fields) to the
/// driver's completion (`block_rq_complete`); the stat's clock stops a
/// little later, after the request's bios are ended (for these synchronous
/// reads: waking the reader). So over 2,000 reads faultline's latency sum is
/// at most the kernel's read time (to the stat's millisecond), and short of
/// it by less than 20 µs per request (7 µs measured here, a VM's wake-up).
#[test]
fn latency_totals_match_the_kernels_time_fields() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_latency") {
        return;
    }
    tests::runtime().block_on(async {
        let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
        let n = 2000;
        let (k, r, untimed, misses) = btf_reads(&lo, n);
        // Every read is counted, or counted by the kernel as a completion
        // run it skipped (seen once under a loaded CI: 1 of 2,000).
        assert_eq!(
            (k.read_ios, r.requests + misses, r.timed + misses, untimed),
            (n, n, n, 0)
        );
        let kernel_ns = k.read_ms * 1_000_000;
        // The stat shows floor(ns / 1e6) of its running total: a difference of
        // two readings is within 1 ms of the time it added.
        assert!(
            r.latency_sum_ns <= kernel_ns + 1_000_000,
            "faultline {} ns above the kernel's {} ms",
            r.latency_sum_ns,
            k.read_ms
        );
        assert!(
            r.latency_sum_ns + 1_000_000 + n * 20_000 >= kernel_ns,
            "faultline {} ns far below the kernel's {} ms",
            r.latency_sum_ns,
            k.read_ms
        );
        eprintln!(
            "the stat's clock ran {:.1} µs per request past the driver's completion",
            (kernel_ns as f64 - r.latency_sum_ns as f64) / n as f64 / 1e3
        );
    });
}

/// A device whose `queue/iostats` is off gets no start stamp from the
/// kernel: its first completed request is counted untimed (and counted in
/// `BLOCK_UNTIMED`), and every later one is timed by the probes' own clock.
#[test]
fn a_device_without_iostats_is_timed_by_the_probes_own_clock() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_own_clock") {
        return;
    }
    tests::runtime().block_on(async {
        struct IostatsOff<'a>(&'a tests::LoopDevice);
        impl Drop for IostatsOff<'_> {
            fn drop(&mut self) {
                let _ = self.0.set_iostats(true);
            }
        }
        let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
        lo.set_iostats(false).expect("queue/iostats");
        let _restore = IostatsOff(&lo);
        let n = 200;
        let (k, r, untimed, misses) = btf_reads(&lo, n);
        assert_eq!(k.read_ios, 0, "the kernel counts nothing with iostats off");
        assert_eq!(r.requests + misses, n);
        // The reads are synchronous: the first one's completion switches the
        // clock before the second starts (0 when another device without
        // iostats switched it first).
        assert!(untimed <= 1, "{untimed}");
        assert_eq!(r.timed + untimed + misses, n);
        let mean = r.latency_sum_ns / r.timed.max(1);
        assert!(
            mean > 0 && mean <= r.latency_max_ns,
            "mean {mean} max {}",
            r.latency_max_ns
        );
    });
}

/// With `[block] sample_every = 1` every timed completion is one record in
/// `BLOCK_EVENTS`, and the agent's drain takes every one of them: none is
/// left in the ring, none was dropped for a full ring.
#[test]
fn sampled_block_events_are_drained_one_per_timed_request() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("block_events") {
        return;
    }
    tests::runtime().block_on(async {
        use collector::{block::probe::BlockSample, probes::drain::EventDrain};
        let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
        let dev = dev_of(&lo);
        let opts = ProbeOptions {
            block_sample_every: 1,
            ..block_only(true)
        };
        let mut probes = Probes::load(&opts).expect("load probes");
        let mut drain = EventDrain::<BlockSample>::take(&mut probes, true)
            .expect("block ring")
            .expect("taken when sampling");
        let before = probes.block_snapshot().unwrap();
        let k_before = probes.kernel_stats().unwrap();
        let issued = tests::direct_io_workload(&lo.path, 20, 4096, 12, 16384, 5, 2).unwrap();
        let after = probes.block_snapshot().unwrap();
        let k_after = probes.kernel_stats().unwrap();
        let timed: u64 = [op::READ, op::WRITE, op::FLUSH, op::DISCARD]
            .iter()
            .map(|&o| op_delta(&before, &after, dev, o).timed)
            .sum();
        let events = drain.take_ready();
        let ours: Vec<_> = events.iter().filter(|e| e.data.dev == dev).collect();
        eprintln!(
            "issued {issued:?} timed {timed} drained {} (ours {})",
            events.len(),
            ours.len()
        );
        assert_eq!(
            k_after[stat::BLOCK_RING_FULL as usize] - k_before[stat::BLOCK_RING_FULL as usize],
            0
        );
        assert!(timed >= issued.reads + issued.writes, "{timed}");
        assert_eq!(ours.len() as u64, timed);
        assert_eq!(drain.total, events.len() as u64);
        assert!(ours.iter().all(|e| e.data.latency_ns > 0), "{ours:?}");
        assert!(
            drain.take_ready().iter().all(|e| e.data.dev != dev),
            "nothing of ours left"
        );
    });
}
