//! The OTLP receiver's counters, read from a Prometheus recorder installed
//! once per test binary; the tests that count take [`serial`] so that they
//! run one at a time.
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("installing the test's metrics recorder")
    })
}

/// Holds the other tests of this file off while a test counts.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    handle();
    SERIAL.lock().await
}

/// Everything counted so far.
pub fn snapshot() -> String {
    handle().render()
}

/// The sum of `name`'s series in `text` that carry all of `labels`.
fn get_in(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    let total: f64 = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            let all = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (n == name && all).then(|| value.parse::<f64>().ok())?
        })
        .sum();
    total as u64
}

/// How much `name` with `labels` grew since `before`.
pub fn since(before: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    get_in(&snapshot(), name, labels) - get_in(before, name, labels)
}
