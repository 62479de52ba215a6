//! Slow and low BER faults below the alarm line, judged over the long
//! horizons too (issue: judged only over one minute, a port creeping up was
//! caught only once its errors piled up inside that minute). The
//! simulator's windows are replayed through the engine twice: with the
//! default long horizons (5 and 15 min) and with none (the one-minute
//! horizon alone).
use correlator::engine::{config::DetectConfig, Engine};
use proto::v1::{CandidateUpdate, Window};
use sim::{run, SimArgs};

const PORT: &str = "n000/mlx5_5/1";
const ONSET_S: f64 = 60.0;
const RAMP_S: f64 = 1200.0;

/// The port's `ib_link_degraded` updates, replaying `ws`.
fn degraded(ws: &[Window], cfg: &DetectConfig) -> Vec<CandidateUpdate> {
    let mut e = Engine::new(cfg, Default::default());
    ws.iter()
        .flat_map(|w| e.ingest(w))
        .filter(|u| u.kind == "ib_link_degraded" && u.entity == PORT)
        .collect()
}

/// The ramp's BER at `t_ms` (log-linear from 1e-15 to 5e-13).
fn ramp_ber(t_ms: i64, start_ms: i64) -> f64 {
    let x = ((t_ms - start_ms) as f64 / 1000.0 - ONSET_S) / RAMP_S;
    let x = x.clamp(0.0, 1.0);
    10f64.powf(-15.0 + x * (5e-13f64.log10() + 15.0))
}

/// The simulator's windows with `fault` (onset `ONSET_S`) for `duration`
/// seconds: the first degraded update of the port with the long horizons,
/// and without them, and the run's first window start.
async fn replayed(
    tag: &str,
    fault: &str,
    duration: f64,
) -> (Vec<CandidateUpdate>, Option<CandidateUpdate>, i64) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("slow_ramp_{tag}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("windows.jsonl");
    run(SimArgs {
        nodes: 2,
        inject: vec![format!("{fault}")],
        seed: 3,
        speed: 4000.0,
        duration,
        onset: ONSET_S,
        json: true,
        record: Some(file.clone()),
        ..SimArgs::default()
    })
    .await
    .expect("sim runs");
    let ws: Vec<Window> = std::fs::read_to_string(&file)
        .expect("recorded windows")
        .lines()
        .map(|l| correlator::replay::parse_line(l).expect("a window"))
        .collect();
    let start = ws.iter().map(|w| w.start_unix_ms).min().unwrap_or(0);
    let long = degraded(&ws, &DetectConfig::default());
    let mut short_cfg = DetectConfig::default();
    short_cfg.ib.long_horizons_s.clear();
    (long, degraded(&ws, &short_cfg).into_iter().next(), start)
}

fn decided_long(u: &CandidateUpdate) -> bool {
    u.evidence[0].starts_with("decided over the last 5 min")
        || u.evidence[0].starts_with("decided over the last 15 min")
}

/// A ramp from the port's base BER (1e-15) to 5e-13 over 20 minutes:
/// flagged below the alarm line by a long horizon, which the evidence
/// names, and no later than the one-minute horizon alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_ramp_is_flagged_by_the_long_horizon_before_the_alarm_line() {
    let _turn = tests::one_file_at_a_time(file!());
    let fault = format!("ib-link-degrade@{PORT}:ber=5e-13,ramp={RAMP_S}");
    let (updates, short, start) = replayed("ramp", &fault, ONSET_S + RAMP_S + 120.0).await;
    let long = updates
        .first()
        .cloned()
        .expect("flagged with the long horizons");
    let at = |u: &CandidateUpdate| (u.ts_unix_ms - start) as f64 / 1000.0;
    let ber_then = ramp_ber(long.ts_unix_ms, start);
    eprintln!(
        "ramp: long horizons flag at {:.0} s (ramp BER {ber_then:.1e}); one minute alone: {}",
        at(&long),
        short.as_ref().map_or("never".into(), |u| format!(
            "{:.0} s (ramp BER {:.1e})",
            at(u),
            ramp_ber(u.ts_unix_ms, start)
        ))
    );
    assert!(ber_then < 1e-12, "flagged only at {ber_then:.1e}");
    assert!(
        decided_long(&long),
        "the deciding horizon is named: {:?}",
        long.evidence
    );
    // The rise is stated, with the time to the alarm line, while the ramp
    // is still below it.
    let rising = updates.iter().find_map(|u| {
        let e = u.evidence.iter().find(|e| e.starts_with("rising: BER"))?;
        Some((at(u), e.clone()))
    });
    eprintln!("ramp forecast: {rising:?}");
    let (when, line) = rising.expect("a forecast during the ramp");
    assert!(when <= ONSET_S + RAMP_S, "{when:.0} s: {line}");
    assert!(line.contains("at this rate, 1.0e-12 in ~"), "{line}");
    if let Some(s) = &short {
        assert!(
            at(s) >= at(&long),
            "long {:.0} s vs short {:.0} s",
            at(&long),
            at(s)
        );
    }
}

/// A port steady at 6e-14 (six times the reference, twenty times below the
/// alarm line): about three errors a minute, never significant in one
/// minute, significant within a quarter hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_steady_ber_is_seen_only_over_the_long_horizon() {
    let _turn = tests::one_file_at_a_time(file!());
    let fault = format!("ib-link-degrade@{PORT}:ber=6e-14");
    let (updates, short, start) = replayed("steady", &fault, ONSET_S + 1200.0).await;
    let long = updates
        .first()
        .cloned()
        .expect("flagged with the long horizons");
    let after = (long.ts_unix_ms - start) as f64 / 1000.0 - ONSET_S;
    eprintln!(
        "steady 6e-14: flagged {after:.0} s after onset ({}); one minute alone: {short:?}",
        long.evidence[0]
    );
    assert!(decided_long(&long), "{:?}", long.evidence);
    assert!(after <= 900.0, "{after:.0} s");
    assert!(
        short.is_none(),
        "the one-minute horizon alone saw it: {short:?}"
    );
}
