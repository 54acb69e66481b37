//! The fallback walk's bookkeeping, as pure functions: what each candidate's outcome (a
//! download refused, failed or done; a program that loaded or did not) adds to the load
//! report's attempts and to the telemetry. No I/O and no clock: durations come in as
//! milliseconds and events are made by the caller's `base` function, so every rule here is
//! tested without a server or a runtime.

use ferry_shared::manifest::Variant;
use ferry_shared::wire::telemetry::{EventKind, Outcome, TelemetryEvent};

use crate::error::{Attempt, Stage};
use crate::run::golden::LoadFailure;

/// Makes the event of `kind` about a variant (the client's device, release and clock).
pub(crate) type EventBase<'a> = dyn Fn(EventKind, &Variant) -> TelemetryEvent + 'a;

/// The attempts and events of one walk over the candidates, best first.
pub(crate) struct Walk<'a> {
    candidates: Vec<&'a Variant>,
    base: &'a EventBase<'a>,
    attempts: Vec<Attempt>,
    events: Vec<TelemetryEvent>,
}

impl<'a> Walk<'a> {
    /// A walk over `candidates`, best first.
    pub(crate) fn new(candidates: Vec<&'a Variant>, base: &'a EventBase<'a>) -> Self {
        Self {
            candidates,
            base,
            attempts: Vec::new(),
            events: Vec::new(),
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
    pub(crate) fn downloaded(&mut self, i: usize, t: super::fetch::Transfer) {
        let v = self.candidates[i];
        self.events.push(TelemetryEvent {
            bytes_fetched: Some(t.fetched),
            bytes_total: Some(t.total),
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
