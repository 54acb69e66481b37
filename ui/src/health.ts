// A model's fleet health: rates over time with the gates, breakdowns, the deny list.

// Why a deny-list entry is there, in words.
function denyWhy(d: Json): string {
  const l = d.latency;
  if (d.kind === "crashed_in_field") {
    const c = d.crash;
    return c ? `crashed natively on ${c.devices} of ${c.class_devices} devices (${pct(c.share)})` : `set by ${d.source}`;
  }
  if (d.kind === "slow_in_field") {
    if (!l) {
      return `set by ${d.source}`;
    }
    const parts = [`median warm p95 ${ms(l.p95_ms)} on ${l.devices} devices`];
    if (l.budget_ms !== undefined) {
      parts.push(`budget ${ms(l.budget_ms)}`);
    }
    if (l.next_variant) {
      parts.push(`${l.next_variant} ${l.next_p95_ms === undefined ? "not measured" : ms(l.next_p95_ms)}`);
    }
    return parts.join(", ");
  }
  return d.samples > 0 ? `${pct(d.fallback_rate)} fallback of ${d.samples} loads` : `set by ${d.source}`;
}

// Field latency: per release and variant the devices' warm p95s, cold starts, sustained use and
// the budget; then the median warm p95 by SoC and variant (what selection ranks by).
function latencyTables(releases: Json[], role: (r: string) => string): HTMLElement[] {
  const rows: string[][] = [];
  const bySoc = new Map<string, Map<string, Json>>();
  const cols: string[] = [];
  for (const r of releases) {
    for (const v of r.variants as Json[]) {
      const i = v.inference;
      if (!i) {
        continue;
      }
      rows.push([
        role(r.release),
        v.variant,
        v.delegate,
        String(i.devices),
        ms(i.warm_p95_ms?.p50),
        ms(i.warm_p95_ms?.p95),
        ms(i.cold_ms?.p95),
        ms(i.sustained_p95_ms?.p50),
        i.budget_ms === undefined ? "–" : ms(i.budget_ms),
        i.budget_ms === undefined ? "–" : pct(i.over_budget),
        String(i.probes ?? 0),
      ]);
      const col = `${r.release} ${v.variant}`;
      cols.push(col);
      for (const [soc, c] of Object.entries(v.by_soc ?? {}) as [string, Json][]) {
        if (c.warm_p95_ms) {
          if (!bySoc.has(soc)) {
            bySoc.set(soc, new Map());
          }
          bySoc.get(soc)!.set(col, c.warm_p95_ms);
        }
      }
    }
  }
  if (!rows.length) {
    return [];
  }
  const socRows = [...bySoc.entries()].map(([soc, cells]) => [
    soc,
    ...cols.map((c) => {
      const q = cells.get(c);
      if (!q) {
        return "";
      }
      const over = q.over_budget === undefined ? "" : `, ${pct(q.over_budget)} over budget`;
      return `${ms(q.p50)} (${q.devices ?? q.samples} devices${over})`;
    }),
  ]);
  return [
    el("h3", {}, "Field latency"),
    table(
      "health-latency",
      ["release", "variant", "delegate", "devices", "warm p95 (median)", "warm p95 (p95)", "cold p95", "sustained p95", "budget", "over budget", "probes"],
      rows,
    ),
    el("h3", {}, "Warm p95 by SoC"),
    table("latency-by-soc", ["SoC", ...cols], socRows),
  ];
}

function chart(
  target: HTMLElement,
  title: string,
  range: [number, number],
  xs: number[],
  series: { label: string; values: (number | null)[]; dash?: boolean }[],
): void {
  const colors = ["#c0392b", "#2471a3", "#27ae60", "#8e44ad", "#d35400", "#7f8c8d"];
  const opts = {
    title: `${title} (UTC)`,
    // Times in UTC, as everywhere else on the page (not the browser's zone).
    tzDate: (ts: number) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
    width: chartWidth(),
    height: 240,
    scales: {
      x: { time: true, range: () => range },
      y: { range: (_u: unknown, _min: number, max: number) => [0, Math.max(max ?? 0, 0.01) * 1.1] },
    },
    series: [
      {},
      ...series.map((s, i) => ({
        label: s.label,
        stroke: s.dash ? "#7f8c8d" : colors[i % colors.length],
        dash: s.dash ? [6, 4] : undefined,
        points: { show: true },
        spanGaps: true,
        value: (_u: unknown, v: number | null) => (v === null ? "–" : pct(v)),
      })),
    ],
    axes: [{}, { values: (_u: unknown, vals: number[]) => vals.map((v) => pct(v)) }],
  };
  charts.push(new uPlot(opts, [xs, ...series.map((s) => s.values)], target));
}

async function healthView(name: string): Promise<void> {
  const root = main();
  const enc = encodeURIComponent(name);
  const load = () =>
    Promise.all([
      api(`/v1/admin/models/${enc}/health`),
      api(`/v1/admin/models/${enc}/health/series?since=6h`),
    ]);
  const [[h, series], model] = await Promise.all([load(), api(`/v1/admin/models/${enc}`)]);
  // Outside the part that refreshes: a confirmation or a half-filled form stays.
  const confirmBox = el("div", { id: "deny-confirm", "aria-live": "polite" });
  const onDone = () => void render();
  root.replaceChildren(
    el("h2", {}, `${name}: fleet health`),
    el("p", {}, link(`#/model/${enc}`, `back to ${name}`)),
    healthData(enc, h, series, confirmBox, onDone),
    confirmBox,
    denyForm(enc, model, confirmBox, onDone),
  );
  let shown = JSON.stringify([h, series.points]);
  live(10, async () => {
    const [h2, s2] = await load();
    // Nothing moves when nothing changed (the series' clock moves on every answer).
    const now = JSON.stringify([h2, s2.points]);
    if (now === shown) {
      return;
    }
    shown = now;
    replaceById("health-data", healthData(enc, h2, s2, confirmBox, onDone));
    pruneCharts();
  });
}

/** Everything the health page shows from the server's data: summary, charts, tables, the
 * deny list (rebuilt whole on each refresh). */
function healthData(
  enc: string,
  h: Json,
  series: Json,
  confirmBox: HTMLElement,
  onDone: () => void,
): HTMLElement {
  const plan = h.rollout;
  const t = plan?.thresholds ?? {};
  const staged: string | null = plan?.staged ?? null;
  const baseline: string | null = plan?.baseline ?? null;
  const points = series.points as Json[];
  // The window asked for, so an hour of data is drawn as an hour of the last six.
  const range: [number, number] = [series.since_unix, series.now_unix + series.step_secs];
  // The window's edges as x values too, so the gates are lines across the whole window.
  const inner = points.map((p) => p.at_unix as number);
  const left = Math.min(range[0], inner[0] ?? range[0]);
  const right = Math.max(range[1], inner[inner.length - 1] ?? range[1]);
  const xs = [left, ...inner.filter((x) => x > left && x < right), right];
  const at = new Map(points.map((p) => [p.at_unix as number, p]));
  const of = (release: string, field: "load_failures" | "fallbacks") =>
    xs.map((x) => {
      const c = at.get(x)?.releases[release];
      return c ? rate(c[field], c.loads) : null;
    });
  const flat = (v: number | undefined) => xs.map(() => (v === undefined ? null : v));
  // Every release that reported in the window, named by its role in the plan in force.
  const releases = [...new Set(points.flatMap((p) => Object.keys(p.releases)))].sort();
  const role = (r: string) =>
    r === staged ? `${r} (staged)` : r === baseline ? `${r} (baseline)` : r;
  const chartBox = el("div", { id: "charts" });
  const parts: HTMLElement[] = [
    el(
      "p",
      { id: "health-summary" },
      `baseline ${baseline ?? "–"}${staged ? `, staged ${staged}` : ""}; state ${plan?.state ?? "–"}; cohort devices: ${Object.entries(h.cohort_sizes ?? {})
        .map(([k, v]) => `${k} ${v}`)
        .join(", ") || "none yet"}`,
    ),
  ];
  if (rolledBack(plan?.action, plan?.state)) {
    parts.push(el("p", { class: "warning", id: "rollback-reason" }, `Rolled back by ${plan.actor}: ${plan.reason ?? ""}`));
  } else if (plan?.state === "halted") {
    parts.push(el("p", { class: "error", id: "halt-reason" }, `Halted: ${plan.reason ?? ""}`));
  }
  // Native crashes of the staged release against the baseline's (what max_crash_rate reads).
  const cc = h.crash_compare;
  if (cc && (cc.staged_crashed > 0 || cc.baseline_crashed > 0)) {
    const needed = crashDevicesNeeded(t);
    const over = t.max_crash_rate !== undefined && cc.staged_crashed >= needed && cc.staged_rate > t.max_crash_rate;
    parts.push(
      el(
        "p",
        { id: "crash-compare", class: over ? "error" : "" },
        `Native crashes: staged ${cc.staged_crashed} of ${cc.staged_devices} devices (${pct(cc.staged_rate)}), baseline ${cc.baseline_crashed} of ${cc.baseline_devices} (${pct(cc.baseline_rate)})${t.max_crash_rate !== undefined ? `; the gate halts above ${pct(t.max_crash_rate)}` : ""}`,
      ),
    );
  }
  parts.push(chartBox);
  // Per release and variant.
  const rows: (Node | string)[][] = [];
  const heat = new Map<string, Map<string, number | null>>();
  const variantNames: string[] = [];
  for (const r of h.releases as Json[]) {
    for (const v of r.variants as Json[]) {
      rows.push([
        r.release,
        v.variant,
        v.delegate,
        String(v.loads),
        pct(v.failure_rate),
        pct(v.fallback_rate),
        v.crashes ? `${v.crashes} on ${v.crash_devices} devices` : "0",
        ms(v.load_ms?.p50),
        ms(v.load_ms?.p95),
        (v.top_error_codes as Json[]).map((c) => `${c.code} ×${c.count}`).join(", "),
      ]);
      const col = `${r.release} ${v.variant}`;
      variantNames.push(col);
      for (const [soc, c] of Object.entries(v.by_soc ?? {}) as [string, Json][]) {
        if (!heat.has(soc)) {
          heat.set(soc, new Map());
        }
        heat.get(soc)!.set(col, rate(c.fallbacks, c.loads));
      }
    }
  }
  parts.push(
    el("h3", {}, "By variant"),
    rows.length
      ? table("health-variants", ["release", "variant", "delegate", "loads", "failures", "fallbacks", "crashes", "p50", "p95", "top errors"], rows)
      : el("p", { id: "health-empty" }, "No telemetry with receipts yet."),
  );
  parts.push(...latencyTables(h.releases as Json[], role));
  // Who is in the field: devices by protocol version and SDK (`ferry fleet clients`).
  const clients = (h.clients?.by_client ?? []) as Json[];
  parts.push(
    el("h3", {}, "Clients"),
    clients.length
      ? table(
          "health-clients",
          ["protocol", "SDK", "version", "devices", "share"],
          clients.map((c) => [
            c.protocol === "legacy" ? "legacy (before v1)" : String(c.protocol),
            String(c.sdk),
            String(c.sdk_version),
            String(c.devices),
            pct(c.share),
          ]),
        )
      : el("p", { id: "clients-empty" }, "No device has resolved this model yet."),
  );
  // Heat map: SoC x variant, fallbacks per load attempt (what the deny list learns from).
  if (heat.size) {
    const head = el("tr", {}, el("th", {}, "SoC"), ...variantNames.map((n) => el("th", {}, n)));
    const body = [...heat.entries()].map(([soc, cells]) =>
      el(
        "tr",
        {},
        el("th", {}, soc),
        ...variantNames.map((n) => {
          const r = cells.get(n);
          const td = el("td", { class: "heat" }, r === undefined || r === null ? "" : pct(r));
          if (r !== undefined && r !== null) {
            td.style.background = `rgba(192, 57, 43, ${Math.min(1, r * 2).toFixed(2)})`;
          }
          return td;
        }),
      ),
    );
    parts.push(
      el("h3", {}, "Fallback rate by SoC"),
      scroller(el("table", { id: "heatmap" }, el("thead", {}, head), el("tbody", {}, ...body))),
    );
  }
  // By device model, all variants together.
  const byModel = new Map<string, { loads: number; failures: number; fallbacks: number; crashes: number }>();
  for (const r of h.releases as Json[]) {
    for (const v of r.variants as Json[]) {
      for (const [dm, c] of Object.entries(v.by_device_model ?? {}) as [string, Json][]) {
        const e = byModel.get(dm) ?? { loads: 0, failures: 0, fallbacks: 0, crashes: 0 };
        e.loads += c.loads;
        e.failures += c.load_failures;
        e.fallbacks += c.fallbacks;
        e.crashes += c.crashes ?? 0;
        byModel.set(dm, e);
      }
    }
  }
  if (byModel.size) {
    parts.push(
      el("h3", {}, "By device model"),
      table(
        "by-device-model",
        ["device model", "loads", "failure rate", "fallback rate", "crashes"],
        [...byModel.entries()].map(([dm, e]) => [
          dm,
          String(e.loads),
          pct(rate(e.failures, e.loads)),
          pct(rate(e.fallbacks, e.loads)),
          String(e.crashes),
        ]),
      ),
    );
  }
  parts.push(denyTable(enc, h, confirmBox, onDone));
  const box = el("div", { id: "health-data" }, ...parts);
  if (releases.length) {
    for (const [title, field, gate] of [
      ["Load failure rate", "load_failures", t.max_failure_rate],
      ["Fallback rate", "fallbacks", t.max_fallback_rate],
    ] as [string, "load_failures" | "fallbacks", number | undefined][]) {
      chart(chartBox, title, [left, right], xs, [
        ...releases.map((r) => ({ label: role(r), values: of(r, field) })),
        { label: "halt threshold", values: flat(gate), dash: true },
      ]);
    }
  } else {
    chartBox.append(el("p", { class: "muted", id: "no-telemetry" }, "No telemetry in the last 6 hours."));
  }
  return box;
}
