//! The latency histogram on the wire (`BlockStat.hist`): log2 buckets of
//! nanoseconds. Bucket `i` holds `[2^i, 2^(i+1))` ns (bucket 0 also 0 ns);
//! the last is open-ended. The probes' in-kernel layout
//! (`collector_common::block::LAT_BUCKETS`) is asserted equal in the collector.

/// Number of log2 latency buckets.
pub const LAT_BUCKETS: usize = 40;

/// Lower bound (inclusive) of log2 bucket `b`, ns.
pub fn bucket_lower_ns(b: usize) -> u64 {
    if b == 0 {
        0
    } else {
        1u64 << b
    }
}

/// Upper bound (exclusive) of log2 bucket `b`, ns.
pub fn bucket_upper_ns(b: usize) -> u64 {
    1u64 << (b + 1).min(63)
}

/// Quantile `q` (0..=1) of a log2 histogram, interpolated linearly inside the
/// bucket that holds it. `None` when the histogram is empty.
pub fn quantile_ns(hist: &[u64; LAT_BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut seen = 0u64;
    for (b, &c) in hist.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (seen + c) as f64 >= rank {
            let lo = bucket_lower_ns(b) as f64;
            let hi = bucket_upper_ns(b) as f64;
            let frac = (rank - seen as f64) / c as f64;
            return Some(lo + (hi - lo) * frac);
        }
        seen += c;
    }
    None
}
