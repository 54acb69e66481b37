"use strict";
// ferry's operator dashboard: shared helpers (elements, tables, the admin API, formats).
// Plain TypeScript scripts (one per page or widget, no module loader) compiled by tsc into one
// server/ui/app.js in the order ui/tsconfig.json lists them (ui/build.sh), served at /ui with
// everything it needs (no CDN). Every request to the
// admin API carries the token the operator typed, kept in sessionStorage only (gone when the
// tab closes). All text from the server goes into the page as text, never as HTML.
const TOKEN_KEY = "ferry.token";
/** The view being built: rendered into a detached box that replaces the page only if no
 * newer navigation started meanwhile (a slow answer never overwrites a newer view). */
let target = document.createElement("div");
let renderGen = 0;
/** Charts on the page, resized with the window. */
let charts = [];
/** Where the current view renders (capture it before any await). */
function main() {
    return target;
}
/** The width charts get for the window's width. */
function chartWidth() {
    return Math.min(900, Math.max(300, window.innerWidth - 60));
}
/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
        e.setAttribute(k, v);
    }
    for (const c of children) {
        if (c === null || c === undefined) {
            continue;
        }
        e.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
}
/** A table with a header row and body rows. */
function table(id, head, rows) {
    return el("table", { id }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
}
function token() {
    return sessionStorage.getItem(TOKEN_KEY);
}
/** A failed API call, with the server's error code and message. */
class ApiFailure extends Error {
    constructor(status, code, message) {
        super(message);
        this.status = status;
        this.code = code;
    }
}
/** Calls the admin API with the session's token; a 401 signs out. */
async function api(path, init = {}) {
    const t = token();
    if (!t) {
        throw new ApiFailure(401, "unauthorized", "not signed in");
    }
    const headers = new Headers(init.headers);
    headers.set("authorization", `Bearer ${t}`);
    if (init.body) {
        headers.set("content-type", "application/json");
    }
    const resp = await fetch(path, { ...init, headers });
    const text = await resp.text();
    let body = null;
    try {
        body = text ? JSON.parse(text) : null;
    }
    catch {
        body = { code: "not_json", message: text.slice(0, 200) };
    }
    if (resp.status === 401) {
        // The token is no good: forget it; the caller shows the sign-in form with the reason.
        sessionStorage.removeItem(TOKEN_KEY);
        throw new ApiFailure(401, "unauthorized", "the server refused the token; sign in again");
    }
    if (!resp.ok) {
        throw new ApiFailure(resp.status, body?.code ?? "error", body?.message ?? resp.statusText);
    }
    return body;
}
function post(path, body) {
    return api(path, { method: "POST", body: JSON.stringify(body) });
}
function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById("nav").hidden = true;
    if (location.hash === "#/signin") {
        void render();
    }
    else {
        location.hash = "#/signin";
    }
}
/** An RFC 3339 time for people: date and time to the second, UTC. */
function when(t) {
    if (!t) {
        return "–";
    }
    const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(t);
    return m ? `${m[1]} ${m[2]} UTC` : t;
}
/** Whether a halted plan was rolled back by an operator (not halted by telemetry). */
function rolledBack(action, state) {
    return state === "halted" && action === "rollback";
}
/** A percentage with at most two decimals. */
function pct(rate) {
    if (rate === null || rate === undefined || Number.isNaN(rate)) {
        return "–";
    }
    return `${(Math.round(rate * 10000) / 100).toString()}%`;
}
/** Milliseconds rounded for people. */
function ms(v) {
    if (v === null || v === undefined) {
        return "–";
    }
    return v >= 100 ? `${Math.round(v)} ms` : `${v.toFixed(1)} ms`;
}
function bytes(n) {
    if (n >= 1 << 20) {
        return `${(n / (1 << 20)).toFixed(1)} MiB`;
    }
    if (n >= 1 << 10) {
        return `${(n / (1 << 10)).toFixed(1)} KiB`;
    }
    return `${n} B`;
}
function link(href, text, id) {
    return el("a", id ? { href, id } : { href }, text);
}
function errorBox(e) {
    const msg = e instanceof ApiFailure ? `${e.code}: ${e.message}` : String(e);
    return el("p", { class: "error", role: "alert" }, msg);
}
// Sign in, and the list of models.
function signInView(reason) {
    const input = el("input", {
        id: "token",
        type: "password",
        autocomplete: "off",
        placeholder: "admin token",
    });
    const status = el("p", { id: "signin-status" });
    const form = el("form", { id: "signin" }, el("h2", {}, "Sign in"), el("p", {}, "An admin token with the read scope (rollout changes need the rollout scope). It is kept for this browser tab only."), input, el("button", { type: "submit" }, "Sign in"), status);
    form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        try {
            await api("/v1/admin/models");
            // Back to where the operator was going (a bookmark or a deep link), else the models.
            const wanted = location.hash && location.hash !== "#/signin" ? location.hash : "#/models";
            if (location.hash === wanted) {
                void render();
            }
            else {
                location.hash = wanted;
            }
        }
        catch (e) {
            sessionStorage.removeItem(TOKEN_KEY);
            status.replaceChildren(errorBox(e));
        }
    });
    if (reason !== undefined) {
        status.replaceChildren(errorBox(reason));
    }
    main().replaceChildren(form);
}
// ---------------------------------------------------------------------------------------------
// Models
function badge(m) {
    const badges = [];
    if (rolledBack(m.rollout_action, m.rollout_state)) {
        badges.push(el("span", { class: "badge warn" }, "rolled back"));
    }
    else if (m.rollout_state === "halted") {
        badges.push(el("span", { class: "badge bad" }, "halted"));
    }
    else if (m.rollout_state === "paused") {
        badges.push(el("span", { class: "badge warn" }, "paused"));
    }
    if (m.deny_entries > 0) {
        badges.push(el("span", { class: "badge warn" }, `${m.deny_entries} deny entries`));
    }
    if (!badges.length) {
        badges.push(el("span", { class: "badge ok" }, "ok"));
    }
    return el("span", {}, ...badges);
}
async function modelsView() {
    const root = main();
    const body = await api("/v1/admin/models");
    const rows = body.models.map((m) => [
        link(`#/model/${encodeURIComponent(m.model)}`, m.model),
        m.baseline ?? "–",
        m.staged ? `${m.staged} at ${m.percent}%` : "–",
        rolledBack(m.rollout_action, m.rollout_state) ? "rolled back" : m.rollout_state ?? "–",
        m.ramp_step === null || m.ramp_step === undefined ? "–" : String(m.ramp_step + 1),
        badge(m),
    ]);
    root.replaceChildren(el("h2", {}, "Models"), rows.length
        ? table("models", ["model", "baseline", "staged", "rollout", "ramp step", "health"], rows)
        : el("p", {}, "No model is published yet."));
}
// One model: its rollout (summary and controls), releases and history.
function rolloutSummary(r) {
    const cur = r.current;
    if (!cur) {
        return el("p", { id: "rollout-state" }, "No rollout plan yet.");
    }
    const back = rolledBack(cur.action, cur.state);
    const parts = [
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
        box.append(el("p", { class: "muted", id: "rollback-reason" }, `Rolled back by ${cur.actor} at ${when(cur.at)}: ${cur.reason ?? ""}. Resume would stage it again.`));
    }
    else if (cur.state === "halted") {
        box.append(el("p", { class: "error", id: "halt-reason" }, `Halted: ${cur.reason ?? ""}`));
    }
    const t = cur.thresholds ?? {};
    box.append(el("p", { class: "muted" }, `gates: failure ≤ ${pct(t.max_failure_rate)}, fallback ≤ ${pct(t.max_fallback_rate)}, min samples ${t.min_samples ?? "–"}`));
    return box;
}
function rolloutControls(name, releases, onDone) {
    const action = el("select", { id: "rollout-action" }, ...["start", "set", "pause", "resume", "rollback", "complete"].map((a) => el("option", { value: a }, a)));
    const release = el("select", { id: "rollout-release" }, ...releases.map((r) => el("option", { value: r.version }, r.version)));
    const percent = el("input", {
        id: "rollout-percent",
        type: "text",
        inputmode: "decimal",
        placeholder: "percent",
        size: "6",
    });
    const reason = el("input", { id: "rollout-reason", type: "text", placeholder: "reason" });
    const preview = el("div", { id: "rollout-preview" });
    const fit = () => {
        release.hidden = action.value !== "start";
        percent.hidden = action.value !== "start" && action.value !== "set";
        preview.replaceChildren();
    };
    action.addEventListener("change", fit);
    fit();
    const describe = (b) => {
        switch (b.action) {
            case "start":
                return `start ${b.release}${b.percent ? ` at ${b.percent}%` : ""}`;
            case "set":
                return `set to ${b.percent ?? "?"}%`;
            default:
                return b.action;
        }
    };
    const body = () => {
        const b = { action: action.value };
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
            const confirm = el("button", { id: "rollout-confirm", type: "button" }, "Confirm");
            confirm.addEventListener("click", async () => {
                // Only what was previewed is applied: a form changed since asks for a new preview.
                if (JSON.stringify(body()) !== JSON.stringify(b)) {
                    preview.replaceChildren(el("p", { class: "error", role: "alert" }, "The form changed since the preview: preview again."));
                    return;
                }
                confirm.disabled = true;
                try {
                    await post(path, b);
                    onDone();
                }
                catch (e) {
                    preview.replaceChildren(errorBox(e));
                }
            });
            preview.replaceChildren(el("p", { id: "rollout-share" }, `${describe(b)}: ${pct(p.preview.share_changing)} of install ids change release`), el("ul", {}, ...p.preview.moves.map((m) => el("li", {}, m))), confirm, el("button", { type: "button", id: "rollout-cancel" }, "Cancel"));
            preview.querySelector("#rollout-cancel").addEventListener("click", () => preview.replaceChildren());
        }
        catch (e) {
            preview.replaceChildren(errorBox(e));
        }
    });
    return el("fieldset", { id: "rollout-controls" }, el("legend", {}, "Change the rollout"), action, release, percent, reason, previewButton, preview);
}
async function modelView(name) {
    const root = main();
    const enc = encodeURIComponent(name);
    const [model, rollout] = await Promise.all([
        api(`/v1/admin/models/${enc}`),
        api(`/v1/admin/models/${enc}/rollout`),
    ]);
    const releases = model.releases;
    const rows = releases.map((r) => [
        link(`#/model/${enc}/release/${encodeURIComponent(r.version)}`, r.version),
        r.state,
        r.variants.map((v) => `${v.id} (${v.delegate})`).join(", "),
        verdict(r.evaluation),
        r.notes ?? "",
    ]);
    const history = rollout.history.map((h) => [
        String(h.revision),
        h.action,
        h.actor,
        when(h.at),
        h.staged ? `${h.staged} ${(h.basis_points / 100).toString()}%` : `${h.baseline ?? ""}`,
        h.reason ?? "",
    ]);
    root.replaceChildren(el("h2", {}, name), el("p", {}, link(`#/health/${enc}`, "Fleet health", "health-link")), el("h3", {}, "Rollout"), rolloutSummary(rollout), rolloutControls(name, releases, () => render()), el("h3", {}, "Releases"), table("releases", ["release", "state", "variants", "evaluation", "notes"], rows), el("h3", {}, "History"), table("history", ["revision", "action", "who", "when", "release", "why"], history.reverse()));
}
// One release: variants, evaluation and the delegation report.
/** A release's signed evaluation in a few words (the model page's list). */
function verdict(e) {
    if (!e) {
        return "";
    }
    const failed = (e.failed ?? []);
    let out = failed.length ? `${e.metric} FAILED ${failed.join(", ")}` : `${e.metric} passed`;
    if (e.override) {
        out += ` (signed anyway: ${e.override})`;
    }
    const skipped = (e.not_evaluated ?? []);
    if (skipped.length) {
        out += `; ${skipped.length} not evaluated`;
    }
    return out;
}
/** The release's signed evaluation: what was measured, on what, and each variant's verdict. */
function evaluationSection(e, variants) {
    if (!e) {
        return [el("p", { class: "muted", id: "evaluation" }, "Signed without an evaluation.")];
    }
    const bound = e.max_error != null ? `max_error ${e.max_error}` : `max_drop ${((e.max_drop ?? 0) * 100).toFixed(2)}%`;
    // In the release's variant order.
    const results = e.results;
    const rows = variants.filter((v) => Object.prototype.hasOwnProperty.call(results, v.id)).map((v) => results[v.id]).map((r) => [
        r.id,
        r.value != null ? Number(r.value).toFixed(4) : "",
        r.drop != null ? `${(Number(r.drop) * 100).toFixed(2)}%` : "",
        r.passed == null ? `not evaluated: ${r.why_not ?? ""}` : r.passed ? "pass" : `FAIL: ${r.why_not ?? ""}`,
    ]);
    const out = [
        el("h3", {}, "Evaluation"),
        el("p", { class: "muted" }, `${e.metric} on ${e.samples} samples (set ${String(e.dataset_sha256).slice(0, 12)}), reference ${e.reference}, ${bound}, runtime ${e.runtime_version}${e.baseline ? `, baseline ${e.baseline.version}` : ""}`),
    ];
    if (e.override) {
        out.push(el("p", { class: "warning" }, `Signed despite ${(e.override.failed ?? []).join(", ")}: ${e.override.reason}`));
    }
    out.push(table("evaluation", ["variant", "value", "drop", "verdict"], rows));
    return out;
}
/** A variant's signed metadata for the app, for people. */
function metadata(v) {
    const parts = [];
    const p = v.preprocess;
    if (p) {
        const steps = [];
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
    const assets = (v.assets ?? []).map((a) => `${a.name} (${bytes(a.size)})`);
    if (assets.length) {
        parts.push(`assets ${assets.join(", ")}`);
    }
    return parts.join("; ");
}
/** A variant's device constraints, for people. */
function constraints(c) {
    if (!c) {
        return "";
    }
    const parts = [];
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
async function releaseView(name, version) {
    const root = main();
    const r = await api(`/v1/admin/models/${encodeURIComponent(name)}/releases/${encodeURIComponent(version)}`);
    const inspection = r.inspection ?? {};
    const variants = r.variants;
    const sections = [];
    for (const v of variants) {
        const ins = inspection[v.id];
        const methods = (ins?.methods ?? []);
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
        sections.push(el("section", { class: "variant", "data-variant": v.id }, el("h3", {}, `${v.id} — ${v.delegate}, ${v.quant}, ${bytes(v.size)}`), el("p", { class: "muted" }, `runtime ${v.runtime ?? "*"}, app ${v.app ?? "*"}, backends ${(v.backends ?? []).join(", ") || "none"}${constraints(v.constraints)}`), ...(metadata(v) ? [el("p", { class: "muted metadata" }, metadata(v))] : []), methodRows.length
            ? table(`delegation-${v.id}`, ["method", "summary", "delegated", "on portable kernels"], methodRows)
            : el("p", {}, "No inspection recorded for this variant.")));
    }
    root.replaceChildren(el("h2", {}, `${name} ${version}`), el("p", {}, link(`#/model/${encodeURIComponent(name)}`, `back to ${name}`)), el("p", { id: "release-notes" }, r.notes ?? ""), ...evaluationSection(r.evaluation, variants), ...sections);
}
// A model's fleet health: rates over time with the gates, breakdowns, the deny list.
// Why a deny-list entry is there, in words.
function denyWhy(d) {
    const l = d.latency;
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
function latencyTables(releases, role) {
    const rows = [];
    const bySoc = new Map();
    const cols = [];
    for (const r of releases) {
        for (const v of r.variants) {
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
            for (const [soc, c] of Object.entries(v.by_soc ?? {})) {
                if (c.warm_p95_ms) {
                    if (!bySoc.has(soc)) {
                        bySoc.set(soc, new Map());
                    }
                    bySoc.get(soc).set(col, c.warm_p95_ms);
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
        table("health-latency", ["release", "variant", "delegate", "devices", "warm p95 (median)", "warm p95 (p95)", "cold p95", "sustained p95", "budget", "over budget", "probes"], rows),
        el("h3", {}, "Warm p95 by SoC"),
        table("latency-by-soc", ["SoC", ...cols], socRows),
    ];
}
function rate(n, d) {
    return d > 0 ? n / d : null;
}
function chart(target, title, range, xs, series) {
    const colors = ["#c0392b", "#2471a3", "#27ae60", "#8e44ad", "#d35400", "#7f8c8d"];
    const opts = {
        title,
        width: chartWidth(),
        height: 240,
        scales: {
            x: { time: true, range: () => range },
            y: { range: (_u, _min, max) => [0, Math.max(max ?? 0, 0.01) * 1.1] },
        },
        series: [
            {},
            ...series.map((s, i) => ({
                label: s.label,
                stroke: s.dash ? "#7f8c8d" : colors[i % colors.length],
                dash: s.dash ? [6, 4] : undefined,
                points: { show: true },
                spanGaps: true,
                value: (_u, v) => (v === null ? "–" : pct(v)),
            })),
        ],
        axes: [{}, { values: (_u, vals) => vals.map((v) => pct(v)) }],
    };
    charts.push(new uPlot(opts, [xs, ...series.map((s) => s.values)], target));
}
async function healthView(name) {
    const root = main();
    const enc = encodeURIComponent(name);
    const [h, series] = await Promise.all([
        api(`/v1/admin/models/${enc}/health`),
        api(`/v1/admin/models/${enc}/health/series?since=6h`),
    ]);
    const plan = h.rollout;
    const t = plan?.thresholds ?? {};
    const staged = plan?.staged ?? null;
    const baseline = plan?.baseline ?? null;
    const points = series.points;
    // The window asked for, so an hour of data is drawn as an hour of the last six.
    const range = [series.since_unix, series.now_unix + series.step_secs];
    // The window's edges as x values too, so the gates are lines across the whole window.
    const inner = points.map((p) => p.at_unix);
    const left = Math.min(range[0], inner[0] ?? range[0]);
    const right = Math.max(range[1], inner[inner.length - 1] ?? range[1]);
    const xs = [left, ...inner.filter((x) => x > left && x < right), right];
    const at = new Map(points.map((p) => [p.at_unix, p]));
    const of = (release, field) => xs.map((x) => {
        const c = at.get(x)?.releases[release];
        return c ? rate(c[field], c.loads) : null;
    });
    const flat = (v) => xs.map(() => (v === undefined ? null : v));
    // Every release that reported in the window, named by its role in the plan in force.
    const releases = [...new Set(points.flatMap((p) => Object.keys(p.releases)))].sort();
    const role = (r) => r === staged ? `${r} (staged)` : r === baseline ? `${r} (baseline)` : r;
    const chartBox = el("div", { id: "charts" });
    const parts = [
        el("h2", {}, `${name}: fleet health`),
        el("p", {}, link(`#/model/${enc}`, `back to ${name}`)),
        el("p", { id: "health-summary" }, `baseline ${baseline ?? "–"}${staged ? `, staged ${staged}` : ""}; state ${plan?.state ?? "–"}; cohort devices: ${Object.entries(h.cohort_sizes ?? {})
            .map(([k, v]) => `${k} ${v}`)
            .join(", ") || "none yet"}`),
    ];
    if (plan?.state === "halted") {
        parts.push(el("p", { class: "error", id: "halt-reason" }, `Halted: ${plan.reason ?? ""}`));
    }
    parts.push(chartBox);
    // Per release and variant.
    const rows = [];
    const heat = new Map();
    const variantNames = [];
    for (const r of h.releases) {
        for (const v of r.variants) {
            rows.push([
                r.release,
                v.variant,
                v.delegate,
                String(v.loads),
                pct(v.failure_rate),
                pct(v.fallback_rate),
                ms(v.load_ms?.p50),
                ms(v.load_ms?.p95),
                v.top_error_codes.map((c) => `${c.code} ×${c.count}`).join(", "),
            ]);
            const col = `${r.release} ${v.variant}`;
            variantNames.push(col);
            for (const [soc, c] of Object.entries(v.by_soc ?? {})) {
                if (!heat.has(soc)) {
                    heat.set(soc, new Map());
                }
                heat.get(soc).set(col, rate(c.fallbacks, c.loads));
            }
        }
    }
    parts.push(el("h3", {}, "By variant"), rows.length
        ? table("health-variants", ["release", "variant", "delegate", "loads", "failures", "fallbacks", "p50", "p95", "top errors"], rows)
        : el("p", { id: "health-empty" }, "No telemetry with receipts yet."));
    parts.push(...latencyTables(h.releases, role));
    // Who is in the field: devices by protocol version and SDK (`ferry fleet clients`).
    const clients = (h.clients?.by_client ?? []);
    parts.push(el("h3", {}, "Clients"), clients.length
        ? table("health-clients", ["protocol", "SDK", "version", "devices", "share"], clients.map((c) => [
            c.protocol === "legacy" ? "legacy (before v1)" : String(c.protocol),
            String(c.sdk),
            String(c.sdk_version),
            String(c.devices),
            pct(c.share),
        ]))
        : el("p", { id: "clients-empty" }, "No device has resolved this model yet."));
    // Heat map: SoC x variant, fallbacks per load attempt (what the deny list learns from).
    if (heat.size) {
        const head = el("tr", {}, el("th", {}, "SoC"), ...variantNames.map((n) => el("th", {}, n)));
        const body = [...heat.entries()].map(([soc, cells]) => el("tr", {}, el("th", {}, soc), ...variantNames.map((n) => {
            const r = cells.get(n);
            const td = el("td", { class: "heat" }, r === undefined || r === null ? "" : pct(r));
            if (r !== undefined && r !== null) {
                td.style.background = `rgba(192, 57, 43, ${Math.min(1, r * 2).toFixed(2)})`;
            }
            return td;
        })));
        parts.push(el("h3", {}, "Fallback rate by SoC"), el("table", { id: "heatmap" }, el("thead", {}, head), el("tbody", {}, ...body)));
    }
    // By device model, all variants together.
    const byModel = new Map();
    for (const r of h.releases) {
        for (const v of r.variants) {
            for (const [dm, c] of Object.entries(v.by_device_model ?? {})) {
                const e = byModel.get(dm) ?? { loads: 0, failures: 0, fallbacks: 0 };
                e.loads += c.loads;
                e.failures += c.load_failures;
                e.fallbacks += c.fallbacks;
                byModel.set(dm, e);
            }
        }
    }
    if (byModel.size) {
        parts.push(el("h3", {}, "By device model"), table("by-device-model", ["device model", "loads", "failure rate", "fallback rate"], [...byModel.entries()].map(([dm, e]) => [
            dm,
            String(e.loads),
            pct(rate(e.failures, e.loads)),
            pct(rate(e.fallbacks, e.loads)),
        ])));
    }
    // Deny list with override and clear.
    const deny = h.deny;
    const denyRows = deny.map((d) => {
        const act = (action) => {
            const b = el("button", { type: "button", class: `deny-${action}` }, action);
            b.addEventListener("click", async () => {
                try {
                    await post(`/v1/admin/models/${enc}/deny`, {
                        action,
                        release: d.release,
                        variant: d.variant,
                        class: d.class,
                        value: d.value,
                        kind: d.kind ?? "fallback",
                    });
                    render();
                }
                catch (e) {
                    b.replaceWith(errorBox(e));
                }
            });
            return b;
        };
        return [
            d.release,
            d.variant,
            `${d.class} ${d.value}`,
            d.kind === "slow_in_field" ? "slow in field (ranked after the next candidate)" : "fallback (not offered)",
            denyWhy(d),
            d.state,
            el("span", {}, act("override"), act("clear")),
        ];
    });
    parts.push(el("h3", {}, "Deny list"), denyRows.length
        ? table("deny", ["release", "variant", "devices", "kind", "why", "state", ""], denyRows)
        : el("p", {}, "Nothing is denied."));
    root.replaceChildren(...parts);
    if (releases.length) {
        for (const [title, field, gate] of [
            ["Load failure rate", "load_failures", t.max_failure_rate],
            ["Fallback rate", "fallbacks", t.max_fallback_rate],
        ]) {
            chart(chartBox, title, [left, right], xs, [
                ...releases.map((r) => ({ label: role(r), values: of(r, field) })),
                { label: "halt threshold", values: flat(gate), dash: true },
            ]);
        }
    }
    else {
        chartBox.append(el("p", { class: "muted", id: "no-telemetry" }, "No telemetry in the last 6 hours."));
    }
}
// Explain: what a device would get, and why.
function explainView() {
    const field = (id, label, value = "") => el("label", {}, label, el("input", { id, value, type: "text" }));
    const out = el("div", { id: "explain-result" });
    const form = el("form", { id: "explain" }, el("h2", {}, "Explain a resolve"), field("ex-model", "model"), field("ex-platform", "platform", "android"), field("ex-os", "OS version", "14"), field("ex-soc", "SoC"), field("ex-device", "device model"), field("ex-ram", "RAM (MiB)", "8192"), field("ex-app", "app version", "1.0.0"), field("ex-runtime", "runtime version", "1.5.1"), field("ex-backends", "backends (comma-separated)", "XnnpackBackend"), field("ex-install", "install id", "dashboard-explain"), el("button", { type: "submit" }, "Explain"), out);
    const value = (id) => form.querySelector(`#${id}`).value.trim();
    form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        const ram = Number(value("ex-ram"));
        if (!Number.isInteger(ram) || ram < 0) {
            out.replaceChildren(el("p", { class: "error", role: "alert" }, "RAM must be a whole number of MiB."));
            return;
        }
        const device = {
            model: value("ex-model"),
            install_id: value("ex-install"),
            app_version: value("ex-app"),
            runtime_version: value("ex-runtime"),
            backends: value("ex-backends")
                .split(",")
                .map((s) => s.trim())
                .filter((s) => s),
            platform: value("ex-platform"),
            os_version: value("ex-os"),
            device_model: value("ex-device"),
            soc: value("ex-soc"),
            ram_mb: ram,
        };
        try {
            const r = await post("/v1/resolve?explain=true", device);
            const entries = (r.explain ?? []);
            const chosen = entries
                .filter((e) => e.rank !== undefined)
                .sort((a, b) => a.rank - b.rank);
            out.replaceChildren(el("p", { id: "explain-chosen" }, chosen.length
                ? `Gets ${chosen[0].release} ${chosen[0].variant} (${chosen[0].delegate})${chosen.length > 1 ? `, then ${chosen.slice(1).map((c) => c.variant).join(", ")}` : ""}`
                : "Gets nothing"), table("explain-table", ["release", "variant", "delegate", "rank", "why"], entries.map((e) => [
                e.release,
                e.variant,
                e.delegate,
                e.rank === undefined ? "–" : String(e.rank),
                e.reasons.join("; "),
            ])));
        }
        catch (e) {
            out.replaceChildren(errorBox(e));
        }
    });
    main().replaceChildren(form);
}
// Routing: the view for the address, and the page's event handlers.
/** Model names and versions as the server spells them; anything else is not fetched. */
const NAME = /^[A-Za-z0-9._+-]{1,128}$/;
async function render() {
    const gen = ++renderGen;
    const box = document.createElement("div");
    target = box;
    const nav = document.getElementById("nav");
    const show = () => {
        if (gen === renderGen) {
            // Charts of views no longer shown are released; this view's stay for resizing.
            const keep = charts.filter((c) => box.contains(c.root));
            for (const c of charts) {
                if (!keep.includes(c)) {
                    c.destroy();
                }
            }
            charts = keep;
            document.getElementById("main").replaceChildren(box);
            box.querySelector("#token")?.focus();
        }
    };
    if (!token()) {
        nav.hidden = true;
        signInView();
        show();
        return;
    }
    nav.hidden = false;
    try {
        let parts;
        try {
            parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
        }
        catch {
            throw new Error("this address is not one the dashboard knows");
        }
        const named = (i) => {
            const v = parts[i];
            if (!v || v === "." || v === ".." || !NAME.test(v)) {
                throw new Error(`${JSON.stringify(v ?? "")} is not a model name or version`);
            }
            return v;
        };
        if (parts[0] === "model" && parts[1] && parts[2] === "release" && parts[3]) {
            await releaseView(named(1), named(3));
        }
        else if (parts[0] === "model" && parts[1]) {
            await modelView(named(1));
        }
        else if (parts[0] === "health" && parts[1]) {
            await healthView(named(1));
        }
        else if (parts[0] === "explain") {
            explainView();
        }
        else {
            await modelsView();
        }
    }
    catch (e) {
        if (e instanceof ApiFailure && e.status === 401) {
            nav.hidden = true;
            signInView(e);
        }
        else {
            box.replaceChildren(errorBox(e));
        }
    }
    show();
}
window.addEventListener("hashchange", () => {
    void render();
});
window.addEventListener("resize", () => {
    for (const c of charts) {
        c.setSize({ width: chartWidth(), height: 240 });
    }
});
window.addEventListener("DOMContentLoaded", () => {
    document.getElementById("signout").addEventListener("click", signOut);
    void render();
});
