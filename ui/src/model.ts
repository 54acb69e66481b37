// One model: its rollout (summary and controls), releases and history.

function rolloutSummary(r: Json): HTMLElement {
  const cur = r.current;
  if (!cur) {
    return el("p", { id: "rollout-state" }, "No rollout plan yet.");
  }
  const back = rolledBack(cur.action, cur.state);
  const parts: (Node | string)[] = [
    el("strong", {}, back ? "rolled back" : cur.state),
    ` — baseline ${cur.baseline ?? "none"}`,
  ];
  if (cur.staged) {
    parts.push(back ? `, ${cur.staged} withdrawn` : `, staged ${cur.staged} at ${r.percent}%`);
  }
  if (r.ramp) {
    parts.push(`, ramp step ${r.ramp.step} of ${(r.ramp.steps ?? []).length}`);
    if (typeof r.ramp.now === "string") {
      parts.push(` (${r.ramp.now})`);
    }
  }
  const box = el("div", { id: "rollout-state" }, el("p", {}, ...parts));
  if (back) {
    box.append(
      el(
        "p",
        { class: "muted", id: "rollback-reason" },
        `Rolled back by ${cur.actor} at ${when(cur.at)}: ${cur.reason ?? ""}. Resume would stage it again.`,
      ),
    );
  } else if (cur.state === "halted") {
    box.append(el("p", { class: "error", id: "halt-reason" }, `Halted: ${cur.reason ?? ""}`));
  }
  const t = cur.thresholds ?? {};
  box.append(
    el(
      "p",
      { class: "muted" },
      `gates: failure ≤ ${pct(t.max_failure_rate)}, fallback ≤ ${pct(t.max_fallback_rate)}, min samples ${t.min_samples ?? "–"}`,
    ),
  );
  return box;
}

function rolloutControls(name: string, releases: Json[], onDone: () => void): HTMLElement {
  const action = el(
    "select",
    { id: "rollout-action" },
    ...["start", "set", "pause", "resume", "rollback", "complete"].map((a) =>
      el("option", { value: a }, a),
    ),
  ) as HTMLSelectElement;
  const release = el(
    "select",
    { id: "rollout-release" },
    ...releases.map((r) => el("option", { value: r.version }, r.version)),
  ) as HTMLSelectElement;
  const percent = el("input", {
    id: "rollout-percent",
    type: "text",
    inputmode: "decimal",
    placeholder: "percent",
    size: "6",
  }) as HTMLInputElement;
  const reason = el("input", { id: "rollout-reason", type: "text", placeholder: "reason" }) as HTMLInputElement;
  const preview = el("div", { id: "rollout-preview" });
  const fit = () => {
    release.hidden = action.value !== "start";
    percent.hidden = action.value !== "start" && action.value !== "set";
    preview.replaceChildren();
  };
  action.addEventListener("change", fit);
  fit();
  const describe = (b: Json): string => {
    switch (b.action) {
      case "start":
        return `start ${b.release}${b.percent ? ` at ${b.percent}%` : ""}`;
      case "set":
        return `set to ${b.percent ?? "?"}%`;
      default:
        return b.action;
    }
  };
  const body = (): Json => {
    const b: Json = { action: action.value };
    if (action.value === "start") {
      b.release = release.value;
    }
    if ((action.value === "start" || action.value === "set") && percent.value.trim()) {
      b.percent = percent.value.trim();
    }
    if (reason.value.trim()) {
      b.reason = reason.value.trim();
    }
    return b;
  };
  const path = `/v1/admin/models/${encodeURIComponent(name)}/rollout`;
  const previewButton = el("button", { id: "rollout-preview-button", type: "button" }, "Preview");
  previewButton.addEventListener("click", async () => {
    const b = body();
    preview.replaceChildren(el("p", { class: "muted" }, "Previewing…"));
    try {
      const p = await post(`${path}?dry_run=true`, b);
      const confirm = el("button", { id: "rollout-confirm", type: "button" }, "Confirm") as HTMLButtonElement;
      confirm.addEventListener("click", async () => {
        // Only what was previewed is applied: a form changed since asks for a new preview.
        if (JSON.stringify(body()) !== JSON.stringify(b)) {
          preview.replaceChildren(
            el("p", { class: "error", role: "alert" }, "The form changed since the preview: preview again."),
          );
          return;
        }
        confirm.disabled = true;
        try {
          await post(path, b);
          onDone();
        } catch (e) {
          preview.replaceChildren(errorBox(e));
        }
      });
      preview.replaceChildren(
        el(
          "p",
          { id: "rollout-share" },
          `${describe(b)}: ${pct(p.preview.share_changing)} of install ids change release`,
        ),
        el("ul", {}, ...(p.preview.moves as string[]).map((m) => el("li", {}, m))),
        confirm,
        el("button", { type: "button", id: "rollout-cancel" }, "Cancel"),
      );
      (preview.querySelector("#rollout-cancel") as HTMLElement).addEventListener("click", () =>
        preview.replaceChildren(),
      );
    } catch (e) {
      preview.replaceChildren(errorBox(e));
    }
  });
  return el(
    "fieldset",
    { id: "rollout-controls" },
    el("legend", {}, "Change the rollout"),
    action,
    release,
    percent,
    reason,
    previewButton,
    preview,
  );
}

async function modelView(name: string): Promise<void> {
  const root = main();
  const enc = encodeURIComponent(name);
  const [model, rollout] = await Promise.all([
    api(`/v1/admin/models/${enc}`),
    api(`/v1/admin/models/${enc}/rollout`),
  ]);
  const releases = model.releases as Json[];
  const rows = releases.map((r) => [
    link(`#/model/${enc}/release/${encodeURIComponent(r.version)}`, r.version),
    r.state,
    (r.variants as Json[]).map((v) => `${v.id} (${v.delegate})`).join(", "),
    verdict(r.evaluation),
    r.notes ?? "",
  ]);
  const history = (rollout.history as Json[]).map((h) => [
    String(h.revision),
    h.action,
    h.actor,
    when(h.at),
    h.staged ? `${h.staged} ${(h.basis_points / 100).toString()}%` : `${h.baseline ?? ""}`,
    h.reason ?? "",
  ]);
  root.replaceChildren(
    el("h2", {}, name),
    el("p", {}, link(`#/health/${enc}`, "Fleet health", "health-link")),
    el("h3", {}, "Rollout"),
    rolloutSummary(rollout),
    rolloutControls(name, releases, () => render()),
    el("h3", {}, "Releases"),
    table("releases", ["release", "state", "variants", "evaluation", "notes"], rows),
    el("h3", {}, "History"),
    table("history", ["revision", "action", "who", "when", "release", "why"], history.reverse()),
  );
}
