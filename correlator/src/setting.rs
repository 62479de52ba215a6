//! A `[detect]` setting outside its valid range, and the range checks
//! every section's `validate` shares (engine thresholds and
//! `[detect.limits]` alike).

/// A setting outside its valid range.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("detect.{key} = {value}: {why}")]
pub struct InvalidSetting {
    pub key: &'static str,
    pub value: String,
    pub why: std::borrow::Cow<'static, str>,
}

impl InvalidSetting {
    /// `key` is `value`, which is wrong because `why`.
    pub fn new(key: &'static str, value: impl ToString, why: &'static str) -> Self {
        Self {
            key,
            value: value.to_string(),
            why: why.into(),
        }
    }
}

/// A probability strictly between 0 and 1.
pub fn prob(key: &'static str, v: f64) -> Result<(), InvalidSetting> {
    if v > 0.0 && v < 1.0 {
        Ok(())
    } else {
        Err(InvalidSetting::new(
            key,
            v,
            "must be a probability strictly between 0 and 1",
        ))
    }
}

/// A finite positive number.
pub fn pos(key: &'static str, v: f64) -> Result<(), InvalidSetting> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(InvalidSetting::new(key, v, "must be a positive number"))
    }
}

/// A count of at least 1.
pub fn at_least_one(key: &'static str, v: usize) -> Result<(), InvalidSetting> {
    if v == 0 {
        Err(InvalidSetting::new(key, 0, "must be at least 1"))
    } else {
        Ok(())
    }
}

/// `v` within a declared key's bounds ([`within`]'s words).
pub fn in_bounds(key: &proto::config_key::Key<f64>, v: f64) -> Result<(), InvalidSetting> {
    within(key.path, v, key.lo(), key.hi())
}

/// A finite number in `[lo, hi]` (NaN and infinities refused); the error
/// names the range.
pub fn within(key: &'static str, v: f64, lo: f64, hi: f64) -> Result<(), InvalidSetting> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        return Ok(());
    }
    Err(InvalidSetting {
        key,
        value: v.to_string(),
        why: format!("must be a number in [{lo}, {hi}]").into(),
    })
}
