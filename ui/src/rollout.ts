// A model's rollout: the state in force, the ramp as a timeline with its gates, and the form
// that changes it (every action the CLI has, each previewed before it is confirmed).

/** What the ramp waits for or does next, in words (the server's verdict). */
function rampNow(now: Json): string {
  switch (now?.verdict) {
    case "wait":
      return `waiting for ${(now.waiting_for as string[]).join("; ")}`;
    case "advance":
      return `moves to ${(now.to / 100).toString()}% at the next check`;
    case "halt":
      return `halts at the next check: ${now.reason}`;
    case "done":
      return "the last step is in force";
    default:
      return "not ramping";
  }
}

/** The gates of a ramp step: each one's value now against its limit. */
function gateRows(t: Json, h: Json): (Node | string)[][] {
  const rows: (Node | string)[][] = [];
  const row = (gate: string, now: string, limit: string, over: boolean) => {
    rows.push([gate, over ? el("span", { class: "error" }, now) : now, limit]);
  };
  const loads = h?.loads ?? 0;
  row("samples (staged loads)", String(loads), `at least ${t.min_samples ?? 0}`, false);
  if (t.max_failure_rate !== undefined && t.max_failure_rate !== null) {
    const r = rate(h?.failures ?? 0, loads);
    row("load failure rate", pct(r), `at most ${pct(t.max_failure_rate)}`, r !== null && r > t.max_failure_rate);
  }
  if (t.max_fallback_rate !== undefined && t.max_fallback_rate !== null) {
    const r = rate(h?.fallbacks ?? 0, loads);
    row("fallback rate", pct(r), `at most ${pct(t.max_fallback_rate)}`, r !== null && r > t.max_fallback_rate);
  }
  if (t.max_regression !== undefined && t.max_regression !== null) {
    // The regression gate holds both rates to the baseline's.
    for (const [what, staged, base] of [
      ["failure rate over the baseline's", h?.failures ?? 0, h?.baseline_failures ?? 0],
      ["fallback rate over the baseline's", h?.fallbacks ?? 0, h?.baseline_fallbacks ?? 0],
    ] as [string, number, number][]) {
      const s = rate(staged, loads);
      const b = rate(base, h?.baseline_loads ?? 0);
      const ratio = s !== null && b ? s / b : null;
      row(
        what,
        ratio === null ? (s === null ? "–" : `${pct(s)} (baseline ${pct(b)})`) : `${ratio.toFixed(2)}× (${pct(s)} vs ${pct(b)})`,
        `at most ${t.max_regression}×`,
        ratio !== null && ratio > t.max_regression,
      );
    }
  }
  if (t.max_crash_rate !== undefined && t.max_crash_rate !== null) {
    const c = h?.crash;
    const needed = crashDevicesNeeded(t);
    row(
      "devices crashed (native)",
      c ? `${pct(c.staged_rate)} (${c.staged_crashed} of ${c.staged_devices}; baseline ${pct(c.baseline_rate)})` : "–",
      `at most ${pct(t.max_crash_rate)} (from ${needed} devices)`,
      !!c && c.staged_crashed >= needed && c.staged_rate > t.max_crash_rate,
    );
  }
  if (t.max_latency_ratio !== undefined && t.max_latency_ratio !== null) {
    const l = h?.latency;
    row(
      "field latency over the baseline's",
      l ? `${Number(l.ratio).toFixed(2)}× (${ms(l.staged_ms)} vs ${ms(l.baseline_ms)}, ${l.devices} devices)` : "–",
      `at most ${t.max_latency_ratio}×`,
      !!l && l.ratio > t.max_latency_ratio,
    );
  }
  return rows;
}

/** The ramp as a timeline: steps done, the step in force and what it waits for, the rest. */
function rampTimeline(r: Json): HTMLElement | null {
  const ramp = r.ramp;
  if (!ramp) {
    return null;
  }
  const steps = (ramp.steps ?? []) as string[];
  const items = steps.map((s, i) => {
    const n = i + 1;
    const state = n < ramp.step ? "done" : n === ramp.step ? "current" : "next";
    const li = el("li", { class: `step-${state}` }, `${s}%`);
    if (state === "current") {
      li.append(
        el(
          "span",
          { class: "muted" },
          ` — in force since ${when(ramp.step_started)}, at least ${duration(ramp.every_secs)}; ${rampNow(ramp.now)}`,
        ),
      );
    } else if (state === "done") {
      li.append(el("span", { class: "muted" }, " — done"));
    }
    return li;
  });
  return el(
    "div",
    { id: "ramp-timeline" },
    el("h4", {}, `Ramp: step ${ramp.step} of ${steps.length}`),
    el("ol", { class: "timeline" }, ...items),
    table("ramp-gates", ["gate", "this step", "limit"], gateRows(r.current?.thresholds ?? {}, ramp.step_health)),
  );
}

function rolloutSummary(r: Json): HTMLElement {
  const cur = r.current;
  if (!cur) {
    return el("div", { id: "rollout-state" }, el("p", {}, "No rollout plan yet."));
  }
  const back = rolledBack(cur.action, cur.state);
  const box = el("div", { id: "rollout-state" });
  // A halt's reason comes first: it is what the operator came for.
  if (back) {
    box.append(
      el(
        "p",
        { class: "warning", id: "rollback-reason" },
        `Rolled back by ${cur.actor} at ${when(cur.at)}: ${cur.reason ?? ""}. Resume would stage it again.`,
      ),
    );
  } else if (cur.state === "halted") {
    box.append(el("p", { class: "error", id: "halt-reason" }, `Halted: ${cur.reason ?? ""}`));
  }
  const parts: (Node | string)[] = [
    el("strong", {}, back ? "rolled back" : cur.state),
    ` — baseline ${cur.baseline ?? "none"}`,
  ];
  if (cur.staged) {
    parts.push(back ? `, ${cur.staged} withdrawn` : `, staged ${cur.staged} at ${r.percent}%`);
  }
  if (r.ramp) {
    parts.push(`, ramp step ${r.ramp.step} of ${(r.ramp.steps ?? []).length}`);
  }
  box.append(el("p", {}, ...parts));
  const timeline = rampTimeline(r);
  if (timeline) {
    box.append(timeline);
  } else {
    box.append(el("p", { class: "muted" }, gatesText(cur.thresholds ?? {})));
  }
  const pins = (cur.pins ?? []) as Json[];
  if (pins.length) {
    box.append(
      el("h4", {}, "Pinned test devices"),
      table(
        "pins",
        ["install id", "release", "expires", ""],
        pins.map((p) => [p.install_id, p.release, p.expires ? when(p.expires) : "never", unpinButton(p.install_id)]),
      ),
    );
  }
  return box;
}

/** A button that fills the rollout form to unpin `install` and previews it. */
function unpinButton(install: string): HTMLElement {
  const b = el("button", { type: "button", class: "unpin" }, "unpin…") as HTMLButtonElement;
  b.disabled = !may("rollout");
  b.addEventListener("click", () => {
    const action = document.getElementById("rollout-action") as HTMLSelectElement | null;
    const field = document.getElementById("rollout-install") as HTMLInputElement | null;
    if (!action || !field) {
      return;
    }
    action.value = "unpin";
    action.dispatchEvent(new Event("change"));
    field.value = install;
    (document.getElementById("rollout-preview-button") as HTMLElement | null)?.click();
    action.scrollIntoView({ block: "center" });
  });
  return b;
}
