"""Checks of ferry's own that Schemathesis runs beside its built-in ones (tests/schemathesis.toml,
tests/tests/e2e/api_contract.rs loads this module through SCHEMATHESIS_HOOKS).

schemas/openapi.json lists, under each error answer of each operation, the catalogue codes that
answer can carry (`x-ferry-codes`). Schemathesis checks the body against the error schema, which
allows every code in the catalogue; this check holds each answer to the codes its operation and
status declare, so the document cannot promise one code and the server send another.
"""

import json
import os

import schemathesis

_DOC = None


def _document():
    global _DOC
    if _DOC is None:
        with open(os.environ["FERRY_OPENAPI"], encoding="utf-8") as f:
            _DOC = json.load(f)
    return _DOC


@schemathesis.check
def ferry_error_codes_declared(ctx, response, case):
    """An error answer's `code` is one its operation declares for that status."""
    if response.status_code < 400:
        return None
    op = case.operation
    declared = _document()["paths"].get(op.path, {}).get(op.method.lower(), {})
    declared = declared.get("responses", {}).get(str(response.status_code))
    if declared is None:
        # An undeclared status is the built-in status_code_conformance check's to report.
        return None
    codes = declared.get("x-ferry-codes")
    if codes is None:
        raise AssertionError(f"{op.label} declares {response.status_code} without x-ferry-codes")
    try:
        body = json.loads(response.content)
    except ValueError:
        if op.method.lower() == "head" and not response.content:
            return None
        raise AssertionError(f"{op.label} answered {response.status_code} without a JSON error body")
    code = body.get("code") if isinstance(body, dict) else None
    if code not in codes:
        raise AssertionError(
            f"{op.label} answered {response.status_code} {code!r}; the document declares {', '.join(codes)}"
        )
    return None


@schemathesis.deserializer("application/openmetrics-text", "text/plain", "text/html")
def ferry_text(ctx, response):
    """/metrics (OpenMetrics) and /healthz answer text: validated as the string schemas they
    declare."""
    return response.content.decode(response.encoding or "utf-8")
