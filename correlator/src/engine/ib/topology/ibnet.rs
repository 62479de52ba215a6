//! A topology from `ibnetdiscover`'s output (either form, parsed by
//! [`vocab::ibnet`]): CA ports behind the switch their cable lands on, and
//! the uplinks between switches.
use vocab::ibnet::{Fabric, NodeType};

use super::{Topology, TopologyError};

/// Whether the text is ibnetdiscover output.
pub(super) fn looks_like(text: &str) -> bool {
    vocab::ibnet::looks_like(text)
}

pub(super) fn parse(text: &str) -> Result<Topology, TopologyError> {
    Ok(build(&vocab::ibnet::parse(text)?))
}

fn build(f: &Fabric) -> Topology {
    let names = f.switch_names();
    let mut t = Topology::default();
    for (id, n) in &f.nodes {
        match n.ty {
            NodeType::Switch => {
                // Each uplink is listed from both ends: taken once.
                for p in &n.ports {
                    let Some(remote) = names.get(p.remote.as_str()) else {
                        continue;
                    };
                    if id.as_str() < p.remote.as_str() {
                        let here = (names[id.as_str()].as_str(), p.port);
                        let there = (remote.as_str(), p.remote_port);
                        let (a, b) = if here <= there {
                            (here, there)
                        } else {
                            (there, here)
                        };
                        let name = format!("{}[{}]~{}[{}]", a.0, a.1, b.0, b.1);
                        t.uplink(&name, a, b);
                    }
                }
            }
            NodeType::Ca => {
                let words: Vec<&str> = n.desc.split_whitespace().collect();
                let [host, hca] = words.as_slice() else {
                    t.skipped += 1;
                    continue;
                };
                for p in &n.ports {
                    if let Some(sw) = names.get(p.remote.as_str()) {
                        t.cable(&vocab::entity::port(host, hca, p.port), sw, p.remote_port);
                    }
                }
            }
        }
    }
    t.finish();
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
        assert_eq!(t.parent_of("gpu-a02/mlx5_0/1"), Some("leaf01"));
        assert_eq!(
            t.members("spine01"),
            ["leaf01[33]~spine01[1]", "leaf02[33]~spine01[2]"]
        );
        assert_eq!(t.parent_of("switch:leaf02/33"), Some("spine01"));
        assert_eq!(t.canonical("switch:leaf01/3"), "gpu-a02/mlx5_0/1");
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
        assert_eq!(t.parent_of("n1/mlx5_0/1"), Some("S-01"));
        assert_eq!(t.parent_of("n2/mlx5_0/1"), Some("S-02"));
    }

    /// infiniband_exporter's real `ibnetdiscover --ports` output
    /// (tests/data/infiniband_exporter).
    #[test]
    fn the_ports_form_places_cas_and_uplinks() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/data/infiniband_exporter/ibnetdiscover/test.out"
        ))
        .expect("fixture");
        let t = parse_topology(&text).expect("parses");
        assert_eq!(t.members("ib-i1l1s01"), ["o0001/HCA-1/1", "o0002/HCA-1/1"]);
        assert_eq!(t.parent_of("p0001/HCA-1/1"), Some("ib-i4l1s01"));
        // The leaf's port 11 reports into o0002's port.
        assert_eq!(t.canonical("switch:ib-i1l1s01/11"), "o0002/HCA-1/1");
        // ib-i1l2s01 has no CA behind it: the uplink groups under it.
        let up = "ib-i1l1s01[1]~ib-i1l2s01[1]";
        assert_eq!(t.members("ib-i1l2s01"), [up]);
        assert_eq!(
            t.link_of("switch:ib-i1l2s01/1").map(String::as_str),
            Some(up)
        );
        assert_eq!(t.counts(), (0, 2, 1, 0));
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
