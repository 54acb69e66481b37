#!/usr/bin/env python3
"""A test attestation verifier for ferry's [sealing] attestation_verifier (exec protocol, see
server/src/release/attest.rs): it allows a token of kind "test" that reads "ok:" followed by the
request's binding, exits 3 for the token "crash" (ferry must refuse then: the verifier fails
closed), and denies everything else with a reason. Usage: verifier.py verify < request.json"""

import json
import sys

if sys.argv[1:] != ["verify"]:
    sys.exit(2)
request = json.load(sys.stdin)
token = request.get("token", "")
if token == "crash":
    sys.exit(3)
if request.get("kind") == "test" and token == "ok:" + request.get("binding", ""):
    print(json.dumps({"verdict": "allow"}))
else:
    print(json.dumps({"verdict": "deny", "reason": "the token does not vouch for this request"}))
