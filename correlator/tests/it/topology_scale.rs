//! A large topology file loads in time linear in its links, however its
//! ports are spread over switches: 100k HCA ports behind one leaf load in
//! about the time of the same 100k behind 100 leaves of 1k each in
//! faultline's own form, and 30k likewise in `ibnetdiscover --ports`
//! (issue 47: per-switch work quadratic in the switch's ports made 400k
//! links in one switch take 16 s and 1.8M never start; ibnetdiscover's
//! default form shares the own form's per-switch path). Both files of a
//! pair have the same lines, names and map sizes, so caches and allocation
//! cost the same; only the shape differs. The timings are ratios measured
//! side by side in one run, interleaved, the best of two each.
use std::fmt::Write;
use std::time::{Duration, Instant};

use correlator::engine::ib::parse_topology;

/// Ports per leaf when spread.
const SPREAD: usize = 1_000;

/// Host `i`'s name (hosts are listed in descending name order, a sorted
/// insert's worst case).
fn host(i: usize) -> String {
    format!("h{i:07}")
}

/// faultline's own form: `LINK HCA-PORT SWITCH[PORT]`, `per` ports behind
/// each leaf.
fn own(ports: usize, per: usize) -> String {
    let mut s = String::with_capacity(ports * 40);
    for i in (0..ports).rev() {
        let (leaf, port) = (i / per, i % per + 1);
        let _ = writeln!(s, "l{i} {}/mlx5_0/1 leaf{leaf:03}[{port}]", host(i));
    }
    s
}

/// `ibnetdiscover --ports`: each cable from both ends.
fn ports(ports: usize, per: usize) -> String {
    let mut s = String::with_capacity(ports * 240);
    for i in (0..ports).rev() {
        let (leaf, p, lid) = (i / per, i % per + 1, i + 100);
        let sw = format!("0x7cfe9003{leaf:08x}");
        let _ = writeln!(
            s,
            "CA {lid} 1 0x7cfe90{i:010x} 4x EDR - SW 1719 {p} {sw} ( '{} mlx5_0' - 'leaf{leaf:03}' )",
            host(i)
        );
        let _ = writeln!(
            s,
            "SW 1719 {p} {sw} 4x EDR - CA {lid} 1 0x7cfe90{i:010x} ( 'leaf{leaf:03}' - '{} mlx5_0' )",
            host(i)
        );
    }
    s
}

/// One load of `text`, checking every port sits behind its leaf.
fn load(text: &str, per: usize) -> Duration {
    let t0 = Instant::now();
    let t = parse_topology(text).expect("parses");
    let took = t0.elapsed();
    let leaf = t
        .parent_of("h0000007/mlx5_0/1")
        .expect("placed")
        .to_string();
    assert_eq!(t.members(&leaf).len(), per);
    took
}

/// A form's name, its size and its generator.
type Form = (&'static str, usize, fn(usize, usize) -> String);

#[test]
fn one_leaf_with_many_ports_loads_as_fast_as_many_leaves() {
    let _turn = tests::one_file_at_a_time(file!());
    let forms: [Form; 2] = [("own", 100_000, own), ("ports", 30_000, ports)];
    for (name, n, make) in forms {
        let (spread, one) = (make(n, SPREAD), make(n, n));
        // Interleaved, the best of two each: both see the same load.
        let (mut ts, mut t1) = (Duration::MAX, Duration::MAX);
        for _ in 0..2 {
            ts = ts.min(load(&spread, SPREAD));
            t1 = t1.min(load(&one, n));
        }
        let ratio = t1.as_secs_f64() / ts.as_secs_f64().max(1e-6);
        let leaves = n / SPREAD;
        eprintln!(
            "{name}: {n} ports behind 1 leaf {t1:?}, behind {leaves} leaves {ts:?}: ×{ratio:.1}"
        );
        // Linear: ×1 (the sort of one long member list is n log n). The
        // quadratic loader took ×2.5 and more at these sizes.
        assert!(
            ratio < 2.0,
            "{name}: {n} ports behind one leaf took ×{ratio:.1} the time of {leaves} leaves ({t1:?} vs {ts:?})"
        );
    }
}
