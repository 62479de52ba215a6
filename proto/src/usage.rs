//! One job's usage quantities combined: the one sum of [`JobUsage`] both
//! sides use (the collector's cumulative counters, the correlator's hours).
use crate::v1::JobUsage;

impl JobUsage {
    /// Adds `o`'s quantities to these: every amount summed, the peak
    /// memory the larger of the two. The labels (job, team, resource) are
    /// left as they are.
    pub fn add_quantities(&mut self, o: &JobUsage) {
        self.gpu_alloc_seconds += o.gpu_alloc_seconds;
        self.gpu_busy_seconds += o.gpu_busy_seconds;
        self.energy_joules += o.energy_joules;
        self.peak_mem_bytes = self.peak_mem_bytes.max(o.peak_mem_bytes);
        self.launches += o.launches;
        self.copy_bytes += o.copy_bytes;
        self.sync_wait_ns += o.sync_wait_ns;
        self.io_requests += o.io_requests;
        self.io_bytes += o.io_bytes;
        self.io_device_ns += o.io_device_ns;
        self.fabric_bytes += o.fabric_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_add_and_the_peak_is_the_larger() {
        let mut a = JobUsage {
            job: "j".into(),
            gpu_alloc_seconds: 1.5,
            peak_mem_bytes: 10,
            launches: 3,
            fabric_bytes: 7,
            ..Default::default()
        };
        let b = JobUsage {
            job: "other".into(),
            gpu_alloc_seconds: 2.0,
            peak_mem_bytes: 4,
            launches: 5,
            io_device_ns: 9,
            ..Default::default()
        };
        a.add_quantities(&b);
        assert_eq!(a.job, "j");
        assert_eq!((a.gpu_alloc_seconds, a.peak_mem_bytes), (3.5, 10));
        assert_eq!((a.launches, a.fabric_bytes, a.io_device_ns), (8, 7, 9));
    }
}
