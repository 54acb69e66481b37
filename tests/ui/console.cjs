// Drives the dashboard as an on-call operator would (issue 26), for tests/tests/e2e/console.rs:
// a health-gated ramp started, paused, resumed, pinned, rolled back, completed and reverted
// from the browser across three replicas on one store, pages that refresh by themselves and
// say when the server is unreachable, a read-only token, and phone and desktop widths.
// Usage: node tests/ui/console.cjs URL_A URL_B TOKEN READ_TOKEN SCREENSHOT_DIR
// Prints one JSON object per line: {"step": ..., ...facts the Rust test checks}. Fails (exit 1)
// on any page error, console error or failed expectation.
"use strict";

const path = require("path");
const { out, launch, run } = require("./browser.cjs");

const [urlA, urlB, token, readToken, shots] = process.argv.slice(2);

async function main() {
  const browser = await launch();
  const problems = [];
  const refusals = [];
  let n = 0;
  const open = async (width, height, base, t) => {
    const context = await browser.newContext({ viewport: { width, height } });
    const page = await context.newPage();
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      // Requests the test itself cuts off (the unreachable server) are logged by the browser,
      // and so is the one refusal the test asks for (counted below).
      if (m.type() !== "error" || m.text().includes("net::ERR_FAILED")) {
        return;
      }
      if (m.text().includes("status of 400") || m.text().includes("status of 409")) {
        refusals.push(m.text());
      } else {
        problems.push(`console error: ${m.text()}`);
      }
    });
    page.on("dialog", async (d) => {
      problems.push(`a dialog opened: ${d.message()}`);
      await d.dismiss();
    });
    await page.goto(`${base}/ui#/model/mlp`);
    await page.fill("#token", t);
    await page.click("#signin button[type=submit]");
    await page.waitForSelector("#rollout-state");
    return page;
  };
  const shot = async (page, name) => {
    n += 1;
    const file = path.join(shots, `console-${String(n).padStart(2, "0")}-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    out({ step: "screenshot", file, name });
  };
  const text = (page, sel) => page.textContent(sel);
  // Fills the rollout form for `action` with `fields` (id suffix → value), previews, and
  // returns the preview's text; `confirm` then applies it.
  const change = async (page, action, fields, confirm = true) => {
    await page.selectOption("#rollout-action", action);
    for (const [k, v] of Object.entries(fields)) {
      const sel = `#rollout-${k}`;
      if ((await page.$eval(sel, (e) => e.tagName)) === "SELECT") {
        await page.selectOption(sel, v);
      } else if (v === true) {
        await page.check(sel);
      } else {
        await page.fill(sel, v);
      }
    }
    await page.click("#rollout-preview-button");
    await page.waitForSelector("#rollout-share, #rollout-preview .error");
    const preview = await text(page, "#rollout-preview");
    if (confirm && (await page.$("#rollout-confirm"))) {
      const revision = await page.$$eval("#history tbody tr", (rows) => rows.length);
      await page.click("#rollout-confirm");
      // The page reloads its view after a change: the history has one more revision.
      await page.waitForFunction(
        (r) => document.querySelectorAll("#history tbody tr").length > r,
        revision,
      );
    }
    return preview;
  };
  const waitText = (page, sel, want, timeout = 20000) =>
    page.waitForFunction(
      ([s, w]) => (document.querySelector(s)?.textContent ?? "").includes(w),
      [sel, want],
      { timeout },
    );

  try {
    // Desktop on replica A: a health-gated ramp from the browser.
    const a = await open(1440, 900, urlA, token);
    const preview = await change(a, "start", {
      release: "2.0.0",
      mode: "ramp",
      steps: "5, 25, 100",
      every: "60",
      "max-failure": "2",
      "max-fallback": "5",
      "min-samples": "50",
      "max-regression": "1.5",
      "max-latency": "1.3",
      "max-crash": "0.5",
      reason: "console: ramp 2.0.0",
    });
    await a.waitForSelector("#ramp-timeline");
    const steps = await a.$$eval("#ramp-timeline li", (ls) => ls.map((l) => [l.className, l.textContent]));
    const gates = await a.$$eval("#ramp-gates tbody tr", (rows) =>
      rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
    );
    out({ step: "ramp", preview, steps, gates, state: await text(a, "#rollout-state") });
    await shot(a, "ramp-1440");

    // Replica B shows the same rollout, and follows changes made on A without a reload.
    const b = await open(1440, 900, urlB, token);
    const seenOnB = await text(b, "#rollout-state");
    // With a release staged, the form offers changing its share first, not a new start.
    const defaultAction = await b.$eval("#rollout-action", (s) => s.value);
    await change(a, "pause", { reason: "console: pause to look at SM8350" });
    await waitText(b, "#rollout-state", "paused");
    out({ step: "live", seen_on_b: seenOnB, default_action: defaultAction, b_after: await text(b, "#rollout-state"), b_live: await text(b, "#live") });
    // Resumed from B; A follows.
    await change(b, "resume", { reason: "console: resume" });
    await waitText(a, "#rollout-state", "active");

    // A preview made stale by another operator's change is not applied over it.
    await a.selectOption("#rollout-action", "set");
    await a.fill("#rollout-percent", "50");
    await a.click("#rollout-preview-button");
    await a.waitForSelector("#rollout-confirm");
    await b.evaluate(async (t) => {
      await fetch("/v1/admin/models/mlp/rollout", {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body: JSON.stringify({ action: "set", percent: "10", reason: "console: another operator" }),
      });
    }, token);
    await a.click("#rollout-confirm");
    await a.waitForSelector("#rollout-preview .error");
    const stale = await text(a, "#rollout-preview");
    await waitText(a, "#rollout-state", "at 10%");
    out({ step: "stale", text: stale, state: await text(a, "#rollout-state") });

    // A test device pinned for two hours, then unpinned.
    await change(a, "pin", { install: "qa-phone-1", release: "2.0.0", expires: "2h" });
    const pins = await a.$$eval("#pins tbody tr", (rows) =>
      rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
    );
    await change(a, "unpin", { install: "qa-phone-1" });
    out({ step: "pins", pins, after: await a.$$eval("#pins tbody tr", (rows) => rows.length) });

    // A refusal is shown as the server gave it: nothing to revert to yet.
    const refused = await change(a, "revert", { to: "1.0.0", reason: "console: try" }, false);
    out({ step: "refused", text: refused });

    // Roll back, then stage at 100% superseding, complete, and revert the baseline.
    await change(a, "rollback", { reason: "console: rollback" });
    await waitText(a, "#rollback-reason", "console: rollback");
    await change(a, "start", { release: "2.0.0", mode: "percent", percent: "100", supersede: true, reason: "console: all in" });
    await change(a, "complete", { reason: "console: done" });
    await waitText(a, "#rollout-state", "baseline 2.0.0");
    const reverted = await change(a, "revert", { to: "1.0.0", reason: "console: revert after complaints" });
    await waitText(a, "#rollout-state", "baseline 1.0.0");
    out({ step: "revert", preview: reverted, state: await text(a, "#rollout-state") });
    const history = await a.$$eval("#history tbody tr", (rows) =>
      rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
    );
    out({ step: "history", rows: history });

    // Deny a variant on one SoC from the health page: it says what changes first.
    await a.click("#health-link");
    await a.waitForSelector("#deny-form");
    await a.selectOption("#deny-release", "2.0.0");
    await a.selectOption("#deny-variant", "vulkan-fp32");
    await a.fill("#deny-value", "SM8450");
    await a.selectOption("#deny-kind", "slow_in_field");
    await a.click("#deny-add");
    await a.waitForSelector("#deny-confirm .deny-effect");
    const effect = await text(a, "#deny-confirm .deny-effect");
    await a.click("#deny-confirm .deny-confirm");
    await a.waitForSelector("#deny tbody tr");
    const denied = await a.$$eval("#deny tbody tr", (rows) =>
      rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
    );
    out({ step: "deny_add", effect, rows: denied });
    await a.click("text=back to mlp");
    await a.waitForSelector("#history");

    // The server goes away: the page keeps its data and says since when; it comes back.
    await a.route("**/v1/admin/**", (route) => route.abort());
    await a.waitForSelector("#live.error", { timeout: 20000 });
    const down = await text(a, "#live");
    await shot(a, "unreachable");
    await a.unroute("**/v1/admin/**");
    await a.waitForFunction(() => document.querySelector("#live")?.className === "muted", null, { timeout: 20000 });
    out({ step: "unreachable", down, back: await text(a, "#live"), kept: await a.$$eval("#history tbody tr", (r) => r.length) });

    // A read-only token sees the controls off, with why.
    const r = await open(1440, 900, urlA, readToken);
    const disabled = await r.$eval("#rollout-controls", (f) => f.disabled);
    const note = await text(r, "#rollout-controls .scope-note");
    await r.click("#health-link");
    await r.waitForSelector("#deny-form");
    const denyDisabled = await r.$eval("#deny-form", (f) => f.disabled);
    out({ step: "read_only", disabled, note, deny_disabled: denyDisabled });
    await shot(r, "read-only");

    // Phone and desktop widths: no page scrolls sideways.
    const widths = [];
    for (const [w, h] of [[360, 740], [390, 844], [1440, 900]]) {
      const p = await open(w, h, urlA, token);
      for (const [route, ready] of [["#/models", "#models"], ["#/model/mlp", "#rollout-state"], ["#/health/mlp", "#health-data"]]) {
        await p.goto(`${urlA}/ui${route}`);
        await p.waitForSelector(ready);
        const [scroll, client] = await p.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
        widths.push({ width: w, route, scroll, client });
        if (w !== 360 && route !== "#/models") {
          await shot(p, `${route.split("/")[1]}-${w}`);
        }
      }
      // Keyboard: the rollout form is reachable with Tab alone.
      if (w === 390) {
        await p.goto(`${urlA}/ui#/model/mlp`);
        await p.waitForSelector("#rollout-action");
        let reached = false;
        for (let i = 0; i < 40 && !reached; i += 1) {
          await p.keyboard.press("Tab");
          reached = await p.evaluate(() => document.activeElement?.id === "rollout-action");
        }
        out({ step: "keyboard", reached });
      }
    }
    out({ step: "widths", widths });
  } finally {
    await browser.close();
  }
  if (refusals.length !== 2) {
    problems.push(`expected the refused revert and the stale preview, got ${refusals.length} refusals: ${refusals.join("; ")}`);
  }
  if (problems.length) {
    throw new Error(problems.join("\n"));
  }
}

run(main);
