//! What a port read went without: unreadable files are counted every
//! window (`faultline_sysfs_read_errors_total{file}`), while an optional
//! attribute the driver does not have (`lid` on an iWARP port, say) is
//! noted once per port — logged and counted in
//! `faultline_ib_optional_files_missing_total{file}` once — since it will
//! be missing every window.
use std::collections::BTreeSet;

use super::sysfs::{MissingFile, Scan};

/// At most this many (port, file) notes are remembered; past it a missing
/// file is noted again each window rather than growing the set.
const MAX_NOTES: usize = 4096;

/// The missing optional files already noted.
#[derive(Debug, Default)]
pub struct ReadIssues {
    noted: BTreeSet<MissingFile>,
}

impl ReadIssues {
    /// Counts the read errors of `scan` and notes its newly missing
    /// optional files; returns how many were newly noted.
    pub fn account(&mut self, host: &str, scan: &Scan) -> usize {
        for p in &scan.ports {
            for (file, err) in &p.read_errors {
                metrics::counter!(crate::metrics_catalog::SYSFS_READ_ERRORS.name, "file" => file.clone())
                    .increment(1);
                tracing::debug!(port = %p.entity(host), file, err, "sysfs read error");
            }
        }
        let mut new = 0;
        for m in &scan.missing {
            if self.noted.contains(m) {
                continue;
            }
            if self.noted.len() < MAX_NOTES {
                self.noted.insert(m.clone());
            }
            new += 1;
            metrics::counter!(crate::metrics_catalog::IB_OPTIONAL_FILES_MISSING.name, "file" => m.file)
                .increment(1);
            tracing::info!(
                port = %vocab::entity::port(host, &m.device, m.port),
                file = m.file,
                "optional InfiniBand port attribute not provided by the driver; its series is left out"
            );
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::{scan, DeviceFilter};

    /// A port without `lid` (and with an unreadable counter, a real error)
    /// over three windows: the lid is noted once, the error counted thrice.
    #[test]
    fn missing_lid_counts_once_a_read_error_every_window() {
        let root = std::env::temp_dir().join(format!("faultline-ib-issues-{}", std::process::id()));
        let port = root.join("class/infiniband/irdma0/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        for (f, v) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "100 Gb/sec (4X EDR)"),
            ("link_layer", "Ethernet"),
            ("counters/symbol_error", "garbage"),
        ] {
            std::fs::write(port.join(f), format!("{v}\n")).unwrap();
        }
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let mut issues = ReadIssues::default();
        let noted: Vec<usize> = (0..3)
            .map(|_| {
                let s = scan(&root, &DeviceFilter::default()).unwrap();
                metrics::with_local_recorder(&recorder, || issues.account("n1", &s))
            })
            .collect();
        assert_eq!(noted, [1, 0, 0]);
        let text = handle.render();
        let value = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(series))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_string)
        };
        assert_eq!(
            value("faultline_ib_optional_files_missing_total{file=\"lid\"}").as_deref(),
            Some("1"),
            "{text}"
        );
        assert_eq!(
            value("faultline_sysfs_read_errors_total{file=\"counters/symbol_error\"}").as_deref(),
            Some("3"),
            "{text}"
        );
        assert!(
            !text.contains("faultline_sysfs_read_errors_total{file=\"lid\"}"),
            "{text}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
