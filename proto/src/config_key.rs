//! One configuration key declared once: its path in the file, its default,
//! its bounds, its command-line flag and environment variable. A section's
//! file declares a `const` [`Key`] per key and reads it for the serde
//! default, the range check, the flag's name and help, and the use site;
//! each binary's docs test checks `docs/config.md` against the same
//! declarations ([`crate::config_doc`]). Both binaries use it.
use std::fmt::Display;

/// A key of a config file, e.g.
/// `Key { path: "stream.spool_max_bytes", default: 64 << 20, min: Some(4096), .. }`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Key<T: 'static> {
    /// `section.key` as written in the file (`[stream]` `spool_max_bytes`);
    /// the name configuration errors give.
    pub path: &'static str,
    /// The value when the file and the flag say nothing.
    pub default: T,
    /// Smallest valid value, inclusive.
    pub min: Option<T>,
    /// Largest valid value, inclusive.
    pub max: Option<T>,
    /// The long flag that overrides it, without the dashes.
    pub flag: Option<&'static str>,
    /// The environment variable that overrides it.
    pub env: Option<&'static str>,
    /// What it means, one line: the flag's help.
    pub doc: &'static str,
    /// How `--help` shows the default (`64 MiB`); empty: the value itself.
    pub shown: &'static str,
}

/// What the docs must say of a key besides its default: its flag and
/// environment variable (a section lists its keys' as `DECLARED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    pub path: &'static str,
    pub flag: Option<&'static str>,
    pub env: Option<&'static str>,
}

impl<T: Copy + PartialOrd + Display> Key<T> {
    /// The key's path, flag and environment variable.
    pub const fn declared(&self) -> Declared {
        Declared {
            path: self.path,
            flag: self.flag,
            env: self.env,
        }
    }

    /// A key with neither bounds, flag nor environment variable.
    pub const fn new(path: &'static str, default: T, doc: &'static str) -> Self {
        Self {
            path,
            default,
            min: None,
            max: None,
            flag: None,
            env: None,
            doc,
            shown: "",
        }
    }

    /// Whether `v` is within the bounds (NaN is not).
    pub fn contains(&self, v: T) -> bool {
        // `!(v < min)` would let NaN through.
        self.min.is_none_or(|m| v >= m) && self.max.is_none_or(|m| v <= m)
    }

    /// The bounds in words: `at least 4096`, `in [1, 4096]`, `at most 5`,
    /// or `any value`.
    pub fn range_text(&self) -> String {
        match (self.min, self.max) {
            (Some(lo), Some(hi)) => format!("in [{lo}, {hi}]"),
            (Some(lo), None) => format!("at least {lo}"),
            (None, Some(hi)) => format!("at most {hi}"),
            (None, None) => "any value".to_string(),
        }
    }

    /// The key's name in the file, after its section (`spool_max_bytes`).
    pub fn name(&self) -> &'static str {
        self.path.rsplit_once('.').map_or(self.path, |(_, k)| k)
    }

    /// The flag's name for clap's `long` (the key has one, or this is a
    /// declaration mistake caught by the binary's flag test: `""`).
    pub const fn long(&self) -> &'static str {
        match self.flag {
            Some(f) => f,
            None => "",
        }
    }

    /// The environment variable for clap's `env` (`""`: none declared).
    pub const fn env_var(&self) -> &'static str {
        match self.env {
            Some(e) => e,
            None => "",
        }
    }

    /// The flag's help: the doc, then the key and its default
    /// (`Spool bound in bytes [stream.spool_max_bytes, default 64 MiB]`);
    /// a default that shows as nothing (`""`: unset) is left out.
    pub fn help(&self) -> String {
        let default = if self.shown.is_empty() {
            self.default.to_string()
        } else {
            self.shown.to_string()
        };
        if default.is_empty() {
            format!("{} [{}]", self.doc, self.path)
        } else {
            format!("{} [{}, default {default}]", self.doc, self.path)
        }
    }
}

impl Key<f64> {
    /// The smallest valid value (`f64::MIN` when unbounded below).
    pub fn lo(&self) -> f64 {
        self.min.unwrap_or(f64::MIN)
    }

    /// The largest valid value (`f64::MAX` when unbounded above).
    pub fn hi(&self) -> f64 {
        self.max.unwrap_or(f64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key<u64> = Key {
        min: Some(4096),
        flag: Some("spool-max-bytes"),
        shown: "64 MiB",
        ..Key::new("stream.spool_max_bytes", 64 << 20, "Spool bound in bytes")
    };

    #[test]
    fn bounds_help_and_names_come_from_the_declaration() {
        assert!(K.contains(4096) && !K.contains(4095) && K.contains(u64::MAX));
        assert_eq!(K.range_text(), "at least 4096");
        assert_eq!(
            K.help(),
            "Spool bound in bytes [stream.spool_max_bytes, default 64 MiB]"
        );
        assert_eq!((K.name(), K.long()), ("spool_max_bytes", "spool-max-bytes"));
        let unset = Key::new("stream.record", "", "Also write every window to FILE");
        assert_eq!(
            unset.help(),
            "Also write every window to FILE [stream.record]"
        );
        let f = Key {
            min: Some(0.01),
            max: Some(3600.0),
            ..Key::new("collector.window_secs", 1.0, "Window length in seconds")
        };
        assert!(!f.contains(f64::NAN) && !f.contains(0.0) && f.contains(1.0));
        assert_eq!((f.lo(), f.hi(), f.env_var()), (0.01, 3600.0, ""));
        assert_eq!(f.range_text(), "in [0.01, 3600]");
    }
}
