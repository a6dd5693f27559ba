//! Integration tests of mgbench-replay, one module per topic.

mod accounting;
mod apex;
mod bad_input;
mod common;
mod kernels;
mod parsing;
mod properties;
mod schema;
mod suite;
