//! Integration tests of mgbench-synth on generated traces, one module per topic.

mod bad_input;
mod common;
mod locality;
mod mining;
