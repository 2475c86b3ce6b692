//! # dojo-progress: how long-running library calls report progress
//!
//! Position: beside every stage that runs long (rollouts, grading and validation batches,
//! synthesis, training, RL). The libraries report to a [`Progress`] handle they are given and
//! never decide how progress looks; the binary passes [`Bar::stderr`] (feature `bar`: an
//! indicatif bar on a terminal, plain log lines elsewhere) or [`Progress::quiet`]. So there is
//! one progress setup instead of one per library, and a caller embedding a library (a service,
//! a test) gets no output it did not ask for.
//!
//! Execution model: one handle serves one call, which may report from many threads and async
//! tasks at once; observers are `Send + Sync`, must be cheap and must not block. A call reports
//! phases in order: [`Progress::start`], then any number of [`Progress::advance`],
//! [`Progress::status`], [`Progress::event`] and [`Progress::line`], then [`Progress::finish`].

use std::sync::Arc;

/// What a [`Progress`] handle reports to.
pub trait Observer: Send + Sync {
    /// A phase of `total` units begins under `label`; `done` of them are already done (a
    /// resumed run).
    fn start(&self, label: &str, total: u64, done: u64);
    /// `n` more units are done; `status` is the text shown beside the count.
    fn advance(&self, n: u64, status: &str);
    /// The status text changes without progress (a unit started).
    fn status(&self, status: &str);
    /// One finished unit, described for a log: printed where no bar is drawn (a bar shows the
    /// count instead).
    fn event(&self, line: &str);
    /// A line everybody should see (a step's summary): above a bar, or plainly.
    fn line(&self, line: &str);
    /// The phase ends; a non-empty `status` stays visible as its final state.
    fn finish(&self, status: &str);
}

/// The handle libraries take in their options: an observer, or nothing (quiet, the default).
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn Observer>>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(shown)"
        } else {
            "Progress(quiet)"
        })
    }
}

impl Progress {
    /// Reports nothing.
    pub fn quiet() -> Progress {
        Progress(None)
    }

    pub fn new(observer: impl Observer + 'static) -> Progress {
        Progress(Some(Arc::new(observer)))
    }

    pub fn is_quiet(&self) -> bool {
        self.0.is_none()
    }

    pub fn start(&self, label: &str, total: u64, done: u64) {
        if let Some(o) = &self.0 {
            o.start(label, total, done);
        }
    }

    pub fn advance(&self, n: u64, status: &str) {
        if let Some(o) = &self.0 {
            o.advance(n, status);
        }
    }

    pub fn status(&self, status: &str) {
        if let Some(o) = &self.0 {
            o.status(status);
        }
    }

    pub fn event(&self, line: &str) {
        if let Some(o) = &self.0 {
            o.event(line);
        }
    }

    pub fn line(&self, line: &str) {
        if let Some(o) = &self.0 {
            o.line(line);
        }
    }

    pub fn finish(&self, status: &str) {
        if let Some(o) = &self.0 {
            o.finish(status);
        }
    }
}

#[cfg(feature = "bar")]
pub use bar::Bar;

#[cfg(feature = "bar")]
mod bar {
    use std::io::IsTerminal;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::{Observer, Progress};

    /// Progress on stderr: a bar (label, elapsed time, count, status, estimate) on a
    /// terminal; elsewhere no bar, and [`Observer::event`] / [`Observer::line`] as plain lines,
    /// so logs of non-interactive runs still say what finished.
    pub struct Bar {
        tty: bool,
        bar: Mutex<Option<indicatif::ProgressBar>>,
    }

    impl Bar {
        /// The handle the binary passes to libraries.
        pub fn stderr() -> Progress {
            Progress::new(Bar {
                tty: std::io::stderr().is_terminal(),
                bar: Mutex::new(None),
            })
        }

        fn with(&self, f: impl FnOnce(&indicatif::ProgressBar)) {
            if let Ok(b) = self.bar.lock()
                && let Some(b) = b.as_ref()
            {
                f(b);
            }
        }
    }

    impl Observer for Bar {
        fn start(&self, label: &str, total: u64, done: u64) {
            if !self.tty {
                return;
            }
            let bar = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{prefix:.bold} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg} ETA {eta}",
            ) {
                bar.set_style(style);
            }
            bar.set_prefix(label.to_string());
            bar.set_position(done);
            bar.enable_steady_tick(Duration::from_millis(250));
            if let Ok(mut b) = self.bar.lock()
                && let Some(old) = b.replace(bar)
            {
                old.finish_and_clear();
            }
        }

        fn advance(&self, n: u64, status: &str) {
            self.with(|b| {
                b.inc(n);
                b.set_message(status.to_string());
            });
        }

        fn status(&self, status: &str) {
            self.with(|b| b.set_message(status.to_string()));
        }

        fn event(&self, line: &str) {
            if !self.tty {
                eprintln!("{line}");
            }
        }

        fn line(&self, line: &str) {
            let mut shown = false;
            self.with(|b| {
                b.println(line);
                shown = true;
            });
            if !shown {
                eprintln!("{line}");
            }
        }

        fn finish(&self, status: &str) {
            if let Ok(mut b) = self.bar.lock()
                && let Some(b) = b.take()
            {
                if status.is_empty() {
                    b.finish_and_clear();
                } else {
                    b.finish_with_message(status.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Record(Mutex<Vec<String>>);

    impl Observer for Arc<Record> {
        fn start(&self, label: &str, total: u64, done: u64) {
            self.0
                .lock()
                .unwrap()
                .push(format!("start {label} {done}/{total}"));
        }
        fn advance(&self, n: u64, status: &str) {
            self.0.lock().unwrap().push(format!("+{n} {status}"));
        }
        fn status(&self, status: &str) {
            self.0.lock().unwrap().push(format!("status {status}"));
        }
        fn event(&self, line: &str) {
            self.0.lock().unwrap().push(format!("event {line}"));
        }
        fn line(&self, line: &str) {
            self.0.lock().unwrap().push(format!("line {line}"));
        }
        fn finish(&self, status: &str) {
            self.0.lock().unwrap().push(format!("finish {status}"));
        }
    }

    #[test]
    fn a_handle_forwards_to_its_observer_and_quiet_reports_nothing() {
        let rec = Arc::new(Record::default());
        let p = Progress::new(rec.clone());
        let q = p.clone();
        std::thread::spawn(move || q.advance(1, "a"))
            .join()
            .unwrap();
        p.start("eval", 3, 1);
        p.status("s");
        p.event("e");
        p.line("l");
        p.finish("done");
        assert_eq!(
            *rec.0.lock().unwrap(),
            [
                "+1 a",
                "start eval 1/3",
                "status s",
                "event e",
                "line l",
                "finish done"
            ]
        );
        let quiet = Progress::default();
        assert!(quiet.is_quiet() && !p.is_quiet());
        quiet.start("x", 1, 0);
        quiet.finish("");
        assert_eq!(format!("{quiet:?}"), "Progress(quiet)");
    }
}
