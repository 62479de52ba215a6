//! The fleet run's processes: `nats-server -js` (with its monitoring port,
//! for JetStream's storage), one `faultline-correlator serve --nats` per
//! shard, and the `faultline-correlator fleet` view with its history and
//! web UI. Each one's stderr goes to a log file in the run's directory.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result};

use crate::wait;

/// A child process the run measures: its pid and where it listens.
pub struct Proc {
    pub child: tests::KillOnDrop,
    /// `host:port` of its `/metrics` (shards), web UI (fleet) or
    /// monitoring (nats-server).
    pub addr: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

fn log(dir: &Path, name: &str) -> Result<std::fs::File> {
    let p = dir.join(format!("{name}.log"));
    std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))
}

/// `nats-server -js` on loopback with its store in `dir/js` and its
/// monitoring endpoint; returns it and the client URL.
pub fn nats_server(dir: &Path) -> Result<(Proc, String)> {
    let (port, mon) = (wait::free_port()?, wait::free_port()?);
    let mut child = tests::KillOnDrop(
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["-m", &mon.to_string(), "-sd"])
            .arg(dir.join("js"))
            .stdout(Stdio::null())
            .stderr(log(dir, "nats-server")?)
            .spawn()
            .context("starting nats-server (Debian's nats-server; scripts/setup.sh installs it)")?,
    );
    wait::port(&mut child.0, port, "nats-server")?;
    wait::port(&mut child.0, mon, "nats-server's monitoring")?;
    Ok((
        Proc {
            child,
            addr: format!("127.0.0.1:{mon}"),
        },
        format!("nats://127.0.0.1:{port}"),
    ))
}

/// Where the shards find the stream, the fabric and their settings.
pub struct ShardSetup<'a> {
    pub bin: &'a Path,
    pub url: &'a str,
    pub stream: &'a str,
    pub prefix: &'a str,
    pub topology: &'a Path,
    pub config: &'a Path,
    pub dir: &'a Path,
}

/// `serve --nats` for shard `key` (durable consumer `<stream>-<key>`).
pub fn shard(s: &ShardSetup<'_>, key: &str) -> Result<Proc> {
    let metrics = format!("127.0.0.1:{}", wait::free_port()?);
    let name = format!("shard-{key}");
    let mut child = tests::KillOnDrop(
        Command::new(s.bin)
            .args(["serve", "--insecure", "--listen"])
            .arg(format!("127.0.0.1:{}", wait::free_port()?))
            .args(["--metrics-addr", &metrics, "--nats", s.url])
            .args(["--nats-stream", s.stream, "--nats-subject", s.prefix])
            .args(["--nats-shards", key])
            .args(["--nats-consumer", &format!("{}-{key}", s.stream)])
            .arg("--topology")
            .arg(s.topology)
            .arg("--config")
            .arg(s.config)
            .stdout(Stdio::null())
            .stderr(log(s.dir, &name)?)
            .spawn()
            .with_context(|| format!("starting {}", s.bin.display()))?,
    );
    let port: u16 = metrics.rsplit(':').next().unwrap_or("0").parse()?;
    wait::port(&mut child.0, port, "a shard correlator")?;
    Ok(Proc {
        child,
        addr: metrics,
    })
}

/// The fleet view: every shard's incidents into one list, history and web
/// UI; returns it (its `addr` the web UI) and its history file.
pub fn fleet_view(bin: &Path, url: &str, dir: &Path) -> Result<(Proc, PathBuf)> {
    let web = format!("127.0.0.1:{}", wait::free_port()?);
    let db = dir.join("fleet-history.db");
    let mut child = tests::KillOnDrop(
        Command::new(bin)
            .args(["fleet", "--nats", url, "--web", &web, "--history"])
            .arg(&db)
            .stdout(Stdio::null())
            .stderr(log(dir, "fleet-view")?)
            .spawn()
            .with_context(|| format!("starting {} fleet", bin.display()))?,
    );
    let port: u16 = web.rsplit(':').next().unwrap_or("0").parse()?;
    wait::port(&mut child.0, port, "the fleet view")?;
    Ok((Proc { child, addr: web }, db))
}

/// Everything downstream of the collectors: the server, the shards (with
/// the simulated fabric's topology and no clock checks: simulated time is
/// not this machine's) and the fleet view.
pub struct Pipeline {
    pub nats: Proc,
    pub url: String,
    pub shards: Vec<Proc>,
    pub view: Proc,
    pub history: PathBuf,
}

/// Starts the [`Pipeline`] of `shards` shards (keys `p00`…) for a fleet of
/// `nodes`, its files in `dir`.
pub fn pipeline(
    bin: &Path,
    dir: &Path,
    nodes: usize,
    shards: usize,
    stream: &str,
    prefix: &str,
) -> Result<Pipeline> {
    let (nats, url) = nats_server(dir)?;
    let topology = dir.join("fabric.topo");
    std::fs::write(&topology, sim::cluster::topology::ibnetdiscover(nodes))?;
    let config = dir.join("correlator.toml");
    std::fs::write(
        &config,
        "[detect.limits]\nmax_future_s = 0\nmax_past_s = 0\n",
    )?;
    let setup = ShardSetup {
        bin,
        url: &url,
        stream,
        prefix,
        topology: &topology,
        config: &config,
        dir,
    };
    let procs = (0..shards)
        .map(|k| shard(&setup, &super::plan::shard_key(k)))
        .collect::<Result<Vec<_>>>()?;
    let (view, history) = fleet_view(bin, &url, dir)?;
    Ok(Pipeline {
        nats,
        url,
        shards: procs,
        view,
        history,
    })
}

/// The body of `GET path` at `addr` with its status (HTTP/1.0: never
/// chunked).
pub fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path} at {addr}: not an HTTP response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}
