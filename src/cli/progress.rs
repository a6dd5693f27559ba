//! Progress bars on stderr for long commands, drawn only when stderr is a terminal and
//! `--quiet` is not given. The library crates advance a `Progress` counter; a thread here
//! polls it a few times a second and draws it with indicatif, so JSON/CSV on stdout and the
//! work itself are unaffected.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle};
use mgbench_capture::progress::Progress;

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: draw no progress.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// How the counts are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Bytes of a known total (reading a trace or an input file): rate and ETA.
    Bytes,
    /// Items of a known total (configs of a replay).
    Items,
    /// A capture: accesses recorded (`done`), trace bytes (`items`), rate, elapsed.
    Capture,
}

/// A progress bar that follows a [`Progress`] until dropped.
pub struct Display {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
}

impl Display {
    /// Starts drawing `progress` in `style`, or returns None (quiet, or stderr not a terminal).
    pub fn start(progress: &Progress, style: Style) -> Option<Display> {
        if QUIET.load(Ordering::Relaxed) || !std::io::stderr().is_terminal() {
            return None;
        }
        let template = match style {
            Style::Bytes => {
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}"
            }
            Style::Items => "{spinner} [{bar:20}] {pos}/{len} {msg} ({elapsed})",
            Style::Capture => "{spinner} {elapsed} {msg}",
        };
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (bar, stop, progress) = (bar.clone(), Arc::clone(&stop), progress.clone());
            std::thread::spawn(move || poll(&bar, &stop, &progress, style))
        };
        Some(Display {
            bar,
            stop,
            poller: Some(poller),
        })
    }

    /// Runs `f` with the bar hidden (for output that would otherwise be drawn over).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }
}

/// Runs `f` with `display`'s bar (if any) hidden.
pub fn suspended<R>(display: &Option<Display>, f: impl FnOnce() -> R) -> R {
    match display {
        Some(d) => d.suspend(f),
        None => f(),
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.poller.take() {
            p.thread().unpark();
            let _ = p.join();
        }
        self.bar.finish_and_clear();
    }
}

fn poll(bar: &ProgressBar, stop: &AtomicBool, progress: &Progress, style: Style) {
    let start = Instant::now();
    let mut phase = String::new();
    while !stop.load(Ordering::Relaxed) {
        let now = progress.phase();
        if now != phase {
            // A new phase of bytes (pass 2 of synth) restarts the rate and ETA.
            if style == Style::Bytes {
                bar.reset();
            }
            phase = now;
        }
        let (done, total) = (progress.done(), progress.total());
        match style {
            Style::Bytes | Style::Items => {
                bar.set_length(total.max(done));
                bar.set_position(done);
                bar.set_message(phase.clone());
            }
            Style::Capture => {
                let secs = start.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!(
                    "{phase}: {} accesses recorded, trace {}, {} accesses/s",
                    HumanCount(done),
                    HumanBytes(progress.items()),
                    HumanCount((done as f64 / secs) as u64)
                ));
            }
        }
        bar.tick();
        // Woken early when the display is dropped, so that the command does not wait.
        std::thread::park_timeout(Duration::from_millis(100));
    }
}
