//! The fallback walk as a state machine without I/O: it says what to do next with the
//! candidates (fetch one, open one, hand one over, fall back to the last known good, stop),
//! takes what happened, and keeps what each outcome adds to the load report's attempts and to
//! the telemetry. The shell (`drive.rs`) only does what [`Walk::next`] says and reports back
//! with [`Walk::fetched`] and [`Walk::opened`]. No clock: durations come in as milliseconds,
//! and events are made by the caller's `base` function, so every fallback order is tested
//! here without a server, a runtime or a file.
//!
//! ```text
//! Fetch(0) ─ready─► Open(0) ─loaded─► Loaded(0)
//!    │                 └─failed─► Fetch(1) …
//!    ├─crashed before / operators missing / failed / deferred─► Fetch(1) …
//!    └─failed on a full disk─► Stop
//! after the last candidate: LastKnownGood when a download was deferred, else AllFailed
//! ```

use ferry_shared::errors::ErrorCode;
use ferry_shared::manifest::Variant;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::error::{Attempt, Stage};
use crate::load::fetch::Transfer;
use crate::run::golden::LoadFailure;

/// Makes the event of `kind` about a variant (the client's device, release and clock).
pub(crate) type EventBase<'a> = dyn Fn(EventKind, &Variant) -> TelemetryEvent + 'a;

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Check candidate `i`'s operators against the runtime, then make sure its files are
    /// cached (downloading them if allowed); report with [`Walk::fetched`].
    Fetch(usize),
    /// Open candidate `i`'s program and run its checks; report with [`Walk::opened`].
    Open(usize),
    /// Candidate `i` loaded: send the events and hand it over.
    Loaded(usize),
    /// Every candidate was tried and a download was not allowed: send the events; the last
    /// known good serves (or the first deferral is the error).
    LastKnownGood,
    /// Every candidate was tried and failed: send the events; the attempts are the error.
    AllFailed,
    /// A failure that ends the walk (a full disk: no other candidate can be stored either):
    /// send the events and stop with it.
    Stop,
}

/// How making sure of a candidate's files went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fetched {
    /// The variant crashed this app on an earlier launch (a native crash, an OOM kill, a hang
    /// the OS ended) under the same app, runtime and OS versions: passed over without a native
    /// call, as an attempt with code `crashed` and the stage it crashed in.
    Crashed {
        /// The stage it crashed in.
        stage: Stage,
        /// What is known of the crash.
        message: String,
    },
    /// The runtime lacks operators the variant's program calls (checked before a download).
    OperatorsMissing(String),
    /// Its files are cached; `Some` when this load downloaded them.
    Ready(Option<Transfer>),
    /// Its download is not allowed now (the download policy, the free space): not the
    /// variant's failure.
    Deferred {
        /// The catalogue code.
        code: String,
        /// Why.
        message: String,
    },
    /// The download or its checks failed.
    Failed {
        /// The download, or the hash or size check.
        stage: Stage,
        /// The catalogue code.
        code: String,
        /// What happened.
        message: String,
        /// Whether no candidate after it can do better (a full disk).
        ends_walk: bool,
    },
}

/// How opening a candidate's program went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Opened {
    /// It loaded (and passed its checks) in this many milliseconds.
    Loaded(f64),
    /// It failed after this many milliseconds.
    Failed(LoadFailure, f64),
}

/// Where the walk stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Fetch(usize),
    Open(usize),
    Done(Next),
}

/// The attempts and events of one walk over the candidates, best first, and where it stands.
pub(crate) struct Walk<'a> {
    candidates: Vec<&'a Variant>,
    base: &'a EventBase<'a>,
    attempts: Vec<Attempt>,
    events: Vec<TelemetryEvent>,
    at: At,
    deferred: bool,
}

impl<'a> Walk<'a> {
    /// A walk over `candidates`, best first.
    pub(crate) fn new(candidates: Vec<&'a Variant>, base: &'a EventBase<'a>) -> Self {
        let mut walk = Self {
            candidates,
            base,
            attempts: Vec::new(),
            events: Vec::new(),
            at: At::Fetch(0),
            deferred: false,
        };
        walk.at = walk.from(0);
        walk
    }

    /// What to do next.
    pub(crate) fn next(&self) -> Next {
        match self.at {
            At::Fetch(i) => Next::Fetch(i),
            At::Open(i) => Next::Open(i),
            At::Done(n) => n,
        }
    }

    /// Candidate `i`'s files, after `ms` on it: what the walk does with each outcome.
    pub(crate) fn fetched(&mut self, i: usize, outcome: Fetched, ms: f64) {
        if self.at != At::Fetch(i) {
            return;
        }
        self.at = match outcome {
            Fetched::Crashed { stage, message } => {
                self.failed(i, stage, ErrorCode::Crashed.as_str(), message, ms);
                self.from(i + 1)
            }
            Fetched::OperatorsMissing(message) => {
                self.failed(
                    i,
                    Stage::Select,
                    ErrorCode::OperatorsMissing.as_str(),
                    message,
                    ms,
                );
                self.from(i + 1)
            }
            Fetched::Ready(transfer) => {
                if let Some(t) = transfer {
                    self.downloaded(i, t);
                }
                At::Open(i)
            }
            Fetched::Deferred { code, message } => {
                self.deferred(i, &code, message, ms);
                self.deferred = true;
                self.from(i + 1)
            }
            Fetched::Failed {
                stage,
                code,
                message,
                ends_walk,
            } => {
                self.download_failed(i, stage, &code);
                if ends_walk {
                    At::Done(Next::Stop)
                } else {
                    self.failed(i, stage, &code, message, ms);
                    self.from(i + 1)
                }
            }
        };
    }

    /// Candidate `i`'s program, `ms` after the candidate's turn began.
    pub(crate) fn opened(&mut self, i: usize, outcome: Opened, ms: f64) {
        if self.at != At::Open(i) {
            return;
        }
        self.at = match outcome {
            Opened::Loaded(load_ms) => {
                self.loaded(i, load_ms);
                At::Done(Next::Loaded(i))
            }
            Opened::Failed(failure, load_ms) => {
                self.load_failed(i, failure, load_ms, ms);
                self.from(i + 1)
            }
        };
    }

    /// The turn of candidate `i`, or the end of the walk when there is none.
    fn from(&self, i: usize) -> At {
        if i < self.candidates.len() {
            At::Fetch(i)
        } else if self.deferred {
            At::Done(Next::LastKnownGood)
        } else {
            At::Done(Next::AllFailed)
        }
    }

    /// Candidate `i`'s download was not allowed (the download policy): an attempt in the
    /// report, and no telemetry (it is not the variant's failure).
    pub(crate) fn deferred(&mut self, i: usize, code: &str, message: String, ms: f64) {
        self.attempt(i, Stage::Download, code, message, ms);
    }

    /// Candidate `i`'s download failed at `stage` (the download, or the hash or size check):
    /// a failed download event.
    pub(crate) fn download_failed(&mut self, i: usize, stage: Stage, code: &str) {
        let v = self.candidates[i];
        self.events.push(TelemetryEvent {
            outcome: Outcome::Failed,
            error_code: Some(code.to_string()),
            stage: Some(stage.as_str().to_string()),
            ..(self.base)(EventKind::Download, v)
        });
    }

    /// Candidate `i` was downloaded (`t`: bytes fetched of the bytes missing): a download
    /// event.
    pub(crate) fn downloaded(&mut self, i: usize, t: Transfer) {
        let v = self.candidates[i];
        self.events.push(TelemetryEvent {
            bytes_fetched: Some(t.fetched),
            bytes_total: Some(t.total),
            sources: t.sources.clone(),
            ..(self.base)(EventKind::Download, v)
        });
    }

    /// Candidate `i` loaded in `load_ms`: a load event.
    pub(crate) fn loaded(&mut self, i: usize, load_ms: f64) {
        let v = self.candidates[i];
        self.events.push(TelemetryEvent {
            load_ms: Some(load_ms),
            ..(self.base)(EventKind::Load, v)
        });
    }

    /// Candidate `i`'s program did not load (`failure`, after `load_ms`): a failed load event,
    /// then the failure as for [`Walk::failed`].
    pub(crate) fn load_failed(&mut self, i: usize, failure: LoadFailure, load_ms: f64, ms: f64) {
        let v = self.candidates[i];
        self.events.push(TelemetryEvent {
            outcome: Outcome::Failed,
            error_code: Some(failure.code.to_string()),
            stage: Some(failure.stage.as_str().to_string()),
            load_ms: Some(load_ms),
            ..(self.base)(EventKind::Load, v)
        });
        self.failed(i, failure.stage, failure.code.as_str(), failure.message, ms);
    }

    /// Candidate `i` failed at `stage` after `ms`: an attempt in the report and, when a next
    /// candidate exists, a fallback event from this variant to it.
    pub(crate) fn failed(&mut self, i: usize, stage: Stage, code: &str, message: String, ms: f64) {
        self.attempt(i, stage, code, message, ms);
        if let Some(next) = self.candidates.get(i + 1) {
            let v = self.candidates[i];
            self.events.push(TelemetryEvent {
                error_code: Some(code.to_string()),
                outcome: Outcome::Failed,
                to_variant: Some(next.id.to_string()),
                stage: Some(stage.as_str().to_string()),
                ..(self.base)(EventKind::Fallback, v)
            });
        }
    }

    /// The events so far, taken (the walk goes on with none).
    pub(crate) fn take_events(&mut self) -> Vec<TelemetryEvent> {
        std::mem::take(&mut self.events)
    }

    /// The attempts, for the report or the error.
    pub(crate) fn into_attempts(self) -> Vec<Attempt> {
        self.attempts
    }

    fn attempt(&mut self, i: usize, stage: Stage, code: &str, message: String, ms: f64) {
        let v = self.candidates[i];
        self.attempts.push(Attempt {
            variant: v.id.to_string(),
            delegate: v.delegate.to_string(),
            stage,
            error_code: code.to_string(),
            message,
            duration_ms: ms,
        });
    }
}

#[cfg(test)]
mod tests;
