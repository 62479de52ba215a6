//! Bounded reads of files from outside: the workspace's one helper,
//! [`proto::bounded_read`] (shared with the correlator).
pub use proto::bounded_read::*;
