//! The verbs family: RDMA work completions, posts and QP state per process
//! from the libibverbs and provider uprobes ([`probe`] reads the maps,
//! [`wire`] builds the rows, [`source`] runs each window), and the RDMA
//! asynchronous events (port errors, QP fatal) libibverbs' event threads
//! report ([`events`]). The libibverbs binding both use (dlopen, the event
//! threads, the provider's data-path functions) is `crate::rdma`, below
//! `probes` because the verbs attach resolves the provider through it; the
//! attach itself is `probes::attach` (`attach_verbs`). The `[verbs]`
//! section is [`section`].
#[cfg(agent)]
pub mod events;
#[cfg(feature = "probes")]
pub mod probe;
pub mod section;
#[cfg(agent)]
pub mod source;
#[cfg(feature = "probes")]
pub mod wire;

#[cfg(agent)]
pub use events::RdmaEventSource;
#[cfg(feature = "probes")]
pub use probe::VerbsSnapshot;
pub use section::VerbsSection;
#[cfg(agent)]
pub use source::VerbsSource;
