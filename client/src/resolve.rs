//! Asking the server what to load: the resolve request built from the device and the runtime,
//! retries of transient failures, and verification of the answer into a [`Plan`].

use ferry_shared::BackendId;
use ferry_shared::dsse::{Envelope, Verified};
use ferry_shared::keyring::{Keyring, KeyringResponse};
use ferry_shared::resolve::{ErrorBody, ResolveRequest, ResolveResponse};

use crate::error::ClientError;
use crate::types::DeviceInfo;
use crate::verify::{Plan, effective_revocations, revoked, verify_response};
use crate::{Client, download};

impl Client {
    pub(crate) fn request(
        &self,
        model: &str,
        device: &DeviceInfo,
        nonce: Option<String>,
    ) -> Result<ResolveRequest, ClientError> {
        let mut backends: Vec<String> = self.runtime.registered_backends();
        for b in &device.claimed_backends {
            if !backends.contains(b) {
                backends.push(b.clone());
            }
        }
        Ok(ResolveRequest {
            model: model
                .parse()
                .map_err(|e| ClientError::Config(format!("model: {e}")))?,
            install_id: device.install_id.clone(),
            app_version: self.app_version.clone(),
            runtime_version: self.runtime.version(),
            backends: backends
                .iter()
                .filter_map(|b| BackendId::new(b.as_str()).ok())
                .collect(),
            platform: device.platform.clone(),
            os_version: device.os_version.clone(),
            device_model: device.device_model.clone(),
            soc: device.soc.clone(),
            ram_mb: device.ram_mb,
            nonce,
        })
    }

    /// Asks the server which variants of `model` suit `device` (retrying transient failures)
    /// and verifies the answer: the decision against the online keys, its expiry and sequence
    /// (the sequence is then persisted, so an older answer is refused as a replay), the release
    /// against the release keys and every candidate against the signed manifest. Nothing is
    /// downloaded.
    ///
    /// Freshness does not rest on the device's clock: a client that has not learned the
    /// server's time in this boot asks for a decision made for its request alone (a nonce),
    /// and learns the time from it; a decision that fails a time check is asked for again
    /// that way (`docs/client.md`, device clocks).
    pub fn resolve(&self, model: &str, device: &DeviceInfo) -> Result<Verified<Plan>, ClientError> {
        let learn_first =
            self.clock.since_boot().is_some() && self.time.estimate(&*self.clock).is_none();
        let first = self.resolve_with(model, device, learn_first.then(fresh_nonce));
        match first {
            Err(e) if !learn_first && is_time_error(&e) => {
                self.resolve_with(model, device, Some(fresh_nonce()))
            }
            other => other,
        }
    }

    /// One resolve, with `nonce` when the decision must be made for this request alone.
    fn resolve_with(
        &self,
        model: &str,
        device: &DeviceInfo,
        nonce: Option<String>,
    ) -> Result<Verified<Plan>, ClientError> {
        let url = format!("{}/v1/resolve", self.server);
        let request = self.request(model, device, nonce)?;
        let body = serde_json::to_vec(&request).map_err(|e| ClientError::Config(e.to_string()))?;
        let mut failures = 0u32;
        let (status, text) = loop {
            if failures > 0 {
                std::thread::sleep(download::backoff(&self.limits, failures));
            }
            let result = self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(&body[..]);
            let problem = match result {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if status >= 500 && failures < self.limits.retries {
                        format!("HTTP {status}")
                    } else if status >= 500 {
                        return Err(ClientError::Server { url, status });
                    } else {
                        // A planned retirement of this protocol, announced by the server.
                        self.note_sunset(
                            resp.headers()
                                .get("ferry-protocol-sunset")
                                .and_then(|v| v.to_str().ok())
                                .filter(|v| {
                                    v.len() == 10
                                        && v.bytes().all(|b| b.is_ascii_digit() || b == b'-')
                                })
                                .map(str::to_string),
                        );
                        let text = resp
                            .body_mut()
                            .with_config()
                            .limit(self.max_response_bytes)
                            .read_to_string()
                            .map_err(|e| ClientError::BadResponse {
                                url: url.clone(),
                                message: e.to_string(),
                            })?;
                        break (status, text);
                    }
                }
                Err(e) => e.to_string(),
            };
            failures += 1;
            if failures > self.limits.retries {
                return Err(ClientError::Network {
                    url,
                    message: problem,
                });
            }
        };
        if status != 200 {
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => ClientError::Rejected {
                    code: e.code,
                    message: e.message,
                    status,
                },
                Err(_) => ClientError::BadResponse {
                    url,
                    message: format!("HTTP {status} without an error body"),
                },
            });
        }
        let resp: ResolveResponse =
            serde_json::from_str(&text).map_err(|e| ClientError::BadResponse {
                url: url.clone(),
                message: e.to_string(),
            })?;
        self.follow_keyring(&resp, model)?;
        let release = self.release_envelope(&resp)?;
        let trust = self.trust();
        let last = self.cache().last_sequence(model);
        let plan = verify_response(&resp, &release, &request, &trust, self.now(), last)?;
        // A decision made for this request's nonce carries the server's time: judge by it
        // from now on.
        if let (Some(_), Some(time)) = (&plan.decision.nonce, plan.decision.time) {
            self.time.learn(time, &*self.clock);
        }
        let ring = trust.ring_at(self.now());
        let held = self
            .cache()
            .revocations(model)
            .map(|(e, kv)| (e.clone(), kv));
        let (list, keep) = effective_revocations(
            model,
            held.as_ref().map(|(e, kv)| (e, *kv)),
            resp.revocations.as_ref(),
            plan.decision().revocations_version,
            &ring,
            trust.version(),
        )?;
        if let Some(env) = keep {
            self.cache()
                .record_revocations(model, env, trust.version())?;
        }
        if let Some(e) = revoked(model, &plan.decision().release.to_string(), list.as_ref()) {
            return Err(e);
        }
        self.cache().record_sequence(
            model,
            plan.decision().keyring_version,
            plan.decision().sequence,
        )?;
        Ok(plan)
    }

    /// When the answer names a newer keyring version than the one held (or the model's replay
    /// floor was set under a newer one, which a device that lost its stored keyrings would
    /// otherwise refuse forever), fetches `GET /v1/keyring` and walks it from the held version
    /// (each version signed by the root keys of the one before; none skipped). The answer's
    /// claim is read before any check, so at worst it costs one request: the decision is then
    /// verified against the walked keyring. Concurrent walks only ever move the trust forward.
    fn follow_keyring(&self, resp: &ResolveResponse, model: &str) -> Result<(), ClientError> {
        #[derive(serde::Deserialize)]
        struct Peek {
            #[serde(default)]
            keyring_version: u64,
        }
        let held = self.trust();
        if !held.is_rooted() {
            return Ok(());
        }
        let claimed = ferry_shared::dsse::decode_payload(&resp.decision, &Default::default())
            .ok()
            .and_then(|b| serde_json::from_slice::<Peek>(&b).ok())
            .map_or(0, |p| p.keyring_version);
        let floor = self.cache().last_sequence(model).0;
        if claimed.max(floor) <= held.version() {
            return Ok(());
        }
        let url = format!("{}/v1/keyring", self.server);
        let bad = |message: String| ClientError::BadResponse {
            url: url.clone(),
            message,
        };
        let mut got = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| ClientError::Network {
                url: url.clone(),
                message: e.to_string(),
            })?;
        if got.status().as_u16() != 200 {
            return Err(bad(format!("HTTP {}", got.status().as_u16())));
        }
        let text = got
            .body_mut()
            .with_config()
            .limit(self.max_response_bytes)
            .read_to_string()
            .map_err(|e| bad(e.to_string()))?;
        let chain: KeyringResponse = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let mut next = held.clone();
        let mut walked = Vec::new();
        for env in &chain.keyrings {
            let before = next.version();
            next.advance_all(std::slice::from_ref(env))
                .map_err(|e| ClientError::Verify {
                    code: e.code(),
                    message: e.to_string(),
                })?;
            if next.version() > before {
                walked.push(env.clone());
            }
        }
        // Install under the lock, and only forward: another load may have walked further
        // meanwhile (or a lagging replica served this one an older chain).
        let mut trust = ferry_shared::sync::lock(&self.trust);
        if next.version() > trust.version() {
            let held_version = trust.version();
            let mut cache = self.cache();
            let mut kept: Vec<_> = cache
                .keyrings()
                .iter()
                .filter(|env| Keyring::peek_version(env).is_some_and(|v| v <= held_version))
                .cloned()
                .collect();
            kept.extend(
                walked
                    .into_iter()
                    .filter(|env| Keyring::peek_version(env).is_some_and(|v| v > held_version)),
            );
            cache.record_keyrings(kept)?;
            *trust = next;
        }
        Ok(())
    }

    /// The signed release envelope the answer refers to: from the answer when it carries it,
    /// else from the cache, else fetched once from its URL and kept. Its bytes must hash to the
    /// digest of the reference (which the signed decision names too, checked when verifying).
    fn release_envelope(&self, resp: &ResolveResponse) -> Result<Envelope, ClientError> {
        let want = resp.release_ref.sha256;
        // Nothing is fetched or stored for an answer whose decision does not verify, or names
        // another manifest than the reference: only then do the bytes at the (unsigned) URL
        // count, by their digest.
        let ring = self.trust().ring_at(self.now());
        let decision = ferry_shared::dsse::verify(
            &resp.decision,
            ferry_shared::resolve::DECISION_PAYLOAD_TYPE,
            &ring,
            ferry_shared::dsse::KeyRole::Online,
            1,
            &Default::default(),
        )
        .map_err(|e| ClientError::Verify {
            code: e.code(),
            message: e.to_string(),
        })?;
        let named = ferry_shared::resolve::Decision::from_json(decision.value())
            .map_err(|e| ClientError::Verify {
                code: e.code(),
                message: e.to_string(),
            })?
            .release_sha256;
        if named != want {
            return Err(ClientError::DecisionMismatch(format!(
                "the decision names release manifest {named}, the answer refers to {want}"
            )));
        }
        if let Some(env) = &resp.release {
            let bytes = serde_json::to_vec(env).map_err(|e| ClientError::Config(e.to_string()))?;
            if ferry_shared::Sha256Digest::of(&bytes) != want {
                return Err(ClientError::DecisionMismatch(
                    "the release manifest in the answer is not the one it refers to".into(),
                ));
            }
            return Ok(env.clone());
        }
        if let Some(env) = self.cache().release(&want) {
            return Ok(env);
        }
        let url = self.url_for(&resp.release_ref.url);
        let bad = |message: String| ClientError::BadResponse {
            url: url.clone(),
            message,
        };
        let mut failures = 0u32;
        let bytes = loop {
            if failures > 0 {
                std::thread::sleep(download::backoff(&self.limits, failures));
            }
            let problem = match self.agent.get(&url).call() {
                Ok(mut got) => {
                    let status = got.status().as_u16();
                    if status == 200 {
                        break got
                            .body_mut()
                            .with_config()
                            .limit(self.max_response_bytes)
                            .read_to_vec()
                            .map_err(|e| bad(e.to_string()))?;
                    }
                    if status < 500 {
                        return Err(bad(format!("HTTP {status}")));
                    }
                    format!("HTTP {status}")
                }
                Err(e) => e.to_string(),
            };
            failures += 1;
            if failures > self.limits.retries {
                return Err(ClientError::Network {
                    url: url.clone(),
                    message: problem,
                });
            }
        };
        let actual = ferry_shared::Sha256Digest::of(&bytes);
        if actual != want {
            return Err(ClientError::DecisionMismatch(format!(
                "the release manifest from {url} hashes to {actual}, not {want} as the answer says"
            )));
        }
        let env: Envelope = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        // A cache that cannot keep it costs only a fetch next time.
        let _ = self.cache().keep_release(&want, &bytes);
        Ok(env)
    }

    pub(crate) fn url_for(&self, url: &str) -> String {
        if url.starts_with("http://") || url.starts_with("https://") {
            url.to_string()
        } else {
            format!("{}{url}", self.server)
        }
    }
}

/// A fresh request nonce: 24 random bytes, base64url without padding.
fn fresh_nonce() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 24];
    // Without system randomness the nonce is still unique enough per request (time-based),
    // and the decision it brings is checked like any other.
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        bytes[..16].copy_from_slice(&t.to_le_bytes());
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A decision refused by a time check (expired, or issued after this device's time).
fn is_time_error(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Expired { .. }
            | ClientError::Verify {
                code: ferry_shared::errors::ErrorCode::DecisionUntimely,
                ..
            }
    )
}
