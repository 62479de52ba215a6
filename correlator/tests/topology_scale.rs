//! A large topology file loads in time linear in its links: one leaf with
//! 80k HCA ports behind it, in each of the three forms `--topology`
//! takes, loads in about 8× the time of one with 10k (a quadratic loader
//! takes up to 64×, over 20× at these sizes: issue 47's 1.8M links never
//! started). The timings are ratios measured side by side in one run, the
//! best of two each.
use std::fmt::Write;
use std::time::{Duration, Instant};

use correlator::engine::ib::parse_topology;

/// faultline's own form: `LINK HCA-PORT SWITCH[PORT]`. Every generator
/// lists the hosts in descending name order (a sorted insert's worst
/// case).
fn own(n: usize) -> String {
    let mut s = String::with_capacity(n * 32);
    for i in (0..n).rev() {
        let _ = writeln!(s, "l{i} h{i:07}/mlx5_0/1 leaf01[{}]", i + 1);
    }
    s
}

/// `ibnetdiscover --ports`: each cable from both ends.
fn ports(n: usize) -> String {
    let mut s = String::with_capacity(n * 240);
    for i in (0..n).rev() {
        let p = i + 1;
        let _ = writeln!(
            s,
            "CA {lid} 1 0x7cfe9003{i:08x} 4x EDR - SW 1719 {p} 0x7cfe9003009ce5b0 ( 'h{i:07} mlx5_0' - 'leaf01' )",
            lid = i + 100
        );
        let _ = writeln!(
            s,
            "SW 1719 {p} 0x7cfe9003009ce5b0 4x EDR - CA {lid} 1 0x7cfe9003{i:08x} ( 'leaf01' - 'h{i:07} mlx5_0' )",
            lid = i + 100
        );
    }
    s
}

/// `ibnetdiscover`'s default form: the switch's port list, then each CA.
fn default_form(n: usize) -> String {
    let mut s = String::with_capacity(n * 200);
    let _ = writeln!(
        s,
        "Switch\t{n} \"S-b83fd20300a1b3c0\"\t\t# \"leaf01\" enhanced port 0 lid 2 lmc 0"
    );
    for i in (0..n).rev() {
        let _ = writeln!(
            s,
            "[{}]\t\"H-{i:016x}\"[1]({i:016x}) \t\t# \"h{i:07} mlx5_0\" lid 10 4xNDR",
            i + 1
        );
    }
    for i in (0..n).rev() {
        let _ = writeln!(
            s,
            "\nCa\t1 \"H-{i:016x}\"\t\t# \"h{i:07} mlx5_0\"\n[1]({i:016x}) \t\"S-b83fd20300a1b3c0\"[{}]\t\t# lid 10 lmc 0 \"leaf01\" lid 2 4xNDR",
            i + 1
        );
    }
    s
}

/// The best of two loads of `text`, checking every port sits behind
/// the leaf.
fn load(text: &str, n: usize) -> Duration {
    (0..2)
        .map(|_| {
            let t0 = Instant::now();
            let t = parse_topology(text).expect("parses");
            let took = t0.elapsed();
            assert_eq!(t.members("leaf01").len(), n);
            assert_eq!(t.parent_of("h0000007/mlx5_0/1"), Some("leaf01"));
            took
        })
        .min()
        .expect("two runs")
}

/// A form's name and its generator.
type Form = (&'static str, fn(usize) -> String);

#[test]
fn one_leaf_with_many_ports_loads_in_linear_time() {
    const SMALL: usize = 10_000;
    const LARGE: usize = 80_000;
    let forms: [Form; 3] = [("own", own), ("ports", ports), ("default", default_form)];
    for (name, make) in forms {
        let (small, large) = (make(SMALL), make(LARGE));
        let (ts, tl) = (load(&small, SMALL), load(&large, LARGE));
        let ratio = tl.as_secs_f64() / ts.as_secs_f64().max(1e-6);
        eprintln!("{name}: {SMALL} links {ts:?}, {LARGE} links {tl:?}: ×{ratio:.1}");
        // Linear is ×8 (a little more for hash tables growing past the
        // caches); quadratic is ×64, its linear part diluting it to ×20
        // and more here.
        assert!(
            ratio < 16.0,
            "{name}: {LARGE} links took ×{ratio:.1} the time of {SMALL} ({tl:?} vs {ts:?})"
        );
    }
}
