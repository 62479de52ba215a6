//! Which InfiniBand devices are read: node_exporter's
//! `--collector.infiniband.device-include` / `--collector.infiniband.device-exclude`
//! (a regular expression matched anywhere in the device name, e.g.
//! `mlx5_[01]` also matches `mlx5_10`; anchor it with `^...$`). The two are
//! mutually exclusive, as node_exporter's are.
use regex::Regex;

/// Include or exclude devices by name; the default reads every device.
#[derive(Clone, Debug, Default)]
pub struct DeviceFilter {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

/// A device filter that cannot be built; [`FilterError::key`] names the
/// configuration key (the flags set the same keys).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("ib.device_include and ib.device_exclude are mutually exclusive (as node_exporter's --collector.infiniband.device-include/-exclude); set one")]
    BothSet,
    #[error("{pattern:?} is not a regular expression: {reason}")]
    NotARegex {
        key: &'static str,
        pattern: String,
        reason: String,
    },
}

impl FilterError {
    /// The configuration key whose value is wrong.
    pub fn key(&self) -> &'static str {
        match self {
            Self::BothSet => "ib.device_include",
            Self::NotARegex { key, .. } => key,
        }
    }
}

impl DeviceFilter {
    /// The filter of `[ib] device_include` / `device_exclude`; an invalid
    /// pattern, or both set, is an error naming the key.
    pub fn new(include: Option<&str>, exclude: Option<&str>) -> Result<Self, FilterError> {
        if include.is_some() && exclude.is_some() {
            return Err(FilterError::BothSet);
        }
        let compile = |key: &'static str, p: Option<&str>| {
            p.map(|p| {
                regex::RegexBuilder::new(p)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| FilterError::NotARegex {
                        key,
                        pattern: p.to_string(),
                        reason: e.to_string().replace('\n', " "),
                    })
            })
            .transpose()
        };
        Ok(Self {
            include: compile("ib.device_include", include)?,
            exclude: compile("ib.device_exclude", exclude)?,
        })
    }

    /// Whether device `name` is read.
    pub fn accepts(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|r| r.is_match(name))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_exclude_like_node_exporter() {
        let all = DeviceFilter::default();
        assert!(all.accepts("mlx5_0") && all.accepts("rxe0"));

        let inc = DeviceFilter::new(Some("^mlx5_[01]$"), None).unwrap();
        assert_eq!(
            ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_2", "rxe0"].map(|d| inc.accepts(d)),
            [true, true, false, false, false]
        );
        // Unanchored, as Go's regexp.MatchString.
        let inc = DeviceFilter::new(Some("mlx5_1"), None).unwrap();
        assert!(inc.accepts("mlx5_1") && inc.accepts("mlx5_10") && !inc.accepts("mlx5_0"));

        let exc = DeviceFilter::new(None, Some("^rxe")).unwrap();
        assert_eq!(
            ["mlx5_0", "rxe0", "xrxe"].map(|d| exc.accepts(d)),
            [true, false, true]
        );

        let both = DeviceFilter::new(Some("a"), Some("b")).unwrap_err();
        assert!(both.to_string().contains("mutually exclusive"), "{both}");
        assert_eq!(both.key(), "ib.device_include");
        let bad = DeviceFilter::new(Some("mlx5_[0"), None).unwrap_err();
        assert_eq!(bad.key(), "ib.device_include");
        let bad = bad.to_string();
        assert!(
            bad.starts_with("\"mlx5_[0\" is not a regular expression") && !bad.contains('\n'),
            "{bad}"
        );
    }
}
