//! Integration tests of mgbench-capture, one module per topic.

mod common;
mod format;
mod import;
