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
/** A table with a header row and body rows, in a box that scrolls sideways on its own when
 * the table is wider than the screen (the page itself never does). */
function table(id, head, rows) {
    return scroller(el("table", { id }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))), el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c)))))));
}
/** `inner` in a box that scrolls sideways when it is wider than the screen. */
function scroller(inner) {
    return el("div", { class: "scroll" }, inner);
}
/** Replaces the element with id `id` (in the page shown) by `node`, keeping its place. */
function replaceById(id, node) {
    const old = document.getElementById(id);
    const fresh = node.id === id ? node : node.querySelector(`#${id}`);
    if (!old || !fresh) {
        return;
    }
    // A table's scrolling box goes with it.
    const oldBox = old.parentElement?.classList.contains("scroll") ? old.parentElement : old;
    const newBox = fresh.parentElement?.classList.contains("scroll") ? fresh.parentElement : fresh;
    // Where the operator was stays: each sideways-scrolled box's offset, and the focus when the
    // focused element has an id or a place among its table's buttons and links.
    const offsets = [oldBox, ...Array.from(oldBox.querySelectorAll(".scroll"))].map((e) => e.scrollLeft);
    const focused = document.activeElement;
    const focusPath = focused && oldBox.contains(focused) ? pathOf(oldBox, focused) : null;
    oldBox.replaceWith(newBox);
    [newBox, ...Array.from(newBox.querySelectorAll(".scroll"))].forEach((e, i) => {
        e.scrollLeft = offsets[i] ?? 0;
    });
    if (focusPath) {
        follow(newBox, focusPath)?.focus();
    }
}
/** The child indexes from `root` down to `node`. */
function pathOf(root, node) {
    const path = [];
    for (let n = node; n && n !== root; n = n.parentElement) {
        path.unshift(Array.prototype.indexOf.call(n.parentElement?.children ?? [], n));
    }
    return path;
}
/** The element at `path` below `root`, if there is one. */
function follow(root, path) {
    let n = root;
    for (const i of path) {
        n = n?.children[i] ?? null;
    }
    return n;
}
/** The scopes of the signed-in token (GET /v1/admin/token); null when the server does not say
 * (an older one): every control is offered and the server refuses what the token may not do. */
let tokenScopes = null;
/** The token `tokenScopes` belongs to. */
let scopesOf = null;
/** Learns the signed-in token's scopes, once per token. */
async function loadScopes() {
    const t = token();
    if (t === scopesOf) {
        return;
    }
    try {
        tokenScopes = (await api("/v1/admin/token")).scopes;
    }
    catch (e) {
        if (e instanceof ApiFailure && e.status === 401) {
            throw e;
        }
        tokenScopes = null;
    }
    scopesOf = t;
}
/** Whether the token may do what needs `scope`. */
function may(scope) {
    return tokenScopes === null || tokenScopes.includes(scope);
}
/** `box` (a fieldset) as is, or disabled with the reason when the token lacks `scope`. */
function guarded(box, scope) {
    if (may(scope)) {
        return box;
    }
    box.disabled = true;
    box.classList.add("read-only");
    const note = el("p", { class: "scope-note", role: "note" }, `Read only: this token lacks the ${scope} scope, so these controls are off. An admin can make one with: ferry keys token --scopes read,${scope}`);
    const legend = box.querySelector("legend");
    if (legend) {
        legend.after(note);
    }
    else {
        box.prepend(note);
    }
    return box;
}
/** Releases the charts no longer on the page (a refresh replaced them). */
function pruneCharts() {
    charts = charts.filter((c) => {
        if (document.body.contains(c.root)) {
            return true;
        }
        c.destroy();
        return false;
    });
}
/** The time of day, UTC, to the second. */
function clock() {
    return new Date().toISOString().slice(11, 19);
}
/** Keeps the view shown current: every `secs` seconds `refresh` fetches and updates it in
 * place (no reload, the operator's half-filled forms stay); it stops when another view is
 * rendered, and skips while the tab is hidden. The header says when the data is from, or
 * since when the server cannot be reached. */
function live(secs, refresh) {
    const gen = renderGen;
    const status = document.getElementById("live");
    let failingSince = null;
    const fresh = () => {
        failingSince = null;
        status.className = "muted";
        status.textContent = `live, updated ${clock()} UTC`;
    };
    fresh();
    let busy = false;
    const timer = window.setInterval(async () => {
        if (gen !== renderGen) {
            window.clearInterval(timer);
            return;
        }
        if (busy || document.hidden) {
            return;
        }
        busy = true;
        try {
            await refresh();
            if (gen === renderGen) {
                fresh();
            }
        }
        catch (e) {
            if (gen !== renderGen) {
                return;
            }
            if (e instanceof ApiFailure && e.status === 401) {
                window.clearInterval(timer);
                void render();
                return;
            }
            failingSince = failingSince ?? clock();
            const why = e instanceof ApiFailure ? `${e.code}: ${e.message}` : "no answer";
            status.className = "error";
            status.textContent = `server unreachable since ${failingSince} UTC (${why}); showing the last data, retrying every ${secs} s`;
        }
        finally {
            busy = false;
        }
    }, secs * 1000);
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
/** n over d, or null when d is 0. */
function rate(n, d) {
    return d > 0 ? n / d : null;
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
    const msg = e instanceof ApiFailure
        ? `${e.code}: ${e.message}`
        : e instanceof TypeError
            ? "The server did not answer (is it running, and reachable from this browser?); nothing was changed."
            : e instanceof Error
                ? e.message
                : String(e);
    return el("p", { class: "error", role: "alert" }, msg);
}
/** Crashed devices the crash gate needs before it can halt: as many as the other gates need
 * reporting devices (min_samples / 8), at least 3 (`crash_devices_needed` in
 * shared/src/select/rollout). */
function crashDevicesNeeded(t) {
    return Math.max(3, Math.ceil((t?.min_samples ?? 0) / 8));
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
    const form = el("form", { id: "signin" }, el("h2", {}, "Sign in"), el("p", {}, "An admin token with the read scope (rollout changes need the rollout scope). It is kept for this browser tab only."), el("label", { for: "token" }, "Admin token"), input, el("button", { type: "submit" }, "Sign in"), status);
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
        m.live && m.baseline && m.live !== m.baseline ? `${m.live} (${m.baseline} revoked)` : (m.live ?? m.baseline ?? "–"),
        m.staged ? `${m.staged} at ${m.percent}%` : "–",
        rolledBack(m.rollout_action, m.rollout_state) ? "rolled back" : m.rollout_state ?? "–",
        m.ramp_step === null || m.ramp_step === undefined ? "–" : String(m.ramp_step + 1),
        badge(m),
    ]);
    root.replaceChildren(el("h2", {}, "Models"), rows.length
        ? table("models", ["model", "baseline", "staged", "rollout", "ramp step", "health"], rows)
        : el("p", {}, "No model is published yet."));
}
// A model's rollout: the state in force, the ramp as a timeline with its gates, and the form
// that changes it (every action the CLI has, each previewed before it is confirmed).
/** What the ramp waits for or does next, in words (the server's verdict). */
function rampNow(now) {
    switch (now?.verdict) {
        case "wait":
            return `waiting for ${now.waiting_for.join("; ")}`;
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
function gateRows(t, h) {
    const rows = [];
    const row = (gate, now, limit, over) => {
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
        ]) {
            const s = rate(staged, loads);
            const b = rate(base, h?.baseline_loads ?? 0);
            const ratio = s !== null && b ? s / b : null;
            row(what, ratio === null ? (s === null ? "–" : `${pct(s)} (baseline ${pct(b)})`) : `${ratio.toFixed(2)}× (${pct(s)} vs ${pct(b)})`, `at most ${t.max_regression}×`, ratio !== null && ratio > t.max_regression);
        }
    }
    if (t.max_crash_rate !== undefined && t.max_crash_rate !== null) {
        const c = h?.crash;
        const needed = crashDevicesNeeded(t);
        row("devices crashed (native)", c ? `${pct(c.staged_rate)} (${c.staged_crashed} of ${c.staged_devices}; baseline ${pct(c.baseline_rate)})` : "–", `at most ${pct(t.max_crash_rate)} (from ${needed} devices)`, !!c && c.staged_crashed >= needed && c.staged_rate > t.max_crash_rate);
    }
    if (t.max_latency_ratio !== undefined && t.max_latency_ratio !== null) {
        const l = h?.latency;
        row("field latency over the baseline's", l ? `${Number(l.ratio).toFixed(2)}× (${ms(l.staged_ms)} vs ${ms(l.baseline_ms)}, ${l.devices} devices)` : "–", `at most ${t.max_latency_ratio}×`, !!l && l.ratio > t.max_latency_ratio);
    }
    return rows;
}
/** The ramp as a timeline: steps done, the step in force and what it waits for, the rest. */
function rampTimeline(r) {
    const ramp = r.ramp;
    if (!ramp) {
        return null;
    }
    const steps = (ramp.steps ?? []);
    const items = steps.map((s, i) => {
        const n = i + 1;
        const state = n < ramp.step ? "done" : n === ramp.step ? "current" : "next";
        const li = el("li", { class: `step-${state}` }, `${s}%`);
        if (state === "current") {
            li.append(el("span", { class: "muted" }, ` — in force since ${when(ramp.step_started)}, at least ${duration(ramp.every_secs)}; ${rampNow(ramp.now)}`));
        }
        else if (state === "done") {
            li.append(el("span", { class: "muted" }, " — done"));
        }
        return li;
    });
    return el("div", { id: "ramp-timeline" }, el("h4", {}, `Ramp: step ${ramp.step} of ${steps.length}`), el("ol", { class: "timeline" }, ...items), table("ramp-gates", ["gate", "this step", "limit"], gateRows(r.current?.thresholds ?? {}, ramp.step_health)));
}
function rolloutSummary(r) {
    const cur = r.current;
    if (!cur) {
        return el("div", { id: "rollout-state" }, el("p", {}, "No rollout plan yet."));
    }
    const back = rolledBack(cur.action, cur.state);
    const box = el("div", { id: "rollout-state" });
    // A halt's reason comes first: it is what the operator came for.
    if (back) {
        box.append(el("p", { class: "warning", id: "rollback-reason" }, `Rolled back by ${cur.actor} at ${when(cur.at)}: ${cur.reason ?? ""}. Resume would stage it again.`));
    }
    else if (cur.state === "halted") {
        box.append(el("p", { class: "error", id: "halt-reason" }, `Halted: ${cur.reason ?? ""}`));
    }
    const parts = [
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
    }
    else {
        box.append(el("p", { class: "muted" }, gatesText(cur.thresholds ?? {})));
    }
    const pins = (cur.pins ?? []);
    if (pins.length) {
        box.append(el("h4", {}, "Pinned test devices"), table("pins", ["install id", "release", "expires", ""], pins.map((p) => [p.install_id, p.release, p.expires ? when(p.expires) : "never", unpinButton(p.install_id)])));
    }
    return box;
}
/** A button that fills the rollout form to unpin `install` and previews it. */
function unpinButton(install) {
    const b = el("button", { type: "button", class: "unpin" }, "unpin…");
    b.disabled = !may("rollout");
    b.addEventListener("click", () => {
        const action = document.getElementById("rollout-action");
        const field = document.getElementById("rollout-install");
        if (!action || !field) {
            return;
        }
        action.value = "unpin";
        action.dispatchEvent(new Event("change"));
        field.value = install;
        document.getElementById("rollout-preview-button")?.click();
        action.scrollIntoView({ block: "center" });
    });
    return b;
}
// The form that changes a model's rollout: every action `ferry rollout` has, built into the
// same JSON the CLI sends, previewed with dry_run (cohort moves, share of install ids changing
// release, device classes left without a variant) and applied only as previewed. The
// server's refusal is shown as it is, code and message.
const ROLLOUT_ACTIONS = [
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
const ROLLOUT_FIELDS = {
    start: ["release", "mode", "gates", "supersede"],
    set: ["percent"],
    revert: ["to"],
    pin: ["install", "release", "expires"],
    unpin: ["install"],
};
/** A labelled input, shown or hidden with its label. */
function labelled(label, input) {
    return el("label", { class: "field" }, label, input);
}
function textInput(id, placeholder = "", mode = "text") {
    return el("input", { id, type: "text", inputmode: mode, placeholder, autocomplete: "off" });
}
function versionSelect(id, releases) {
    return el("select", { id }, ...releases.map((r) => el("option", { value: r.version }, `${r.version} (${r.state})`)));
}
/** A number from a text input (a trailing % allowed), scaled; undefined when empty; an Error
 * when not a number of zero or more. */
function numberOf(input, what, scale = 1) {
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
function durationOf(input, what, unit) {
    const v = input.value.trim().toLowerCase();
    if (!v) {
        return undefined;
    }
    const m = /^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?$/.exec(v);
    if (!m) {
        throw new Error(`${what} must be a duration such as 90, 45m, 6h or 7d, not ${JSON.stringify(input.value.trim())}`);
    }
    const per = { s: 1, m: 60, min: 60, h: 3600, d: 86400 };
    const secs = Math.round(Number(m[1]) * (m[2] ? per[m[2]] : unit));
    if (secs < 1) {
        throw new Error(`${what} must be at least one second`);
    }
    return secs;
}
/** A duration in seconds for people: 45 s, 30 min, 6 h, 7 d (or a mix: 1 h 30 min). */
function duration(secs) {
    if (secs < 60) {
        return `${secs} s`;
    }
    const parts = [];
    for (const [n, u] of [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]]) {
        if (secs >= n) {
            parts.push(`${Math.floor(secs / n)} ${u}`);
            secs %= n;
        }
    }
    return parts.slice(0, 2).join(" ");
}
/** A plan's gates in words. */
function gatesText(t) {
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
function describeChange(b) {
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
function rolloutControls(name, releases, onDone, current) {
    const action = el("select", { id: "rollout-action" }, ...ROLLOUT_ACTIONS.map(([a, text]) => el("option", { value: a }, text)));
    // While a release is staged, a new `start` is the rarer move: offer changing its share first.
    if (current?.staged && (current.state === "active" || current.state === "paused")) {
        action.value = "set";
    }
    const release = versionSelect("rollout-release", releases);
    const to = versionSelect("rollout-to", releases);
    const mode = el("select", { id: "rollout-mode" }, el("option", { value: "percent" }, "a share now"), el("option", { value: "ramp" }, "a ramp with health gates"));
    const percent = textInput("rollout-percent", "e.g. 5", "decimal");
    const steps = textInput("rollout-steps", "e.g. 1, 5, 25, 100");
    const every = textInput("rollout-every", "e.g. 60", "numeric");
    const failure = textInput("rollout-max-failure", "e.g. 2", "decimal");
    const fallback = textInput("rollout-max-fallback", "e.g. 5", "decimal");
    const samples = textInput("rollout-min-samples", "e.g. 200", "numeric");
    const regression = textInput("rollout-max-regression", "e.g. 1.5", "decimal");
    const latency = textInput("rollout-max-latency", "e.g. 1.3", "decimal");
    const crash = textInput("rollout-max-crash", "default 1", "decimal");
    const supersede = el("input", { id: "rollout-supersede", type: "checkbox" });
    const install = textInput("rollout-install", "install id");
    const expires = textInput("rollout-expires", "hours, or 30m, 7d; empty: until unpinned");
    const reason = textInput("rollout-reason", "why (kept in the history; at most 1024 characters)");
    reason.maxLength = 1024;
    const groups = {
        release: labelled("release", release),
        to: labelled("back to", to),
        mode: labelled("stage", mode),
        ramp: el("div", { class: "ramp-fields" }, labelled("steps (%)", steps), labelled("each step at least (minutes, or 6h, 1d)", every)),
        gates: el("div", { class: "gate-fields" }, labelled("halt above failure rate (%)", failure), labelled("halt above fallback rate (%)", fallback), labelled("min samples per step", samples), labelled("halt above failure rate × baseline", regression), labelled("halt above field latency × baseline", latency), labelled("halt above devices crashed (%)", crash)),
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
    const body = () => {
        const a = action.value;
        const b = { action: a };
        if (a === "start" || a === "pin") {
            b.release = release.value;
        }
        if (a === "start" && mode.value === "ramp") {
            b.steps = steps.value.split(",").map((s) => s.trim().replace(/%$/, "")).filter((s) => s);
            b.every_secs = durationOf(every, "each step's length", 60);
        }
        else if ((a === "start" || a === "set") && percent.value.trim()) {
            b.percent = percent.value.trim().replace(/%$/, "").trim();
        }
        if (a === "start") {
            const gates = [
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
        let b;
        try {
            b = body();
        }
        catch (e) {
            preview.replaceChildren(el("p", { class: "error", role: "alert" }, e.message));
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
                const done = el("p", { id: "rollout-applied", role: "status", tabindex: "-1" }, `Applied as revision ${plan.revision}: ${describeChange(b)}.`);
                preview.replaceChildren(done);
                done.focus();
            });
        }
        catch (e) {
            preview.replaceChildren(errorBox(e));
        }
    });
    const box = el("fieldset", { id: "rollout-controls" }, el("legend", {}, "Change the rollout"), labelled("action", action), ...Object.values(groups), labelled("reason", reason), previewButton, preview);
    // Escape drops a preview.
    box.addEventListener("keydown", (ev) => {
        if (ev.key === "Escape") {
            preview.replaceChildren();
        }
    });
    return guarded(box, "rollout");
}
/** The dry run's answer, with Confirm (applies the change if the form still says the same)
 * and Cancel. */
function showPreview(box, b, p, unchanged, apply) {
    const v = p.preview ?? {};
    const after = `after: ${p.state}, baseline ${p.baseline ?? "none"}${p.staged ? `, staged ${p.staged} at ${(p.basis_points / 100).toString()}%` : ""}; ${gatesText(p.thresholds)}`;
    const confirm = el("button", { id: "rollout-confirm", type: "button" }, "Confirm");
    const cancel = el("button", { type: "button", id: "rollout-cancel" }, "Cancel");
    confirm.addEventListener("click", async () => {
        // Only what was previewed is applied: a form changed since asks for a new preview.
        try {
            if (!unchanged()) {
                throw new Error("The form changed since the preview: preview again.");
            }
        }
        catch (e) {
            box.replaceChildren(el("p", { class: "error", role: "alert" }, e.message));
            return;
        }
        confirm.disabled = true;
        try {
            await apply();
        }
        catch (e) {
            box.replaceChildren(errorBox(e));
        }
    });
    cancel.addEventListener("click", () => box.replaceChildren());
    const stranded = (v.stranded ?? []);
    box.replaceChildren(el("p", { id: "rollout-share" }, `${describeChange(b)}: ${pct(v.share_changing)} of install ids change release`), el("p", { class: "muted", id: "rollout-after" }, after), el("ul", { id: "rollout-moves" }, ...(v.moves ?? []).map((m) => el("li", {}, m))), stranded.length
        ? el("div", { class: "warning", id: "rollout-stranded" }, el("p", {}, "Left without a variant:"), el("ul", {}, ...stranded.map((s) => el("li", {}, s))))
        : "", confirm, cancel);
    confirm.focus();
}
// One model: its rollout (ui/src/rollout.ts, rollout_form.ts), releases and history, kept
// current while shown.
function releasesTable(enc, releases) {
    return table("releases", ["release", "state", "variants", "download", "update", "evaluation", "notes"], releases.map((r) => [
        link(`#/model/${enc}/release/${encodeURIComponent(r.version)}`, r.version),
        r.state,
        r.variants.map((v) => `${v.id} (${v.delegate})`).join(", "),
        downloadRange(r.variants, "download_bytes"),
        downloadRange(r.variants, "update_bytes"),
        verdict(r.evaluation),
        r.notes ?? "",
    ]));
}
/** The smallest and largest download of a release's variants, or "–" when the server does not
 * say: `download_bytes` is the full download (program, data files and assets),
 * `update_bytes` what a device on the live release (`update_from`) downloads (delta updates). */
function downloadRange(variants, field) {
    const sizes = variants.map((v) => v[field]).filter((n) => typeof n === "number");
    if (!sizes.length) {
        return "–";
    }
    const lo = Math.min(...sizes);
    const hi = Math.max(...sizes);
    return lo === hi ? bytes(lo) : `${bytes(lo)} – ${bytes(hi)}`;
}
function historyTable(rollout) {
    const rows = rollout.history.map((h) => [
        String(h.revision),
        h.action,
        h.actor,
        when(h.at),
        h.staged ? `${h.staged} ${(h.basis_points / 100).toString()}%` : `${h.baseline ?? ""}`,
        h.reason ?? "",
    ]);
    return table("history", ["revision", "action", "who", "when", "release", "why"], rows.reverse());
}
async function modelView(name) {
    const root = main();
    const enc = encodeURIComponent(name);
    const load = () => Promise.all([api(`/v1/admin/models/${enc}`), api(`/v1/admin/models/${enc}/rollout`)]);
    const [model, rollout] = await load();
    const releases = model.releases;
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
        replaceById("releases", releasesTable(enc, m.releases));
        replaceById("history", historyTable(r));
    };
    root.replaceChildren(el("h2", {}, name), el("p", {}, link(`#/health/${enc}`, "Fleet health", "health-link"), " · ", link(`#/experiment/${enc}`, "Experiment", "experiment-link")), el("h3", {}, "Rollout"), rolloutSummary(rollout), 
    // After a change the page stays where it is: the data refreshes, the form says what was
    // applied.
    rolloutControls(name, releases, refresh, rollout?.current), el("h3", {}, "Releases"), releasesTable(enc, releases), el("h3", {}, "History"), historyTable(rollout));
    live(5, refresh);
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
// The deny list on the health page: every entry with override and clear, and a form to deny a
// variant on a device class by hand. Each change first says what it does to which devices
// and waits for Confirm; the server's refusal is shown as it is.
/** What a deny-list change does, in words, naming the device class. */
function denyEffect(c) {
    const who = `devices with ${classLabel(c.class)} ${c.value}`;
    const what = `${c.variant} of ${c.release}`;
    const slow = c.kind === "slow_in_field" || c.kind === "crashed_in_field";
    const found = c.kind === "crashed_in_field" ? "crashed the app there" : "found it slow there";
    switch (c.action) {
        case "override":
            return slow
                ? `${who} get ${what} ranked as the release orders it again, although the field ${found}; new reports do not move it back until you clear the override.`
                : `${who} are offered ${what} again, although it fell back there; new failures do not deny it again until you clear the override.`;
        case "clear":
            return `The entry for ${what} on ${who} is removed: they are offered it as the release orders it, and the fleet's telemetry may deny it again.`;
        default:
            return slow
                ? `${who} get the next candidate ranked before ${what}.`
                : `${who} are no longer offered ${what}; they get the release's next candidate for them, if any.`;
    }
}
/** A deny-list kind as people say it. */
function kindLabel(k) {
    return k === "slow_in_field" ? "slow in field" : k === "crashed_in_field" ? "crashed in field" : "fallback";
}
/** A device class as people say it. */
function classLabel(c) {
    return c === "soc" ? "SoC" : c === "device_model" ? "device model" : c;
}
/** Shows `change`'s effect in `box` with Confirm and Cancel; Confirm sends it. */
function confirmDeny(box, enc, change, onDone) {
    const confirm = el("button", { type: "button", class: "deny-confirm" }, `Confirm ${change.action}`);
    const cancel = el("button", { type: "button", class: "deny-cancel" }, "Cancel");
    confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        try {
            await post(`/v1/admin/models/${enc}/deny`, change);
            onDone();
        }
        catch (e) {
            box.replaceChildren(errorBox(e));
        }
    });
    cancel.addEventListener("click", () => box.replaceChildren());
    box.replaceChildren(el("p", { class: "deny-effect" }, denyEffect(change)), confirm, cancel);
    confirm.focus();
}
/** The deny list with override and clear on every entry (each confirmed in `confirmBox`). */
function denyTable(enc, h, confirmBox, onDone) {
    const rows = h.deny.map((d) => {
        const act = (action) => {
            const b = el("button", { type: "button", class: `deny-${action}` }, action);
            b.addEventListener("click", () => confirmDeny(confirmBox, enc, { action, release: d.release, variant: d.variant, class: d.class, value: d.value, kind: d.kind ?? "fallback" }, onDone));
            if (!may("rollout")) {
                b.disabled = true;
                b.title = "this token lacks the rollout scope";
            }
            return b;
        };
        return [
            d.release,
            d.variant,
            `${classLabel(d.class)} ${d.value}`,
            d.state === "allow"
                ? `${kindLabel(d.kind)}, overridden: offered as the release orders it`
                : d.kind === "fallback" || !d.kind
                    ? "fallback (not offered)"
                    : `${kindLabel(d.kind)} (ranked after the next candidate)`,
            denyWhy(d),
            d.state,
            // An overridden entry can only be cleared.
            el("span", {}, d.state === "allow" ? "" : act("override"), act("clear")),
        ];
    });
    return el("section", { id: "deny-section" }, el("h3", {}, "Deny list"), rows.length
        ? table("deny", ["release", "variant", "devices", "kind", "why", "state", ""], rows)
        : el("p", { id: "deny-empty" }, "Nothing is denied."));
}
/** The form that denies a published release's variant on one SoC or device model by hand
 * (`model` is the model API's answer: its releases and their variants). */
function denyForm(enc, model, confirmBox, onDone) {
    const releases = model.releases ?? [];
    const release = el("select", { id: "deny-release" }, ...releases.map((r) => el("option", { value: r.version }, `${r.version} (${r.state})`)));
    const variant = el("select", { id: "deny-variant" });
    const fill = () => variant.replaceChildren(...(releases.find((r) => r.version === release.value)?.variants ?? []).map((v) => el("option", { value: v.id }, `${v.id} (${v.delegate})`)));
    release.addEventListener("change", fill);
    fill();
    const cls = el("select", { id: "deny-class" }, el("option", { value: "soc" }, "SoC"), el("option", { value: "device_model" }, "device model"));
    const value = el("input", { id: "deny-value", type: "text", placeholder: "e.g. SM8550", autocomplete: "off" });
    const kind = el("select", { id: "deny-kind" }, el("option", { value: "fallback" }, "not offered (it fails there)"), el("option", { value: "slow_in_field" }, "ranked after the next candidate (slow there)"), el("option", { value: "crashed_in_field" }, "ranked after the next candidate (it crashes there)"));
    const add = el("button", { type: "button", id: "deny-add" }, "Deny…");
    add.addEventListener("click", () => {
        if (!value.value.trim() || !variant.value) {
            confirmBox.replaceChildren(el("p", { class: "error", role: "alert" }, "Pick a release and variant, and name the SoC or device model."));
            return;
        }
        confirmDeny(confirmBox, enc, {
            action: "deny",
            release: release.value,
            variant: variant.value,
            class: cls.value,
            value: value.value.trim(),
            kind: kind.value,
        }, onDone);
    });
    return guarded(el("fieldset", { id: "deny-form" }, el("legend", {}, "Deny a variant on a device class"), labelled("release", release), labelled("variant", variant), labelled("class", cls), labelled("value", value), labelled("kind", kind), add), "rollout");
}
// One model's experiment (#/experiment/MODEL): the plan in force, per metric each arm's mean
// per device, the difference with its always-valid 95% interval and the decision, the
// breakdown by device class, the history with actor and reason, and the stop (scope rollout).
// Kept current while shown. Starting one is `ferry experiment start` (docs/experiments.md).
/** A number for people: null (no data yet) as a dash. */
function figure(v) {
    if (v === null || v === undefined || Number.isNaN(v)) {
        return "–";
    }
    const a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 1 ? v.toFixed(3) : v.toFixed(5);
}
function interval(i) {
    return i ? `[${figure(i[0])}, ${figure(i[1])}]` : "–";
}
/** A decision, marked so that a worse treatment stands out. */
function decisionCell(d) {
    return el("span", { class: d === "worse" ? "error" : d === "better" ? "ok" : "muted" }, d);
}
function needs(m) {
    if (m.decision === "better" || m.decision === "worse" || m.devices_more === 0) {
        return "enough devices";
    }
    return typeof m.devices_more === "number" ? `${m.devices_more} more per arm` : "–";
}
/** The plan in one paragraph. */
function experimentSummary(s) {
    const p = s.experiment;
    const d = s.devices;
    const state = p.state === "running"
        ? "running"
        : `stopped${p.winner ? `, winner ${p.winner}` : ""}${p.rolled_out ? ", rolled out" : ""}`;
    return el("div", { id: "experiment-state" }, el("p", {}, `Experiment ${p.id}: control ${arm(p.control)} vs treatment ${arm(p.treatment)} on ` +
        `${(p.basis_points / 100).toString()}% of devices, ${state}; started ${when(p.started_at)}.`), el("p", { class: "muted" }, `Devices: control ${d.control}, treatment ${d.treatment} (${d.with_history} with a history ` +
        `before their arm). Effect of interest ${pct(p.effect)} of the control's mean.`));
}
function arm(a) {
    return a.variant ? `${a.release}/${a.variant}` : a.release;
}
function metricsTable(s) {
    return table("experiment-metrics", ["metric", "better", "control", "treatment", "difference", "95% interval (always valid)", "decision", "needs"], s.metrics.map((m) => [
        m.metric,
        m.better,
        figure(m.control),
        figure(m.treatment),
        figure(m.difference),
        interval(m.interval),
        decisionCell(m.decision),
        needs(m),
    ]));
}
/** Every class of every metric, with the share of the 5% each got. */
function classesTable(s) {
    const rows = [];
    for (const m of s.metrics) {
        for (const c of m.classes ?? []) {
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
function experimentHistory(h) {
    const rows = h.revisions.map((r) => [
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
function stopForm(enc, running, onDone) {
    const winner = el("select", { id: "experiment-winner" }, el("option", { value: "" }, "no winner"), el("option", { value: "control" }, "control"), el("option", { value: "treatment" }, "treatment"));
    const rollOut = el("input", { id: "experiment-roll-out", type: "checkbox" });
    // Only a winner can be rolled out.
    rollOut.disabled = true;
    winner.addEventListener("change", () => {
        rollOut.disabled = !winner.value;
        if (!winner.value) {
            rollOut.checked = false;
        }
    });
    const reason = el("input", { id: "experiment-reason", type: "text", autocomplete: "off" });
    const result = el("div", { id: "experiment-result", role: "status" });
    const stop = el("button", { type: "button", id: "experiment-stop" }, "Stop…");
    stop.disabled = !running;
    stop.addEventListener("click", () => {
        const body = { reason: reason.value.trim() };
        if (winner.value) {
            body.winner = winner.value;
            body.roll_out = rollOut.checked;
        }
        const confirm = el("button", { type: "button", id: "experiment-confirm" }, "Confirm stop");
        confirm.addEventListener("click", async () => {
            confirm.disabled = true;
            try {
                const r = await post(`/v1/admin/models/${enc}/experiment/stop`, body);
                result.replaceChildren(el("p", {}, `Stopped at revision ${r.revision}${r.rollout ? `; rollout of ${r.rollout.staged} started` : ""}.`));
                await onDone();
            }
            catch (e) {
                result.replaceChildren(errorBox(e));
            }
        });
        result.replaceChildren(el("p", {}, `No device will be assigned any more${body.winner ? `; winner ${body.winner}` : ""}` +
            `${body.roll_out ? ", its release rolled out to every device" : ""}. The results stay.`), confirm);
        confirm.focus();
    });
    return guarded(el("fieldset", { id: "experiment-form" }, el("legend", {}, "Stop the experiment"), labelled("winner", winner), labelled("roll the winner out", rollOut), labelled("reason", reason), stop, result), "rollout");
}
async function experimentView(name) {
    const root = main();
    const enc = encodeURIComponent(name);
    const load = async () => {
        try {
            return await Promise.all([
                api(`/v1/admin/models/${enc}/experiment`),
                api(`/v1/admin/models/${enc}/experiment/history`),
            ]);
        }
        catch (e) {
            if (e instanceof ApiFailure && e.code === "experiment_not_found") {
                return null;
            }
            throw e;
        }
    };
    const first = await load();
    if (!first) {
        root.replaceChildren(el("h2", {}, `${name}: experiment`), el("p", { id: "experiment-none" }, "This model has had no experiment. Start one with: ferry experiment start"));
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
        document.getElementById("experiment-stop").disabled =
            s.experiment.state !== "running";
    };
    const [s, h] = first;
    root.replaceChildren(el("h2", {}, `${name}: experiment`), el("p", {}, link(`#/model/${enc}`, "Model"), " · ", link(`#/health/${enc}`, "Fleet health")), experimentSummary(s), el("h3", {}, "Metrics"), el("p", { class: "muted" }, "Means per device. Better or worse when the interval excludes 0; it stays valid however often you look."), metricsTable(s), el("h3", {}, "By device class"), classesTable(s), stopForm(enc, s.experiment.state === "running", refresh), el("h3", {}, "History"), experimentHistory(h));
    live(10, refresh);
}
// A model's fleet health: rates over time with the gates, breakdowns, the deny list.
// Why a deny-list entry is there, in words.
function denyWhy(d) {
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
function chart(target, title, range, xs, series) {
    const colors = ["#c0392b", "#2471a3", "#27ae60", "#8e44ad", "#d35400", "#7f8c8d"];
    const opts = {
        title: `${title} (UTC)`,
        // Times in UTC, as everywhere else on the page (not the browser's zone).
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
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
    const load = () => Promise.all([
        api(`/v1/admin/models/${enc}/health`),
        api(`/v1/admin/models/${enc}/health/series?since=6h`),
    ]);
    const [[h, series], model] = await Promise.all([load(), api(`/v1/admin/models/${enc}`)]);
    // Outside the part that refreshes: a confirmation or a half-filled form stays.
    const confirmBox = el("div", { id: "deny-confirm", "aria-live": "polite" });
    const onDone = () => void render();
    root.replaceChildren(el("h2", {}, `${name}: fleet health`), el("p", {}, link(`#/model/${enc}`, `back to ${name}`)), healthData(enc, h, series, confirmBox, onDone), confirmBox, denyForm(enc, model, confirmBox, onDone));
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
function healthData(enc, h, series, confirmBox, onDone) {
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
        el("p", { id: "health-summary" }, `baseline ${baseline ?? "–"}${staged ? `, staged ${staged}` : ""}; state ${plan?.state ?? "–"}; cohort devices: ${Object.entries(h.cohort_sizes ?? {})
            .map(([k, v]) => `${k} ${v}`)
            .join(", ") || "none yet"}`),
    ];
    if (rolledBack(plan?.action, plan?.state)) {
        parts.push(el("p", { class: "warning", id: "rollback-reason" }, `Rolled back by ${plan.actor}: ${plan.reason ?? ""}`));
    }
    else if (plan?.state === "halted") {
        parts.push(el("p", { class: "error", id: "halt-reason" }, `Halted: ${plan.reason ?? ""}`));
    }
    // Native crashes of the staged release against the baseline's (what max_crash_rate reads).
    const cc = h.crash_compare;
    if (cc && (cc.staged_crashed > 0 || cc.baseline_crashed > 0)) {
        const needed = crashDevicesNeeded(t);
        const over = t.max_crash_rate !== undefined && cc.staged_crashed >= needed && cc.staged_rate > t.max_crash_rate;
        parts.push(el("p", { id: "crash-compare", class: over ? "error" : "" }, `Native crashes: staged ${cc.staged_crashed} of ${cc.staged_devices} devices (${pct(cc.staged_rate)}), baseline ${cc.baseline_crashed} of ${cc.baseline_devices} (${pct(cc.baseline_rate)})${t.max_crash_rate !== undefined ? `; the gate halts above ${pct(t.max_crash_rate)}` : ""}`));
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
                v.crashes ? `${v.crashes} on ${v.crash_devices} devices` : "0",
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
        ? table("health-variants", ["release", "variant", "delegate", "loads", "failures", "fallbacks", "crashes", "p50", "p95", "top errors"], rows)
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
        parts.push(el("h3", {}, "Fallback rate by SoC"), scroller(el("table", { id: "heatmap" }, el("thead", {}, head), el("tbody", {}, ...body))));
    }
    // By device model, all variants together.
    const byModel = new Map();
    for (const r of h.releases) {
        for (const v of r.variants) {
            for (const [dm, c] of Object.entries(v.by_device_model ?? {})) {
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
        parts.push(el("h3", {}, "By device model"), table("by-device-model", ["device model", "loads", "failure rate", "fallback rate", "crashes"], [...byModel.entries()].map(([dm, e]) => [
            dm,
            String(e.loads),
            pct(rate(e.failures, e.loads)),
            pct(rate(e.fallbacks, e.loads)),
            String(e.crashes),
        ])));
    }
    parts.push(denyTable(enc, h, confirmBox, onDone));
    const box = el("div", { id: "health-data" }, ...parts);
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
    return box;
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
    // A view that keeps itself current says so (live()); the others show nothing here.
    const status = document.getElementById("live");
    status.textContent = "";
    status.className = "muted";
    try {
        await loadScopes();
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
        else if (parts[0] === "experiment" && parts[1]) {
            await experimentView(named(1));
        }
        else if (parts[0] === "health" && parts[1]) {
            await healthView(named(1));
        }
        else if (parts[0] === "explain") {
            explainView();
        }
        else if (parts.length === 1 && ["", "models", "signin"].includes(parts[0])) {
            await modelsView();
        }
        else {
            // Not silently the model list: say the address is not one the dashboard has.
            throw new Error(`#/${parts.join("/")} is not a page of the dashboard; the models are at #/`);
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
