//! `ibnetdiscover`'s topology output: node records, each a header line
//! (`Switch 36 "S-<guid>" # "<node description>" …` or
//! `Ca 2 "H-<guid>" # "<node description>"`) followed by one line per
//! connected port (`[<port>](<port guid>) "<remote id>"[<remote port>] # …`);
//! `vendid=`-style lines and comments in between. The same grammar is
//! ibsim's network file (`Hca` headers, no descriptions).
use std::collections::{BTreeMap, HashMap};

use super::{Topology, TopologyError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeType {
    Switch,
    Ca,
}

/// A node header: type, id, node description (empty when absent).
fn header(line: &str) -> Option<(NodeType, &str, &str)> {
    let mut words = line.split_whitespace();
    let ty = match words.next()? {
        "Switch" => NodeType::Switch,
        "Ca" | "Hca" => NodeType::Ca,
        _ => return None,
    };
    words.next()?.parse::<u32>().ok()?;
    let (id, rest) = quoted(line)?;
    let desc = rest
        .split_once('#')
        .and_then(|(_, c)| quoted(c))
        .map_or("", |(d, _)| d);
    Some((ty, id, desc))
}

/// The first `"…"` of `s` and what follows it.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let (_, after) = s.split_once('"')?;
    let (inner, rest) = after.split_once('"')?;
    Some((inner, rest))
}

/// `[N]` at the start of `s`: N and what follows.
fn bracketed(s: &str) -> Option<(u32, &str)> {
    let inner = s.strip_prefix('[')?;
    let (n, rest) = inner.split_once(']')?;
    Some((n.trim().parse().ok()?, rest))
}

/// A port line: local port, remote id, remote port.
fn port_line(line: &str) -> Option<(u32, &str, u32)> {
    let (local, rest) = bracketed(line)?;
    let (remote, rest) = quoted(rest)?;
    let (rport, _) = bracketed(rest.trim_start())?;
    Some((local, remote, rport))
}

/// Whether the text has ibnetdiscover node headers.
pub(super) fn looks_like(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .any(|l| !l.starts_with('#') && header(l).is_some())
}

/// One record as read.
struct Node<'a> {
    ty: NodeType,
    desc: &'a str,
    ports: Vec<(u32, &'a str, u32)>,
}

pub(super) fn parse(text: &str) -> Result<Topology, TopologyError> {
    let mut nodes: BTreeMap<&str, Node<'_>> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((ty, id, desc)) = header(line) {
            if nodes.contains_key(id) {
                return Err(TopologyError::Ibnet {
                    line: i + 1,
                    why: "node listed twice",
                    text: line.to_string(),
                });
            }
            let ports = Vec::new();
            nodes.insert(id, Node { ty, desc, ports });
            current = Some(id);
        } else if line.starts_with('[') {
            let p = port_line(line).ok_or_else(|| TopologyError::Ibnet {
                line: i + 1,
                why: "expected `[port] \"remote id\"[remote port]`",
                text: line.to_string(),
            })?;
            let node =
                current
                    .and_then(|id| nodes.get_mut(id))
                    .ok_or_else(|| TopologyError::Ibnet {
                        line: i + 1,
                        why: "a port line before any node header",
                        text: line.to_string(),
                    })?;
            node.ports.push(p);
        }
    }
    Ok(build(&nodes))
}

/// Switch names: the node description where it is one switch's alone,
/// else the node id.
fn switch_names<'a>(nodes: &BTreeMap<&'a str, Node<'a>>) -> HashMap<&'a str, String> {
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for n in nodes.values().filter(|n| n.ty == NodeType::Switch) {
        *uses.entry(n.desc.trim()).or_default() += 1;
    }
    nodes
        .iter()
        .filter(|(_, n)| n.ty == NodeType::Switch)
        .map(|(id, n)| {
            let d = n.desc.trim();
            let name = if d.is_empty() || uses.get(d).copied().unwrap_or(0) > 1 {
                (*id).to_string()
            } else {
                d.to_string()
            };
            (*id, name)
        })
        .collect()
}

fn build(nodes: &BTreeMap<&str, Node<'_>>) -> Topology {
    let names = switch_names(nodes);
    let mut t = Topology::default();
    for (id, n) in nodes {
        match n.ty {
            NodeType::Switch => {
                // Each uplink is listed from both ends: counted once.
                t.uplinks += n
                    .ports
                    .iter()
                    .filter(|(_, r, _)| names.contains_key(r) && *id < *r)
                    .count();
            }
            NodeType::Ca => {
                let words: Vec<&str> = n.desc.split_whitespace().collect();
                let [host, hca] = words.as_slice() else {
                    t.skipped += 1;
                    continue;
                };
                for (port, remote, _) in &n.ports {
                    if let Some(sw) = names.get(remote) {
                        t.cable(&vocab::entity::port(host, hca, *port), sw);
                    }
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::super::parse_topology;

    /// Written for this test in ibnetdiscover's layout (two leaves, one
    /// spine, CAs named by rdma-ndd's `%h %d`, one SHARP aggregation node
    /// described otherwise).
    const FABRIC: &str = r#"#
# Topology file: generated on Sat Dec  5 10:00:00 2026
#
vendid=0x2c9
devid=0xd2f0
sysimgguid=0xb83fd20300a1b2c0
switchguid=0xb83fd20300a1b2c0(b83fd20300a1b2c0)
Switch	41 "S-b83fd20300a1b2c0"		# "spine01" enhanced port 0 lid 1 lmc 0
[1]	"S-b83fd20300a1b3c0"[33]		# "leaf01" lid 2 4xNDR
[2]	"S-b83fd20300a1b4c0"[33]		# "leaf02" lid 3 4xNDR

Switch	41 "S-b83fd20300a1b3c0"		# "leaf01" enhanced port 0 lid 2 lmc 0
[1]	"H-b83fd20300c0ffe0"[1](b83fd20300c0ffe0) 		# "gpu-a01 mlx5_0" lid 10 4xNDR
[2]	"H-b83fd20300c0ffe2"[1](b83fd20300c0ffe2) 		# "gpu-a01 mlx5_1" lid 11 4xNDR
[3]	"H-b83fd20300c0fff0"[1](b83fd20300c0fff0) 		# "gpu-a02 mlx5_0" lid 12 4xNDR
[33]	"S-b83fd20300a1b2c0"[1]		# "spine01" lid 1 4xNDR

Switch	41 "S-b83fd20300a1b4c0"		# "leaf02" enhanced port 0 lid 3 lmc 0
[1]	"H-b83fd20300c10000"[1](b83fd20300c10000) 		# "gpu-b01 mlx5_0" lid 20 4xNDR
[5]	"H-b83fd20300c1aaaa"[1](b83fd20300c1aaaa) 		# "Mellanox Technologies Aggregation Node" lid 21 4xNDR
[33]	"S-b83fd20300a1b2c0"[2]		# "spine01" lid 1 4xNDR

vendid=0x2c9
devid=0x1021
sysimgguid=0xb83fd20300c0ffe6
caguid=0xb83fd20300c0ffe0
Ca	1 "H-b83fd20300c0ffe0"		# "gpu-a01 mlx5_0"
[1](b83fd20300c0ffe0) 	"S-b83fd20300a1b3c0"[1]		# lid 10 lmc 0 "leaf01" lid 2 4xNDR

Ca	1 "H-b83fd20300c0ffe2"		# "gpu-a01 mlx5_1"
[1](b83fd20300c0ffe2) 	"S-b83fd20300a1b3c0"[2]		# lid 11 lmc 0 "leaf01" lid 2 4xNDR

Ca	1 "H-b83fd20300c0fff0"		# "gpu-a02 mlx5_0"
[1](b83fd20300c0fff0) 	"S-b83fd20300a1b3c0"[3]		# lid 12 lmc 0 "leaf01" lid 2 4xNDR

Ca	1 "H-b83fd20300c10000"		# "gpu-b01 mlx5_0"
[1](b83fd20300c10000) 	"S-b83fd20300a1b4c0"[1]		# lid 20 lmc 0 "leaf02" lid 3 4xNDR

Ca	1 "H-b83fd20300c1aaaa"		# "Mellanox Technologies Aggregation Node"
[1](b83fd20300c1aaaa) 	"S-b83fd20300a1b4c0"[5]		# lid 21 lmc 0 "leaf02" lid 3 4xNDR
"#;

    #[test]
    fn ports_sit_behind_the_switch_their_cable_lands_on() {
        let t = parse_topology(FABRIC).expect("parses");
        assert_eq!(
            t.members("leaf01"),
            ["gpu-a01/mlx5_0/1", "gpu-a01/mlx5_1/1", "gpu-a02/mlx5_0/1"]
        );
        assert_eq!(t.members("leaf02"), ["gpu-b01/mlx5_0/1"]);
        assert_eq!(t.leaf_of("gpu-a02/mlx5_0/1"), Some("leaf01"));
        assert!(t.members("spine01").is_empty());
        // 0 named links, 2 leaves with CAs, 2 uplinks, the aggregation node
        // skipped.
        assert_eq!(t.counts(), (0, 2, 2, 1));
    }

    #[test]
    fn switches_sharing_a_description_are_named_by_id() {
        let text =
            "Switch 36 \"S-01\" # \"MF0;switch\" base port 0\n[1] \"H-0a\"[1] # \"n1 mlx5_0\"\n\n\
                    Switch 36 \"S-02\" # \"MF0;switch\" base port 0\n[1] \"H-0b\"[1]\n\n\
                    Ca 1 \"H-0a\" # \"n1 mlx5_0\"\n[1](0a) \"S-01\"[1]\n\n\
                    Ca 1 \"H-0b\" # \"n2 mlx5_0\"\n[1](0b) \"S-02\"[1]\n";
        let t = parse_topology(text).expect("parses");
        assert_eq!(t.leaf_of("n1/mlx5_0/1"), Some("S-01"));
        assert_eq!(t.leaf_of("n2/mlx5_0/1"), Some("S-02"));
    }

    #[test]
    fn a_garbled_port_line_is_named_with_its_line() {
        let e = parse_topology("Ca 1 \"H-0a\" # \"n1 mlx5_0\"\n[1](0a) S-01 1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2 (ibnetdiscover): expected `[port] \"remote id\"[remote port]`: \"[1](0a) S-01 1\""
        );
    }
}
