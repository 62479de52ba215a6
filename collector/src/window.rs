//! Building the wire `Window` from one window of every source.
pub use vocab::time::unix_ms;
