// The form that changes a model's rollout: every action `ferry rollout` has, built into the
// same JSON the CLI sends, previewed with dry_run (cohort moves, share of install ids changing
// release, device classes left without a variant) and applied only as previewed. The
// server's refusal is shown as it is, code and message.

const ROLLOUT_ACTIONS: [string, string][] = [
  ["start", "start: stage a release (a share, or a ramp with gates)"],
  ["set", "set: change the staged share"],
  ["pause", "pause"],
  ["resume", "resume"],
  ["rollback", "rollback: withdraw the staged release"],
  ["complete", "complete: make the staged release the baseline"],
  ["revert", "revert: move the baseline back to an older release"],
  ["pin", "pin a test device to a release"],
  ["unpin", "unpin a test device"],
];

/** Which inputs each action takes. */
const ROLLOUT_FIELDS: Record<string, string[]> = {
  start: ["release", "mode", "gates", "supersede"],
  set: ["percent"],
  revert: ["to"],
  pin: ["install", "release", "expires"],
  unpin: ["install"],
};

/** A labelled input, shown or hidden with its label. */
function labelled(label: string, input: HTMLElement): HTMLElement {
  return el("label", { class: "field" }, label, input);
}

function textInput(id: string, placeholder = "", mode = "text"): HTMLInputElement {
  return el("input", { id, type: "text", inputmode: mode, placeholder, autocomplete: "off" }) as HTMLInputElement;
}

function versionSelect(id: string, releases: Json[]): HTMLSelectElement {
  return el(
    "select",
    { id },
    ...releases.map((r) => el("option", { value: r.version }, `${r.version} (${r.state})`)),
  ) as HTMLSelectElement;
}

/** A number from a text input (a trailing % allowed), scaled; undefined when empty; an Error
 * when not a number of zero or more. */
function numberOf(input: HTMLInputElement, what: string, scale = 1): number | undefined {
  const v = input.value.trim().replace(/%$/, "").trim();
  if (!v) {
    return undefined;
  }
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) {
    throw new Error(`${what} must be a number of zero or more, not ${JSON.stringify(input.value.trim())}`);
  }
  return Math.round(n * scale * 1e6) / 1e6;
}

/** Seconds from a duration typed as `90`, `90s`, `45m`, `6h` or `7d` (a bare number is in
 * `unit` seconds); undefined when empty; an Error otherwise. */
function durationOf(input: HTMLInputElement, what: string, unit: number): number | undefined {
  const v = input.value.trim().toLowerCase();
  if (!v) {
    return undefined;
  }
  const m = /^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?$/.exec(v);
  if (!m) {
    throw new Error(`${what} must be a duration such as 90, 45m, 6h or 7d, not ${JSON.stringify(input.value.trim())}`);
  }
  const per: Record<string, number> = { s: 1, m: 60, min: 60, h: 3600, d: 86400 };
  const secs = Math.round(Number(m[1]) * (m[2] ? per[m[2]] : unit));
  if (secs < 1) {
    throw new Error(`${what} must be at least one second`);
  }
  return secs;
}

/** A duration in seconds for people: 45 s, 30 min, 6 h, 7 d (or a mix: 1 h 30 min). */
function duration(secs: number): string {
  if (secs < 60) {
    return `${secs} s`;
  }
  const parts: string[] = [];
  for (const [n, u] of [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]] as [number, string][]) {
    if (secs >= n) {
      parts.push(`${Math.floor(secs / n)} ${u}`);
      secs %= n;
    }
  }
  return parts.slice(0, 2).join(" ");
}

/** A plan's gates in words. */
function gatesText(t: Json): string {
  const parts = [
    `failure ≤ ${pct(t?.max_failure_rate)}`,
    `fallback ≤ ${pct(t?.max_fallback_rate)}`,
    `min samples ${t?.min_samples ?? "–"}`,
  ];
  if (t?.max_regression) {
    parts.push(`failure and fallback ≤ ${t.max_regression}× the baseline's`);
  }
  if (t?.max_latency_ratio) {
    parts.push(`field latency ≤ ${t.max_latency_ratio}× the baseline's`);
  }
  if (t?.max_crash_rate !== undefined) {
    parts.push(`devices crashed ≤ ${pct(t.max_crash_rate)}`);
  }
  return `gates: ${parts.join(", ")}`;
}

/** What a change does, in words. */
function describeChange(b: Json): string {
  switch (b.action) {
    case "start":
      return b.steps
        ? `start ${b.release} as a ramp ${b.steps.join("% → ")}%, each step at least ${duration(b.every_secs)}`
        : `start ${b.release} at ${b.percent ?? "?"}%`;
    case "set":
      return `set the staged share to ${b.percent ?? "?"}%`;
    case "revert":
      return `revert the baseline to ${b.to}`;
    case "pin":
      return `pin ${b.install_id} to ${b.release}${b.expires_secs ? ` for ${duration(b.expires_secs)}` : " until unpinned"}`;
    case "unpin":
      return `unpin ${b.install_id}`;
    default:
      return b.action;
  }
}

function rolloutControls(
  name: string,
  releases: Json[],
  onDone: (plan: Json) => Promise<void>,
  current?: Json,
): HTMLElement {
  const action = el(
    "select",
    { id: "rollout-action" },
    ...ROLLOUT_ACTIONS.map(([a, text]) => el("option", { value: a }, text)),
  ) as HTMLSelectElement;
  // While a release is staged, a new `start` is the rarer move: offer changing its share first.
  if (current?.staged && (current.state === "active" || current.state === "paused")) {
    action.value = "set";
  }
  const release = versionSelect("rollout-release", releases);
  const to = versionSelect("rollout-to", releases);
  const mode = el(
    "select",
    { id: "rollout-mode" },
    el("option", { value: "percent" }, "a share now"),
    el("option", { value: "ramp" }, "a ramp with health gates"),
  ) as HTMLSelectElement;
  const percent = textInput("rollout-percent", "e.g. 5", "decimal");
  const steps = textInput("rollout-steps", "e.g. 1, 5, 25, 100");
  const every = textInput("rollout-every", "e.g. 60", "numeric");
  const failure = textInput("rollout-max-failure", "e.g. 2", "decimal");
  const fallback = textInput("rollout-max-fallback", "e.g. 5", "decimal");
  const samples = textInput("rollout-min-samples", "e.g. 200", "numeric");
  const regression = textInput("rollout-max-regression", "e.g. 1.5", "decimal");
  const latency = textInput("rollout-max-latency", "e.g. 1.3", "decimal");
  const crash = textInput("rollout-max-crash", "default 1", "decimal");
  const supersede = el("input", { id: "rollout-supersede", type: "checkbox" }) as HTMLInputElement;
  const install = textInput("rollout-install", "install id");
  const expires = textInput("rollout-expires", "hours, or 30m, 7d; empty: until unpinned");
  const reason = textInput("rollout-reason", "why (kept in the history; at most 1024 characters)");
  reason.maxLength = 1024;
  const groups: Record<string, HTMLElement> = {
    release: labelled("release", release),
    to: labelled("back to", to),
    mode: labelled("stage", mode),
    ramp: el("div", { class: "ramp-fields" }, labelled("steps (%)", steps), labelled("each step at least (minutes, or 6h, 1d)", every)),
    gates: el(
      "div",
      { class: "gate-fields" },
      labelled("halt above failure rate (%)", failure),
      labelled("halt above fallback rate (%)", fallback),
      labelled("min samples per step", samples),
      labelled("halt above failure rate × baseline", regression),
      labelled("halt above field latency × baseline", latency),
      labelled("halt above devices crashed (%)", crash),
    ),
    supersede: labelled("supersede a rollout in progress", supersede),
    percent: labelled("percent", percent),
    install: labelled("install id", install),
    expires: labelled("expires after", expires),
  };
  const preview = el("div", { id: "rollout-preview", "aria-live": "polite" });
  const fit = () => {
    const wanted = [...(ROLLOUT_FIELDS[action.value] ?? [])];
    if (action.value === "start") {
      wanted.push(mode.value === "ramp" ? "ramp" : "percent");
    }
    for (const [k, g] of Object.entries(groups)) {
      g.hidden = !wanted.includes(k);
    }
    preview.replaceChildren();
  };
  action.addEventListener("change", fit);
  mode.addEventListener("change", fit);
  fit();
  const body = (): Json => {
    const a = action.value;
    const b: Json = { action: a };
    if (a === "start" || a === "pin") {
      b.release = release.value;
    }
    if (a === "start" && mode.value === "ramp") {
      b.steps = steps.value.split(",").map((s) => s.trim().replace(/%$/, "")).filter((s) => s);
      b.every_secs = durationOf(every, "each step's length", 60);
    } else if ((a === "start" || a === "set") && percent.value.trim()) {
      b.percent = percent.value.trim().replace(/%$/, "").trim();
    }
    if (a === "start") {
      const gates: [string, HTMLInputElement, string, number][] = [
        ["max_failure_rate", failure, "the failure rate", 0.01],
        ["max_fallback_rate", fallback, "the fallback rate", 0.01],
        ["min_samples", samples, "min samples", 1],
        ["max_regression", regression, "the ratio to the baseline", 1],
        ["max_latency_ratio", latency, "the latency ratio", 1],
        ["max_crash_rate", crash, "the crash rate", 0.01],
      ];
      for (const [k, input, what, scale] of gates) {
        const v = numberOf(input, what, scale);
        if (v !== undefined) {
          b[k] = v;
        }
      }
    }
    if (a === "start" && supersede.checked) {
      b.supersede = true;
    }
    if (a === "revert") {
      b.to = to.value;
    }
    if (a === "pin" || a === "unpin") {
      b.install_id = install.value.trim();
    }
    if (a === "pin") {
      const h = durationOf(expires, "the expiry", 3600);
      if (h !== undefined) {
        b.expires_secs = h;
      }
    }
    if (reason.value.trim()) {
      b.reason = reason.value.trim();
    }
    return b;
  };
  const path = `/v1/admin/models/${encodeURIComponent(name)}/rollout`;
  const previewButton = el("button", { id: "rollout-preview-button", type: "button" }, "Preview");
  previewButton.addEventListener("click", async () => {
    let b: Json;
    try {
      b = body();
    } catch (e) {
      preview.replaceChildren(el("p", { class: "error", role: "alert" }, (e as Error).message));
      return;
    }
    preview.replaceChildren(el("p", { class: "muted" }, "Previewing…"));
    try {
      const p = await post(`${path}?dry_run=true`, b);
      // Applied only over the plan it was previewed on: a dry run answers the revision it
      // would write, so the plan in force was the one before (another operator's change
      // meanwhile is refused with rollout_changed).
      const base = Math.max(0, (p.revision ?? 1) - 1);
      showPreview(preview, b, p, () => JSON.stringify(body()) === JSON.stringify(b), async () => {
        const plan = await post(`${path}?if_revision=${base}`, b);
        // A reason belongs to one change.
        reason.value = "";
        await onDone(plan);
        const done = el(
          "p",
          { id: "rollout-applied", role: "status", tabindex: "-1" },
          `Applied as revision ${plan.revision}: ${describeChange(b)}.`,
        );
        preview.replaceChildren(done);
        done.focus();
      });
    } catch (e) {
      preview.replaceChildren(errorBox(e));
    }
  });
  const box = el(
    "fieldset",
    { id: "rollout-controls" },
    el("legend", {}, "Change the rollout"),
    labelled("action", action),
    ...Object.values(groups),
    labelled("reason", reason),
    previewButton,
    preview,
  );
  // Escape drops a preview.
  box.addEventListener("keydown", (ev) => {
    if ((ev as KeyboardEvent).key === "Escape") {
      preview.replaceChildren();
    }
  });
  return guarded(box, "rollout");
}

/** The dry run's answer, with Confirm (applies the change if the form still says the same)
 * and Cancel. */
function showPreview(
  box: HTMLElement,
  b: Json,
  p: Json,
  unchanged: () => boolean,
  apply: () => Promise<void>,
): void {
  const v = p.preview ?? {};
  const after = `after: ${p.state}, baseline ${p.baseline ?? "none"}${p.staged ? `, staged ${p.staged} at ${(p.basis_points / 100).toString()}%` : ""}; ${gatesText(p.thresholds)}`;
  const confirm = el("button", { id: "rollout-confirm", type: "button" }, "Confirm") as HTMLButtonElement;
  const cancel = el("button", { type: "button", id: "rollout-cancel" }, "Cancel");
  confirm.addEventListener("click", async () => {
    // Only what was previewed is applied: a form changed since asks for a new preview.
    try {
      if (!unchanged()) {
        throw new Error("The form changed since the preview: preview again.");
      }
    } catch (e) {
      box.replaceChildren(el("p", { class: "error", role: "alert" }, (e as Error).message));
      return;
    }
    confirm.disabled = true;
    try {
      await apply();
    } catch (e) {
      box.replaceChildren(errorBox(e));
    }
  });
  cancel.addEventListener("click", () => box.replaceChildren());
  const stranded = (v.stranded ?? []) as string[];
  box.replaceChildren(
    el("p", { id: "rollout-share" }, `${describeChange(b)}: ${pct(v.share_changing)} of install ids change release`),
    el("p", { class: "muted", id: "rollout-after" }, after),
    el("ul", { id: "rollout-moves" }, ...((v.moves ?? []) as string[]).map((m) => el("li", {}, m))),
    stranded.length
      ? el(
          "div",
          { class: "warning", id: "rollout-stranded" },
          el("p", {}, "Left without a variant:"),
          el("ul", {}, ...stranded.map((s) => el("li", {}, s))),
        )
      : "",
    confirm,
    cancel,
  );
  confirm.focus();
}
