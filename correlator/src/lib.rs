//! faultline's correlator: ingest (`ingest`), detection and incidents
//! (`engine`), subscriptions (`subscribe`), replay (`replay`), incident
//! history (`history`), the web UI and API (`web`), Alertmanager delivery
//! (`alerts`) and the correlator's own metrics (`telemetry`); the config
//! file (`config`) is assembled from the tables each of them owns. The
//! simulator that drives it is the `sim` crate (`faultline-sim`).
pub mod ack;
pub mod alerts;
pub mod auth;
pub mod certs;
pub mod config;
pub mod conn;
pub mod engine;
pub mod finite;
pub mod history;
pub mod http_client;
pub mod ingest;
pub mod kube;
pub mod limits;
pub mod logging;
pub mod replay;
pub mod setting;
pub mod shell;
pub mod subscribe;
pub mod telemetry;
pub mod web;
