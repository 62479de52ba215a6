//! faultline's wire protocol, generated from `proto/faultline.proto` at build time.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("faultline.v1");
}

/// The kubelet's pod-resources API, v1 (the `List` call only;
/// `proto/kubelet_podresources.proto`).
pub mod podresources {
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("v1");
    }
}

pub mod bounded_read;
pub mod config_doc;
pub mod config_key;
pub mod metric;
pub mod parse_error;
pub mod record;
pub mod refusal;
mod usage;

#[cfg(feature = "client-tls")]
pub mod client_tls;

#[cfg(feature = "listen")]
pub mod listen;
#[cfg(feature = "self-telemetry")]
pub mod self_telemetry;
