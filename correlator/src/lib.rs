//! faultline's correlator: ingest (`ingest`), detection and incidents
//! (`engine`), subscriptions (`subscribe`), replay (`replay`), incident
//! history (`history`), the web UI and API (`web`), Alertmanager delivery
//! (`alerts`) and the correlator's own metrics (`telemetry`). The
//! simulator that drives it is the `sim` crate (`faultline-sim`).
pub mod alerts;
pub mod auth;
pub mod certs;
pub mod conn;
pub mod engine;
pub mod finite;
pub mod history;
pub mod http_client;
pub mod ingest;
pub mod kube;
pub mod logging;
pub mod replay;
pub mod shell;
pub mod subscribe;
pub mod telemetry;
pub mod web;
