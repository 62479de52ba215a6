//! What the families' wire rows share: window times as Unix ms. Each family
//! builds its own rows (`ib/wire.rs`, `nvml/wire.rs`, `block/wire.rs`, …;
//! NFS and Lustre rows in their trackers).
pub use vocab::time::unix_ms;
