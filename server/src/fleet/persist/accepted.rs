//! [`Accepted`]: one telemetry batch as intake decided it (which events count, under which
//! network), the unit the journal makes durable and the outbox counts and keeps. Counting it
//! is a plain function of the batch, so a batch replayed from the journal counts exactly as it
//! did when it arrived.

use ferry_shared::wire::telemetry::TelemetryEvent;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::fleet::counts::rollup::Rollup;
use crate::fleet::devices::hash_id;
use crate::fleet::persist::events::RawEvent;

/// One accepted event and what intake decided about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptedEvent {
    /// The event (validated).
    #[serde(rename = "e")]
    pub event: TelemetryEvent,
    /// It carried a valid receipt: it is counted (within the per-device cap) and its clock
    /// offset noted.
    #[serde(rename = "v")]
    pub verified: bool,
    /// Within the per-device cap: it adds to its variant's counts.
    #[serde(rename = "c")]
    pub counted: bool,
    /// The experiment arm its verified receipt names (`<experiment id>=<arm>`).
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
}

impl AcceptedEvent {
    /// An accepted event; the arm is read from its receipt when it verified.
    pub fn new(event: TelemetryEvent, verified: bool, counted: bool) -> Self {
        let arm = verified
            .then_some(event.receipt.as_deref())
            .flatten()
            .and_then(crate::fleet::intake::receipt::arm_of)
            .map(|t| format!("{}={}", t.id, t.arm.as_str()));
        Self {
            event,
            verified,
            counted,
            arm,
        }
    }
}

/// One batch as accepted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accepted {
    /// When it arrived (unix nanoseconds).
    #[serde(rename = "t")]
    pub received_ns: i64,
    /// The sender's network (the network quorum of learned deny entries).
    #[serde(rename = "n")]
    pub network: u64,
    /// Its events, in batch order.
    #[serde(rename = "e")]
    pub events: Vec<AcceptedEvent>,
}

impl Accepted {
    /// When it arrived.
    pub fn received_at(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.received_ns))
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }

    /// True when some event counts toward the aggregates.
    pub fn counts(&self) -> bool {
        self.events.iter().any(|e| e.verified)
    }

    /// Adds what it counts to `bucket` (the rollup of the minute it counts in); returns the
    /// models whose counts changed.
    pub fn count_into(&self, bucket: &mut Rollup) -> std::collections::BTreeSet<String> {
        let mut models = std::collections::BTreeSet::new();
        for a in self.events.iter().filter(|a| a.verified) {
            let e = &a.event;
            let id = hash_id(&e.install_id);
            if let Some(offset) = e.clock_offset_s {
                bucket.note_clock(&e.model, offset, id);
            }
            if a.counted {
                bucket
                    .variant_mut(&e.model, &e.release, &e.variant)
                    .add(e, id, self.network);
                if !models.contains(&e.model) {
                    models.insert(e.model.clone());
                }
            }
        }
        models
    }

    /// Its events for the raw log (moved), each marked with the journal record `seq` that
    /// holds it (0: none).
    pub fn into_raw(self, seq: u64) -> impl Iterator<Item = RawEvent> {
        let at = self.received_at();
        self.events.into_iter().map(move |a| RawEvent {
            event: a.event,
            received_at: at,
            counted: a.verified,
            arm: a.arm,
            seq,
        })
    }

    /// [`Accepted::into_raw`] by copy, for a batch that is read again (a replay).
    pub fn raw(&self, seq: u64) -> impl Iterator<Item = RawEvent> + '_ {
        let at = self.received_at();
        self.events.iter().map(move |a| RawEvent {
            event: a.event.clone(),
            received_at: at,
            counted: a.verified,
            arm: a.arm.clone(),
            seq,
        })
    }
}
