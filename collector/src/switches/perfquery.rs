//! `perfquery`'s output for a switch's ports (`perfquery -l -x -G <guid>
//! <ports>`): one block per port, a `# Port extended counters: Lid <lid>
//! port <port> …` header (`# Port counters:` without `-x`) then
//! `Name:....value` lines. Fields become sysfs counter names
//! ([`vocab::ib::PERFQUERY_NAMES`]); `PortSelect`, `CounterSelect` and
//! fields without a sysfs twin are skipped.
use std::collections::BTreeMap;

/// One port's counters as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub lid: u32,
    pub port: u32,
    /// By sysfs file name.
    pub counters: BTreeMap<String, u64>,
}

/// The blocks of one run; `malformed` counts lines inside a block that fit
/// no `Name:....value` form.
pub fn parse(text: &str) -> (Vec<PortCounters>, u64) {
    let mut out: Vec<PortCounters> = Vec::new();
    let mut malformed = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            if let Some((lid, port)) = header(h) {
                out.push(PortCounters {
                    lid,
                    port,
                    counters: BTreeMap::new(),
                });
            }
            continue;
        }
        let Some(cur) = out.last_mut() else {
            continue;
        };
        let Some((name, value)) = line.split_once(':') else {
            malformed += 1;
            continue;
        };
        let value = value.trim_start_matches('.').trim();
        let Some(file) = vocab::ib::perfquery_file(name.trim()) else {
            continue;
        };
        match value.parse::<u64>() {
            Ok(v) => {
                cur.counters.insert(file.to_string(), v);
            }
            Err(_) => malformed += 1,
        }
    }
    (out, malformed)
}

/// `Port extended counters: Lid 1719 port 1 (CapMask: …)` → (1719, 1).
fn header(h: &str) -> Option<(u32, u32)> {
    let rest = h.trim();
    if !rest.starts_with("Port") || !rest.contains("counters") {
        return None;
    }
    let w: Vec<&str> = rest.split_whitespace().collect();
    let at = w.iter().position(|x| *x == "Lid")?;
    let lid = w.get(at + 1)?.parse().ok()?;
    let port = w.get(at + 2).filter(|x| **x == "port")?;
    let _ = port;
    let port = w.get(at + 3)?.trim_end_matches(',').parse().ok()?;
    Some((lid, port))
}
