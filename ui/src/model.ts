// One model: its rollout (ui/src/rollout.ts, rollout_form.ts), releases and history, kept
// current while shown.

function releasesTable(enc: string, releases: Json[]): HTMLElement {
  return table(
    "releases",
    ["release", "state", "variants", "download", "update", "evaluation", "notes"],
    releases.map((r) => [
      link(`#/model/${enc}/release/${encodeURIComponent(r.version)}`, r.version),
      r.state,
      (r.variants as Json[]).map((v) => `${v.id} (${v.delegate})`).join(", "),
      downloadRange(r.variants as Json[], "download_bytes"),
      downloadRange(r.variants as Json[], "update_bytes"),
      verdict(r.evaluation),
      r.notes ?? "",
    ]),
  );
}

/** The smallest and largest download of a release's variants, or "–" when the server does not
 * say: `download_bytes` is the full download (program, data files and assets),
 * `update_bytes` what a device on the live release (`update_from`) downloads (delta updates). */
function downloadRange(variants: Json[], field: string): string {
  const sizes = variants.map((v) => v[field]).filter((n) => typeof n === "number") as number[];
  if (!sizes.length) {
    return "–";
  }
  const lo = Math.min(...sizes);
  const hi = Math.max(...sizes);
  return lo === hi ? bytes(lo) : `${bytes(lo)} – ${bytes(hi)}`;
}

function historyTable(rollout: Json): HTMLElement {
  const rows = (rollout.history as Json[]).map((h) => [
    String(h.revision),
    h.action,
    h.actor,
    when(h.at),
    h.staged ? `${h.staged} ${(h.basis_points / 100).toString()}%` : `${h.baseline ?? ""}`,
    h.reason ?? "",
  ]);
  return table("history", ["revision", "action", "who", "when", "release", "why"], rows.reverse());
}

async function modelView(name: string): Promise<void> {
  const root = main();
  const enc = encodeURIComponent(name);
  const load = () =>
    Promise.all([api(`/v1/admin/models/${enc}`), api(`/v1/admin/models/${enc}/rollout`)]);
  const [model, rollout] = await load();
  const releases = model.releases as Json[];
  let shown = JSON.stringify([model, rollout]);
  // Updates the data in place; nothing moves when nothing changed.
  const refresh = async () => {
    const [m, r] = await load();
    const now = JSON.stringify([m, r]);
    if (now === shown) {
      return;
    }
    shown = now;
    replaceById("rollout-state", rolloutSummary(r));
    replaceById("releases", releasesTable(enc, m.releases as Json[]));
    replaceById("history", historyTable(r));
  };
  root.replaceChildren(
    el("h2", {}, name),
    el(
      "p",
      {},
      link(`#/health/${enc}`, "Fleet health", "health-link"),
      " · ",
      link(`#/experiment/${enc}`, "Experiment", "experiment-link"),
    ),
    el("h3", {}, "Rollout"),
    rolloutSummary(rollout),
    // After a change the page stays where it is: the data refreshes, the form says what was
    // applied.
    rolloutControls(name, releases, refresh, rollout?.current),
    el("h3", {}, "Releases"),
    releasesTable(enc, releases),
    el("h3", {}, "History"),
    historyTable(rollout),
  );
  live(5, refresh);
}
