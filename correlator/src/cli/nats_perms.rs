//! The NATS permissions of each role (`nats-auth`), rendered as a
//! nats-server configuration fragment (`include auth.conf`). Every subject
//! a role's client uses is listed; the JetStream API subjects are those of
//! async-nats 0.52 against nats-server 2.9 and 2.10.

/// The names the permissions are cut to.
pub struct Names {
    pub stream: String,
    pub prefix: String,
    /// (durable consumer, shard key) per correlator shard.
    pub shards: Vec<(String, String)>,
    /// The fleet view's durable consumer.
    pub fleet: String,
}

/// One nkey user.
pub struct User {
    pub comment: String,
    pub nkey: String,
    pub publish: Vec<String>,
    pub publish_deny: Vec<String>,
    pub subscribe: Vec<String>,
}

/// The shards' key-value buckets (`correlator/src/ingest/shard.rs`,
/// `summaries.rs`).
const LEASES: &str = "faultline_leases";
const OPEN: &str = "faultline_open";
const BASELINES: &str = "faultline_baselines";
const SUMMARIES: &str = "faultline_summaries";
const BUCKETS: [&str; 4] = [LEASES, OPEN, BASELINES, SUMMARIES];

/// What no role but a correlator may publish, and nobody deletes.
const NEVER: [&str; 6] = [
    "$JS.API.STREAM.DELETE.>",
    "$JS.API.STREAM.PURGE.>",
    "$JS.API.STREAM.MSG.DELETE.>",
    "$JS.API.STREAM.UPDATE.>",
    "$JS.API.CONSUMER.DELETE.>",
    "$JS.API.ACCOUNT.PURGE.>",
];

/// Whether `s` is letters, digits, `-` or `_` only (never needs quoting,
/// never a wildcard).
pub fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn inbox(key: &str) -> Vec<String> {
    vec![format!("{}.>", vocab::nats::inbox_prefix(key))]
}

/// A durable consumer's API: look it up, create it (any filter), pull
/// from it, acknowledge its messages.
fn durable(stream: &str, name: &str) -> Vec<String> {
    vec![
        format!("$JS.API.CONSUMER.INFO.{stream}.{name}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.{name}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.{name}.>"),
        format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{name}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"),
        format!("$JS.ACK.{stream}.{name}.>"),
    ]
}

/// The collector of `host`: its windows under its own host token, the
/// stream's info.
pub fn collector(n: &Names, host: &str, key: &str) -> User {
    User {
        comment: format!("collector {host}"),
        nkey: key.into(),
        publish: vec![
            format!("{}.*.{}", n.prefix, vocab::nats::host_token(host)),
            format!("$JS.API.STREAM.INFO.{}", n.stream),
        ],
        publish_deny: NEVER.iter().map(|s| s.to_string()).collect(),
        subscribe: inbox(key),
    }
}

/// The correlator of the shard consumed by `consumer`.
pub fn correlator(n: &Names, consumer: &str, key: &str) -> User {
    let incidents = vocab::nats::INCIDENTS_STREAM;
    let mut publish = vec!["$JS.API.INFO".to_string()];
    for s in [n.stream.as_str(), incidents] {
        publish.push(format!("$JS.API.STREAM.INFO.{s}"));
        publish.push(format!("$JS.API.STREAM.CREATE.{s}"));
    }
    publish.extend(durable(&n.stream, consumer));
    for b in BUCKETS {
        let s = format!("KV_{b}");
        publish.push(format!("$JS.API.STREAM.INFO.{s}"));
        publish.push(format!("$JS.API.STREAM.CREATE.{s}"));
        publish.push(format!("$JS.API.STREAM.MSG.GET.{s}"));
        publish.push(format!("$JS.API.DIRECT.GET.{s}"));
        publish.push(format!("$JS.API.DIRECT.GET.{s}.>"));
        // Key listings and watches: ephemeral ordered consumers.
        publish.push(format!("$JS.API.CONSUMER.CREATE.{s}"));
        publish.push(format!("$JS.API.CONSUMER.CREATE.{s}.>"));
        publish.push(format!("$JS.API.CONSUMER.INFO.{s}.*"));
        publish.push(format!("$JS.FC.{s}.>"));
    }
    // Its own keys only: its lease, its open incidents, its hosts'
    // baselines, its summary.
    publish.push(format!("$KV.{LEASES}.{consumer}"));
    publish.push(format!("$KV.{OPEN}.{consumer}.>"));
    publish.push(format!("$KV.{BASELINES}.{consumer}.>"));
    publish.push(format!("$KV.{SUMMARIES}.{}.{consumer}", n.stream));
    publish.push(format!("{}.{consumer}", vocab::nats::INCIDENTS_PREFIX));
    User {
        comment: format!("correlator of {consumer}"),
        nkey: key.into(),
        publish,
        publish_deny: NEVER.iter().map(|s| s.to_string()).collect(),
        subscribe: inbox(key),
    }
}

/// The fleet view: reads the incidents stream, writes nothing.
pub fn fleet(n: &Names, key: &str) -> User {
    let s = vocab::nats::INCIDENTS_STREAM;
    let mut publish = vec![
        "$JS.API.INFO".to_string(),
        format!("$JS.API.STREAM.INFO.{s}"),
        format!("$JS.API.STREAM.CREATE.{s}"),
        // Its rebuild's ephemeral consumer (no acknowledgements).
        format!("$JS.API.CONSUMER.CREATE.{s}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{s}.*"),
    ];
    publish.extend(durable(s, &n.fleet));
    let mut deny: Vec<String> = NEVER.iter().map(|s| s.to_string()).collect();
    deny.push("$KV.>".into());
    deny.push(format!("{}.>", vocab::nats::INCIDENTS_PREFIX));
    User {
        comment: "fleet view".into(),
        nkey: key.into(),
        publish,
        publish_deny: deny,
        subscribe: inbox(key),
    }
}

fn list(v: &[String]) -> String {
    // Subjects hold no '"' or '\' (plain names, host tokens).
    let q: Vec<String> = v.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", q.join(", "))
}

/// The configuration fragment: the FAULTLINE account (JetStream) with
/// `users`, the system account, nobody anonymous.
pub fn render(users: &[User]) -> String {
    let mut out = String::from(
        "# Written by `faultline-correlator nats-auth` (docs/scale-out.md); include it\n\
         # from nats.conf. Re-run the command to add hosts; edit nothing here.\n\
         # No default user: a client without one of these nkeys is refused.\n\
         accounts {\n  FAULTLINE {\n    jetstream: enabled\n    users: [\n",
    );
    for u in users {
        out.push_str(&format!(
            "      # {}\n      {{nkey: \"{}\", permissions: {{\n        publish: {{allow: {}, deny: {}}}\n        subscribe: {{allow: {}}}\n      }}}}\n",
            u.comment.replace('\n', " "),
            u.nkey,
            list(&u.publish),
            list(&u.publish_deny),
            list(&u.subscribe),
        ));
    }
    out.push_str("    ]\n  }\n  SYS: {}\n}\nsystem_account: SYS\n");
    out
}
