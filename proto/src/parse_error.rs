//! A parse error of a file from outside (a config file), told without the
//! file's text: its line and column and the parser's message, with every
//! value the message quotes replaced by `…`. A `--config` pointed at a file
//! the operator cannot read (`/proc/self/environ`, a key) must not print
//! it: toml's own `Display` quotes the offending line. Both binaries use it.

/// The 1-based line and column (in characters) of byte `offset` in `text`.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

/// Longest key a message may name as it is (`unknown field \`…\``).
const KEY_MAX: usize = 64;

/// `message` with the values it quotes hidden: a `"…"` string (serde's
/// `invalid type: string "…"`) always, a `` `…` `` name unless it is a short
/// key of letters, digits, `_`, `-` and `.` (field names and the expected
/// ones stay, so `unknown field \`libary\`` still says which). One line.
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
                out.push_str("\"…\"");
            }
            '`' => {
                let name: String = chars.by_ref().take_while(|&c| c != '`').collect();
                let key_like = name.len() <= KEY_MAX
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
                // The parser's expected tokens (`=`, `]`, `,`) are not from the file.
                let token = name.len() <= 3 && name.chars().all(|c| c.is_ascii_punctuation());
                out.push('`');
                out.push_str(if key_like || token { &name } else { "…" });
                out.push('`');
            }
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_in_characters() {
        let t = "a = 1\nbé = x\n";
        assert_eq!(position(t, 0), (1, 1));
        assert_eq!(position(t, 6), (2, 1));
        // After the two-byte 'é': column 3.
        assert_eq!(position(t, 9), (2, 3));
        assert_eq!(position(t, 8), (2, 2));
        assert_eq!(position(t, 999), (3, 1));
    }

    #[test]
    fn quoted_values_are_hidden_and_keys_kept() {
        assert_eq!(
            redact("invalid type: string \"hunter2 \\\" x\", expected f64"),
            "invalid type: string \"…\", expected f64"
        );
        assert_eq!(
            redact("unknown field `libary`, expected `library` or `enabled`"),
            "unknown field `libary`, expected `library` or `enabled`"
        );
        assert_eq!(
            redact("unknown variant `AKIA/secret+x=`, expected `a`"),
            "unknown variant `…`, expected `a`"
        );
        assert_eq!(redact("expected `=`\nfound\x07"), "expected `=` found?");
    }
}
