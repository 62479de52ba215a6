//! The NATS JetStream transport's names, spelled once for the collector
//! (publisher) and the correlator (consumer): the stream, the subjects
//! with their shard key, and the message id JetStream de-duplicates by.

/// The JetStream stream windows are published to (created by whichever
/// side connects first, with the subjects `<prefix>.>`).
pub const DEFAULT_STREAM: &str = "FAULTLINE_WINDOWS";
/// Window subjects are `<prefix>.<shard>.<host token>` ([`subject`]).
pub const DEFAULT_PREFIX: &str = "faultline.windows";
/// Hash buckets of the host-name shard key (`h00` … `h3f`).
pub const DEFAULT_BUCKETS: u32 = 64;
/// How long the windows stream remembers message ids (a resend after a
/// reconnect within it is dropped by the stream, later ones by the
/// correlator's per-origin sequence).
pub const DUPLICATE_WINDOW_S: u64 = 120;
/// The windows stream is a work queue (a window leaves it when its shard's
/// consumer acknowledges it), so it holds only what no correlator has
/// taken yet, bounded by age and size; past either the oldest windows go.
/// A day, so a shard down for hours resumes where it stopped.
pub const MAX_AGE_S: u64 = 86_400;
/// The stream every shard publishes its incident updates to, under
/// `<INCIDENTS_PREFIX>.<consumer>`; the fleet view consumes all of it.
pub const INCIDENTS_STREAM: &str = "FAULTLINE_INCIDENTS";
pub const INCIDENTS_PREFIX: &str = "faultline.incidents";
/// How long the incidents stream keeps an update: a fleet view down this
/// long still gets every update when it comes back.
pub const INCIDENTS_MAX_AGE_S: u64 = 7 * 86_400;

/// The stream's size bound when created (per server keeping a replica);
/// -1: none but the server's own JetStream store limit (nats-server
/// refuses a stream whose bound exceeds the storage it can reserve).
pub const DEFAULT_MAX_BYTES: i64 = -1;

/// A window's subject: `<prefix>.<shard>.<host token>`, the publishing
/// host's name in the last token ([`host_token`]), so a NATS permission on
/// the subject binds a window to its publisher's credential.
pub fn subject(prefix: &str, shard: &str, host: &str) -> String {
    format!("{prefix}.{shard}.{}", host_token(host))
}

/// The subjects of one shard's windows, every host: `<prefix>.<shard>.*`.
pub fn shard_subjects(prefix: &str, shard: &str) -> String {
    format!("{prefix}.{shard}.*")
}

/// A host name as one subject token: every byte outside `[A-Za-z0-9_-]`
/// as `%XX` (upper-case hex), so `.`, `*`, `>`, white space and anything
/// a NATS configuration string would need quoted never appear in it, and
/// the escaping is reversible ([`host_of_token`]). `n001.example` is
/// `n001%2Eexample`; an empty name is `%` alone (no host escapes to it).
pub fn host_token(host: &str) -> String {
    if host.is_empty() {
        return "%".into();
    }
    let mut t = String::with_capacity(host.len());
    for b in host.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            t.push(char::from(b));
        } else {
            t.push_str(&format!("%{b:02X}"));
        }
    }
    t
}

/// The host name of a [`host_token`]; `None` when `t` is not one.
pub fn host_of_token(t: &str) -> Option<String> {
    if t == "%" {
        return Some(String::new());
    }
    let b = t.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = t.get(i + 1..i + 3)?;
                let v = u8::from_str_radix(hex, 16).ok()?;
                if v.is_ascii_alphanumeric() || v == b'-' || v == b'_' {
                    return None;
                }
                out.push(v);
                i += 3;
            }
            c if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' => {
                out.push(c);
                i += 1;
            }
            _ => return None,
        }
    }
    let host = String::from_utf8(out).ok()?;
    (host_token(&host) == t).then_some(host)
}

/// The shard and host token of a window's subject under `prefix`; `None`
/// for any other shape (the old `<prefix>.<shard>` included).
pub fn parse_subject<'a>(prefix: &str, subject: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix('.')?;
    let (shard, token) = rest.split_once('.')?;
    (!shard.is_empty() && !token.is_empty() && !token.contains('.')).then_some((shard, token))
}

/// The subjects a stream holds: everything under the prefix.
pub fn stream_subjects(prefix: &str) -> String {
    format!("{prefix}.>")
}

/// The shard key of a host without a configured one: `h` and its bucket in
/// hex (FNV-1a of the name, so every collector and correlator agrees
/// without coordination).
pub fn host_shard(host: &str, buckets: u32) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in host.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("h{:02x}", h % buckets.max(1))
}

/// Whether a shard key can be one NATS subject token (no `.`, `*`, `>`,
/// white space or control characters; not empty).
pub fn valid_shard(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| !(c == '.' || c == '*' || c == '>' || c.is_whitespace() || c.is_control()))
}

/// Whether `s` can name a cluster: 1 to 64 ASCII letters, digits, `-` or
/// `_` (a NATS subject token, a Prometheus label value, a URL query value).
pub fn valid_cluster(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The inbox prefix of a client authenticated by the nkey `public_key`
/// (`_INBOX_<key>`): the generated NATS permissions let each user
/// subscribe only under its own, so no client reads another's replies
/// (key-value values and consumer info travel on inboxes).
pub fn inbox_prefix(public_key: &str) -> String {
    format!("_INBOX_{public_key}")
}

/// The message id JetStream de-duplicates resends by: one per window of one
/// collector run (`<host>/<instance>/<seq>`).
pub fn msg_id(host: &str, instance: &str, seq: u64) -> String {
    format!("{host}/{instance}/{seq}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(host_shard("n001", 64), host_shard("n001", 64));
        let used: std::collections::BTreeSet<String> = (0..1000)
            .map(|i| host_shard(&format!("n{i:04}"), 64))
            .collect();
        assert_eq!(used.len(), 64);
        assert_eq!(
            subject(DEFAULT_PREFIX, "leaf07", "n001.example"),
            "faultline.windows.leaf07.n001%2Eexample"
        );
        assert!(valid_shard("leaf07") && !valid_shard("a.b") && !valid_shard(""));
    }

    #[test]
    fn host_tokens_are_one_token_and_reversible() {
        for h in [
            "n001",
            "a.b",
            "x*y",
            "x>y",
            "s p",
            "tab\t",
            "50%",
            "é",
            "",
            "%",
            "UPPER_low-1",
        ] {
            let t = host_token(h);
            assert!(valid_shard(&t), "{h:?} -> {t:?}");
            assert!(t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "%-_".contains(c)));
            assert_eq!(host_of_token(&t).as_deref(), Some(h), "{t:?}");
        }
        assert_ne!(host_token("a.b"), host_token("a%2Eb"));
        // Not tokens: a lower-case escape, an escaped safe byte, a stray '.'.
        for t in ["a%2eb", "%41", "a.b", "a%2", ""] {
            assert_eq!(host_of_token(t), None, "{t:?}");
        }
        let s = subject("p.q", "h01", "n1.x");
        assert_eq!(parse_subject("p.q", &s), Some(("h01", "n1%2Ex")));
        assert_eq!(parse_subject("p.q", "p.q.h01"), None);
        assert_eq!(parse_subject("p.q", "p.q.h01.a.b"), None);
        assert_eq!(parse_subject("p.q", "p.qq.h01.a"), None);
    }
}
