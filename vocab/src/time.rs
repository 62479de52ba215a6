//! Time on the wire: Unix milliseconds.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for times before it).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The wall-clock time `ms` milliseconds after the epoch (the epoch for negative values).
pub fn from_unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Now, in Unix milliseconds.
pub fn now_unix_ms() -> i64 {
    unix_ms(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_clamps_before_the_epoch() {
        assert_eq!(unix_ms(from_unix_ms(1_700_000_000_123)), 1_700_000_000_123);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(from_unix_ms(-5), UNIX_EPOCH);
    }
}
