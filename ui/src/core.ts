// ferry's operator dashboard: shared helpers (elements, tables, the admin API, formats).
// Plain TypeScript scripts (one per page or widget, no module loader) compiled by tsc into one
// server/ui/app.js in the order ui/tsconfig.json lists them (ui/build.sh), served at /ui with
// everything it needs (no CDN). Every request to the
// admin API carries the token the operator typed, kept in sessionStorage only (gone when the
// tab closes). All text from the server goes into the page as text, never as HTML.

declare const uPlot: any;

type Json = any;

const TOKEN_KEY = "ferry.token";

/** The view being built: rendered into a detached box that replaces the page only if no
 * newer navigation started meanwhile (a slow answer never overwrites a newer view). */
let target: HTMLElement = document.createElement("div");
let renderGen = 0;
/** Charts on the page, resized with the window. */
let charts: any[] = [];

/** Where the current view renders (capture it before any await). */
function main(): HTMLElement {
  return target;
}

/** The width charts get for the window's width. */
function chartWidth(): number {
  return Math.min(900, Math.max(300, window.innerWidth - 60));
}

/** An element with attributes and children (strings become text nodes). */
function el(
  tag: string,
  attrs: Record<string, string> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElement {
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
function table(id: string, head: string[], rows: (Node | string)[][]): HTMLElement {
  return scroller(
    el(
      "table",
      { id },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))),
    ),
  );
}

/** `inner` in a box that scrolls sideways when it is wider than the screen. */
function scroller(inner: HTMLElement): HTMLElement {
  return el("div", { class: "scroll" }, inner);
}

/** Replaces the element with id `id` (in the page shown) by `node`, keeping its place. */
function replaceById(id: string, node: HTMLElement): void {
  const old = document.getElementById(id);
  const fresh = node.id === id ? node : (node.querySelector(`#${id}`) as HTMLElement | null);
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
    (follow(newBox, focusPath) as HTMLElement | null)?.focus();
  }
}

/** The child indexes from `root` down to `node`. */
function pathOf(root: Element, node: Element): number[] {
  const path: number[] = [];
  for (let n: Element | null = node; n && n !== root; n = n.parentElement) {
    path.unshift(Array.prototype.indexOf.call(n.parentElement?.children ?? [], n));
  }
  return path;
}

/** The element at `path` below `root`, if there is one. */
function follow(root: Element, path: number[]): Element | null {
  let n: Element | null = root;
  for (const i of path) {
    n = n?.children[i] ?? null;
  }
  return n;
}

/** The scopes of the signed-in token (GET /v1/admin/token); null when the server does not say
 * (an older one): every control is offered and the server refuses what the token may not do. */
let tokenScopes: string[] | null = null;
/** The token `tokenScopes` belongs to. */
let scopesOf: string | null = null;

/** Learns the signed-in token's scopes, once per token. */
async function loadScopes(): Promise<void> {
  const t = token();
  if (t === scopesOf) {
    return;
  }
  try {
    tokenScopes = (await api("/v1/admin/token")).scopes as string[];
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 401) {
      throw e;
    }
    tokenScopes = null;
  }
  scopesOf = t;
}

/** Whether the token may do what needs `scope`. */
function may(scope: string): boolean {
  return tokenScopes === null || tokenScopes.includes(scope);
}

/** `box` (a fieldset) as is, or disabled with the reason when the token lacks `scope`. */
function guarded(box: HTMLElement, scope: string): HTMLElement {
  if (may(scope)) {
    return box;
  }
  (box as HTMLFieldSetElement).disabled = true;
  box.classList.add("read-only");
  const note = el(
    "p",
    { class: "scope-note", role: "note" },
    `Read only: this token lacks the ${scope} scope, so these controls are off. An admin can make one with: ferry keys token --scopes read,${scope}`,
  );
  const legend = box.querySelector("legend");
  if (legend) {
    legend.after(note);
  } else {
    box.prepend(note);
  }
  return box;
}

/** Releases the charts no longer on the page (a refresh replaced them). */
function pruneCharts(): void {
  charts = charts.filter((c) => {
    if (document.body.contains(c.root)) {
      return true;
    }
    c.destroy();
    return false;
  });
}

/** The time of day, UTC, to the second. */
function clock(): string {
  return new Date().toISOString().slice(11, 19);
}

/** Keeps the view shown current: every `secs` seconds `refresh` fetches and updates it in
 * place (no reload, the operator's half-filled forms stay); it stops when another view is
 * rendered, and skips while the tab is hidden. The header says when the data is from, or
 * since when the server cannot be reached. */
function live(secs: number, refresh: () => Promise<void>): void {
  const gen = renderGen;
  const status = document.getElementById("live") as HTMLElement;
  let failingSince: string | null = null;
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
    } catch (e) {
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
    } finally {
      busy = false;
    }
  }, secs * 1000);
}

function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** A failed API call, with the server's error code and message. */
class ApiFailure extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Calls the admin API with the session's token; a 401 signs out. */
async function api(path: string, init: RequestInit = {}): Promise<Json> {
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
  let body: Json = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
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

function post(path: string, body: Json): Promise<Json> {
  return api(path, { method: "POST", body: JSON.stringify(body) });
}

function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  (document.getElementById("nav") as HTMLElement).hidden = true;
  if (location.hash === "#/signin") {
    void render();
  } else {
    location.hash = "#/signin";
  }
}

/** An RFC 3339 time for people: date and time to the second, UTC. */
function when(t: string | null | undefined): string {
  if (!t) {
    return "–";
  }
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(t);
  return m ? `${m[1]} ${m[2]} UTC` : t;
}

/** Whether a halted plan was rolled back by an operator (not halted by telemetry). */
function rolledBack(action: string | null | undefined, state: string | null | undefined): boolean {
  return state === "halted" && action === "rollback";
}

/** A percentage with at most two decimals. */
function pct(rate: number | null | undefined): string {
  if (rate === null || rate === undefined || Number.isNaN(rate)) {
    return "–";
  }
  return `${(Math.round(rate * 10000) / 100).toString()}%`;
}

/** n over d, or null when d is 0. */
function rate(n: number, d: number): number | null {
  return d > 0 ? n / d : null;
}

/** Milliseconds rounded for people. */
function ms(v: number | null | undefined): string {
  if (v === null || v === undefined) {
    return "–";
  }
  return v >= 100 ? `${Math.round(v)} ms` : `${v.toFixed(1)} ms`;
}

function bytes(n: number): string {
  if (n >= 1 << 20) {
    return `${(n / (1 << 20)).toFixed(1)} MiB`;
  }
  if (n >= 1 << 10) {
    return `${(n / (1 << 10)).toFixed(1)} KiB`;
  }
  return `${n} B`;
}

function link(href: string, text: string, id?: string): HTMLElement {
  return el("a", id ? { href, id } : { href }, text);
}

function errorBox(e: unknown): HTMLElement {
  const msg =
    e instanceof ApiFailure
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
function crashDevicesNeeded(t: Json): number {
  return Math.max(3, Math.ceil((t?.min_samples ?? 0) / 8));
}
