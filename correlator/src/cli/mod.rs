//! The binary's subcommands (`main.rs`), one module per group; not part of
//! the library (`lib.rs` does not declare it).
pub mod fleet;
pub mod nats_auth;
mod nats_perms;
pub mod replay;
pub mod reports;
pub mod serve;
pub mod subscribe;
