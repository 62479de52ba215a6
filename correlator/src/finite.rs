//! Non-finite floats (NaN, ±∞) in a received window are never judged: a
//! buggy or hostile collector could otherwise poison medians, change points
//! and thresholds (every comparison with NaN is false). Optional values are
//! removed, "unknown = 0" values become 0, and a row whose main value is not
//! finite (a step time, a workload sum) is dropped. Each removed value is
//! counted in `faultline_ingest_non_finite_total`. The window itself is
//! accepted: refusing it would leave the collector resending the same
//! spooled window forever.
use proto::v1::Window;

/// Removes the window's non-finite values as above; how many it removed.
pub fn drop_non_finite(w: &mut Window) -> u64 {
    let mut n = 0;
    let mut unknown = |v: &mut f64| {
        if !v.is_finite() {
            *v = 0.0;
            n += 1;
        }
    };
    for s in &mut w.steps {
        unknown(&mut s.max_seconds);
    }
    for s in &mut w.workload {
        unknown(&mut s.p50);
        unknown(&mut s.p99);
        unknown(&mut s.max);
    }
    for g in &mut w.gpus {
        for v in [&mut g.power_w, &mut g.power_limit_w] {
            if v.is_some_and(|x| !x.is_finite()) {
                *v = None;
                n += 1;
            }
        }
    }
    let (steps, workload) = (w.steps.len(), w.workload.len());
    w.steps.retain(|s| s.seconds.is_finite());
    w.workload.retain(|s| s.sum.is_finite());
    n += (steps - w.steps.len() + workload - w.workload.len()) as u64;
    if n > 0 {
        metrics::counter!(crate::telemetry::INGEST_NON_FINITE.name).increment(n);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::v1::{GpuSample, StepTime, WorkloadSample};

    #[test]
    fn non_finite_values_are_removed_and_counted_finite_ones_kept() {
        let mut w = Window {
            gpus: vec![
                GpuSample {
                    index: 0,
                    power_w: Some(f64::NAN),
                    power_limit_w: Some(f64::INFINITY),
                    temp_c: Some(70),
                    ..GpuSample::default()
                },
                GpuSample {
                    index: 1,
                    power_w: Some(250.0),
                    power_limit_w: Some(400.0),
                    ..GpuSample::default()
                },
            ],
            steps: vec![
                StepTime {
                    job: "j".into(),
                    rank: 0,
                    seconds: f64::NAN,
                    ..StepTime::default()
                },
                StepTime {
                    job: "j".into(),
                    rank: 1,
                    seconds: 1.5,
                    max_seconds: f64::NEG_INFINITY,
                    ..StepTime::default()
                },
            ],
            workload: vec![
                WorkloadSample {
                    signal: "ttft_seconds".into(),
                    count: 3,
                    sum: f64::INFINITY,
                    ..WorkloadSample::default()
                },
                WorkloadSample {
                    signal: "ttft_seconds".into(),
                    count: 3,
                    sum: 0.3,
                    p99: f64::NAN,
                    max: 0.2,
                    ..WorkloadSample::default()
                },
            ],
            ..Window::default()
        };
        assert_eq!(drop_non_finite(&mut w), 6);
        assert_eq!((w.gpus[0].power_w, w.gpus[0].power_limit_w), (None, None));
        assert_eq!(w.gpus[0].temp_c, Some(70));
        assert_eq!(
            (w.gpus[1].power_w, w.gpus[1].power_limit_w),
            (Some(250.0), Some(400.0))
        );
        assert_eq!(w.steps.len(), 1);
        assert_eq!(
            (w.steps[0].rank, w.steps[0].seconds, w.steps[0].max_seconds),
            (1, 1.5, 0.0)
        );
        assert_eq!(w.workload.len(), 1);
        assert_eq!(
            (w.workload[0].sum, w.workload[0].p99, w.workload[0].max),
            (0.3, 0.0, 0.2)
        );
        // A clean window is left alone.
        let before = w.clone();
        assert_eq!(drop_non_finite(&mut w), 0);
        assert_eq!(w, before);
    }
}
