//! A fleet row's judgement: throughput, intake and incident lags, each
//! injected fault against the simulator's truth (one incident within 2
//! windows of being physically visible, nothing else raised), and each
//! component's CPU, memory and cost at the whole fleet's rate.
use std::time::Duration;

use serde_json::{json, Value};

use super::{plan, plan::Plan, q, watch, Args, Slot};
use crate::report::Failures;

/// What a row measured.
pub struct Measured {
    pub shards: usize,
    pub nodes: usize,
    pub plan: Plan,
    pub slots: Vec<Slot>,
    /// Windows generated per shard.
    pub total: Vec<u64>,
    /// From the first hand-over until every shard had taken its windows.
    pub run_s: f64,
    pub tick: Duration,
    pub polled: watch::Polled,
    /// Windows each shard's engine processed.
    pub engines: Vec<u64>,
    pub fell_behind_at: Option<u64>,
    pub updates: Vec<watch::Seen>,
    /// CPU seconds of nats-server, each shard and the fleet view, in turn.
    pub cpu: Vec<f64>,
    pub rss: Vec<Option<u64>>,
    /// This process's CPU seconds (simulator and senders).
    pub own_cpu: f64,
    pub own_rss: Option<u64>,
    pub sim_cpu: f64,
    pub per_shard: Vec<usize>,
    pub connect_s: f64,
    pub delivered: u64,
    pub dropped: u64,
    pub fleet_open_end: Option<Vec<(String, String)>>,
    pub ui_status: u16,
    pub history_bytes: u64,
}

/// The row's JSON; what fails the row goes to `failures`.
pub fn judge(a: &Args, m: Measured, failures: &mut Failures) -> Value {
    let Measured {
        shards,
        nodes,
        plan,
        slots,
        total,
        run_s,
        tick,
        polled,
        engines,
        fell_behind_at,
        updates,
        cpu,
        rss,
        own_cpu,
        own_rss,
        sim_cpu,
        per_shard,
        connect_s,
        delivered,
        dropped,
        fleet_open_end,
        ui_status,
        history_bytes,
    } = m;
    // Throughput.
    let windows: u64 = total.iter().sum();
    let bytes: u64 = slots.iter().map(|s| s.bytes).sum();
    let offered = nodes as f64 * a.speed / a.window_s;
    let taken_by: Vec<u64> = polled
        .samples
        .last()
        .map_or_else(|| vec![0; shards], |s| s.consumed.clone());
    let taken_total: u64 = taken_by.iter().sum();
    let taken = taken_total as f64 / run_s.max(1e-3);
    // Windows of the whole fleet a second at its window length.
    let fleet_rate = nodes as f64 / a.window_s;
    let late: Vec<f64> = slots.iter().map(|s| s.late_s).collect();
    // Intake lag per shard: hand-over of a slot to the first poll at which
    // the shard had taken every window up to it.
    let mut intake: Vec<Vec<f64>> = vec![Vec::new(); shards];
    for (s, lags) in intake.iter_mut().enumerate() {
        let mut cum = 0;
        for slot in &slots {
            cum += slot.windows[s];
            let Some(h) = slot.handed else { continue };
            if let Some(at) = polled
                .samples
                .iter()
                .find(|x| x.consumed.get(s).copied().unwrap_or(0) >= cum)
                .and_then(|x| x.at)
            {
                lags.push(at.saturating_duration_since(h).as_secs_f64());
            }
        }
    }
    let (js_max, js_end) = (
        polled
            .samples
            .iter()
            .map(|s| s.js_storage)
            .max()
            .unwrap_or(0),
        polled.samples.last().map_or(0, |s| s.js_storage),
    );
    let found = incidents(shards, &plan, &slots, &updates, &polled, failures);
    let (outcomes, incident_lag, merged, others) =
        (found.outcomes, found.lag, found.merged, found.others);
    let fell_behind = keeping_up(
        shards,
        &intake,
        tick,
        fell_behind_at,
        (taken, offered),
        failures,
    );
    let mut components = components(&Components {
        shards,
        cpu: &cpu,
        rss: &rss,
        engines: &engines,
        run_s,
        fleet_rate,
        per_shard: &per_shard,
        total: &total,
        intake: &intake,
        incident_lag: &incident_lag,
    });
    let own = own_cpu;
    components.push(
        json!({"component": "simulator (generation thread)", "cpu_seconds": sim_cpu,
        "cores": sim_cpu / run_s.max(1e-3)}),
    );
    components.push(
        json!({"component": "collector senders (this process, less the simulator)",
        "cpu_seconds": own - sim_cpu, "cores": (own - sim_cpu) / run_s.max(1e-3),
        "cpu_us_per_window": 1e6 * (own - sim_cpu) / windows.max(1) as f64,
        "peak_rss_bytes_with_simulator": own_rss}),
    );
    json!({
        "shards": shards, "nodes": nodes, "gpus": nodes * 8, "hca_ports": nodes * 8,
        "nodes_per_shard": per_shard, "window_seconds": a.window_s, "speed": a.speed,
        "slots": slots.len(), "windows": windows, "bytes": bytes,
        "senders_connect_seconds": connect_s,
        "offered_windows_per_second": offered, "taken_windows_per_second": taken,
        "run_seconds": run_s, "generation_late_seconds_max": q(&late, 1.0),
        "kept_up": !fell_behind && fell_behind_at.is_none(),
        "fell_behind_at_window": fell_behind_at, "windows_taken": taken_by,
        "delivered": delivered, "dropped": dropped,
        "engine_windows": engines,
        "jetstream_storage_bytes_max": js_max, "jetstream_storage_bytes_end": js_end,
        "fleet_view": {"web_ui_status": ui_status, "history_bytes": history_bytes,
            "open_at_end": fleet_open_end, "poll_errors": polled.fleet_errors},
        "components": components, "faults": outcomes,
        "symptoms_merged_into_a_faults_incident": merged, "other_incidents": others,
    })
}

/// The injected faults' outcomes, the incident lags per shard, symptoms
/// merged into a fault's incident, and anything else raised.
struct Found {
    outcomes: Vec<Value>,
    lag: Vec<Vec<f64>>,
    merged: Vec<Value>,
    others: Vec<Value>,
}

fn incidents(
    shards: usize,
    plan: &Plan,
    slots: &[Slot],
    updates: &[watch::Seen],
    polled: &watch::Polled,
    failures: &mut Failures,
) -> Found {
    // Faults → incidents.
    let slot_of = |ts: i64| slots.iter().find(|s| s.end_ms >= ts);
    let opened: Vec<&watch::Seen> = updates
        .iter()
        .filter(|u| u.update.state == "opened")
        .collect();
    let mut matched_ids = std::collections::BTreeSet::new();
    let mut outcomes = Vec::new();
    let mut incident_lag: Vec<Vec<f64>> = vec![Vec::new(); shards];
    for (i, f) in plan.faults.iter().enumerate() {
        let Some((kind, entity)) = f.expected(&plan.cluster) else {
            continue;
        };
        let visible = plan.cluster.truth().get(i).and_then(|t| t.visible_window);
        let mine: Vec<&&watch::Seen> = opened
            .iter()
            .filter(|u| u.update.kind == kind && u.update.entity == entity)
            .collect();
        for m in &mine {
            matched_ids.insert((m.shard.clone(), m.update.incident_id.clone()));
        }
        let first = mine.iter().min_by_key(|u| u.at);
        let (opened_k, lag, shard) = match first {
            Some(u) => {
                let s = slot_of(u.update.ts_unix_ms);
                let lag = s
                    .and_then(|s| s.handed)
                    .map(|h| u.at.saturating_duration_since(h).as_secs_f64());
                let shard_ix = (0..shards).find(|k| u.shard.ends_with(&plan::shard_key(*k)));
                if let (Some(l), Some(k)) = (lag, shard_ix) {
                    incident_lag[k].push(l);
                }
                (s.map(|s| s.k), lag, u.shard.clone())
            }
            None => (None, None, String::new()),
        };
        let within = matches!((opened_k, visible), (Some(o), Some(v)) if o <= v + 2);
        let in_view = polled
            .fleet_first
            .keys()
            .filter(|(k, e)| k == kind && e == &entity)
            .count();
        let ok = within && mine.len() == 1 && in_view == 1;
        if !ok {
            failures.add(
                &format!("{shards} shards: {}", plan.injected[i]),
                &anyhow::anyhow!(
                    "expected one {kind} on {entity} within 2 windows of window {visible:?}: opened {} time(s), first in window {opened_k:?}, {in_view} in the fleet view",
                    mine.len()
                ),
            );
        }
        outcomes.push(
            json!({"fault": plan.injected[i], "kind": kind, "entity": entity,
            "visible_window": visible, "opened_window": opened_k, "opened_by": shard,
            "shard_incidents": mine.len(), "fleet_view_incidents": in_view,
            "lag_seconds_from_hand_over": lag, "within_2_windows": within, "ok": ok}),
        );
    }
    // A symptom raised before its cause was found and then resolved as
    // "explained by incident <the fault's>" is that fault's (the engine's
    // own merge), reported apart; anything else is a false alarm.
    let ids: std::collections::BTreeSet<&String> = matched_ids.iter().map(|(_, id)| id).collect();
    let merged_into = |u: &watch::Seen| {
        updates.iter().find_map(|x| {
            (x.shard == u.shard
                && x.update.incident_id == u.update.incident_id
                && x.update.state == "resolved")
                .then(|| {
                    x.update.evidence.iter().find_map(|l| {
                        l.strip_prefix("explained by incident ")
                            .and_then(|r| r.split_whitespace().next())
                            .filter(|id| ids.contains(&id.to_string()))
                            .map(|id| (id.to_string(), slot_of(x.update.ts_unix_ms).map(|s| s.k)))
                    })
                })
                .flatten()
        })
    };
    let mut merged = Vec::new();
    let mut others = Vec::new();
    for u in opened
        .iter()
        .filter(|u| !matched_ids.contains(&(u.shard.clone(), u.update.incident_id.clone())))
    {
        let opened_k = slot_of(u.update.ts_unix_ms).map(|s| s.k);
        let v = json!({"shard": u.shard, "kind": u.update.kind, "entity": u.update.entity,
            "window": opened_k});
        match merged_into(u) {
            Some((into, resolved_k)) => merged.push(json!({"symptom": v, "merged_into": into,
                "merged_in_window": resolved_k})),
            None => others.push(v),
        }
    }
    if !others.is_empty() {
        failures.add(
            &format!("{shards} shards: nothing else raised"),
            &anyhow::anyhow!("{} other incident(s): {others:?}", others.len()),
        );
    }
    Found {
        outcomes,
        lag: incident_lag,
        merged,
        others,
    }
}

/// What the per-component figures are made of.
struct Components<'a> {
    shards: usize,
    cpu: &'a [f64],
    rss: &'a [Option<u64>],
    engines: &'a [u64],
    run_s: f64,
    fleet_rate: f64,
    per_shard: &'a [usize],
    total: &'a [u64],
    intake: &'a [Vec<f64>],
    incident_lag: &'a [Vec<f64>],
}

/// nats-server's, each shard's and the fleet view's CPU, peak RSS, CPU per
/// window and cores at the fleet's rate; a shard's lags.
fn components(c: &Components<'_>) -> Vec<Value> {
    let Components {
        shards,
        cpu,
        rss,
        engines,
        run_s,
        fleet_rate,
        per_shard,
        total,
        intake,
        incident_lag,
    } = *c;
    let engines_total: u64 = engines.iter().sum();
    let mut components = Vec::new();
    let names: Vec<String> = std::iter::once("nats-server".to_string())
        .chain((0..shards).map(|k| format!("shard {}", plan::shard_key(k))))
        .chain(std::iter::once("fleet view".to_string()))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let cpu = cpu[i];
        // Its CPU per window it handled (a shard's: those it took; the
        // server's and the view's: every window taken), and what the whole
        // fleet's rate would cost at that price.
        let handled = i
            .checked_sub(1)
            .and_then(|k| engines.get(k).copied().filter(|n| *n > 0))
            .unwrap_or(engines_total)
            .max(1);
        let per_window = cpu / handled as f64;
        let mut c = json!({"component": name, "cpu_seconds": cpu, "cores": cpu / run_s.max(1e-3),
            "peak_rss_bytes": rss[i], "cpu_us_per_window": 1e6 * per_window,
            "cores_at_the_fleet_rate": per_window * fleet_rate * if (1..=shards).contains(&i) {
                handled as f64 / engines_total.max(1) as f64 } else { 1.0 }});
        if let Some(k) = i.checked_sub(1).filter(|k| *k < shards) {
            c["nodes"] = json!(per_shard[k]);
            c["windows"] = json!(total[k]);
            c["intake_lag_seconds"] = json!({"p50": q(&intake[k], 0.5), "p99": q(&intake[k], 0.99),
                "max": q(&intake[k], 1.0)});
            c["incident_lag_seconds"] = json!(incident_lag[k]);
        }
        components.push(c);
    }
    components
}

/// Whether some slot reached a shard later than the next one was due; a
/// failure for that or for falling behind.
fn keeping_up(
    shards: usize,
    intake: &[Vec<f64>],
    tick: Duration,
    fell_behind_at: Option<u64>,
    (taken, offered): (f64, f64),
    failures: &mut Failures,
) -> bool {
    let fell_behind = intake
        .iter()
        .flatten()
        .any(|l| *l > tick.as_secs_f64() + watch::POLL.as_secs_f64());
    if let Some(k) = fell_behind_at {
        failures.add(
            &format!("{shards} shards: carrying the fleet"),
            &anyhow::anyhow!(
                "fell behind at window {k}: a shard had more than 3 slots of windows waiting; taken {taken:.0} windows/s of {offered:.0} offered"
            ),
        );
    } else if fell_behind {
        failures.add(
            &format!("{shards} shards: keeping up"),
            &anyhow::anyhow!("a shard took a slot later than the next slot was due"),
        );
    }
    fell_behind
}
