//! faultline's correlator: ingest (`ingest`), detection and incidents
//! (`engine`), subscriptions (`subscribe`) and replay (`replay`). The
//! simulator that drives it is the `sim` crate (`faultline-sim`).
pub mod auth;
pub mod certs;
pub mod conn;
pub mod engine;
pub mod ingest;
pub mod logging;
pub mod replay;
pub mod subscribe;
