//! Names taken from windows (hosts, HCAs, devices, jobs) pasted into the
//! shell commands of runbooks: [`quote`] makes each one a single literal
//! shell word, so a name such as `mlx5_0;$(reboot)` cannot run anything
//! when an operator copies the command.
use std::borrow::Cow;

/// Characters no POSIX shell treats specially in a word.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '-' | '_' | '.' | ':' | '/' | '@' | '%' | '+' | '=' | ',')
}

/// `s` as one shell word: unchanged when it is made of plain characters
/// only (every valid hostname, HCA, block device and GPU name is), else in
/// single quotes with each `'` written as `'\''`.
pub fn quote(s: &str) -> Cow<'_, str> {
    if !s.is_empty() && s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("'{}'", s.replace('\'', r"'\''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_literal_word() {
        for plain in ["gpu-001", "mlx5_0", "nvme0n1", "10.0.0.7", "job/17", "dm-3"] {
            assert_eq!(quote(plain), plain);
        }
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("mlx5_0;$(reboot)"), "'mlx5_0;$(reboot)'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        // The shell reads each back as exactly the name, running nothing.
        for name in ["x;$(touch /nonexistent/p)", "`id`", "it's", "a\nb", "$HOME"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", quote(name)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), name);
        }
    }
}
