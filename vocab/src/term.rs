//! Terminal conventions the binaries share: colour codes only on a
//! terminal, and never when `NO_COLOR` is set to a non-empty value
//! (<https://no-color.org>).
use std::ffi::OsStr;

/// Whether to write ANSI colour codes to a stream that is (or is not) a
/// terminal, under the process's `NO_COLOR`.
pub fn colour(is_terminal: bool) -> bool {
    colour_with(is_terminal, std::env::var_os("NO_COLOR").as_deref())
}

/// [`colour`] with `NO_COLOR`'s value given.
pub fn colour_with(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_set_and_non_empty_turns_colour_off() {
        assert!(colour_with(true, None));
        assert!(colour_with(true, Some(OsStr::new(""))), "empty means unset");
        assert!(!colour_with(true, Some(OsStr::new("1"))));
        assert!(!colour_with(true, Some(OsStr::new("false"))), "any value");
        assert!(!colour_with(false, None), "never on a pipe");
    }
}
