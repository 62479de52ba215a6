//! `ibnetdiscover`'s output, the fabric as the subnet's own discovery tool
//! lists it, in either of its two forms:
//!
//! - the default topology form (`ibnetdiscover > FILE`, also ibsim's
//!   network file): node records, each a header line (`Switch 36
//!   "S-<guid>" # "<node description>" …`, `Ca 2 "H-<guid>" # "…"`)
//!   followed by one line per connected port (`[<port>](<port guid>)
//!   "<remote id>"[<remote port>] # … lid N 4xNDR`);
//! - the ports form (`ibnetdiscover --ports`): one line per port, `SW|CA
//!   <lid> <port> <guid> <width> <speed> - SW|CA <lid> <port> <guid> (
//!   '<description>' - '<remote description>' )`, or without the remote
//!   part for a port with no cable.
//!
//! The correlator reads it as the fabric topology (which switch each HCA
//! port and uplink lands on); the collector's switch-counter source reads
//! which switches to query and their ports' widths and speeds.
use std::collections::hash_map::{Entry, HashMap};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    Switch,
    Ca,
}

/// One connected port of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub port: u32,
    /// The remote node's id (`S-<guid>`, `H-<guid>`).
    pub remote: String,
    pub remote_port: u32,
    /// Width and speed as listed (`4xEDR`, `4xNDR`), empty when absent.
    pub speed: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub ty: NodeType,
    /// `S-<guid>` or `H-<guid>` (ibsim may use other ids).
    pub id: String,
    /// The node description, trimmed (empty when absent).
    pub desc: String,
    /// The LID of port 0 (a switch) when listed.
    pub lid: Option<u32>,
    pub ports: Vec<Port>,
}

impl Node {
    /// The node GUID as `0x…` for the ids that carry one.
    pub fn guid(&self) -> Option<String> {
        let hex = self.id.split_once('-')?.1;
        (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("0x{hex}"))
    }
}

/// The fabric: nodes by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fabric {
    pub nodes: BTreeMap<String, Node>,
    /// Cable ends listed twice with different far ends (the ports form;
    /// the first listing is kept).
    pub conflicts: usize,
}

impl Fabric {
    /// Switch names by node id: the node description where it is one
    /// switch's alone, else the node id (switches that keep the vendor's
    /// default description all share it).
    pub fn switch_names(&self) -> BTreeMap<&str, String> {
        let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
        let switches = || self.nodes.values().filter(|n| n.ty == NodeType::Switch);
        for n in switches() {
            *uses.entry(n.desc.as_str()).or_default() += 1;
        }
        switches()
            .map(|n| {
                let d = n.desc.as_str();
                let name = if d.is_empty() || uses.get(d).copied().unwrap_or(0) > 1 {
                    n.id.clone()
                } else {
                    d.to_string()
                };
                (n.id.as_str(), name)
            })
            .collect()
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct IbnetError {
    pub line: usize,
    pub why: &'static str,
    pub text: String,
}

impl core::fmt::Display for IbnetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "line {} (ibnetdiscover): {}: {:?}",
            self.line, self.why, self.text
        )
    }
}

impl std::error::Error for IbnetError {}

/// A node header of the default form: type, id, node description.
fn header(line: &str) -> Option<(NodeType, &str, &str)> {
    let mut words = line.split_whitespace();
    let ty = match words.next()? {
        "Switch" => NodeType::Switch,
        "Ca" | "Hca" => NodeType::Ca,
        _ => return None,
    };
    words.next()?.parse::<u32>().ok()?;
    let (id, rest) = quoted(line, '"')?;
    let desc = rest
        .split_once('#')
        .and_then(|(_, c)| quoted(c, '"'))
        .map_or("", |(d, _)| d);
    Some((ty, id, desc))
}

/// The first `q…q` of `s` and what follows it.
fn quoted(s: &str, q: char) -> Option<(&str, &str)> {
    let (_, after) = s.split_once(q)?;
    let (inner, rest) = after.split_once(q)?;
    Some((inner, rest))
}

/// `[N]` at the start of `s`: N and what follows.
fn bracketed(s: &str) -> Option<(u32, &str)> {
    let inner = s.strip_prefix('[')?;
    let (n, rest) = inner.split_once(']')?;
    Some((n.trim().parse().ok()?, rest))
}

/// A port line of the default form.
fn port_line(line: &str) -> Option<Port> {
    let (port, rest) = bracketed(line)?;
    let (remote, rest) = quoted(rest, '"')?;
    let (remote_port, rest) = bracketed(rest.trim_start())?;
    // The comment ends with the link's width and speed (`… lid 2 4xNDR`).
    let speed = rest
        .split_once('#')
        .and_then(|(_, c)| c.split_whitespace().last())
        .filter(|w| w.contains('x') && w.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or("")
        .to_string();
    Some(Port {
        port,
        remote: remote.to_string(),
        remote_port,
        speed,
    })
}

/// The header's `lid N` (a switch's port 0).
fn header_lid(line: &str) -> Option<u32> {
    let mut w = line.split_whitespace();
    while let Some(x) = w.next() {
        if x == "lid" {
            return w.next()?.parse().ok();
        }
    }
    None
}

/// A line of the ports form: the local end, width+speed, and the remote
/// end with both descriptions when cabled.
struct PortsLine<'a> {
    ty: NodeType,
    lid: u32,
    port: u32,
    guid: &'a str,
    speed: String,
    remote: Option<(NodeType, u32, &'a str)>,
    desc: &'a str,
    remote_desc: &'a str,
}

fn node_type(w: &str) -> Option<NodeType> {
    match w {
        "SW" => Some(NodeType::Switch),
        "CA" => Some(NodeType::Ca),
        _ => None,
    }
}

fn ports_line(line: &str) -> Option<PortsLine<'_>> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let ty = node_type(w.first()?)?;
    let lid = w.get(1)?.parse().ok()?;
    let port = w.get(2)?.parse().ok()?;
    let guid = w.get(3)?.strip_prefix("0x")?;
    let speed = format!("{}{}", w.get(4)?, w.get(5).copied().unwrap_or(""));
    if w.get(6) == Some(&"-") {
        let rty = node_type(w.get(7)?)?;
        let rport = w.get(9)?.parse().ok()?;
        let rguid = w.get(10)?.strip_prefix("0x")?;
        let (_, descs) = line.split_once('(')?;
        let (desc, rest) = quoted(descs, '\'')?;
        let (remote_desc, _) = quoted(rest, '\'')?;
        return Some(PortsLine {
            ty,
            lid,
            port,
            guid,
            speed,
            remote: Some((rty, rport, rguid)),
            desc,
            remote_desc,
        });
    }
    let desc = quoted(line, '\'').map_or("", |(d, _)| d);
    Some(PortsLine {
        ty,
        lid,
        port,
        guid,
        speed,
        remote: None,
        desc,
        remote_desc: "",
    })
}

fn id_of(ty: NodeType, guid: &str) -> String {
    match ty {
        NodeType::Switch => format!("S-{guid}"),
        NodeType::Ca => format!("H-{guid}"),
    }
}

/// Whether the text is ibnetdiscover output in either form.
pub fn looks_like(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|l| header(l).is_some() || ports_line(l).is_some())
}

/// Parses either form.
pub fn parse(text: &str) -> Result<Fabric, IbnetError> {
    let ports_form = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| ports_line(l).is_some());
    if ports_form {
        parse_ports(text)
    } else {
        parse_default(text)
    }
}

fn err(line: usize, why: &'static str, text: &str) -> IbnetError {
    IbnetError {
        line,
        why,
        text: text.to_string(),
    }
}

fn parse_default(text: &str) -> Result<Fabric, IbnetError> {
    let mut f = Fabric::default();
    let mut current: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((ty, id, desc)) = header(line) {
            if f.nodes.contains_key(id) {
                return Err(err(i + 1, "node listed twice", line));
            }
            let node = Node {
                ty,
                id: id.to_string(),
                desc: desc.trim().to_string(),
                lid: header_lid(line),
                ports: Vec::new(),
            };
            f.nodes.insert(id.to_string(), node);
            current = Some(id.to_string());
        } else if line.starts_with('[') {
            let p = port_line(line)
                .ok_or_else(|| err(i + 1, "expected `[port] \"remote id\"[remote port]`", line))?;
            let node = current
                .as_ref()
                .and_then(|id| f.nodes.get_mut(id))
                .ok_or_else(|| err(i + 1, "a port line before any node header", line))?;
            node.ports.push(p);
        }
    }
    Ok(f)
}

fn parse_ports(text: &str) -> Result<Fabric, IbnetError> {
    let mut f = Fabric::default();
    // (node id, port) → the port's index in its node's list: a search of
    // the list per line was quadratic in a switch's ports.
    let mut listed: HashMap<(String, u32), usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = ports_line(line).ok_or_else(|| {
            err(
                i + 1,
                "expected `SW|CA lid port guid width speed [- SW|CA lid port guid ( 'desc' - 'desc' )]`",
                line,
            )
        })?;
        let id = id_of(p.ty, p.guid);
        node(
            &mut f,
            p.ty,
            &id,
            p.desc,
            (p.ty == NodeType::Switch).then_some(p.lid),
        );
        let Some((rty, rport, rguid)) = p.remote else {
            continue;
        };
        // A line describes both ends of its cable; the other end's own
        // line (ibnetdiscover lists most cables from both) should agree,
        // and where it does not (a cable moved between two runs) the first
        // listing stands and the conflict is counted.
        let rid = id_of(rty, rguid);
        node(&mut f, rty, &rid, p.remote_desc, None);
        for (at, port, remote, remote_port) in
            [(&id, p.port, &rid, rport), (&rid, rport, &id, p.port)]
        {
            let ports = &mut f.nodes.get_mut(at.as_str()).expect("inserted above").ports;
            match listed.entry((at.clone(), port)) {
                Entry::Occupied(i) => match ports.get(*i.get()) {
                    Some(x) if x.remote == *remote && x.remote_port == remote_port => {}
                    _ => f.conflicts += 1,
                },
                Entry::Vacant(slot) => {
                    slot.insert(ports.len());
                    ports.push(Port {
                        port,
                        remote: remote.clone(),
                        remote_port,
                        speed: p.speed.clone(),
                    });
                }
            }
        }
    }
    Ok(f)
}

/// The node of `id`, created with its description on first sight.
fn node(f: &mut Fabric, ty: NodeType, id: &str, desc: &str, lid: Option<u32>) {
    let n = f.nodes.entry(id.to_string()).or_insert_with(|| Node {
        ty,
        id: id.to_string(),
        desc: desc.trim().to_string(),
        lid: None,
        ports: Vec::new(),
    });
    n.lid = n.lid.or(lid);
}

/// A link's signalled data rate in bytes per second from its width and
/// speed (`4xEDR` → 100 Gb/s), as sysfs `rate` reports an HCA port's.
pub fn rate_bytes_per_sec(speed: &str) -> Option<u64> {
    let (width, name) = speed.split_once('x')?;
    let lanes: u64 = width.parse().ok()?;
    // Per lane, Mb/s, as the IBTA rate sysfs reports (FDR 4x: 56 Gb/s).
    let per_lane_mbps: u64 = match name.trim() {
        "SDR" => 2_000,
        "DDR" => 4_000,
        "QDR" => 8_000,
        "FDR10" => 10_000,
        "FDR" => 14_000,
        "EDR" => 25_000,
        "HDR" => 50_000,
        "NDR" => 100_000,
        "XDR" => 200_000,
        _ => return None,
    };
    Some(lanes * per_lane_mbps * 1_000_000 / 8)
}
