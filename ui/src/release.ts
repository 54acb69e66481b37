// One release: variants, evaluation and the delegation report.

/** A release's signed evaluation in a few words (the model page's list). */
function verdict(e: Json | undefined): string {
  if (!e) {
    return "";
  }
  const failed = (e.failed ?? []) as string[];
  let out = failed.length ? `${e.metric} FAILED ${failed.join(", ")}` : `${e.metric} passed`;
  if (e.override) {
    out += ` (signed anyway: ${e.override})`;
  }
  const skipped = (e.not_evaluated ?? []) as string[];
  if (skipped.length) {
    out += `; ${skipped.length} not evaluated`;
  }
  return out;
}

/** The release's signed evaluation: what was measured, on what, and each variant's verdict. */
function evaluationSection(e: Json | undefined, variants: Json[]): HTMLElement[] {
  if (!e) {
    return [el("p", { class: "muted", id: "evaluation" }, "Signed without an evaluation.")];
  }
  const bound =
    e.max_error != null ? `max_error ${e.max_error}` : `max_drop ${((e.max_drop ?? 0) * 100).toFixed(2)}%`;
  // In the release's variant order.
  const results = e.results as Record<string, Json>;
  const rows = variants.filter((v) => Object.prototype.hasOwnProperty.call(results, v.id)).map((v) => results[v.id]).map((r) => [
    r.id,
    r.value != null ? Number(r.value).toFixed(4) : "",
    r.drop != null ? `${(Number(r.drop) * 100).toFixed(2)}%` : "",
    r.passed == null ? `not evaluated: ${r.why_not ?? ""}` : r.passed ? "pass" : `FAIL: ${r.why_not ?? ""}`,
  ]);
  const out: HTMLElement[] = [
    el("h3", {}, "Evaluation"),
    el(
      "p",
      { class: "muted" },
      `${e.metric} on ${e.samples} samples (set ${String(e.dataset_sha256).slice(0, 12)}), reference ${e.reference}, ${bound}, runtime ${e.runtime_version}${e.baseline ? `, baseline ${e.baseline.version}` : ""}`,
    ),
  ];
  if (e.override) {
    out.push(el("p", { class: "warning" }, `Signed despite ${(e.override.failed ?? []).join(", ")}: ${e.override.reason}`));
  }
  out.push(table("evaluation", ["variant", "value", "drop", "verdict"], rows));
  return out;
}

/** A variant's signed metadata for the app, for people. */
function metadata(v: Json): string {
  const parts: string[] = [];
  const p = v.preprocess;
  if (p) {
    const steps: string[] = [];
    if (p.resize) {
      steps.push(`resize ${p.resize.width}×${p.resize.height}${p.resize.filter ? ` ${p.resize.filter}` : ""}`);
    }
    for (const k of ["color", "layout"]) {
      if (p[k]) {
        steps.push(p[k]);
      }
    }
    if (p.range) {
      steps.push(`range [${p.range.join(", ")}]`);
    }
    if (p.mean?.length) {
      steps.push(`mean [${p.mean.join(", ")}]`);
    }
    if (p.std?.length) {
      steps.push(`std [${p.std.join(", ")}]`);
    }
    parts.push(`preprocess: ${steps.join(", ")}`);
  }
  if (v.labels) {
    parts.push(`labels ${v.labels}`);
  }
  const assets = ((v.assets ?? []) as Json[]).map((a) => `${a.name} (${bytes(a.size)})`);
  if (assets.length) {
    parts.push(`assets ${assets.join(", ")}`);
  }
  return parts.join("; ");
}

/** A variant's device constraints, for people. */
function constraints(c: Json): string {
  if (!c) {
    return "";
  }
  const parts: string[] = [];
  if (c.platforms?.length) {
    parts.push(`platforms ${c.platforms.join(", ")}`);
  }
  if (c.min_os_version) {
    parts.push(`OS ≥ ${c.min_os_version}`);
  }
  if (c.min_ram_mb) {
    parts.push(`RAM ≥ ${c.min_ram_mb} MiB`);
  }
  if (c.soc_allow?.length) {
    parts.push(`SoCs ${c.soc_allow.join(", ")}`);
  }
  if (c.soc_deny?.length) {
    parts.push(`not on ${c.soc_deny.join(", ")}`);
  }
  return parts.length ? `; ${parts.join("; ")}` : "";
}

async function releaseView(name: string, version: string): Promise<void> {
  const root = main();
  const r = await api(
    `/v1/admin/models/${encodeURIComponent(name)}/releases/${encodeURIComponent(version)}`,
  );
  const inspection: Json = r.inspection ?? {};
  const variants = r.variants as Json[];
  const sections: HTMLElement[] = [];
  for (const v of variants) {
    const ins = inspection[v.id];
    const methods = (ins?.methods ?? []) as Json[];
    const methodRows = methods.map((m) => {
      const portable = Object.entries(m.kernel_calls ?? {}).map(([op, n]) => `${op} ×${n}`);
      const delegated = Object.entries(m.delegate_calls ?? {}).map(([b, n]) => `${b} ×${n}`);
      return [
        m.name,
        m.summary ?? "",
        delegated.join(", ") || "none",
        portable.length ? portable.join(", ") : "none",
      ];
    });
    sections.push(
      el(
        "section",
        { class: "variant", "data-variant": v.id },
        el("h3", {}, `${v.id} — ${v.delegate}, ${v.quant}, ${bytes(v.size)}`),
        el(
          "p",
          { class: "muted" },
          `runtime ${v.runtime ?? "*"}, app ${v.app ?? "*"}, backends ${(v.backends ?? []).join(", ") || "none"}${constraints(v.constraints)}`,
        ),
        ...(metadata(v) ? [el("p", { class: "muted metadata" }, metadata(v))] : []),
        methodRows.length
          ? table(`delegation-${v.id}`, ["method", "summary", "delegated", "on portable kernels"], methodRows)
          : el("p", {}, "No inspection recorded for this variant."),
      ),
    );
  }
  root.replaceChildren(
    el("h2", {}, `${name} ${version}`),
    el("p", {}, link(`#/model/${encodeURIComponent(name)}`, `back to ${name}`)),
    el("p", { id: "release-notes" }, r.notes ?? ""),
    ...evaluationSection(r.evaluation, variants),
    ...sections,
  );
}
