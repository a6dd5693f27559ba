//! mgbench-report against its fixtures (tests/data, see its README): the figures drawn and
//! their SVG, the comparison, bad inputs, and the page in a real browser.

mod browser;
mod common;
mod compare;
mod figures;
mod inputs;
