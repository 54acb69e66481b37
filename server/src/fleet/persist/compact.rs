//! Compaction of the telemetry buckets under a lease one replica holds at a time: minutes
//! into hours, hours into days, and raw files past their retention deleted; the lease holder
//! also collects unused operator sets ([`crate::fleet::persist::collect`]).

use time::OffsetDateTime;

use crate::fleet::Fleet;
use crate::fleet::counts::rollup::Rollup;
use crate::fleet::persist::buckets::{self, Lease, Level, Part};
use crate::fleet::persist::stored::read_bucket_whole;
use crate::fleet::persist::{collect, events};

/// Takes or renews the compaction lease: true when this run holds it.
async fn take_lease(fleet: &Fleet, now: i64) -> bool {
    use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
    let path = buckets::lease_path();
    let mine = Lease {
        holder: fleet.writer.clone(),
        expires_at: now + buckets::LEASE_SECS,
    };
    let Ok(bytes) = serde_json::to_vec(&mine) else {
        return false;
    };
    let current = match fleet.store.get(&path).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => serde_json::from_slice::<Lease>(&b).ok(),
            Err(_) => return false,
        },
        Err(object_store::Error::NotFound { .. }) => None,
        Err(_) => return false,
    };
    match current {
        Some(l) if l.holder == fleet.writer => {
            // Renew.
            fleet
                .store
                .put(&path, PutPayload::from(bytes))
                .await
                .is_ok()
        }
        Some(l) if l.expires_at > now => false,
        other => {
            if other.is_some() {
                // Expired: whoever deletes it and then creates it first takes it. Two takers
                // at once are harmless: parts are create-if-absent, so no bucket is merged
                // twice.
                let _ = fleet.store.delete(&path).await;
            }
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            fleet
                .store
                .put_opts(&path, PutPayload::from(bytes), opts)
                .await
                .is_ok()
        }
    }
}

/// The `telemetry/events/date=YYYY-MM-DD` folders older than `telemetry.raw_retention_days`.
async fn expired_raw_days(fleet: &Fleet, now: i64) -> Vec<object_store::path::Path> {
    let keep_from = Level::Day.floor(now) - i64::from(fleet.config.raw_retention_days) * 86_400;
    let cutoff = OffsetDateTime::from_unix_timestamp(keep_from)
        .map(|t| t.date().to_string())
        .unwrap_or_default();
    let Ok(listed) = fleet
        .store
        .list_with_delimiter(Some(&events::prefix()))
        .await
    else {
        return Vec::new();
    };
    listed
        .common_prefixes
        .into_iter()
        .filter(|p| {
            p.filename()
                .and_then(|f| f.strip_prefix("date="))
                // ISO dates compare as text.
                .is_some_and(|d| d.len() == 10 && *d < *cutoff.as_str())
        })
        .collect()
}

/// Deletes every object under `prefix`.
async fn delete_under(fleet: &Fleet, prefix: &object_store::path::Path) {
    use futures_util::TryStreamExt as _;
    use object_store::ObjectStoreExt as _;
    let metas: Vec<_> = match fleet.store.list(Some(prefix)).try_collect().await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("raw telemetry under {prefix} not listed for deletion: {e}");
            return;
        }
    };
    for m in &metas {
        if let Err(e) = fleet.store.delete(&m.location).await {
            tracing::warn!("raw telemetry {} not deleted: {e}", m.location);
        }
    }
    tracing::info!(
        "deleted {} raw telemetry files under {prefix} (past the retention)",
        metas.len()
    );
}

/// Compacts old buckets (see [`crate::fleet::persist::buckets::plan`]) when this run holds the lease,
/// deletes raw telemetry past its retention, and (hourly) operator sets no device sent lately.
pub(crate) async fn compact(fleet: &Fleet, listing: &buckets::Listing, now: i64) {
    use object_store::{ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
    let plan = buckets::plan(listing, now, fleet.config.retention_days);
    let expired = expired_raw_days(fleet, now).await;
    let unused = if fleet.telemetry.seen().collection_due(collect::EVERY) {
        collect::unused_sets(fleet, now).await
    } else {
        Vec::new()
    };
    if plan.merges.is_empty() && plan.deletes.is_empty() && expired.is_empty() && unused.is_empty()
    {
        return;
    }
    if !take_lease(fleet, now).await {
        return;
    }
    collect::delete(fleet, &unused).await;
    for prefix in &expired {
        delete_under(fleet, prefix).await;
    }
    'merges: for merge in &plan.merges {
        let mut part = Part {
            sources: Vec::new(),
            rollup: Rollup::default(),
        };
        for s in &merge.sources {
            match read_bucket_whole(fleet, s, true).await {
                Ok(Some((_, _, Some(lost)))) => {
                    // Merging it would drop what a newer replica wrote: an upgraded one
                    // compacts this bucket; its counts are still read for every view.
                    tracing::warn!(
                        "telemetry compaction leaves {} to an upgraded replica: it was written \
                         by a newer ferry server ({lost})",
                        merge.target.path()
                    );
                    continue 'merges;
                }
                Ok(Some((r, _, None))) => {
                    part.rollup.merge(&r);
                    part.sources.push(s.path().to_string());
                }
                // Gone since the listing: another compactor took it.
                Ok(None) => continue 'merges,
                Err(e) => {
                    tracing::warn!("telemetry compaction skips {}: {e}", s.path());
                }
            }
        }
        if part.sources.is_empty() {
            continue;
        }
        let Ok(bytes) = serde_json::to_vec(&part) else {
            continue;
        };
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match fleet
            .store
            .put_opts(&merge.target.path(), PutPayload::from(bytes), opts)
            .await
        {
            Ok(_) => {
                for s in &part.sources {
                    let _ = fleet
                        .store
                        .delete(&object_store::path::Path::from(s.as_str()))
                        .await;
                }
                tracing::info!(
                    "compacted {} telemetry buckets into {}",
                    part.sources.len(),
                    merge.target.path()
                );
            }
            // Another compactor wrote this part first: the next pass sees it.
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!("telemetry compaction stopped: {e}"),
        }
    }
    for d in &plan.deletes {
        match fleet.store.delete(&d.path()).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => tracing::warn!("telemetry bucket {} not deleted: {e}", d.path()),
        }
    }
}
