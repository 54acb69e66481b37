//! Asking the server what to load: the resolve request built from the device and the runtime,
//! retries of transient failures, and verification of the answer into a [`Plan`].

use ferry_shared::BackendId;
use ferry_shared::trust::dsse::{Envelope, Verified};
use ferry_shared::trust::keyring::{Keyring, KeyringResponse};
use ferry_shared::wire::resolve::{ErrorBody, ResolveRequest, ResolveResponse};

use crate::Client;
use crate::error::ClientError;
use crate::transfer::download;
use crate::transfer::http::{http_date, server_said, unreachable};
use crate::trust::record::{Held, after_verify};
use crate::trust::timesync::fresh_nonce;
use crate::trust::verify::{Plan, verify_response};
use crate::types::DeviceInfo;

impl Client {
    pub(crate) fn request(
        &self,
        model: &str,
        device: &DeviceInfo,
        nonce: Option<String>,
        send_operators: bool,
    ) -> Result<ResolveRequest, ClientError> {
        // What the runtime can execute: its digest on every request, the list only when the
        // server asked for it.
        // A runtime with more operators than a request may list is not described at all.
        let operators = self
            .runtime
            .registered_operators()
            .filter(|ops| ops.len() <= ferry_shared::select::operators::MAX_OPERATORS);
        let operators_digest = operators
            .as_deref()
            .map(ferry_shared::select::operators::digest);
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
            operators_digest,
            operators: operators.filter(|_| send_operators),
            seal_schemes: if self.runtime.opens_sources() {
                vec![ferry_shared::manifest::SEAL_SCHEME.to_string()]
            } else {
                Vec::new()
            },
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
        let mut learn_first =
            self.clock.since_boot().is_some() && self.time.estimate(&*self.clock).is_none();
        // Over HTTPS the certificate check needs the time too: learn it first through the
        // pool that leaves the certificate's dates out (`transfer/tls.rs`); the resolve then takes the
        // shared answer, judged by what was learned. A server without `GET /v1/time` (404,
        // 405) or one that refuses it now (429) is asked for a decision of its own instead.
        if learn_first && self.server.starts_with("https://") {
            match self.learn_time() {
                Ok(_) => learn_first = false,
                Err(ClientError::Rejected {
                    status: 404 | 405 | 429,
                    ..
                }) => {}
                // A certificate for another name, a forged or replayed signed time: said as
                // it is, not as the certificate dates the next request would trip on.
                Err(e) => return Err(e),
            }
        }
        let nonce = if learn_first { fresh_nonce() } else { None };
        let asked = nonce.is_some();
        match self.resolve_with(model, device, nonce) {
            // The server would not make a decision of its own now (its per-address limit):
            // the shared answer, judged as before.
            Err(ClientError::Rejected { status: 429, .. }) if asked => {
                self.resolve_with(model, device, None)
            }
            Err(e) if !asked && is_time_error(&e) => match fresh_nonce() {
                Some(n) => self.resolve_with(model, device, Some(n)),
                None => Err(e),
            },
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
        self.resolve_as(model, device, nonce, false)
    }

    /// One resolve; `send_operators`: with the runtime's operator list (the server asked).
    fn resolve_as(
        &self,
        model: &str,
        device: &DeviceInfo,
        nonce: Option<String>,
        send_operators: bool,
    ) -> Result<Verified<Plan>, ClientError> {
        let url = format!("{}/v1/resolve", self.server);
        let request = self.request(model, device, nonce, send_operators)?;
        // When the request left, on the boot clock (and the monotonic clock): a decision made
        // for it is no older than the round trip.
        let (sent, started) = (self.clock.since_boot(), std::time::Instant::now());
        let body = serde_json::to_vec(&request).map_err(|e| ClientError::Config(e.to_string()))?;
        let mut failures = 0u32;
        let (status, text, server_date, mirror) = loop {
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
                        let (said, code) = server_said(&mut resp);
                        return Err(ClientError::Server {
                            url,
                            status,
                            said,
                            code,
                        });
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
                        // The server's time as its HTTP answer says (unsigned): only to tell
                        // an app that the device's clock is wrong.
                        // A site mirror says so: its devices fetch from it first.
                        let mirror = resp.headers().contains_key("ferry-mirror");
                        let date = resp
                            .headers()
                            .get("date")
                            .and_then(|v| v.to_str().ok())
                            .and_then(http_date);
                        let text = resp
                            .body_mut()
                            .with_config()
                            .limit(self.max_response_bytes)
                            .read_to_string()
                            .map_err(|e| ClientError::BadResponse {
                                url: url.clone(),
                                message: e.to_string(),
                            })?;
                        break (status, text, date, mirror);
                    }
                }
                Err(e) => match crate::transfer::tls::certificate_error(&url, &e) {
                    Some(refused) => return Err(refused),
                    // The server cannot be reached at all (refused, no route, no such host):
                    // no retry, so that a device without its network starts from its cache at
                    // once; the next load asks again.
                    None if unreachable(&e) => {
                        return Err(ClientError::Network {
                            url,
                            message: e.to_string(),
                        });
                    }
                    None => e.to_string(),
                },
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
        // The server does not know this runtime's operator set yet: tell it once, and take
        // the decision made with it.
        if resp.operators_wanted && !send_operators && request.operators_digest.is_some() {
            match self.resolve_as(model, device, request.nonce.clone(), true) {
                // The server would not take the list now (its limits, an older replica): the
                // answer in hand still serves; each candidate's operators are checked here.
                Err(ClientError::Rejected { status, .. }) if (400..500).contains(&status) => {}
                other => return other,
            }
        }
        self.follow_keyring(&resp, model)?;
        let release = self.release_envelope(&resp, &request)?;
        let trust = self.trust();
        let last = self.cache().last_sequence(model);
        let mut plan = verify_response(&resp, &release, &request, &trust, self.now(), last)
            .map_err(|e| self.explain_time_error(e, server_date))?;
        if mirror {
            plan = plan.try_map(|mut p| {
                p.prefer_server();
                Ok::<_, ClientError>(p)
            })?;
        }
        if request.nonce.is_some() {
            self.check_fresh(&plan, sent, started)?;
        }
        let ring = trust.ring_at(self.now());
        let held = self
            .cache()
            .revocations(model)
            .map(|(e, kv)| (e.clone(), kv));
        let records = after_verify(
            model,
            &plan,
            resp.revocations.as_ref(),
            Held {
                revocations: held.as_ref().map(|(e, kv)| (e, *kv)),
                ring: &ring,
                keyring: trust.version(),
            },
        )?;
        if let Some(env) = records.revocations {
            self.cache()
                .record_revocations(model, env, trust.version())?;
        }
        let (keyring, sequence) = records.sequence?;
        self.cache().record_sequence(model, keyring, sequence)?;
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
        let claimed =
            ferry_shared::trust::dsse::decode_payload(&resp.decision, &Default::default())
                .ok()
                .and_then(|b| serde_json::from_slice::<Peek>(&b).ok())
                .map_or(0, |p| p.keyring_version);
        let floor = self.cache().last_sequence(model).0;
        if claimed.max(floor) <= held.version() {
            return Ok(());
        }
        self.walk_keyring(&self.agent)
    }

    /// Fetches `GET /v1/keyring` through `agent` and walks it from the held version: each
    /// version must be signed by the root keys of the one before (none skipped), so the pool
    /// it comes through adds nothing to its trust.
    pub(crate) fn walk_keyring(&self, agent: &ureq::Agent) -> Result<(), ClientError> {
        let held = self.trust();
        let url = format!("{}/v1/keyring", self.server);
        let bad = |message: String| ClientError::BadResponse {
            url: url.clone(),
            message,
        };
        let mut got = agent.get(&url).call().map_err(|e| {
            crate::transfer::tls::certificate_error(&url, &e).unwrap_or_else(|| {
                ClientError::Network {
                    url: url.clone(),
                    message: e.to_string(),
                }
            })
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
    fn release_envelope(
        &self,
        resp: &ResolveResponse,
        request: &ResolveRequest,
    ) -> Result<Envelope, ClientError> {
        let want = resp.release_ref.sha256;
        // Nothing is fetched or stored for an answer whose decision does not verify, or names
        // another manifest than the reference: only then do the bytes at the (unsigned) URL
        // count, by their digest.
        let ring = self.trust().ring_at(crate::trust::verify::key_time(
            request,
            &resp.decision,
            self.now(),
        ));
        let decision = ferry_shared::trust::dsse::verify(
            &resp.decision,
            ferry_shared::wire::resolve::DECISION_PAYLOAD_TYPE,
            &ring,
            ferry_shared::trust::dsse::KeyRole::Online,
            1,
            &Default::default(),
        )
        .map_err(|e| ClientError::Verify {
            code: e.code(),
            message: e.to_string(),
        })?;
        let named = ferry_shared::wire::resolve::Decision::from_json(decision.value())
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
                Err(e) => match crate::transfer::tls::certificate_error(&url, &e) {
                    Some(refused) => return Err(refused),
                    None => e.to_string(),
                },
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

/// A decision refused by a time check (expired, or issued after this device's time).
fn is_time_error(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Expired { .. }
            | ClientError::ClockSkewed { .. }
            | ClientError::Verify {
                code: ferry_shared::errors::ErrorCode::DecisionUntimely,
                ..
            }
    )
}

impl Client {
    /// A time check that failed because this device's wall clock is far from the server's
    /// (its `Date` header) while the client had no estimate: [`ClientError::ClockSkewed`],
    /// with the offset. Any other error as it is.
    fn explain_time_error(
        &self,
        e: ClientError,
        server_date: Option<time::OffsetDateTime>,
    ) -> ClientError {
        if !is_time_error(&e) || self.time.estimate(&*self.clock).is_some() {
            return e;
        }
        match server_date {
            Some(date) => {
                let offset = (self.clock.now() - date).whole_seconds();
                if offset.unsigned_abs()
                    > crate::trust::verify::MAX_CLOCK_SKEW.whole_seconds() as u64
                {
                    ClientError::ClockSkewed {
                        offset_secs: offset,
                        message: e.to_string(),
                    }
                } else {
                    e
                }
            }
            None => e,
        }
    }

    /// For a request with a nonce: a decision carrying it is judged at the latest the true
    /// time can be (its signed time plus the round trip, so one held back in transit expires
    /// as it would have), and when the round trip was short its time becomes the client's
    /// estimate. A decision without the nonce from a server known to answer nonces is refused
    /// (a replayed answer); from any other server it was judged by the client's time as before.
    fn check_fresh(
        &self,
        plan: &Plan,
        sent: Option<(String, std::time::Duration)>,
        started: std::time::Instant,
    ) -> Result<(), ClientError> {
        let decision = &plan.decision;
        match (&decision.nonce, decision.time) {
            (Some(_), Some(time)) => {
                let round_trip = match (&sent, self.clock.since_boot()) {
                    (Some((id, then)), Some((now_id, now))) if *id == now_id => {
                        now.saturating_sub(*then)
                    }
                    _ => started.elapsed(),
                };
                let latest =
                    time + time::Duration::try_from(round_trip).unwrap_or(time::Duration::MAX);
                if latest > decision.expires_at {
                    return Err(ClientError::Expired {
                        expires_at: decision.expires_at.to_string(),
                        now: latest.to_string(),
                    });
                }
                if round_trip <= crate::trust::timekeeping::MAX_LEARNING_ROUND_TRIP {
                    self.time
                        .learn(time, sent, true, self.trust().created())
                        .map_err(|message| ClientError::Verify {
                            code: ferry_shared::errors::ErrorCode::DecisionUntimely,
                            message,
                        })?;
                }
                Ok(())
            }
            (None, _) if self.time.server_echoes_nonce() => Err(ClientError::DecisionMismatch(
                "this server answers nonces, and this answer to a request with one does not \
                 carry it (a replayed answer?)"
                    .into(),
            )),
            _ => Ok(()),
        }
    }
}
