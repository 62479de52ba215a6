//! Switch port counters from the fabric: the switches of an
//! `ibnetdiscover` file, each polled with `perfquery` every `interval_s`
//! for its cabled ports' PortCounters(Extended), sent as `IbPort` rows with
//! `switch` set. The HCA side of a link is read from sysfs on its host; a
//! switch-to-switch uplink has no host, and is seen only here. The
//! correlator judges these ports as it judges HCA ports and groups uplink
//! findings under their spine.
//!
//! Polls run in a task of their own (one `perfquery` at a time, each
//! bounded by `timeout_s`); a window takes the latest complete poll once.
pub mod perfquery;
pub mod section;
#[cfg(agent)]
pub mod source;

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use proto::v1::IbPort;
pub use section::SwitchesSection;
#[cfg(agent)]
pub use source::SwitchesSource;

/// IBA port state ACTIVE and physical state LinkUp: a port `perfquery`
/// reads counters from and `ibnetdiscover` lists as cabled.
const ACTIVE: u32 = 4;
const LINK_UP: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum SwitchesError {
    #[error("switch counters inactive: reading the fabric file {path}: {source}; save it with `ibnetdiscover > {path}` or set switches.topology")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("switch counters inactive: {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: vocab::ibnet::IbnetError,
    },
    #[error("switch counters inactive: {path} lists no switch with a cabled port")]
    Empty { path: String },
}

/// One switch to poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    pub name: String,
    /// `0x…`, as `perfquery -G` takes it.
    pub guid: String,
    /// Cabled ports and their signalled rates (bytes/s, 0 when unknown).
    pub ports: Vec<(u32, u64)>,
}

/// The switches of a fabric file, by name, with their cabled ports.
pub fn switches(text: &str) -> Result<Vec<Switch>, vocab::ibnet::IbnetError> {
    let fabric = vocab::ibnet::parse(text)?;
    let names = fabric.switch_names();
    let mut out: Vec<Switch> = fabric
        .nodes
        .values()
        .filter_map(|n| {
            let name = names.get(n.id.as_str())?;
            let mut ports: Vec<(u32, u64)> = n
                .ports
                .iter()
                .map(|p| {
                    let rate = vocab::ibnet::rate_bytes_per_sec(&p.speed).unwrap_or(0);
                    (p.port, rate)
                })
                .collect();
            ports.sort_unstable();
            ports.dedup_by_key(|p| p.0);
            let guid = n.guid()?;
            (!ports.is_empty()).then(|| Switch {
                name: name.clone(),
                guid,
                ports,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Reads and parses the configured fabric file.
pub fn load(path: &Path) -> Result<Vec<Switch>, SwitchesError> {
    let p = path.display().to_string();
    let text = crate::bounded_read::read_to_string(path, 64 << 20).map_err(|source| {
        SwitchesError::Read {
            path: p.clone(),
            source,
        }
    })?;
    let s = switches(&text).map_err(|source| SwitchesError::Parse {
        path: p.clone(),
        source,
    })?;
    if s.is_empty() {
        return Err(SwitchesError::Empty { path: p });
    }
    Ok(s)
}

/// One poll of every switch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Poll {
    pub rows: Vec<IbPort>,
    /// Switches whose `perfquery` ran and exited 0.
    pub ok: u64,
    /// Switches whose `perfquery` failed: (name, why).
    pub failed: Vec<(String, String)>,
    /// Ports past `max_ports`.
    pub dropped: u64,
    pub malformed: u64,
}

/// The rows of one switch's `perfquery` output (ports it did not ask for
/// are ignored).
pub fn rows(sw: &Switch, text: &str) -> (Vec<IbPort>, u64) {
    let (ports, malformed) = perfquery::parse(text);
    let rows = ports
        .into_iter()
        .filter_map(|p| {
            let rate = sw.ports.iter().find(|(n, _)| *n == p.port)?.1;
            Some(IbPort {
                hca: String::new(),
                port: p.port,
                state: ACTIVE,
                phys_state: LINK_UP,
                rate_bytes_per_sec: rate,
                counters: p.counters.into_iter().collect(),
                hw_counters: Default::default(),
                link_layer: "InfiniBand".into(),
                switch: sw.name.clone(),
            })
        })
        .collect();
    (rows, malformed)
}

/// Runs `perfquery` for one switch's ports within the timeout.
async fn query(section: &SwitchesSection, sw: &Switch) -> Result<String, String> {
    let ports: Vec<String> = sw.ports.iter().map(|(p, _)| p.to_string()).collect();
    let mut cmd = tokio::process::Command::new(&section.perfquery);
    cmd.args(["-l", "-x", "-G", &sw.guid, &ports.join(",")])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let timeout = Duration::from_secs_f64(section.timeout_s);
    match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => Err(format!("timed out after {} s", section.timeout_s)),
        Ok(Err(e)) => Err(format!("{}: {e}", section.perfquery.display())),
        Ok(Ok(out)) if !out.status.success() => Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Ok(out)) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
    }
}

/// One poll of every switch, in name order, within `max_ports`.
pub async fn poll(section: &SwitchesSection, switches: &[Switch]) -> Poll {
    let mut p = Poll::default();
    let mut budget = section.max_ports;
    for sw in switches {
        let take = sw.ports.len().min(budget);
        p.dropped += (sw.ports.len() - take) as u64;
        if take == 0 {
            continue;
        }
        budget -= take;
        let sw = Switch {
            ports: sw.ports[..take].to_vec(),
            ..sw.clone()
        };
        match query(section, &sw).await {
            Ok(text) => {
                p.ok += 1;
                let (rows, malformed) = rows(&sw, &text);
                p.rows.extend(rows);
                p.malformed += malformed;
            }
            Err(why) => p.failed.push((sw.name.clone(), why)),
        }
    }
    p
}

/// The latest poll not yet taken by a window.
#[derive(Clone, Debug, Default)]
pub struct Latest(Arc<Mutex<Option<Poll>>>);

impl Latest {
    pub fn take(&self) -> Option<Poll> {
        self.0.lock().ok()?.take()
    }

    fn put(&self, p: Poll) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some(p);
        }
    }
}

/// Starts the polling task; its polls land in the returned slot.
pub fn start(section: SwitchesSection, switches: Vec<Switch>) -> Latest {
    let latest = Latest::default();
    let slot = latest.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(section.interval_s));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let p = poll(&section, &switches).await;
            slot.put(p);
        }
    });
    latest
}

#[cfg(test)]
mod tests;
