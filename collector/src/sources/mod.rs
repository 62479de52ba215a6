//! One source per signal family. Each owns its snapshot → delta → typed
//! window and yields the wire rows, its console lines and its metrics
//! (`agent::Source`). The agent loop calls them in this order each window:
//! `block`, `rdma` (async events), `ib`, `verbs`, `gpu`, `cuda` (after
//! `gpu`: its lines name the GPU), `nccl`, `otlp`, `usage` (last: it reads the
//! others' rows); `exec` is drained between windows.
pub mod block;
pub mod cuda;
pub mod exec;
pub mod gpu;
pub mod ib;
pub mod nccl;
pub mod otlp;
pub mod rdma;
pub mod retired;
pub mod usage;
pub mod verbs;
