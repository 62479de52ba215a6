//! faultline's correlator: ingest (`ingest`), detection and incidents
//! (`engine`), subscriptions (`subscribe`) and replay (`replay`).
pub mod auth;
pub mod certs;
pub mod engine;
pub mod ingest;
pub mod replay;
pub mod sim;
pub mod subscribe;
