//! One source per signal family. Each owns its snapshot → delta → typed
//! window and yields the wire rows, its console lines and its metrics
//! ([`Source`]). A window has two phases ([`close_window`]): every source
//! collects, in this order: `block`, `nfs` (mountstats), `lustre`
//! (client targets), `rdma` (async
//! events), `ib`, `switches` (switch port counters), `verbs`,
//! `gpu`, `libraries` (every `nccl.rescan_s`: attach to libraries that
//! appeared, detach from those no process maps), `cuda`, `nccl`, `otlp`,
//! `usage`, `kmsg` (the kernel log); then the sources that need
//! another's data of the same window derive from the [`Facts`] the others
//! returned: `gpu` (workload labels from the processes `cuda` saw), `cuda`
//! (its lines name the GPU `gpu` read), `usage`,
//! `kmsg` (the GPUs `gpu` read, and its NVML XIDs, joined) (from every row and the
//! NVML and verbs facts). `exec` (`crate::exec`) is drained between windows.
pub mod libraries;
pub mod retired;
mod source;

pub use source::{close_window, Console, Ctx, CudaPids, Fact, Facts, Source};
