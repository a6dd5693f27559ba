//! mgbench-capture: memory-access traces of unmodified programs.
//!
//! - [`trace`]: the versioned, compressed, crash-tolerant trace format (no OS code).
//! - [`import`]: traces from other tools (gs_patterns/DynamoRIO, Valgrind lackey, MemGaze).
//! - [`symbols`]: instruction address to function and file:line, from the trace's mappings.
//! - [`stats`]: what `mgbench trace info` reports.
//! - [`descriptors`]: the descriptor numbers the plugin keeps for its own files.
//! - [`perf`]: `perf_event_open`'s attribute record (breakpoints, samplers, counters).
//! - `backend` (feature `backends`): QEMU user-mode plugin runner, ptrace single-stepper,
//!   Intel PT detection.
//!
//! ```
//! use mgbench_capture::trace::*;
//!
//! let meta = TraceMeta {
//!     command: vec!["./app".into()],
//!     backend: "example".into(),
//!     mode: Mode::Full,
//!     start_time: "2026-01-01T00:00:00Z".into(),
//!     roi: None,
//!     notes: vec![],
//! };
//! let mut w = TraceWriter::create(Vec::new(), &meta).unwrap();
//! let chunk = Chunk {
//!     thread: 0,
//!     samples: vec![SampleHeader { id: 0, skipped_before: 0, len: 1 }],
//!     accesses: vec![Access { ip: 0x401000, addr: 0x7fff0000, size: 8, kind: AccessKind::Load }],
//! };
//! w.write_chunk(&chunk).unwrap();
//! w.write_end(&EndInfo::default()).unwrap();
//! let bytes = w.into_inner();
//!
//! let mut r = TraceReader::open(&bytes[..]).unwrap();
//! assert_eq!(r.meta().backend, "example");
//! assert_eq!(r.next_frame().unwrap(), Some(Frame::Chunk(chunk)));
//! ```

#[cfg(feature = "backends")]
pub mod backend;
pub mod descriptors;
pub mod fasthash;
pub mod gosym;
pub mod import;
pub mod native_rdx;
pub mod perf;
pub mod progress;
pub mod spill;
pub mod stats;
pub mod symbols;
pub mod trace;
