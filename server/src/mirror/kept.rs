//! Answers a site mirror keeps so that its devices resolve while the origin is away: the shared
//! resolve answers (one per device class and cohort, signed by the origin's online key, valid
//! until their decision expires), and the latest keyring list and trust file. Kept on disk, so
//! a mirror restarted during an outage still has them.
//!
//! Only answers that may be shared are kept: a decision made for one request (a nonce) or one
//! device (a pin) is relayed, never kept, and a kept answer is served without the telemetry
//! receipt (which names one install). A decision is kept only when it verifies under the trust
//! the mirror holds (the pinned trust file walked through the keyrings it relayed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ferry_shared::trust::dsse::{DsseLimits, Envelope, KeyRole, verify};
use ferry_shared::trust::keyring::TrustState;
use ferry_shared::wire::resolve::{
    Cohort, CohortRule, DECISION_PAYLOAD_TYPE, Decision, ResolveRequest,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// One kept resolve answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeptAnswer {
    /// The answer's JSON without its receipt.
    body: serde_json::Value,
    /// When its decision expires.
    #[serde(with = "time::serde::rfc3339")]
    expires_at: OffsetDateTime,
    /// The rollout's cohort rule, to place a device in a cohort while the origin is away.
    rule: Option<CohortRule>,
    /// The model.
    model: String,
}

/// Why no kept answer serves a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotKept {
    /// The request carries a nonce: only the origin can answer it.
    #[error(
        "the request asks for a fresh answer (a nonce: the device has no time estimate), which \
         only the origin can sign"
    )]
    Fresh,
    /// Nothing kept for this device class and cohort.
    #[error("the mirror holds no answer for this device class")]
    None,
    /// The kept answer's decision has expired.
    #[error("the answer the mirror holds expired at {0}")]
    Expired(String),
}

/// The kept answers and documents.
#[derive(Debug)]
pub struct Kept {
    dir: PathBuf,
    answers: Mutex<HashMap<String, KeptAnswer>>,
    trust: Mutex<TrustState>,
}

fn key(selection: &ferry_shared::Sha256Digest, cohort: Cohort) -> String {
    let c = match cohort {
        Cohort::Baseline => "baseline",
        Cohort::Staged => "staged",
    };
    format!("{}-{c}", selection.to_hex())
}

impl Kept {
    /// Opens the kept answers under `dir` (reading what a previous run kept), with `trust`
    /// (the pinned trust file, walked through the kept keyrings).
    pub fn open(dir: &Path, trust: TrustState) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir.join("answers"))?;
        let mut answers = HashMap::new();
        for e in std::fs::read_dir(dir.join("answers"))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(k) = name.strip_suffix(".json") else {
                continue;
            };
            if let Ok(a) = std::fs::read(e.path())
                .map_err(anyhow::Error::from)
                .and_then(|b| Ok(serde_json::from_slice::<KeptAnswer>(&b)?))
            {
                answers.insert(k.to_string(), a);
            }
        }
        let kept = Kept {
            dir: dir.to_path_buf(),
            answers: Mutex::new(answers),
            trust: Mutex::new(trust),
        };
        if let Some(list) = kept.document("keyring") {
            let _ = kept.learn_keyrings(&list);
        }
        Ok(kept)
    }

    /// The keys the mirror trusts at `now` (the pinned trust walked through the keyrings it
    /// relayed).
    pub fn ring_at(&self, now: OffsetDateTime) -> ferry_shared::trust::dsse::KeyRing {
        ferry_shared::sync::lock(&self.trust).ring_at(now)
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        ferry_shared::sync::lock(&self.answers).len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A kept document (`keyring`, `keys`): the bytes the origin last sent.
    pub fn document(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(format!("{name}.json"))).ok()
    }

    /// Keeps document `name` (written aside and renamed: a reader never sees half) when it is
    /// what it should be: a keyring list whose keyrings verify from the pinned trust, a trust
    /// file that parses. Anything else (a captive portal's page, a proxy's error) is not kept.
    pub fn keep_document(&self, name: &str, bytes: &[u8]) -> bool {
        let good = match name {
            "keyring" => self.learn_keyrings(bytes),
            "keys" => ferry_shared::trust::TrustFile::from_json(bytes).is_ok(),
            _ => false,
        };
        if good {
            let _ = write_atomic(&self.dir.join(format!("{name}.json")), bytes);
        }
        good
    }

    /// Walks the mirror's trust through the keyrings of a `GET /v1/keyring` answer; false when
    /// it is not one, or its keyrings do not verify.
    fn learn_keyrings(&self, bytes: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct List {
            keyrings: Vec<Envelope>,
        }
        let Ok(list) = serde_json::from_slice::<List>(bytes) else {
            return false;
        };
        let mut trust = ferry_shared::sync::lock(&self.trust);
        let mut next = trust.clone();
        let newer: Vec<Envelope> = list
            .keyrings
            .into_iter()
            .skip(usize::try_from(next.version()).unwrap_or(usize::MAX))
            .collect();
        if next.advance_all(&newer).is_ok() {
            *trust = next;
            return true;
        }
        false
    }

    /// Keeps the answer `body` (a 200 to `request`) when it may be shared.
    pub fn consider(&self, request: &ResolveRequest, body: &[u8], now: OffsetDateTime) {
        if request.nonce.is_some() {
            return;
        }
        let Ok(mut answer) = serde_json::from_slice::<serde_json::Value>(body) else {
            return;
        };
        let Some(decision) = self.verified_decision(&answer, now) else {
            return;
        };
        if decision.pinned.is_some()
            || decision.nonce.is_some()
            || decision.request != request.selection_digest()
        {
            return;
        }
        if let Some(map) = answer.as_object_mut() {
            map.remove("receipt");
        }
        let k = key(&decision.request, decision.cohort);
        let kept = KeptAnswer {
            body: answer,
            expires_at: decision.expires_at,
            rule: decision.cohort_rule.clone(),
            model: decision.model.to_string(),
        };
        if let Ok(bytes) = serde_json::to_vec(&kept) {
            let _ = write_atomic(&self.dir.join("answers").join(format!("{k}.json")), &bytes);
        }
        ferry_shared::sync::lock(&self.answers).insert(k, kept);
    }

    /// Forgets the answers kept for `request`'s device class: the origin has just refused it
    /// (a revoked release, a deny entry, a model withdrawn), so what was kept must not be served
    /// in an outage.
    pub fn forget(&self, request: &ResolveRequest) {
        let selection = request.selection_digest();
        let mut answers = ferry_shared::sync::lock(&self.answers);
        for cohort in [Cohort::Baseline, Cohort::Staged] {
            let k = key(&selection, cohort);
            if answers.remove(&k).is_some() {
                let _ = std::fs::remove_file(self.dir.join("answers").join(format!("{k}.json")));
            }
        }
    }

    /// The decision of `answer`, when its signature verifies under the mirror's trust.
    fn verified_decision(
        &self,
        answer: &serde_json::Value,
        now: OffsetDateTime,
    ) -> Option<Decision> {
        let env: Envelope = serde_json::from_value(answer.get("decision")?.clone()).ok()?;
        let ring = ferry_shared::sync::lock(&self.trust).ring_at(now);
        let bytes = verify(
            &env,
            DECISION_PAYLOAD_TYPE,
            &ring,
            KeyRole::Online,
            1,
            &DsseLimits::default(),
        )
        .ok()?
        .into_inner();
        Decision::from_json(&bytes).ok()
    }

    /// The kept answer for `request` at `now`, without a receipt.
    pub fn answer(
        &self,
        request: &ResolveRequest,
        now: OffsetDateTime,
    ) -> Result<Vec<u8>, NotKept> {
        if request.nonce.is_some() {
            return Err(NotKept::Fresh);
        }
        let selection = request.selection_digest();
        let answers = ferry_shared::sync::lock(&self.answers);
        // The device's cohort, by the rule a kept answer for its class carries.
        let rule = [Cohort::Baseline, Cohort::Staged]
            .iter()
            .filter_map(|c| answers.get(&key(&selection, *c)))
            .find_map(|a| a.rule.clone().map(|r| (r, a.model.clone())));
        let cohort = match rule {
            Some((r, model)) => {
                if ferry_shared::select::rollout::bucket(&r.salt, &model, &request.install_id)
                    < r.basis_points
                {
                    Cohort::Staged
                } else {
                    Cohort::Baseline
                }
            }
            None => Cohort::Baseline,
        };
        let kept = answers.get(&key(&selection, cohort)).ok_or(NotKept::None)?;
        if now >= kept.expires_at {
            return Err(NotKept::Expired(
                kept.expires_at
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
            ));
        }
        serde_json::to_vec(&kept.body).map_err(|_| NotKept::None)
    }
}

/// Writes `bytes` to `path` through a file beside it and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
