//! The fabric topology (`serve --topology FILE`), in either of two forms:
//!
//! - faultline's own: one link per line, `LINK ENDPOINT [ENDPOINT]`, `#`
//!   comments. An endpoint is an HCA port `<host>/<hca>/<port>` or a switch
//!   port `<switch>[<port>]`. Both HCA ends of a link report under the
//!   link's name; an HCA port cabled to a switch port sits behind that
//!   switch (its leaf); a link between two switch ports is an uplink.
//! - `ibnetdiscover`'s output, as saved by `ibnetdiscover > FILE`
//!   ([`ibnet`]): every CA port cabled to a switch sits behind it. A CA is
//!   named by its node description `<host> <hca>` (rdma-ndd's default
//!   `%h %d`); CAs described otherwise are skipped and counted.
//!
//! The switches are what [`super::extent`] groups co-occurring port
//! findings by.
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod ibnet;

/// A line of the topology file that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("line {line}: empty")]
    Empty { line: usize },
    #[error("line {line}: expected `LINK ENDPOINT [ENDPOINT]`, got {text:?}")]
    Shape { line: usize, text: String },
    #[error(
        "line {line}: endpoint {endpoint:?} is neither <host>/<hca>/<port> nor <switch>[<port>]"
    )]
    Endpoint { line: usize, endpoint: String },
    #[error("line {line}: endpoint {endpoint} already belongs to link {link}")]
    Taken {
        line: usize,
        endpoint: String,
        link: String,
    },
    #[error("line {line} (ibnetdiscover): {why}: {text:?}")]
    Ibnet {
        line: usize,
        why: &'static str,
        text: String,
    },
}

/// Links, and which switch each HCA port is cabled to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Port entity → link name (both ends of a host-to-host link).
    links: HashMap<String, String>,
    /// Port entity → the switch its cable lands on.
    leaf: HashMap<String, String>,
    /// Switch → the HCA ports behind it (sorted).
    members: BTreeMap<String, Vec<String>>,
    /// Switch-to-switch links.
    uplinks: usize,
    /// CAs left out (no `<host> <hca>` node description).
    skipped: usize,
}

impl Topology {
    /// The link name a port reports under, if the topology names one.
    pub fn link_of(&self, port: &str) -> Option<&String> {
        self.links.get(port)
    }

    /// The switch a port is cabled to, if known.
    pub fn leaf_of(&self, port: &str) -> Option<&str> {
        self.leaf.get(port).map(String::as_str)
    }

    /// The HCA ports behind a switch.
    pub fn members(&self, switch: &str) -> &[String] {
        self.members.get(switch).map_or(&[], Vec::as_slice)
    }

    /// Named links, switches with HCA ports behind them, uplinks, skipped
    /// CAs (for the start-up log line).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let links: BTreeSet<&String> = self.links.values().collect();
        (links.len(), self.members.len(), self.uplinks, self.skipped)
    }

    fn cable(&mut self, port: &str, switch: &str) {
        self.leaf.insert(port.to_string(), switch.to_string());
        let m = self.members.entry(switch.to_string()).or_default();
        if let Err(at) = m.binary_search_by(|p| p.as_str().cmp(port)) {
            m.insert(at, port.to_string());
        }
    }
}

/// Parses a topology file in either form (ibnetdiscover's is recognised
/// by its node header lines).
pub fn parse_topology(text: &str) -> Result<Topology, TopologyError> {
    if ibnet::looks_like(text) {
        return ibnet::parse(text);
    }
    parse_links(text)
}

/// One end of a link in faultline's own form.
#[derive(Debug, PartialEq, Eq)]
enum End<'a> {
    Hca(&'a str),
    Switch(&'a str, u32),
}

fn end(e: &str) -> Option<End<'_>> {
    if let Some(open) = e.find('[') {
        let (name, rest) = e.split_at(open);
        let port = rest.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?;
        return (!name.is_empty() && !name.contains('/')).then_some(End::Switch(name, port));
    }
    let parts: Vec<&str> = e.split('/').collect();
    (parts.len() == 3 && parts.iter().all(|p| !p.is_empty())).then_some(End::Hca(e))
}

fn parse_links(text: &str) -> Result<Topology, TopologyError> {
    let mut t = Topology::default();
    let mut taken: HashMap<String, String> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let link = parts.next().ok_or(TopologyError::Empty { line: i + 1 })?;
        let raw: Vec<&str> = parts.collect();
        if raw.is_empty() || raw.len() > 2 {
            return Err(TopologyError::Shape {
                line: i + 1,
                text: line.to_string(),
            });
        }
        let mut ends = Vec::new();
        for e in raw {
            let parsed = end(e).ok_or_else(|| TopologyError::Endpoint {
                line: i + 1,
                endpoint: e.to_string(),
            })?;
            if let Some(prev) = taken.insert(e.to_string(), link.to_string()) {
                return Err(TopologyError::Taken {
                    line: i + 1,
                    endpoint: e.to_string(),
                    link: prev,
                });
            }
            ends.push(parsed);
        }
        for e in &ends {
            if let End::Hca(p) = e {
                t.links.insert((*p).to_string(), link.to_string());
            }
        }
        match ends.as_slice() {
            [End::Hca(p), End::Switch(s, _)] | [End::Switch(s, _), End::Hca(p)] => t.cable(p, s),
            [End::Switch(..), End::Switch(..)] => t.uplinks += 1,
            _ => {}
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_form_names_links_and_puts_ports_behind_their_switch() {
        let t = parse_topology(
            "# link endpoints\n\
             l1 n01/mlx5_0/1 leaf01[1]\n\
             l2 leaf01[2] n02/mlx5_0/1\n\
             l3 n03/mlx5_0/1 leaf02[1]\n\
             up1 leaf01[33] spine01[1]\n\
             b2b n04/mlx5_0/1 n05/mlx5_0/1\n",
        )
        .expect("parses");
        assert_eq!(t.leaf_of("n01/mlx5_0/1"), Some("leaf01"));
        assert_eq!(t.leaf_of("n04/mlx5_0/1"), None);
        assert_eq!(t.members("leaf01"), ["n01/mlx5_0/1", "n02/mlx5_0/1"]);
        assert_eq!(t.link_of("n05/mlx5_0/1").map(String::as_str), Some("b2b"));
        assert_eq!(t.counts(), (4, 2, 1, 0));
    }

    #[test]
    fn bad_endpoints_and_reuse_are_named() {
        let e = parse_topology("x n1/mlx5_0/1 leaf[a]\n").unwrap_err();
        assert!(
            matches!(e, TopologyError::Endpoint { line: 1, ref endpoint } if endpoint == "leaf[a]"),
            "{e}"
        );
        let e = parse_topology("x n1/mlx5_0/1 leaf[1]\ny n2/mlx5_0/1 leaf[1]\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: endpoint leaf[1] already belongs to link x"
        );
    }
}
