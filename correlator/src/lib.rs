//! faultline's correlator: ingest (`ingest`), detection and incidents
//! (`engine`), subscriptions (`subscribe`), replay (`replay`), incident
//! history (`history`), the web UI and API (`web`), Alertmanager delivery
//! (`alerts`) and the correlator's own metrics (`telemetry`).
pub mod alerts;
pub mod engine;
pub mod history;
pub mod ingest;
pub mod replay;
pub mod sim;
pub mod subscribe;
pub mod telemetry;
pub mod web;
