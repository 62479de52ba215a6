//! `nats-auth`: NATS accounts, users and permissions for the scale-out
//! path (docs/scale-out.md, trust). nats-server 2.9 has no auth callout,
//! so every credential is a static nkey user in one account, FAULTLINE
//! (JetStream on), each allowed only what its role needs:
//!
//! - the collector of host H publishes its windows under its own host
//!   token only (`<prefix>.*.<token(H)>`) and may look up the windows
//!   stream; it reads nothing but its own replies;
//! - the correlator of shard S (durable consumer `shard-S`) creates the
//!   stream and the buckets, consumes through its own durable consumer,
//!   writes only its own keys in the lease, open-incident, baseline and
//!   summary buckets and publishes incident updates under its own subject;
//! - the fleet view reads the incidents stream through its own consumer
//!   and writes nothing.
//!
//! No user is anonymous (`no_auth_user` unset), and every user subscribes
//! only under its own inbox prefix ([`vocab::nats::inbox_prefix`]).
//! Re-running keeps every seed already written: adding a host rotates
//! nobody; deleting a seed file and re-running rotates that one.
use std::{
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use super::nats_perms::{self, Names};

/// Largest `--hosts` file read.
const MAX_HOSTS_BYTES: u64 = 16 << 20;
/// Hosts in one `--hosts` file at most.
const MAX_HOSTS: usize = 100_000;

// `nats-auth`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct NatsAuthArgs {
    /// The collector hosts: one host name a line (the name each collector
    /// reports), `#` comments.
    #[arg(long, value_name = "FILE")]
    hosts: PathBuf,
    /// The shard keys (comma-separated): one correlator user each, for the
    /// durable consumer `<consumer-prefix><shard>`.
    #[arg(
        long,
        value_name = "SHARD,...",
        value_delimiter = ',',
        conflicts_with = "buckets"
    )]
    shards: Vec<String>,
    /// Or the collectors' `nats_buckets`: shards h00 … of the host-name hash.
    #[arg(long, value_name = "N")]
    buckets: Option<u32>,
    /// The correlators' durable consumer names: this and the shard key.
    #[arg(long, value_name = "PREFIX", default_value = "shard-")]
    consumer_prefix: String,
    /// The windows stream.
    #[arg(long, value_name = "NAME", default_value = vocab::nats::DEFAULT_STREAM)]
    stream: String,
    /// The windows' subject prefix.
    #[arg(long, value_name = "PREFIX", default_value = vocab::nats::DEFAULT_PREFIX)]
    prefix: String,
    /// The fleet view's durable consumer.
    #[arg(long, value_name = "NAME", default_value = "faultline-fleet")]
    fleet_consumer: String,
    /// Directory written: auth.conf, collectors/<host>.nk,
    /// correlator-<shard>.nk, fleet.nk (seeds mode 0600).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

impl NatsAuthArgs {
    fn names(&self) -> Result<Names> {
        let shards: Vec<String> = match (self.buckets, self.shards.is_empty()) {
            (Some(n), _) if (1..=4096).contains(&n) => {
                (0..n).map(|i| format!("h{i:02x}")).collect()
            }
            (Some(n), _) => anyhow::bail!("--buckets {n}: must be in [1, 4096]"),
            (None, false) => self.shards.clone(),
            (None, true) => anyhow::bail!("name the shards: --shards or --buckets"),
        };
        for s in &shards {
            let consumer = format!("{}{s}", self.consumer_prefix);
            if !vocab::nats::valid_shard(s) || !nats_perms::plain(&consumer) {
                anyhow::bail!(
                    "shard {s:?} (consumer {consumer:?}): letters, digits, '-' or '_' only"
                );
            }
        }
        for (what, v) in [
            ("--stream", &self.stream),
            ("--fleet-consumer", &self.fleet_consumer),
        ] {
            if !nats_perms::plain(v) {
                anyhow::bail!("{what} {v:?}: letters, digits, '-' or '_' only");
            }
        }
        if self.prefix.split('.').any(|t| !nats_perms::plain(t)) {
            anyhow::bail!(
                "--prefix {:?}: tokens of letters, digits, '-' or '_' joined by '.'",
                self.prefix
            );
        }
        Ok(Names {
            stream: self.stream.clone(),
            prefix: self.prefix.clone(),
            shards: shards
                .into_iter()
                .map(|s| (format!("{}{s}", self.consumer_prefix), s))
                .collect(),
            fleet: self.fleet_consumer.clone(),
        })
    }
}

/// The hosts of a `--hosts` file: one a line, `#` comments, blank lines
/// skipped, each once.
pub fn parse_hosts(text: &str) -> Result<Vec<String>> {
    let mut hosts = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let h = line.split('#').next().unwrap_or_default().trim();
        if h.is_empty() {
            continue;
        }
        if h.len() > 253
            || h.starts_with('.')
            || h.chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '/')
        {
            anyhow::bail!("line {}: {h:?} is not a host name", i + 1);
        }
        hosts.insert(h.to_string());
        if hosts.len() > MAX_HOSTS {
            anyhow::bail!("more than {MAX_HOSTS} hosts");
        }
    }
    Ok(hosts.into_iter().collect())
}

/// Writes the credentials; returns the files written or kept.
pub fn run(a: &NatsAuthArgs) -> Result<Vec<PathBuf>> {
    let names = a.names()?;
    let text = proto::bounded_read::read_to_string(&a.hosts, MAX_HOSTS_BYTES)
        .with_context(|| format!("reading --hosts {}", a.hosts.display()))?;
    let hosts = parse_hosts(&text).with_context(|| format!("--hosts {}", a.hosts.display()))?;
    let collectors = a.out.join("collectors");
    std::fs::create_dir_all(&collectors)
        .with_context(|| format!("creating {}", collectors.display()))?;
    let mut files = Vec::new();
    let mut users = Vec::new();
    for h in &hosts {
        // Never '/' nor a leading '.' (parse_hosts): inside DIR.
        let path = collectors.join(format!("{h}.nk"));
        let key = seed_at(&path)?;
        users.push(nats_perms::collector(&names, h, &key));
        files.push(path);
    }
    for (consumer, shard) in &names.shards {
        let path = a.out.join(format!("correlator-{shard}.nk"));
        let key = seed_at(&path)?;
        users.push(nats_perms::correlator(&names, consumer, &key));
        files.push(path);
    }
    let path = a.out.join("fleet.nk");
    let key = seed_at(&path)?;
    users.push(nats_perms::fleet(&names, &key));
    files.push(path);
    let conf = a.out.join("auth.conf");
    write_new(&conf, nats_perms::render(&users).as_bytes(), 0o644, true)?;
    files.push(conf);
    Ok(files)
}

/// The public key of the seed at `path`, written first when absent (a new
/// user key, mode 0600).
fn seed_at(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let seed = text.trim();
            let kp = nkeys::KeyPair::from_seed(seed).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not an nkey seed ({e}); remove it to issue a new one",
                    path.display()
                )
            })?;
            Ok(kp.public_key())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let kp = nkeys::KeyPair::new_user();
            let seed = kp
                .seed()
                .map_err(|e| anyhow::anyhow!("new nkey seed: {e}"))?;
            write_new(path, format!("{seed}\n").as_bytes(), 0o600, false)?;
            Ok(kp.public_key())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes `bytes` to `path` with `mode` (through a temporary file renamed
/// over it when `replace`, else refusing an existing file).
fn write_new(path: &Path, bytes: &[u8], mode: u32, replace: bool) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let target = if replace { &tmp } else { path };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(target)
        .with_context(|| format!("creating {}", target.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", target.display()))?;
    if replace {
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_files_take_comments_and_refuse_paths() {
        let h = parse_hosts("# fleet\nn001\n n002 # rack 2\n\nn001\nn.x\n").expect("hosts");
        assert_eq!(h, ["n.x", "n001", "n002"]);
        assert!(parse_hosts("../etc/passwd\n").is_err());
        assert!(parse_hosts("..\n").is_err());
        assert!(parse_hosts("a b\n").is_err());
    }

    #[test]
    fn rerunning_keeps_seeds_and_adding_a_host_rotates_nobody() {
        let dir = std::env::temp_dir().join(format!("nats-auth-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, "n001\n").expect("hosts");
        let a = NatsAuthArgs {
            hosts: hosts.clone(),
            shards: vec![],
            buckets: Some(2),
            consumer_prefix: "shard-".into(),
            stream: vocab::nats::DEFAULT_STREAM.into(),
            prefix: vocab::nats::DEFAULT_PREFIX.into(),
            fleet_consumer: "faultline-fleet".into(),
            out: dir.join("out"),
        };
        run(&a).expect("first run");
        let read = |p: &str| std::fs::read_to_string(dir.join("out").join(p)).expect(p);
        let (n1, c0, fleet) = (
            read("collectors/n001.nk"),
            read("correlator-h00.nk"),
            read("fleet.nk"),
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.join("out/collectors/n001.nk"))
            .expect("seed")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&hosts, "n001\nn002.example\n").expect("hosts");
        run(&a).expect("second run");
        assert_eq!(read("collectors/n001.nk"), n1);
        assert_eq!(read("correlator-h00.nk"), c0);
        assert_eq!(read("fleet.nk"), fleet);
        let n2 = read("collectors/n002.example.nk");
        assert_ne!(n2, n1);
        let conf = read("auth.conf");
        let key = |seed: &str| {
            nkeys::KeyPair::from_seed(seed.trim())
                .expect("seed")
                .public_key()
        };
        for s in [&n1, &n2, &c0, &fleet] {
            assert!(conf.contains(&key(s)), "{conf}");
        }
        assert!(
            conf.contains("\"faultline.windows.*.n002%2Eexample\""),
            "{conf}"
        );
        assert!(!conf.contains("no_auth_user"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
