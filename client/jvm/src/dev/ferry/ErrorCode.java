// Generated from shared/src/errors.rs by tests/tests/e2e/bindings/jvm_typed.rs; do not edit.
// Regenerate: FERRY_BLESS=1 cargo test -p ferry-tests --test e2e jvm_typed
package dev.ferry;

/**
 * Every error code of ferry's catalogue (docs/errors.md), to switch on. A code this
 * binding does not know (from a newer library) is {@link #UNKNOWN}; the exception's
 * {@code code()} keeps its text.
 */
public enum ErrorCode {
    /** The request body is not JSON of the expected shape. (server) */
    REQUEST_MALFORMED("request_malformed"),
    /** A request field or query parameter has an invalid value. (server) */
    REQUEST_INVALID("request_invalid"),
    /** The request body could not be read (the connection broke or the encoding is invalid). (server) */
    BODY_UNREADABLE("body_unreadable"),
    /** A blob range outside the blob was asked for. (server, client) */
    RANGE_NOT_SATISFIABLE("range_not_satisfiable"),
    /** The request body did not arrive within the server's body deadline. (server) */
    BODY_TIMEOUT("body_timeout"),
    /** The request body is larger than the endpoint's limit. (server) */
    BODY_TOO_LARGE("body_too_large"),
    /** A model name, variant id or other name breaks the naming rule (1 to 64 of `[a-z0-9._-]`, starting with a letter or digit). (server, CLI) */
    INVALID_NAME("invalid_name"),
    /** A blob path is not 64 lowercase hex characters of a SHA-256. (server) */
    INVALID_DIGEST("invalid_digest"),
    /** A release version is not semantic versioning (at most 64 characters). (server) */
    INVALID_VERSION("invalid_version"),
    /** No route matches the path. (server) */
    NOT_FOUND("not_found"),
    /** The route exists but not with this HTTP method. (server) */
    METHOD_NOT_ALLOWED("method_not_allowed"),
    /** An admin endpoint was called without a valid bearer token. (server, CLI) */
    UNAUTHORIZED("unauthorized"),
    /** The token is valid but lacks the scope this endpoint needs. (server, CLI) */
    FORBIDDEN("forbidden"),
    /** An unexpected failure; the server log has the detail under the request id. (server, client, C ABI) */
    INTERNAL("internal"),
    /** The object store did not answer. (server) */
    STORAGE_UNAVAILABLE("storage_unavailable"),
    /** The object store has no room for the write (the disk is full or over its quota); nothing was stored. (server) */
    STORAGE_FULL("storage_full"),
    /** A site mirror could not reach its origin for what only the origin gives: a fresh answer (the device has no time estimate), signed time, a file the mirror does not hold, or a resolve answer it has not kept; devices keep their last known good model. (server, client) */
    ORIGIN_UNAVAILABLE("origin_unavailable"),
    /** The server's online key is past the expiry its keyring gives it; devices refuse what it signs. (server) */
    ONLINE_KEY_EXPIRED("online_key_expired"),
    /** A rollout or deny-list change lost the race to other writers too many times. (server) */
    STATE_CONTENDED("state_contended"),
    /** A rollout or deny-list change would rewrite a record a newer ferry server wrote, losing what this server does not know; it is refused. (server, CLI) */
    STORE_RECORD_NEWER("store_record_newer"),
    /** Too many telemetry requests from one address, or events from one install. (server, client) */
    RATE_LIMITED("rate_limited"),
    /** The server's TLS certificate was refused (expired or not yet valid at the time the client trusts, another name, an untrusted issuer); the message says which. Not retried; a cached model still serves. (client) */
    SERVER_CERTIFICATE_INVALID("server_certificate_invalid"),
    /** An input breaks the method's signed contract (its element type, number of dimensions, or a size above its bound or other than its fixed value); the message names the input, the dimension, the value and the bound. Nothing reached the runtime. (client) */
    INPUT_MISMATCH("input_mismatch"),
    /** `ferry sign`: a variant failed its accuracy bound in the release's `[evaluation]` (or could not execute); the message names it, its value and the bound. Nothing was signed. (cli) */
    ACCURACY_REGRESSION("accuracy_regression"),
    /** No release of the model is published. (server, client) */
    MODEL_NOT_FOUND("model_not_found"),
    /** No variant of any live release fits the device (runtime, app, platform, OS, RAM, backends, deny list); `details.explain` says why per variant. (server, client) */
    NO_COMPATIBLE_VARIANT("no_compatible_variant"),
    /** The variant calls operators (kernels) the device's runtime did not register; the message names them. (server, client) */
    OPERATORS_MISSING("operators_missing"),
    /** No blob with this digest is stored. (server, client) */
    BLOB_NOT_FOUND("blob_not_found"),
    /** An uploaded blob is larger than `[limits] max_blob_bytes`. (server) */
    BLOB_TOO_LARGE("blob_too_large"),
    /** An uploaded blob has no bytes. (server) */
    BLOB_EMPTY("blob_empty"),
    /** The upload body ended with an error; nothing was stored. (server) */
    UPLOAD_INTERRUPTED("upload_interrupted"),
    /** The bytes do not hash to the digest that names them (upload) or that the signed manifest gives (download). (server, client) */
    HASH_MISMATCH("hash_mismatch"),
    /** A variant's blob is not an ExecuTorch program. (server) */
    NOT_A_PTE("not_a_pte"),
    /** The variant declares a delegate that its program never calls (the partitioner declined the graph). (server, CLI) */
    DELEGATE_MISMATCH("delegate_mismatch"),
    /** The variant's program keeps tensors in a separate data file (.ptd) that none of its data files provides. (server, CLI) */
    DATA_FILES_MISSING("data_files_missing"),
    /** A variant's data files give a tensor twice, or with another element type or shape than the program declares. (server, CLI) */
    DATA_FILES_MISMATCH("data_files_mismatch"),
    /** The program's schema version is newer than any runtime ferry knows. (server) */
    PTE_SCHEMA_UNSUPPORTED("pte_schema_unsupported"),
    /** The release names another model than the URL. (server) */
    MODEL_MISMATCH("model_mismatch"),
    /** A release names a blob that is not uploaded. (server) */
    BLOB_MISSING("blob_missing"),
    /** A stored blob's size differs from the signed size. (server) */
    BLOB_SIZE_MISMATCH("blob_size_mismatch"),
    /** A file's chunk index (for delta updates) is not the one its bytes give: it does not parse, does not add up to the file, or a chunk's SHA-256 differs from the stored bytes. Sign the release again with this ferry. (server, CLI) */
    CHUNK_INDEX_MISMATCH("chunk_index_mismatch"),
    /** A sealed variant cannot be published: a scheme this server does not know, no signed inspection of its program, or a file key that does not unwrap with the key-release key it names. (server) */
    SEALED_INVALID("sealed_invalid"),
    /** The server holds no key-release key for this sealed release (its key folder lacks key-release.key or the retired key the release was sealed to). (server, client) */
    KEY_RELEASE_UNAVAILABLE("key_release_unavailable"),
    /** A key request for a sealed variant was refused: no valid receipt of a resolve that chose this variant for this install, or the attestation verifier refused the device. (server, client) */
    KEY_RELEASE_REFUSED("key_release_refused"),
    /** Key releases for this sealed release were stopped by an operator (`ferry release seal-stop`) or the release is revoked. (server, client) */
    KEY_RELEASE_STOPPED("key_release_stopped"),
    /** The device holds no key for a sealed variant and could not get one (offline, or the server refused): it cannot load it. (client) */
    SEALED_KEY_MISSING("sealed_key_missing"),
    /** The version is already published with other content; releases are immutable. (server, CLI) */
    RELEASE_EXISTS("release_exists"),
    /** The release is not published. (server, CLI) */
    RELEASE_NOT_FOUND("release_not_found"),
    /** A signed envelope is not valid DSSE JSON. (server, client) */
    ENVELOPE_MALFORMED("envelope_malformed"),
    /** A signed envelope is over the size limit. (server, client) */
    ENVELOPE_TOO_LARGE("envelope_too_large"),
    /** An envelope carries another payload type than expected (a decision where a release belongs). (server, client) */
    PAYLOAD_TYPE_MISMATCH("payload_type_mismatch"),
    /** An envelope has no signature. (server, client) */
    SIGNATURE_MISSING("signature_missing"),
    /** An envelope has more signatures than allowed. (server, client) */
    SIGNATURE_TOO_MANY("signature_too_many"),
    /** One key signed the envelope twice. (server, client) */
    SIGNATURE_DUPLICATE("signature_duplicate"),
    /** The signing key is not in the trusted keys. (server, client) */
    KEY_UNKNOWN("key_unknown"),
    /** A key of another role signed (an online key signing a release). (server, client, CLI) */
    KEY_WRONG_ROLE("key_wrong_role"),
    /** A signature is not valid base64 of 64 bytes. (server, client) */
    SIGNATURE_MALFORMED("signature_malformed"),
    /** A signature does not verify: the bytes were changed after signing, or another key signed. (server, client) */
    SIGNATURE_INVALID("signature_invalid"),
    /** Fewer distinct trusted keys signed than required. (server, client) */
    SIGNATURE_THRESHOLD("signature_threshold"),
    /** A release manifest is not valid JSON of the manifest shape. (server, client, CLI) */
    MANIFEST_MALFORMED("manifest_malformed"),
    /** A manifest has a field this server does not know (made by a newer `ferry sign`). (server) */
    MANIFEST_UNKNOWN_FIELD("manifest_unknown_field"),
    /** A manifest breaks a rule (duplicate variant ids, bad ranges, names). (server, client, CLI) */
    MANIFEST_INVALID("manifest_invalid"),
    /** A signed payload (decision, release manifest, keyring, revocation list) is in a newer format than this client or server reads: a client keeps its last known good model (update the app); a server refuses to publish it (upgrade the server). (server, client, C ABI) */
    FORMAT_UNSUPPORTED("format_unsupported"),
    /** A cached model's signed constraints (app or runtime range, backends, platform, OS, RAM, SoC) no longer admit this device, so the client does not load it; the message names each constraint and both values. (client, C ABI) */
    CACHED_INCOMPATIBLE("cached_incompatible"),
    /** The `.pte` file ends early. (server, CLI) */
    PTE_TRUNCATED("pte_truncated"),
    /** The file is not an ExecuTorch program (wrong identifier). (server, CLI) */
    PTE_NOT_A_PROGRAM("pte_not_a_program"),
    /** The `.pte` extended header is invalid. (server, CLI) */
    PTE_BAD_HEADER("pte_bad_header"),
    /** The program's FlatBuffer is malformed. (server, CLI) */
    PTE_MALFORMED("pte_malformed"),
    /** The program exceeds an inspector limit (tables, strings, work). (server, CLI) */
    PTE_LIMIT_EXCEEDED("pte_limit_exceeded"),
    /** A revocation list is malformed, or does not follow the one held (next version, every entry kept). (server, client, CLI) */
    REVOCATIONS_INVALID("revocations_invalid"),
    /** The release was revoked by its publisher; it is neither offered nor loaded, also from the cache. (client, C ABI) */
    RELEASE_REVOKED("release_revoked"),
    /** A keyring is malformed or breaks a rule (threshold, key ids, roles), or the trust file pins no root to check it. (server, client, CLI) */
    KEYRING_INVALID("keyring_invalid"),
    /** A keyring version was skipped: version N+1 must follow N. (client) */
    KEYRING_SKIPPED("keyring_skipped"),
    /** A keyring is not newer than the one already trusted. (client) */
    KEYRING_ROLLBACK("keyring_rollback"),
    /** The trust file cannot be used (no keys, bad key encoding). (client, C ABI) */
    TRUST_INVALID("trust_invalid"),
    /** A rollout change is malformed (unknown action, missing release, bad percentage or rate). (server, CLI) */
    ROLLOUT_INVALID("rollout_invalid"),
    /** The model has no rollout to change. (server, CLI) */
    ROLLOUT_NOT_FOUND("rollout_not_found"),
    /** A rollout is already active or paused. (server, CLI) */
    ROLLOUT_IN_PROGRESS("rollout_in_progress"),
    /** The change needs an active rollout. (server, CLI) */
    ROLLOUT_NOT_ACTIVE("rollout_not_active"),
    /** `resume` needs a paused or halted rollout. (server, CLI) */
    ROLLOUT_NOT_PAUSED("rollout_not_paused"),
    /** The rollout is at another revision than the change was made for (`if_revision`), or changed while an automatic halt was being written; nothing was written. (server, CLI) */
    ROLLOUT_CHANGED("rollout_changed"),
    /** A staged release must be newer than the baseline (and than the release it supersedes). (server, CLI) */
    ROLLOUT_NOT_NEWER("rollout_not_newer"),
    /** The change would leave a device class with no compatible variant; nothing changed. (server, CLI) */
    ROLLOUT_STRANDS_DEVICES("rollout_strands_devices"),
    /** An experiment start or stop is malformed, or names arms that cannot be compared (an unpublished or revoked release, a missing variant, the same arm twice). (server, CLI) */
    EXPERIMENT_INVALID("experiment_invalid"),
    /** An experiment of the model is already running. (server, CLI) */
    EXPERIMENT_RUNNING("experiment_running"),
    /** The model has no experiment (running, for a stop). (server, CLI) */
    EXPERIMENT_NOT_FOUND("experiment_not_found"),
    /** A deny-list change is malformed. (server, CLI) */
    DENY_INVALID("deny_invalid"),
    /** `clear` names an entry that does not exist. (server, CLI) */
    DENY_NOT_FOUND("deny_not_found"),
    /** A telemetry body is not `{"events": [...]}`. (server, client) */
    TELEMETRY_MALFORMED("telemetry_malformed"),
    /** A telemetry batch holds more events than allowed. (server, client) */
    TOO_MANY_EVENTS("too_many_events"),
    /** One telemetry event breaks a rule (missing or oversized field); it is listed in `rejected`. (server) */
    EVENT_INVALID("event_invalid"),
    /** An event's time is too far in the past or the future. (server) */
    EVENT_OUT_OF_RANGE("event_out_of_range"),
    /** The client was built with an unusable setting. (client, C ABI) */
    CONFIG_INVALID("config_invalid"),
    /** A C ABI call got a null or non-UTF-8 argument. (C ABI) */
    INVALID_ARGUMENT("invalid_argument"),
    /** An output buffer is too small for the result. (C ABI) */
    BUFFER_TOO_SMALL("buffer_too_small"),
    /** The server could not be reached after retries. (client) */
    NETWORK("network"),
    /** The server answered 5xx after retries. (client) */
    SERVER_ERROR("server_error"),
    /** A server answer is not what the protocol says. (client) */
    BAD_RESPONSE("bad_response"),
    /** The signed decision has expired (or the device clock is far off). (client) */
    EXPIRED("expired"),
    /** A decision older than one already seen was served (a replayed response). (client) */
    REPLAY("replay"),
    /** The signed decision and the signed release disagree (a candidate's digest, size or delegate differs from what the release key signed). (client) */
    DECISION_MISMATCH("decision_mismatch"),
    /** The decision payload is not a valid decision. (client) */
    DECISION_INVALID("decision_invalid"),
    /** The decision's times cannot be right: issued in the future (beyond the allowed clock skew) or valid for longer than a decision may be. (client, C ABI) */
    DECISION_UNTIMELY("decision_untimely"),
    /** The device's wall clock is far from the server's time (the server's `Date` header), no time estimate or decision made for this request could be had, and the answer failed a time check because of it; the message gives the offset. (client, C ABI) */
    DEVICE_CLOCK_SKEWED("device_clock_skewed"),
    /** The server sent more or fewer bytes than the signed size. (client) */
    SIZE_MISMATCH("size_mismatch"),
    /** A blob is larger than the client's download limit. (client) */
    TOO_LARGE("too_large"),
    /** No space left while writing the cache. (client) */
    DISK_FULL("disk_full"),
    /** The cache's filesystem has too little free space for the download (the file plus the cache's headroom), even after evicting unpinned files the app does not use; nothing was downloaded, and the message gives the figures. (client, C ABI) */
    INSUFFICIENT_STORAGE("insufficient_storage"),
    /** Another file-system error in the cache. (client) */
    CACHE_IO("cache_io"),
    /** The client's cache folder is on a filesystem without working file locks (some network and FUSE mounts), which the processes sharing it need. (client, C ABI) */
    CACHE_LOCK_UNSUPPORTED("cache_lock_unsupported"),
    /** Every candidate failed to download, verify or load; `attempts` lists each. (client, C ABI) */
    ALL_CANDIDATES_FAILED("all_candidates_failed"),
    /** A variant crashed the app natively (a signal in the runtime or a driver, an out-of-memory kill, a hang the OS ended) while it was loaded or run, on an earlier launch; it is not loaded again until the app, runtime or OS version changes. On an attempt it names that variant and the stage; as the error of a load, every candidate crashed. (client, C ABI) */
    CRASHED("crashed"),
    /** The server cannot be used and no verified copy is cached. (client, C ABI) */
    OFFLINE_NO_CACHE("offline_no_cache"),
    /** The download policy did not allow a download now (metered network, not charging, or over the byte budget) and no verified copy is cached. (client, C ABI) */
    DOWNLOAD_DEFERRED("download_deferred"),
    /** The runtime refused to load the program (a missing delegate, operator or memory). (client) */
    RUNTIME_LOAD_FAILED("runtime_load_failed"),
    /** Running the loaded method failed. (client, C ABI) */
    RUNTIME_EXECUTE_FAILED("runtime_execute_failed"),
    /** The variant loaded but its output on the signed golden input is off by more than the tolerance. (client) */
    GOLDEN_MISMATCH("golden_mismatch"),
    /** A code this binding does not know; {@code FerryException.code()} has its text. */
    UNKNOWN(null);

    private final String code;

    ErrorCode(String code) {
        this.code = code;
    }

    /** The code's text on the wire ({@code null} for {@link #UNKNOWN}). */
    public String code() {
        return code;
    }

    /** The member for {@code text}: {@link #UNKNOWN} when none (or null). */
    public static ErrorCode of(String text) {
        if (text != null) {
            for (ErrorCode c : values()) {
                if (text.equals(c.code)) {
                    return c;
                }
            }
        }
        return UNKNOWN;
    }
}
