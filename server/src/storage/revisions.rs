//! Append-only revision logs in the object store, for state that changes.
//!
//! A log lives under a prefix; revision `n` is `<prefix>/<n, 20 digits>.json`. Writing the next
//! revision uses a create-if-absent put (supported by the local store, S3 and Azure); a writer
//! that loses the race re-reads and retries, so no update is lost and the log is the history.
//!
//! Each revision is stored as `{"sha256": <hex>, "revision": <the value>}`, the digest taken
//! over the value's compact JSON with sorted keys. A revision whose digest does not match (a
//! torn or damaged write that still parses) is reported and skipped like an unreadable one.
//! Files written before checksums (the bare value) are still read.
//!
//! Rolling upgrades (protocol v1, `docs/protocol.md`): a revision written by a newer server is
//! read for what this one knows, but [`append`] refuses to derive the next revision from one it
//! cannot write back whole (a field it does not know, a `format` above [`STORE_FORMAT`]), with
//! [`StoreError::NewerRecord`], rather than drop what the newer server wrote.

use futures_util::TryStreamExt as _;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::storage::{Store, StoreError};

/// The newest stored-record `format` this server writes back (records without the field are
/// format 1).
pub const STORE_FORMAT: u64 = 1;

/// What of the stored value `raw` (a revision's inner value) would be lost if it were read as
/// `T` and written again, if anything: a newer `format`, or the first unknown field.
fn lost_in_rewrite<T: Serialize + DeserializeOwned>(raw: &serde_json::Value) -> Option<String> {
    if let Some(f) = raw.get("format").and_then(serde_json::Value::as_u64)
        && f > STORE_FORMAT
    {
        return Some(format!("format {f}"));
    }
    let typed: T = serde_json::from_value(raw.clone()).ok()?;
    let text = serde_json::to_vec(raw).ok()?;
    ferry_shared::wire::protocol::unknown_field_path(&text, &typed).map(|f| format!("field {f}"))
}

/// How many times a change is retried after losing a race.
pub const MAX_RACE_RETRIES: usize = 64;

fn key(prefix: &str, revision: u64) -> StorePath {
    StorePath::from(format!("{prefix}/{revision:020}.json"))
}

/// The revision keys under `prefix`, oldest first.
async fn numbered(store: &Store, prefix: &str) -> Result<Vec<(u64, StorePath)>, StoreError> {
    let metas: Vec<_> = store
        .list(Some(&StorePath::from(prefix)))
        .try_collect()
        .await?;
    let mut numbered: Vec<(u64, StorePath)> = metas
        .into_iter()
        .filter_map(|m| {
            let name = m.location.filename()?.strip_suffix(".json")?.parse().ok()?;
            Some((name, m.location))
        })
        .collect();
    numbered.sort_by_key(|(n, _)| *n);
    Ok(numbered)
}

/// The digest of a revision's value: SHA-256 of its compact JSON (object keys sorted).
fn digest(value: &serde_json::Value) -> String {
    use sha2::Digest as _;
    let canonical = serde_json::to_vec(value).unwrap_or_default();
    hex::encode(sha2::Sha256::digest(&canonical))
}

/// The bytes stored for `value`.
fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    let v = serde_json::to_value(value).map_err(|e| StoreError::Encode(e.to_string()))?;
    let sealed = serde_json::json!({ "sha256": digest(&v), "revision": v });
    serde_json::to_vec_pretty(&sealed).map_err(|e| StoreError::Encode(e.to_string()))
}

/// Parses stored bytes, checking the digest; a bare value (written before checksums) is
/// accepted as it is.
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    decode_value(bytes).and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
}

/// The stored value of a revision (inside its checksum wrapper), checked.
fn decode_value(bytes: &[u8]) -> Result<serde_json::Value, String> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let value = match v.as_object() {
        Some(o) if o.len() == 2 && o.contains_key("sha256") && o.contains_key("revision") => {
            let want = o["sha256"].as_str().unwrap_or_default();
            let inner = &o["revision"];
            if digest(inner) != want {
                return Err("its checksum does not match its contents".into());
            }
            inner.clone()
        }
        _ => v,
    };
    Ok(value)
}

/// Reads and parses one revision; `None` (logged) when it is unreadable or damaged.
async fn read_one<T: DeserializeOwned>(
    store: &Store,
    key: &StorePath,
) -> Result<Option<T>, StoreError> {
    let bytes = store.get(key).await?.bytes().await?;
    match decode::<T>(&bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            tracing::warn!("skipping unreadable revision {key}: {e}");
            Ok(None)
        }
    }
}

/// Every readable revision under `prefix`, oldest first, with its number.
pub async fn all<T: DeserializeOwned>(
    store: &Store,
    prefix: &str,
) -> Result<Vec<(u64, T)>, StoreError> {
    let numbered = numbered(store, prefix).await?;
    let mut out = Vec::with_capacity(numbered.len());
    for (n, k) in numbered {
        if let Some(v) = read_one(store, &k).await? {
            out.push((n, v));
        }
    }
    Ok(out)
}

/// The newest readable revision under `prefix` (reads only what it must).
pub async fn latest<T: DeserializeOwned>(
    store: &Store,
    prefix: &str,
) -> Result<Option<(u64, T)>, StoreError> {
    for (n, k) in numbered(store, prefix).await?.into_iter().rev() {
        if let Some(v) = read_one(store, &k).await? {
            return Ok(Some((n, v)));
        }
    }
    Ok(None)
}

/// Appends the next revision, computed from the newest readable one, retrying lost races.
/// `compute` gets that revision and the number the new one will be written under (one past the
/// highest present, readable or not), and may refuse the change with its own error type.
pub async fn append<T, E>(
    store: &Store,
    prefix: &str,
    compute: impl Fn(Option<&(u64, T)>, u64) -> Result<T, E>,
) -> Result<(u64, T), E>
where
    T: Serialize + DeserializeOwned,
    E: From<StoreError>,
{
    for _ in 0..MAX_RACE_RETRIES {
        // The next number follows the highest one present, readable or not: a torn newest
        // revision is skipped when reading, but its number stays taken.
        let numbered = numbered(store, prefix).await?;
        let top = numbered.last().map_or(0, |(n, _)| *n);
        let mut current = None;
        for (n, k) in numbered.iter().rev() {
            let bytes = store
                .get(k)
                .await
                .map_err(StoreError::from)?
                .bytes()
                .await
                .map_err(StoreError::from)?;
            let Ok(raw) = decode_value(&bytes) else {
                tracing::warn!("skipping unreadable revision {k}");
                continue;
            };
            // Whole (its checksum holds) but not readable as `T`: a newer server's form.
            let v =
                serde_json::from_value::<T>(raw.clone()).map_err(|e| StoreError::NewerRecord {
                    key: k.to_string(),
                    what: format!("a form this server cannot read: {e}"),
                })?;
            if let Some(what) = lost_in_rewrite::<T>(&raw) {
                return Err(StoreError::NewerRecord {
                    key: k.to_string(),
                    what,
                }
                .into());
            }
            current = Some((*n, v));
            break;
        }
        let revision = top + 1;
        let next = compute(current.as_ref(), revision)?;
        let bytes = encode(&next)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match store
            .put_opts(&key(prefix, revision), PutPayload::from(bytes), opts)
            .await
        {
            Ok(_) => return Ok((revision, next)),
            Err(object_store::Error::AlreadyExists { .. }) => continue,
            Err(e) => return Err(StoreError::from(e).into()),
        }
    }
    Err(StoreError::Contended {
        prefix: prefix.to_string(),
        tries: MAX_RACE_RETRIES,
    }
    .into())
}

/// A plan kept as a revision log: its revision number and its time, which [`append_plan`]
/// sets.
pub trait Revised {
    /// Sets the revision number (the one it is stored under).
    fn set_revision(&mut self, number: u64);
    /// Its time (RFC 3339), which never goes back from one revision to the next.
    fn at(&self) -> &str;
    /// Sets its time.
    fn set_at(&mut self, at: String);
}

impl Revised for ferry_shared::select::rollout::RolloutPlan {
    fn set_revision(&mut self, number: u64) {
        self.revision = number;
    }
    fn at(&self) -> &str {
        &self.at
    }
    fn set_at(&mut self, at: String) {
        self.at = at;
    }
}

impl Revised for ferry_shared::experiment::ExperimentPlan {
    fn set_revision(&mut self, number: u64) {
        self.revision = number;
    }
    fn at(&self) -> &str {
        &self.at
    }
    fn set_at(&mut self, at: String) {
        self.at = at;
    }
}

/// [`append`] for a plan: its revision is the number it is stored under (a torn revision file
/// takes a number without being readable), and its time is no older than the revision before
/// it (a change retried after a lost race, or written by a replica whose clock is behind).
pub async fn append_plan<T, E>(
    store: &Store,
    prefix: &str,
    compute: impl Fn(Option<&T>) -> Result<T, E>,
) -> Result<T, E>
where
    T: Revised + Serialize + DeserializeOwned,
    E: From<StoreError>,
{
    let (_, plan) = append::<T, E>(store, prefix, |cur, number| {
        let mut plan = compute(cur.map(|(_, p)| p))?;
        plan.set_revision(number);
        if let Some((_, before)) = cur
            && earlier(plan.at(), before.at())
        {
            plan.set_at(before.at().to_string());
        }
        Ok(plan)
    })
    .await?;
    Ok(plan)
}

/// True when RFC 3339 time `a` is before `b` (compared as times, not text: fractions of a
/// second vary in length). A time that does not parse is never earlier.
pub(crate) fn earlier(a: &str, b: &str) -> bool {
    let parse = |t: &str| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    };
    matches!((parse(a), parse(b)), (Some(a), Some(b)) if a < b)
}

/// The current time as RFC 3339 text, for revision records.
pub(crate) fn now_text() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Plan {
        revision: u64,
        rate: f64,
        reason: String,
    }

    #[test]
    fn revisions_carry_a_checksum_that_catches_damage_that_still_parses() {
        let plan = Plan {
            revision: 7,
            rate: 0.1 + 0.2,
            reason: "über".into(),
        };
        let bytes = encode(&plan).expect("encode");
        assert_eq!(decode::<Plan>(&bytes).expect("decode"), plan);
        // A changed value that is still valid JSON is refused.
        let text = String::from_utf8(bytes).expect("utf8");
        let damaged = text.replace("\"revision\": 7", "\"revision\": 8");
        assert_ne!(damaged, text);
        let err = decode::<Plan>(damaged.as_bytes()).expect_err("damaged");
        assert!(err.contains("checksum"), "{err}");
        // Truncated: not JSON at all.
        assert!(decode::<Plan>(&text.as_bytes()[..text.len() / 2]).is_err());
        // Files from before checksums still read.
        let bare = serde_json::to_vec(&plan).expect("json");
        assert_eq!(decode::<Plan>(&bare).expect("bare"), plan);
    }

    #[test]
    fn what_a_rewrite_would_lose_is_found() {
        let today = serde_json::json!({"revision": 1, "rate": 0.5, "reason": "x"});
        assert_eq!(lost_in_rewrite::<Plan>(&today), None);
        let newer =
            serde_json::json!({"revision": 1, "rate": 0.5, "reason": "x", "gates": {"max": 2}});
        assert_eq!(
            lost_in_rewrite::<Plan>(&newer).as_deref(),
            Some("field gates")
        );
        let format2 = serde_json::json!({"revision": 1, "rate": 0.5, "reason": "x", "format": 2});
        assert_eq!(
            lost_in_rewrite::<Plan>(&format2).as_deref(),
            Some("format 2")
        );
    }
}
