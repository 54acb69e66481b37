// One model's experiment (#/experiment/MODEL): the plan in force, per metric each arm's mean
// per device, the difference with its always-valid 95% interval and the decision, the
// breakdown by device class, the history with actor and reason, and the stop (scope rollout).
// Kept current while shown. Starting one is `ferry experiment start` (docs/experiments.md).

/** A number for people: null (no data yet) as a dash. */
function figure(v: number | null | undefined): string {
  if (v === null || v === undefined || Number.isNaN(v)) {
    return "–";
  }
  const a = Math.abs(v);
  return a >= 1000 ? v.toFixed(0) : a >= 1 ? v.toFixed(3) : v.toFixed(5);
}

function interval(i: (number | null)[] | null | undefined): string {
  return i ? `[${figure(i[0])}, ${figure(i[1])}]` : "–";
}

/** A decision, marked so that a worse treatment stands out. */
function decisionCell(d: string): Node {
  return el("span", { class: d === "worse" ? "error" : d === "better" ? "ok" : "muted" }, d);
}

function needs(m: Json): string {
  if (m.decision === "better" || m.decision === "worse" || m.devices_more === 0) {
    return "enough devices";
  }
  return typeof m.devices_more === "number" ? `${m.devices_more} more per arm` : "–";
}

/** The plan in one paragraph. */
function experimentSummary(s: Json): HTMLElement {
  const p = s.experiment;
  const d = s.devices;
  const state =
    p.state === "running"
      ? "running"
      : `stopped${p.winner ? `, winner ${p.winner}` : ""}${p.rolled_out ? ", rolled out" : ""}`;
  return el(
    "div",
    { id: "experiment-state" },
    el(
      "p",
      {},
      `Experiment ${p.id}: control ${arm(p.control)} vs treatment ${arm(p.treatment)} on ` +
        `${(p.basis_points / 100).toString()}% of devices, ${state}; started ${when(p.started_at)}.`,
    ),
    el(
      "p",
      { class: "muted" },
      `Devices: control ${d.control}, treatment ${d.treatment} (${d.with_history} with a history ` +
        `before their arm). Effect of interest ${pct(p.effect)} of the control's mean.`,
    ),
  );
}

function arm(a: Json): string {
  return a.variant ? `${a.release}/${a.variant}` : a.release;
}

function metricsTable(s: Json): HTMLElement {
  return table(
    "experiment-metrics",
    ["metric", "better", "control", "treatment", "difference", "95% interval (always valid)", "decision", "needs"],
    (s.metrics as Json[]).map((m) => [
      m.metric,
      m.better,
      figure(m.control),
      figure(m.treatment),
      figure(m.difference),
      interval(m.interval),
      decisionCell(m.decision),
      needs(m),
    ]),
  );
}

/** Every class of every metric, with the share of the 5% each got. */
function classesTable(s: Json): HTMLElement {
  const rows: (Node | string)[][] = [];
  for (const m of s.metrics as Json[]) {
    for (const c of (m.classes as Json[]) ?? []) {
      rows.push([
        m.metric,
        `${c.key === "soc" ? "SoC" : "device model"} ${c.value}`,
        `${c.devices[0]} / ${c.devices[1]}`,
        figure(c.difference),
        interval(c.interval),
        pct(c.alpha),
        decisionCell(c.decision),
      ]);
    }
  }
  return rows.length
    ? table("experiment-classes", ["metric", "class", "devices", "difference", "interval", "error rate", "decision"], rows)
    : el("p", { id: "experiment-classes" }, "No breakdown by class (start with --classes soc,device_model).");
}

function experimentHistory(h: Json): HTMLElement {
  const rows = (h.revisions as Json[]).map((r) => [
    String(r.revision),
    r.action,
    r.actor,
    when(r.at),
    `${arm(r.control)} vs ${arm(r.treatment)}`,
    r.reason ?? "",
  ]);
  return table("experiment-history", ["revision", "action", "who", "when", "arms", "why"], rows.reverse());
}

/** The stop: a winner (or none), whether to roll it out, a reason; confirmed before it is sent. */
function stopForm(enc: string, running: boolean, onDone: () => Promise<void>): HTMLElement {
  const winner = el(
    "select",
    { id: "experiment-winner" },
    el("option", { value: "" }, "no winner"),
    el("option", { value: "control" }, "control"),
    el("option", { value: "treatment" }, "treatment"),
  ) as HTMLSelectElement;
  const rollOut = el("input", { id: "experiment-roll-out", type: "checkbox" }) as HTMLInputElement;
  // Only a winner can be rolled out.
  rollOut.disabled = true;
  winner.addEventListener("change", () => {
    rollOut.disabled = !winner.value;
    if (!winner.value) {
      rollOut.checked = false;
    }
  });
  const reason = el("input", { id: "experiment-reason", type: "text", autocomplete: "off" }) as HTMLInputElement;
  const result = el("div", { id: "experiment-result", role: "status" });
  const stop = el("button", { type: "button", id: "experiment-stop" }, "Stop…") as HTMLButtonElement;
  stop.disabled = !running;
  stop.addEventListener("click", () => {
    const body: Json = { reason: reason.value.trim() };
    if (winner.value) {
      body.winner = winner.value;
      body.roll_out = rollOut.checked;
    }
    const confirm = el("button", { type: "button", id: "experiment-confirm" }, "Confirm stop") as HTMLButtonElement;
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      try {
        const r = await post(`/v1/admin/models/${enc}/experiment/stop`, body);
        result.replaceChildren(
          el("p", {}, `Stopped at revision ${r.revision}${r.rollout ? `; rollout of ${r.rollout.staged} started` : ""}.`),
        );
        await onDone();
      } catch (e) {
        result.replaceChildren(errorBox(e));
      }
    });
    result.replaceChildren(
      el(
        "p",
        {},
        `No device will be assigned any more${body.winner ? `; winner ${body.winner}` : ""}` +
          `${body.roll_out ? ", its release rolled out to every device" : ""}. The results stay.`,
      ),
      confirm,
    );
    confirm.focus();
  });
  return guarded(
    el(
      "fieldset",
      { id: "experiment-form" },
      el("legend", {}, "Stop the experiment"),
      labelled("winner", winner),
      labelled("roll the winner out", rollOut),
      labelled("reason", reason),
      stop,
      result,
    ),
    "rollout",
  );
}

async function experimentView(name: string): Promise<void> {
  const root = main();
  const enc = encodeURIComponent(name);
  const load = async () => {
    try {
      return await Promise.all([
        api(`/v1/admin/models/${enc}/experiment`),
        api(`/v1/admin/models/${enc}/experiment/history`),
      ]);
    } catch (e) {
      if (e instanceof ApiFailure && e.code === "experiment_not_found") {
        return null;
      }
      throw e;
    }
  };
  const first = await load();
  if (!first) {
    root.replaceChildren(
      el("h2", {}, `${name}: experiment`),
      el("p", { id: "experiment-none" }, "This model has had no experiment. Start one with: ferry experiment start"),
    );
    return;
  }
  let shown = JSON.stringify(first);
  const refresh = async () => {
    const now = await load();
    const text = JSON.stringify(now);
    if (!now || text === shown) {
      return;
    }
    shown = text;
    const [s, h] = now;
    replaceById("experiment-state", experimentSummary(s));
    replaceById("experiment-metrics", metricsTable(s));
    replaceById("experiment-classes", classesTable(s));
    replaceById("experiment-history", experimentHistory(h));
    (document.getElementById("experiment-stop") as HTMLButtonElement).disabled =
      s.experiment.state !== "running";
  };
  const [s, h] = first;
  root.replaceChildren(
    el("h2", {}, `${name}: experiment`),
    el("p", {}, link(`#/model/${enc}`, "Model"), " · ", link(`#/health/${enc}`, "Fleet health")),
    experimentSummary(s),
    el("h3", {}, "Metrics"),
    el(
      "p",
      { class: "muted" },
      "Means per device. Better or worse when the interval excludes 0; it stays valid however often you look.",
    ),
    metricsTable(s),
    el("h3", {}, "By device class"),
    classesTable(s),
    stopForm(enc, s.experiment.state === "running", refresh),
    el("h3", {}, "History"),
    experimentHistory(h),
  );
  live(10, refresh);
}
