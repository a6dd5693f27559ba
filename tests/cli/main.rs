//! The `mgbench` binary as users run it, one module per stage.

mod affinity;
mod analyze;
mod capture;
mod common;
mod cuda;
mod inputs;
mod mpi;
mod replay;
mod report;
mod reuse;
mod synth;
