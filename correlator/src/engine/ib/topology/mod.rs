//! The fabric topology (`serve --topology FILE`), in either of two forms:
//!
//! - faultline's own: one link per line, `LINK ENDPOINT [ENDPOINT]`, `#`
//!   comments. An endpoint is an HCA port `<host>/<hca>/<port>` or a switch
//!   port `<switch>[<port>]`. Both ends of a link report under the link's
//!   name; an HCA port cabled to a switch port sits behind that switch (its
//!   leaf); a link between two switch ports is an uplink.
//! - `ibnetdiscover`'s output in its default or `--ports` form
//!   ([`vocab::ibnet`], [`ibnet`]): every CA port cabled to a switch sits
//!   behind it. A CA is named by its node description `<host> <hca>`
//!   (rdma-ndd's default `%h %d`); CAs described otherwise are skipped and
//!   counted. Uplinks are named `<switch>[<port>]~<switch>[<port>]` (the
//!   two ends in name order).
//!
//! Switch ports report as `switch:<switch>/<port>` (the collector's
//! `[switches]` source). A switch port cabled to an HCA port reports under
//! the HCA port's entity (or its link's name); the two ends of an uplink
//! under the uplink's name. The extent ([`super::extent`]) groups
//! co-occurring findings by their **parent**: an HCA port's leaf, an
//! uplink's upper switch (the end with no HCA behind it: the spine).
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

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
    #[error("{0}")]
    Ibnet(#[from] vocab::ibnet::IbnetError),
}

/// Links, and which switch each HCA port and uplink groups under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Port entity → the entity it reports under: a link's name (both
    /// ends), or for a switch port cabled to an HCA port that HCA port.
    links: HashMap<String, String>,
    /// Port entity or uplink name → the switch it groups under.
    parent: HashMap<String, Arc<str>>,
    /// Switch names, each held once (`parent`'s values).
    switches: HashSet<Arc<str>>,
    /// Switch → what groups under it (sorted once every link is known,
    /// [`Topology::finish`]): the HCA ports behind a leaf, the uplinks of
    /// a spine.
    members: BTreeMap<String, Vec<String>>,
    /// Switch port entity → the HCA port it is cabled to.
    faces: HashMap<String, String>,
    /// Uplinks: (name, one end's switch and entity, the other's).
    uplinks: Vec<(String, String, String, String, String)>,
    /// The uplinks' names, for [`Topology::is_uplink`].
    uplink_names: HashSet<String>,
    /// CAs left out (no `<host> <hca>` node description).
    skipped: usize,
}

impl Topology {
    /// The entity a port reports under, if not itself.
    pub fn link_of(&self, port: &str) -> Option<&String> {
        self.links.get(port)
    }

    /// What a reported port stands for in its parent's member list: the
    /// HCA port a switch port faces, an uplink end's uplink, else itself.
    pub fn canonical<'a>(&'a self, port: &'a str) -> &'a str {
        if let Some(h) = self.faces.get(port) {
            return h;
        }
        match self.links.get(port) {
            Some(l) if self.parent.contains_key(l) => l,
            _ => port,
        }
    }

    /// The switch a port (or uplink) groups under, if known.
    pub fn parent_of(&self, port: &str) -> Option<&str> {
        self.parent
            .get(port)
            .or_else(|| self.parent.get(self.canonical(port)))
            .map(|s| &**s)
    }

    /// Whether a name is an uplink's (a spine's member).
    pub fn is_uplink(&self, name: &str) -> bool {
        self.uplink_names.contains(name)
    }

    /// What groups under a switch.
    pub fn members(&self, switch: &str) -> &[String] {
        self.members.get(switch).map_or(&[], Vec::as_slice)
    }

    /// Named links, switches with HCA ports behind them, uplinks, skipped
    /// CAs (for the start-up log line).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let uplinks = &self.uplink_names;
        let links: HashSet<&String> = self
            .links
            .values()
            .filter(|l| !uplinks.contains(*l) && !self.parent.contains_key(*l))
            .collect();
        let leaves = self
            .members
            .iter()
            .filter(|(_, m)| m.iter().any(|p| !uplinks.contains(p)))
            .count();
        (links.len(), leaves, uplinks.len(), self.skipped)
    }

    fn cable(&mut self, port: &str, switch: &str, switch_port: u32) {
        let name = self.switch(switch);
        self.parent.insert(port.to_string(), name.clone());
        self.member(switch, port);
        let sp = vocab::entity::switch_port(switch, switch_port);
        let to = self
            .links
            .get(port)
            .cloned()
            .unwrap_or_else(|| port.to_string());
        self.parent.insert(sp.clone(), name);
        self.faces.insert(sp.clone(), port.to_string());
        self.links.insert(sp, to);
    }

    /// The switch's name, shared by every port behind it.
    fn switch(&mut self, name: &str) -> Arc<str> {
        if let Some(s) = self.switches.get(name) {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(name);
        self.switches.insert(s.clone());
        s
    }

    /// Adds a member to a switch's list; [`Topology::finish`] sorts the
    /// lists and drops repeats (a sorted insert per member was quadratic
    /// in a switch's ports: issue 47).
    fn member(&mut self, switch: &str, m: &str) {
        match self.members.get_mut(switch) {
            Some(v) => v.push(m.to_string()),
            None => {
                self.members.insert(switch.to_string(), vec![m.to_string()]);
            }
        }
    }

    fn uplink(&mut self, name: &str, (a, ap): (&str, u32), (b, bp): (&str, u32)) {
        let (ea, eb) = (
            vocab::entity::switch_port(a, ap),
            vocab::entity::switch_port(b, bp),
        );
        self.links.insert(ea.clone(), name.to_string());
        self.links.insert(eb.clone(), name.to_string());
        self.uplink_names.insert(name.to_string());
        self.uplinks
            .push((name.to_string(), a.to_string(), ea, b.to_string(), eb));
    }

    /// Once every link is known: each uplink groups under its end with no
    /// HCA port behind it (a spine above a leaf); between two switches
    /// alike (both leaves, or a spine and a core) it groups under none.
    /// Then the member lists are sorted, each member once.
    fn finish(&mut self) {
        let leaves: BTreeSet<String> = self.members.keys().cloned().collect();
        let uplinks = std::mem::take(&mut self.uplinks);
        for (name, a, _, b, _) in &uplinks {
            let up = match (leaves.contains(a), leaves.contains(b)) {
                (true, false) => b,
                (false, true) => a,
                _ => continue,
            };
            let upper = self.switch(up);
            self.parent.insert(name.clone(), upper);
            self.member(up, name);
        }
        self.uplinks = uplinks;
        for v in self.members.values_mut() {
            v.sort_unstable();
            v.dedup();
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
    // Switch ports alone on their line (in no other map).
    let mut lone: HashMap<String, String> = HashMap::new();
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
            // Every endpoint of an earlier line is a key of `links` (an
            // HCA port as itself, a switch port as its entity) or `lone`.
            let prev = match parsed {
                End::Hca(p) => t.links.get(p).cloned(),
                End::Switch(s, sp) => {
                    let e = vocab::entity::switch_port(s, sp);
                    t.links.get(&e).or_else(|| lone.get(&e)).cloned()
                }
            };
            let prev = prev.or_else(|| (ends.first() == Some(&parsed)).then(|| link.to_string()));
            if let Some(prev) = prev {
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
            [End::Hca(p), End::Switch(s, sp)] | [End::Switch(s, sp), End::Hca(p)] => {
                t.cable(p, s, *sp);
            }
            [End::Switch(a, ap), End::Switch(b, bp)] => t.uplink(link, (a, *ap), (b, *bp)),
            [End::Switch(s, sp)] => {
                lone.insert(vocab::entity::switch_port(s, *sp), link.to_string());
            }
            _ => {}
        }
    }
    t.finish();
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
        assert_eq!(t.parent_of("n01/mlx5_0/1"), Some("leaf01"));
        assert_eq!(t.parent_of("n04/mlx5_0/1"), None);
        assert_eq!(t.members("leaf01"), ["n01/mlx5_0/1", "n02/mlx5_0/1"]);
        assert_eq!(t.link_of("n05/mlx5_0/1").map(String::as_str), Some("b2b"));
        // The leaf's side of l2 reports under l2 and groups with n02's port.
        assert_eq!(t.link_of("switch:leaf01/2").map(String::as_str), Some("l2"));
        assert_eq!(t.parent_of("switch:leaf01/2"), Some("leaf01"));
        assert_eq!(t.canonical("switch:leaf01/2"), "n02/mlx5_0/1");
        // Both ends of the uplink report under it; it groups under the
        // spine (no HCA behind it).
        assert_eq!(
            t.link_of("switch:spine01/1").map(String::as_str),
            Some("up1")
        );
        assert_eq!(t.canonical("switch:leaf01/33"), "up1");
        assert_eq!(t.parent_of("switch:leaf01/33"), Some("spine01"));
        assert_eq!(t.members("spine01"), ["up1"]);
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
        for (text, want) in [
            (
                "x n1/m/1 leaf[1]\ny n1/m/1 leaf[2]\n",
                "line 2: endpoint n1/m/1 already belongs to link x",
            ),
            (
                "x leaf[1]\ny n2/m/1 leaf[1]\n",
                "line 2: endpoint leaf[1] already belongs to link x",
            ),
            (
                "x a[1] b[1]\ny b[1]\n",
                "line 2: endpoint b[1] already belongs to link x",
            ),
            (
                "x n1/m/1 n1/m/1\n",
                "line 1: endpoint n1/m/1 already belongs to link x",
            ),
        ] {
            assert_eq!(
                parse_topology(text).unwrap_err().to_string(),
                want,
                "{text}"
            );
        }
    }
}
