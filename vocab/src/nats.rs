//! The NATS JetStream transport's names, spelled once for the collector
//! (publisher) and the correlator (consumer): the stream, the subjects
//! with their shard key, and the message id JetStream de-duplicates by.

/// The JetStream stream windows are published to (created by whichever
/// side connects first, with the subjects `<prefix>.>`).
pub const DEFAULT_STREAM: &str = "FAULTLINE_WINDOWS";
/// Window subjects are `<prefix>.<shard>`.
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

/// A window's subject: `<prefix>.<shard>`.
pub fn subject(prefix: &str, shard: &str) -> String {
    format!("{prefix}.{shard}")
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
            subject(DEFAULT_PREFIX, "leaf07"),
            "faultline.windows.leaf07"
        );
        assert!(valid_shard("leaf07") && !valid_shard("a.b") && !valid_shard(""));
    }
}
