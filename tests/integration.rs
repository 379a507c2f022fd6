//! Every integration test, in one binary: each file beside this one is a module of it. One
//! binary instead of one per file because each would compile `support/` again and link all of
//! tonic, fred and tokio again; that was most of CI's test build. Run one file's tests with
//! `cargo test --test integration chaos::` (the module path filters).

mod support;

mod burst;
mod chaos;
mod cli;
mod client;
mod cluster;
mod conformance;
mod console;
mod docs;
mod durability;
mod elect_cli;
mod election;
mod eviction;
mod examples;
mod failover;
mod faults;
mod fence;
mod handover;
mod input;
mod input_props;
mod install_cli;
mod layout;
mod lease;
mod leftovers;
mod lifecycle;
mod limits;
mod names_cli;
mod operations;
mod redlock;
mod replication;
mod revoke;
mod scripts_model;
mod semaphore;
mod sentinel;
mod session;
mod several;
mod traces;
mod unary;
mod waiting;
mod watch;
