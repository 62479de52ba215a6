//! faultline's wire protocol, generated from `proto/faultline.proto` at build time.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("faultline.v1");
}

pub mod record;

#[cfg(feature = "client-tls")]
pub mod client_tls;
