//! The `mgbench` binary as users run it, one module per stage.

mod capture;
mod common;
mod replay;
mod synth;
