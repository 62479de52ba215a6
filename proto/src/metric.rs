//! One declaration per metric family (name, type, labels, HELP) that both
//! binaries describe their recorder from, write their text sections' HELP
//! and TYPE lines from, and check `docs/metrics.md` against.
mod docs;
pub mod literals;
pub mod shared;

pub use docs::{check_docs, section, without_section};

/// A family's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The name `# TYPE` and docs/metrics.md's type column use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A metric family as it is declared once: what `/metrics` shows in its
/// `# HELP` and `# TYPE` lines, and the labels every series carries
/// (optional ones included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Family {
    /// A counter family.
    pub const fn counter(
        name: &'static str,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind: Kind::Counter,
            labels,
            help,
        }
    }

    /// A gauge family.
    pub const fn gauge(
        name: &'static str,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind: Kind::Gauge,
            labels,
            help,
        }
    }

    /// A histogram family.
    pub const fn histogram(
        name: &'static str,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind: Kind::Histogram,
            labels,
            help,
        }
    }

    /// The HELP text escaped for the text format (backslash, newline).
    pub fn escaped_help(&self) -> String {
        self.help.replace('\\', "\\\\").replace('\n', "\\n")
    }

    /// The family's `# HELP` and `# TYPE` lines, each ending in a newline.
    pub fn header(&self) -> String {
        format!(
            "# HELP {n} {h}\n# TYPE {n} {t}\n",
            n = self.name,
            h = self.escaped_help(),
            t = self.kind.as_str()
        )
    }

    /// Registers the HELP with the installed `metrics` recorder.
    #[cfg(feature = "metric")]
    pub fn describe(&self) {
        match self.kind {
            Kind::Counter => metrics::describe_counter!(self.name, self.help),
            Kind::Gauge => metrics::describe_gauge!(self.name, self.help),
            Kind::Histogram => metrics::describe_histogram!(self.name, self.help),
        }
    }
}

/// Registers the HELP of every family in `families`.
#[cfg(feature = "metric")]
pub fn describe_all(families: &[&Family]) {
    for f in families {
        f.describe();
    }
}

/// Names declared twice in `families` (a catalog lists each once).
pub fn duplicates(families: &[&Family]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = families.iter().map(|f| f.name).collect();
    names.sort_unstable();
    let mut dup: Vec<&'static str> = names
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    dup.dedup();
    dup
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Family = Family::counter("faultline_x_total", &["a"], "Xs seen\\ok\nnext");

    #[test]
    fn header_escapes_help_and_names_the_type() {
        assert_eq!(
            F.header(),
            "# HELP faultline_x_total Xs seen\\\\ok\\nnext\n# TYPE faultline_x_total counter\n"
        );
        let g = Family::histogram("faultline_h_seconds", &[], "h");
        assert!(g
            .header()
            .ends_with("# TYPE faultline_h_seconds histogram\n"));
    }

    #[test]
    fn duplicates_are_found() {
        let g = Family::gauge("faultline_g", &[], "g");
        assert!(duplicates(&[&F, &g]).is_empty());
        assert_eq!(duplicates(&[&F, &g, &F]), vec!["faultline_x_total"]);
    }
}
