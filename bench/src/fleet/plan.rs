//! The simulated fleet and what is injected into it: the cluster, the
//! shard of every node (pods of whole leaf switches), the faults and the
//! incident each one must become.
use anyhow::{Context as _, Result};
use sim::{
    cluster::{topology, Cluster, NODES_PER_LEAF},
    faults::Fault,
};

/// The fleet of one row.
pub struct Plan {
    pub cluster: Cluster,
    pub faults: Vec<Fault>,
    /// The faults as given to `--inject` (for the report).
    pub injected: Vec<String>,
    /// Shard count.
    pub shards: usize,
    /// The shard of each node.
    pub shard_of: Vec<usize>,
}

/// The shard key of shard `k` on the subject (`p00`…): one pod of leaves.
pub fn shard_key(k: usize) -> String {
    format!("p{k:02}")
}

/// Leaves `0..leaves` cut into `shards` contiguous pods: leaf `l` is on
/// pod `l · shards / leaves`, so a leaf switch and every port behind it
/// are judged by one shard.
pub fn pod_of_leaf(leaf: usize, leaves: usize, shards: usize) -> usize {
    (leaf * shards) / leaves.max(1)
}

/// What is injected into a fleet of `nodes`: a degrading link on the first
/// pod, a switch fault on the last, a slow rank of the one (and biggest)
/// job in the middle, a node lost on the second-to-last pod; each at its
/// own onset (simulated seconds) after the detectors' warm-up.
pub fn faults(nodes: usize, onsets: [f64; 4]) -> Vec<String> {
    let leaves = nodes.div_ceil(NODES_PER_LEAF).max(1);
    let node_at = |frac: f64| ((nodes as f64 * frac) as usize).min(nodes - 1);
    let link = node_at(0.05);
    let switch = ((leaves as f64 * 0.9) as usize).min(leaves - 1);
    let rank = node_at(0.5);
    let lost = node_at(0.7);
    vec![
        format!(
            "ib-link-degrade@n{link:03}/mlx5_3/1:ber=1e-10,at={}",
            onsets[0]
        ),
        format!(
            "ib-switch-degrade@{}:ber=1e-10,ports=4,at={}",
            topology::leaf_name(switch),
            onsets[1]
        ),
        format!("nccl-slow-rank@n{rank:03}/gpu5:factor=1.6,at={}", onsets[2]),
        format!("node-loss@n{lost:03}:at={}", onsets[3]),
    ]
}

impl Plan {
    pub fn new(spec: sim::ClusterSpec, shards: usize, inject: Vec<String>) -> Result<Self> {
        let seed = spec.seed;
        let cluster = Cluster::new(spec);
        let faults =
            sim::faults::parse_all(&inject, &cluster, seed).context("the injected faults")?;
        let leaves = cluster.nodes().div_ceil(NODES_PER_LEAF).max(1);
        let shard_of = (0..cluster.nodes())
            .map(|n| pod_of_leaf(cluster.leaf_of(n), leaves, shards))
            .collect();
        Ok(Self {
            cluster,
            faults,
            injected: inject,
            shards,
            shard_of,
        })
    }

    /// Nodes on each shard.
    pub fn nodes_per_shard(&self) -> Vec<usize> {
        let mut v = vec![0; self.shards];
        for &s in &self.shard_of {
            v[s] += 1;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_whole_contiguous_leaves_of_near_equal_size() {
        // 12,500 nodes: 782 leaves (the last one 4 nodes).
        let leaves = 12_500usize.div_ceil(NODES_PER_LEAF);
        assert_eq!(leaves, 782);
        for shards in [1, 2, 4, 8] {
            let pods: Vec<usize> = (0..leaves)
                .map(|l| pod_of_leaf(l, leaves, shards))
                .collect();
            assert!(pods.windows(2).all(|w| w[0] <= w[1]), "contiguous");
            let mut sizes = vec![0; shards];
            for p in pods {
                sizes[p] += 1;
            }
            let (lo, hi) = (sizes.iter().min().copied(), sizes.iter().max().copied());
            assert!(
                hi.unwrap_or(0) - lo.unwrap_or(0) <= 1,
                "{shards}: {sizes:?}"
            );
        }
    }

    #[test]
    fn the_faults_land_on_distinct_pods_of_four() {
        let inject = faults(12_500, [130.0, 160.0, 190.0, 220.0]);
        let spec = sim::ClusterSpec {
            nodes: 12_500,
            window_s: 10.0,
            ..Default::default()
        };
        let p = Plan::new(spec, 4, inject).expect("plan");
        let shard = |node: usize| p.shard_of[node];
        // n625 (link), n6250 (rank), n8750 (lost), leaf703 (switch): one
        // fault a pod.
        assert_eq!(shard(625), 0);
        assert_eq!(shard(6250), 1);
        assert_eq!(shard(8750), 2);
        assert_eq!(shard(703 * NODES_PER_LEAF), 3);
        assert_eq!(p.nodes_per_shard().iter().sum::<usize>(), 12_500);
    }
}
