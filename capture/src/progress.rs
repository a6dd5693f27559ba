//! Progress of long work (reading a trace, importing, capturing), as shared counters.
//!
//! Library code only advances counters: a [`Progress`] is a handle to a few atomics that the
//! work bumps (once per megabyte read, once per chunk) and that a display — the CLI's progress
//! bar, polled a few times a second — reads. Nothing is drawn, locked or allocated on the hot
//! path, so a run without a display costs one relaxed atomic add per read.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Inner {
    /// Units done (bytes read, accesses recorded).
    done: AtomicU64,
    /// Units in all (0: unknown).
    total: AtomicU64,
    /// A second count shown beside the first (accesses while bytes are counted, ...).
    items: AtomicU64,
    /// What is being done ("pass 1 of 2"), set rarely.
    phase: Mutex<String>,
}

/// A shared progress counter; clones share the same counts.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Inner>);

impl Eq for Progress {}

impl PartialEq for Progress {
    /// Two handles are equal when they share the same counters.
    fn eq(&self, other: &Progress) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Starts a phase: `what` is shown, `total` units are expected (0: unknown), done = 0.
    pub fn start(&self, what: &str, total: u64) {
        if let Ok(mut p) = self.0.phase.lock() {
            p.clear();
            p.push_str(what);
        }
        self.0.total.store(total, Ordering::Relaxed);
        self.0.done.store(0, Ordering::Relaxed);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        self.0.done.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub fn set(&self, n: u64) {
        self.0.done.store(n, Ordering::Relaxed);
    }

    #[inline]
    pub fn set_items(&self, n: u64) {
        self.0.items.store(n, Ordering::Relaxed);
    }

    pub fn done(&self) -> u64 {
        self.0.done.load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.0.total.load(Ordering::Relaxed)
    }

    pub fn items(&self) -> u64 {
        self.0.items.load(Ordering::Relaxed)
    }

    pub fn phase(&self) -> String {
        self.0.phase.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// A reader that advances a [`Progress`] by the bytes it reads.
pub struct CountingReader<R> {
    inner: R,
    progress: Progress,
}

impl<R> CountingReader<R> {
    pub fn new(inner: R, progress: Progress) -> CountingReader<R> {
        CountingReader { inner, progress }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.add(n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for CountingReader<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.progress.add(amt as u64);
        self.inner.consume(amt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_read_and_phases() {
        let p = Progress::new();
        p.start("reading", 10);
        let mut r = CountingReader::new(&b"0123456789"[..], p.clone());
        let mut buf = [0u8; 4];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(
            (p.done(), p.total(), p.phase().as_str()),
            (4, 10, "reading")
        );
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(p.done(), 10);
        p.start("pass 2", 10);
        assert_eq!(p.done(), 0);
        assert_eq!(p, p.clone());
        assert_ne!(p, Progress::new());
    }
}
