//! The one Prometheus text writer of the sources that export state read at
//! each window (port counters, GPU samples, in-kernel aggregates and their
//! histograms) next to the `metrics` recorder: families in name order, each
//! with its HELP and TYPE once, label values escaped one way.
use std::{collections::BTreeMap, fmt::Display, fmt::Write as _};

use proto::metric::Family as Declared;
/// A family's type (the one [`Family`] declarations use).
pub use proto::metric::Kind;

/// A label value escaped for the text format (backslash, quote, newline).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[derive(Debug)]
struct Family {
    help: String,
    kind: Kind,
    /// (name suffix, rendered labels, value) in insertion order.
    samples: Vec<(&'static str, String, String)>,
}

/// Collects samples by family; [`Text::render`] writes the exposition.
#[derive(Debug, Default)]
pub struct Text {
    families: BTreeMap<String, Family>,
}

/// Labels as `name="escaped value"` pairs joined by commas.
pub fn labels(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"{}\"", escape(v));
    }
    s
}

impl Text {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a family (also when it ends up with no samples, nothing is written).
    fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut Family {
        self.families
            .entry(name.to_string())
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                samples: Vec::new(),
            })
    }

    /// One sample of a counter or gauge family.
    pub fn sample(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        labels_: &[(&str, &str)],
        value: impl Display,
    ) {
        let l = labels(labels_);
        self.family(name, help, kind)
            .samples
            .push(("", l, value.to_string()));
    }

    /// One labelled histogram from cumulative bucket counts: `buckets` are
    /// (upper bound, count in that bucket), ascending; `+Inf` is added.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels_: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        let base = labels(labels_);
        let sep = if base.is_empty() { "" } else { "," };
        let f = self.family(name, help, Kind::Histogram);
        let mut cum = 0u64;
        for &(le, n) in buckets {
            cum += n;
            f.samples.push((
                "_bucket",
                format!("{base}{sep}le=\"{le:e}\""),
                cum.to_string(),
            ));
        }
        f.samples.push((
            "_bucket",
            format!("{base}{sep}le=\"+Inf\""),
            count.to_string(),
        ));
        f.samples.push(("_sum", base.clone(), sum.to_string()));
        f.samples.push(("_count", base, count.to_string()));
    }

    /// A histogram from the probes' log2 nanosecond buckets (`hist[b]`
    /// counts `[2^b, 2^(b+1))` ns; the last bucket is open-ended), in seconds.
    pub fn log2_ns_histogram(
        &mut self,
        name: &str,
        help: &str,
        labels_: &[(&str, &str)],
        hist: &[u64],
        sum_ns: u64,
        count: u64,
    ) {
        let buckets: Vec<(f64, u64)> = hist
            .iter()
            .take(hist.len().saturating_sub(1))
            .enumerate()
            .map(|(b, &n)| (vocab::hist::bucket_upper_ns(b) as f64 / 1e9, n))
            .collect();
        self.histogram(name, help, labels_, &buckets, sum_ns as f64 / 1e9, count);
    }

    /// One sample of a declared counter or gauge family.
    pub fn add(&mut self, family: &Declared, labels_: &[(&str, &str)], value: impl Display) {
        self.sample(family.name, family.help, family.kind, labels_, value);
    }

    /// [`Text::histogram`] of a declared histogram family.
    pub fn add_histogram(
        &mut self,
        family: &Declared,
        labels_: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        self.histogram(family.name, family.help, labels_, buckets, sum, count);
    }

    /// [`Text::log2_ns_histogram`] of a declared histogram family.
    pub fn add_log2_ns_histogram(
        &mut self,
        family: &Declared,
        labels_: &[(&str, &str)],
        hist: &[u64],
        sum_ns: u64,
        count: u64,
    ) {
        self.log2_ns_histogram(family.name, family.help, labels_, hist, sum_ns, count);
    }

    /// The text exposition (families without samples are left out).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, f) in &self.families {
            if f.samples.is_empty() {
                continue;
            }
            let _ = writeln!(s, "# HELP {name} {}", f.help);
            let _ = writeln!(s, "# TYPE {name} {}", f.kind.as_str());
            for (suffix, l, v) in &f.samples {
                if l.is_empty() {
                    let _ = writeln!(s, "{name}{suffix} {v}");
                } else {
                    let _ = writeln!(s, "{name}{suffix}{{{l}}} {v}");
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A declared family's section opens with the declaration's HELP and
    /// TYPE lines.
    #[test]
    fn a_declared_family_writes_its_header() {
        const F: Declared = Declared::gauge("t_gauge", &["x"], "T in a test");
        let mut t = Text::new();
        t.add(&F, &[("x", "1")], 2);
        assert_eq!(t.render(), format!("{}t_gauge{{x=\"1\"}} 2\n", F.header()));
    }

    #[test]
    fn escapes_and_groups_by_family() {
        let mut t = Text::new();
        t.sample("b_total", "B.", Kind::Counter, &[("x", "a\"b\\c\nd")], 3);
        t.sample("a", "A.", Kind::Gauge, &[], 1.5);
        t.sample("b_total", "B.", Kind::Counter, &[("x", "y")], 4);
        assert_eq!(
            t.render(),
            "# HELP a A.\n# TYPE a gauge\na 1.5\n\
             # HELP b_total B.\n# TYPE b_total counter\nb_total{x=\"a\\\"b\\\\c\\nd\"} 3\nb_total{x=\"y\"} 4\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut t = Text::new();
        t.histogram(
            "h_seconds",
            "H.",
            &[("d", "x")],
            &[(0.5, 2), (1.0, 3)],
            2.5,
            6,
        );
        let r = t.render();
        assert!(
            r.contains("h_seconds_bucket{d=\"x\",le=\"5e-1\"} 2\n"),
            "{r}"
        );
        assert!(
            r.contains("h_seconds_bucket{d=\"x\",le=\"1e0\"} 5\n"),
            "{r}"
        );
        assert!(
            r.contains("h_seconds_bucket{d=\"x\",le=\"+Inf\"} 6\n"),
            "{r}"
        );
        assert!(
            r.contains("h_seconds_sum{d=\"x\"} 2.5\nh_seconds_count{d=\"x\"} 6\n"),
            "{r}"
        );
    }
}
