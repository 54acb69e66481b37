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

/** A table with a header row and body rows. */
function table(id: string, head: string[], rows: (Node | string)[][]): HTMLElement {
  return el(
    "table",
    { id },
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))),
  );
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
  const msg = e instanceof ApiFailure ? `${e.code}: ${e.message}` : String(e);
  return el("p", { class: "error", role: "alert" }, msg);
}
