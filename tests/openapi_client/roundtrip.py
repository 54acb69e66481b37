"""A release's whole trip through a Python client generated from schemas/openapi.bundled.json.

Run by tests/tests/e2e/api_contract.rs against a real ferry server, with the generated package
(`ferry_api`) on PYTHONPATH and one argument: a JSON file with the server's `url`, an admin
`token`, the `model`, its `releases` in order (each a `version`, the signed `envelope` as
`ferry sign` writes it, and the `files` to upload: programs and data files) and the `device` a
resolve request describes. The last release is the one rolled out.

It goes as a team automating ferry would: upload the blobs, publish, roll the release out,
resolve as a device, fetch the signed manifest and the program (whole and by range) and check
their digests, send a telemetry event with the answer's receipt, and read fleet health. Every
call goes through the generated functions and models; any answer other than the one expected,
or one the generated code cannot parse, fails with a message naming the step.
"""

import base64
import hashlib
import json
import sys

from ferry_api import AuthenticatedClient, Client
from ferry_api.api.admin import (
    change_rollout,
    get_health,
    get_model,
    get_release,
    list_models,
    publish_release,
    put_blob,
)
from ferry_api.api.device import get_blob, get_release_by_digest, post_telemetry, resolve
from ferry_api.models import (
    BlobStored,
    DSSEEnvelope,
    Error,
    ModelDetail,
    ReleaseDetail,
    ResolveRequest,
    ResolveResponse,
    RolloutComplete,
    RolloutChangeResult,
    RolloutStart,
    TelemetryAnswer,
    TelemetryUpload,
)
from ferry_api.types import File


def expect(step, answer, status, parsed_type=None):
    """The answer's status is `status` and, with `parsed_type`, its body parsed as that type."""
    if answer.status_code != status:
        detail = answer.parsed.to_dict() if isinstance(answer.parsed, Error) else answer.content[:300]
        sys.exit(f"{step}: expected {status}, got {int(answer.status_code)}: {detail}")
    if parsed_type is not None and not isinstance(answer.parsed, parsed_type):
        sys.exit(f"{step}: the generated client did not parse the answer as {parsed_type.__name__}: {answer.parsed!r}")
    return answer.parsed


def payload(envelope):
    """The JSON payload of a DSSE envelope (generated model)."""
    return json.loads(base64.b64decode(envelope.payload))


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    admin = AuthenticatedClient(base_url=job["url"], token=job["token"], raise_on_unexpected_status=True)
    device = Client(base_url=job["url"], raise_on_unexpected_status=True)
    model = job["model"]
    version = job["releases"][-1]["version"]
    report = {"uploaded": 0}

    for release in job["releases"]:
        # Upload every file; a second upload of the same bytes is answered 200 (already held).
        for path in release["files"]:
            with open(path, "rb") as f:
                data = f.read()
            digest = hashlib.sha256(data).hexdigest()
            first = put_blob.sync_detailed(digest, client=admin, body=File(payload=data))
            if first.status_code not in (200, 201) or not isinstance(first.parsed, BlobStored):
                sys.exit(f"upload {path}: {int(first.status_code)} {first.content[:300]}")
            if first.parsed.sha256 != digest or first.parsed.size != len(data):
                sys.exit(f"upload {path}: answered {first.parsed.to_dict()}")
            again = put_blob.sync_detailed(digest, client=admin, body=File(payload=data))
            if expect(f"upload {path} again", again, 200, BlobStored).created:
                sys.exit(f"upload {path} again: created is true for bytes already held")
            report["uploaded"] += 1

        # Publish the signed release; publishing it twice is a conflict with its code.
        envelope = DSSEEnvelope.from_dict(release["envelope"])
        step = f"publish {release['version']}"
        published = expect(step, publish_release.sync_detailed(model, client=admin, body=envelope), 201, ReleaseDetail)
        if published.version != release["version"] or not published.variants:
            sys.exit(f"{step}: answered version {published.version} with {len(published.variants)} variants")
        twice = expect(f"{step} again", publish_release.sync_detailed(model, client=admin, body=envelope), 409, Error)
        if str(twice.code) != "release_exists":
            sys.exit(f"{step} again: code {twice.code}, expected release_exists")

    # The admin views know it.
    listed = list_models.sync_detailed(client=admin)
    expect("list models", listed, 200)
    names = [m.model for m in listed.parsed.models]
    if model not in names:
        sys.exit(f"list models: {model} missing from {names}")
    expect("get model", get_model.sync_detailed(model, client=admin), 200, ModelDetail)
    expect("get release", get_release.sync_detailed(model, version, client=admin), 200, ReleaseDetail)
    missing = expect("get unknown release", get_release.sync_detailed(model, "9.9.9", client=admin), 404, Error)
    report["unknown_release_code"] = str(missing.code)

    # Roll it out to everyone and complete the rollout.
    start = RolloutStart.from_dict({"action": "start", "release": version, "percent": "100", "reason": "generated client"})
    plan = expect("rollout start", change_rollout.sync_detailed(model, client=admin, body=start), 200, RolloutChangeResult)
    report["rollout_revision"] = plan.revision
    done = RolloutComplete.from_dict({"action": "complete"})
    expect("rollout complete", change_rollout.sync_detailed(model, client=admin, body=done), 200, RolloutChangeResult)

    # Resolve as a device.
    request = ResolveRequest.from_dict(job["device"])
    answer = expect("resolve", resolve.sync_detailed(client=device, body=request, ferry_protocol="1"), 200, ResolveResponse)
    decision = payload(answer.decision)
    if decision["release"] != version:
        sys.exit(f"resolve: decided {decision['release']}, expected {version}")
    candidate = decision["candidates"][0]
    report["variant"] = candidate["variant"]

    # The signed manifest, by the digest the answer names.
    ref = answer.release_ref
    got = get_release_by_digest.sync_detailed(ref.sha256, client=device)
    expect("release by digest", got, 200, DSSEEnvelope)
    if hashlib.sha256(got.content).hexdigest() != ref.sha256:
        sys.exit("release by digest: the bytes do not hash to release_ref.sha256")
    if got.headers.get("etag") != f'"{ref.sha256}"':
        sys.exit(f"release by digest: ETag {got.headers.get('etag')!r}")

    # The program, whole and by range.
    whole = get_blob.sync_detailed(candidate["sha256"], client=device)
    expect("blob", whole, 200)
    if hashlib.sha256(whole.content).hexdigest() != candidate["sha256"] or len(whole.content) != candidate["size"]:
        sys.exit("blob: the bytes do not match the decision's digest and size")
    part = get_blob.sync_detailed(candidate["sha256"], client=device, range_="bytes=8-15")
    expect("blob range", part, 206)
    if part.content != whole.content[8:16] or part.headers.get("content-range") != f"bytes 8-15/{candidate['size']}":
        sys.exit(f"blob range: wrong bytes or Content-Range {part.headers.get('content-range')!r}")
    report["blob_bytes"] = len(whole.content)

    # Telemetry with the answer's receipt is accepted and verified.
    d = job["device"]
    event = {
        "kind": "load", "model": model, "release": version, "variant": candidate["variant"],
        "delegate": candidate["delegate"], "outcome": "ok", "load_ms": 12.5,
        "install_id": d["install_id"], "platform": d["platform"], "soc": d.get("soc", ""),
        "device_model": d.get("device_model", ""), "os_version": d.get("os_version", ""),
        "app_version": d["app_version"], "runtime_version": d["runtime_version"],
        "at": decision["issued_at"], "receipt": answer.receipt,
    }
    sent = post_telemetry.sync_detailed(client=device, body=TelemetryUpload.from_dict({"events": [event]}), ferry_protocol="1")
    told = expect("telemetry", sent, 200, TelemetryAnswer)
    if told.accepted != 1 or told.unverified != 0:
        sys.exit(f"telemetry: {told.to_dict()}")
    report["telemetry"] = told.to_dict()

    # An error code a newer server added still parses (the list of codes is open).
    newer = Error.from_dict({"code": "brand_new_code", "message": "m", "request_id": "r"})
    if str(newer.code) != "brand_new_code":
        sys.exit(f"an unknown error code parsed as {newer.code!r}")

    # Fleet health reads back.
    expect("health", get_health.sync_detailed(model, client=admin), 200)
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
