//! The simulated fabric as `ibnetdiscover` would print it: a two-level fat
//! tree, [`NODES_PER_LEAF`] nodes per leaf switch with all [`HCAS`] of a
//! node cabled to its leaf (leaf port `8·i + hca + 1` for the leaf's i-th
//! node), every leaf with one uplink to each of two spines. CAs are
//! described as rdma-ndd describes them (`<host> <hca>`), so the
//! correlator's `--topology` reads the same names the windows carry.
use std::fmt::Write;

use super::{HCAS, NODES_PER_LEAF};

/// Spine switches of the simulated fabric.
const SPINES: usize = 2;
/// Leaf ports used by HCAs; uplinks come after.
const DOWNLINKS: usize = NODES_PER_LEAF * HCAS;

/// A leaf switch's name (its node description).
pub fn leaf_name(leaf: usize) -> String {
    format!("leaf{leaf:02}")
}

fn guid(kind: u8, n: usize) -> String {
    format!("{kind:02x}00c0ffee{n:06x}")
}

/// The fabric of `nodes` nodes in ibnetdiscover's output format.
pub fn ibnetdiscover(nodes: usize) -> String {
    let leaves = nodes.div_ceil(NODES_PER_LEAF);
    let mut s = String::from("#\n# Topology file: the faultline-sim fabric\n#\n");
    for sp in 0..SPINES {
        let _ = writeln!(
            s,
            "switchguid=0x{g}\nSwitch\t{} \"S-{g}\"\t\t# \"spine{sp:02}\" base port 0 lid {} lmc 0",
            leaves.max(1),
            1 + sp,
            g = guid(1, sp)
        );
        for l in 0..leaves {
            let _ = writeln!(
                s,
                "[{}]\t\"S-{}\"[{}]\t\t# \"{}\" 4xNDR",
                l + 1,
                guid(2, l),
                DOWNLINKS + sp + 1,
                leaf_name(l)
            );
        }
        s.push('\n');
    }
    for l in 0..leaves {
        let _ = writeln!(
            s,
            "switchguid=0x{g}\nSwitch\t{} \"S-{g}\"\t\t# \"{}\" base port 0 lid {} lmc 0",
            DOWNLINKS + SPINES,
            leaf_name(l),
            10 + l,
            g = guid(2, l)
        );
        for i in 0..NODES_PER_LEAF {
            let n = l * NODES_PER_LEAF + i;
            if n >= nodes {
                break;
            }
            for h in 0..HCAS {
                let _ = writeln!(
                    s,
                    "[{}]\t\"H-{}\"[1]\t\t# \"n{n:03} mlx5_{h}\" 4xNDR",
                    i * HCAS + h + 1,
                    guid(3, n * HCAS + h)
                );
            }
        }
        for sp in 0..SPINES {
            let _ = writeln!(
                s,
                "[{}]\t\"S-{}\"[{}]\t\t# \"spine{sp:02}\" 4xNDR",
                DOWNLINKS + sp + 1,
                guid(1, sp),
                l + 1
            );
        }
        s.push('\n');
    }
    for n in 0..nodes {
        let l = n / NODES_PER_LEAF;
        for h in 0..HCAS {
            let g = guid(3, n * HCAS + h);
            let _ = writeln!(
                s,
                "caguid=0x{g}\nCa\t1 \"H-{g}\"\t\t# \"n{n:03} mlx5_{h}\"\n[1]({g})\t\"S-{}\"[{}]\t\t# lid 0 lmc 0 \"{}\" 4xNDR\n",
                guid(2, l),
                (n % NODES_PER_LEAF) * HCAS + h + 1,
                leaf_name(l)
            );
        }
    }
    s
}

/// The leaf ports a switch fault hits: `ports` of the leaf's HCA ports,
/// spread over its nodes (the i-th on its i-th node's HCA `i mod 8`, the
/// next round one HCA on), as (node, hca), within the cluster's `nodes`.
pub fn switch_ports(leaf: usize, ports: usize, nodes: usize) -> Vec<(usize, usize)> {
    let first = leaf * NODES_PER_LEAF;
    let on_leaf = nodes.saturating_sub(first).min(NODES_PER_LEAF);
    if on_leaf == 0 {
        return Vec::new();
    }
    (0..(on_leaf * HCAS).min(ports))
        .map(|i| (first + i % on_leaf, (i % on_leaf + i / on_leaf) % HCAS))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_correlator_reads_the_simulated_fabric() {
        let t = correlator::engine::ib::parse_topology(&ibnetdiscover(20)).expect("parses");
        assert_eq!(t.members("leaf00").len(), 16 * HCAS);
        assert_eq!(t.members("leaf01").len(), 4 * HCAS);
        assert_eq!(t.parent_of("n017/mlx5_3/1"), Some("leaf01"));
        // Each spine groups its two uplinks.
        assert_eq!(t.members("spine00").len(), 2);
        // No links named, 2 leaves, 2 × 2 uplinks, nothing skipped.
        assert_eq!(t.counts(), (0, 2, 4, 0));
    }

    #[test]
    fn a_switch_fault_hits_distinct_ports_of_its_leaf() {
        let p = switch_ports(1, 4, 40);
        assert_eq!(p, [(16, 0), (17, 1), (18, 2), (19, 3)]);
        let all = switch_ports(0, 200, 3);
        assert_eq!(all.len(), 24);
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 24);
        assert!(switch_ports(2, 4, 20).is_empty());
    }
}
