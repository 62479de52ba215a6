//! NVML's event API (XID, ECC) on a dedicated thread.
use std::{collections::BTreeMap, path::PathBuf, sync::mpsc, time::SystemTime};

use nvml_wrapper::{bitmasks::event::EventTypes, error::NvmlError, Nvml};

use super::{load, xid_meaning, GpuEvent, GpuEventKind, NvmlSourceError, DEFAULT_LIB};

/// Waits on NVML's event API in a dedicated thread (it blocks), forwarding
/// XID and ECC events. The thread owns its own NVML handle; it ends when the
/// receiver is dropped.
pub fn spawn_event_listener(
    lib: Option<PathBuf>,
    tx: mpsc::Sender<GpuEvent>,
) -> Result<EventListener, NvmlSourceError> {
    let lib = lib.unwrap_or_else(|| PathBuf::from(DEFAULT_LIB));
    let nvml = load(&lib)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("nvml-events".into())
        .spawn(move || listen(nvml, tx, &flag))
        .map_err(|e| NvmlSourceError::Query(format!("spawning the event thread: {e}")))?;
    Ok(EventListener {
        stop,
        handle: Some(handle),
    })
}

/// The running event thread; dropping it stops the thread within one wait
/// timeout (1 s) and joins it.
pub struct EventListener {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for EventListener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!(
                    "the NVML event thread panicked: XID and ECC events stopped before shutdown"
                );
            }
        }
    }
}

fn listen(nvml: Nvml, tx: mpsc::Sender<GpuEvent>, stop: &std::sync::atomic::AtomicBool) {
    let Ok(n) = nvml.device_count() else { return };
    let Ok(mut set) = nvml.create_event_set() else {
        tracing::warn!("NVML event set unavailable: no XID events");
        return;
    };
    let wanted = EventTypes::CRITICAL_XID_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
        | EventTypes::SINGLE_BIT_ECC_ERROR;
    let mut uuids = BTreeMap::new();
    // The GPUs registered so far: a failed registration frees the set
    // (nvml-wrapper releases it), so the set is rebuilt from these and the
    // failing GPU alone goes without events.
    let mut registered = Vec::new();
    for i in 0..n {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let types = d
            .supported_event_types()
            .map(|s| s & wanted)
            .unwrap_or(wanted);
        set = match d.register_events(types, set) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(gpu = i, error = %e.error, "NVML event registration failed: no XID events from this GPU");
                metrics::counter!(crate::metrics_catalog::NVML_EVENT_REGISTRATION_FAILURES.name)
                    .increment(1);
                match rebuild_event_set(&nvml, &registered) {
                    Some(s) => s,
                    None => {
                        tracing::warn!("NVML event set cannot be rebuilt: no XID events");
                        return;
                    }
                }
            }
        };
        if let Ok(u) = d.uuid() {
            uuids.insert(u, i);
        }
        registered.push((i, types));
    }
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match set.wait(1000) {
            Ok(ev) => {
                let uuid = ev.device.uuid().unwrap_or_default();
                // By the device's own index; its UUID only when NVML cannot say.
                let index = ev.device.index().ok().or_else(|| uuids.get(&uuid).copied());
                let kind = if ev.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    let code = match ev.event_data {
                        Some(nvml_wrapper::enums::event::XidError::Value(v)) => v,
                        _ => 0,
                    };
                    GpuEventKind::Xid {
                        code,
                        meaning: xid_meaning(code),
                    }
                } else if ev.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
                    GpuEventKind::DoubleBitEcc
                } else {
                    GpuEventKind::SingleBitEcc
                };
                let e = GpuEvent {
                    index,
                    uuid,
                    at: SystemTime::now(),
                    kind,
                };
                if tx.send(e).is_err() {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::warn!(error = %e, "NVML event wait failed; XID listener stopped");
                return;
            }
        }
    }
}

/// A new event set with the GPUs in `registered` (index, event types).
fn rebuild_event_set<'n>(
    nvml: &'n Nvml,
    registered: &[(u32, EventTypes)],
) -> Option<nvml_wrapper::EventSet<'n>> {
    let mut set = nvml.create_event_set().ok()?;
    for &(i, types) in registered {
        set = nvml
            .device_by_index(i)
            .ok()?
            .register_events(types, set)
            .ok()?;
    }
    Some(set)
}
