// Drives ferry's dashboard in headless Chromium (Debian's, through playwright-core) for
// tests/tests/dashboard.rs. Usage:
//   node tests/ui/dashboard.cjs PHASE URL TOKEN SCREENSHOT_DIR
// Prints one JSON object per line: {"step": ..., ...facts the Rust test checks}. Fails (exit 1)
// on any page error, console error (a CSP violation included) or failed expectation.
"use strict";

const path = require("path");
const { out, expect, launch, run } = require("./browser.cjs");

const [phase, base, token, shots] = process.argv.slice(2);

async function main() {
  const browser = await launch();
  const problems = [];
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // The browser logs the 401 of the wrong-token step; anything else is a problem.
    if (m.type() === "error" && !m.text().includes("status of 401")) {
      problems.push(`console error: ${m.text()}`);
    }
  });
  page.on("dialog", async (d) => {
    problems.push(`a dialog opened: ${d.message()}`);
    await d.dismiss();
  });
  // Every admin API answer the page receives, to show what reached it.
  const admin = [];
  page.on("response", (r) => {
    if (r.url().includes("/v1/admin/")) {
      admin.push({ url: r.url(), status: r.status() });
    }
  });
  let n = 0;
  const shot = async (name) => {
    n += 1;
    const file = path.join(shots, `${phase}-${String(n).padStart(2, "0")}-${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    out({ step: "screenshot", file });
  };
  const signIn = async (t) => {
    await page.goto(`${base}/ui`);
    await page.fill("#token", t);
    await page.click("#signin button[type=submit]");
  };

  try {
    if (phase === "rollout") {
      // Without a token: only the sign-in form, and no admin data.
      await page.goto(`${base}/ui`);
      await page.waitForSelector("#signin");
      expect(await page.isHidden("#nav"), "the navigation is hidden before sign-in");
      expect((await page.$$("table")).length === 0, "no table before sign-in");
      await shot("signed-out");
      out({ step: "signed_out", admin_requests: admin.length });
      // A wrong token is refused and nothing is shown.
      await signIn("not-the-token-0000");
      await page.waitForSelector("#signin-status .error");
      out({
        step: "wrong_token",
        message: await page.textContent("#signin-status"),
        admin: admin.slice(),
        tables: (await page.$$("table")).length,
      });
      // Signed in: the models.
      await signIn(token);
      await page.waitForSelector("#models");
      const models = await page.$$eval("#models tbody tr", (rows) =>
        rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent.trim())),
      );
      out({ step: "models", rows: models });
      await shot("models");
      // A model, then a release and its delegation report.
      await page.click("#models tbody a");
      await page.waitForSelector("#releases");
      await page.click("#releases a >> text=2.0.0");
      await page.waitForSelector("section.variant");
      const report = await page.$$eval("section.variant", (sections) =>
        sections.map((s) => ({
          variant: s.getAttribute("data-variant"),
          heading: s.querySelector("h3").textContent,
          rows: Array.from(s.querySelectorAll("tbody tr")).map((r) =>
            Array.from(r.querySelectorAll("td")).map((td) => td.textContent),
          ),
        })),
      );
      const evaluation = await page.$$eval("#evaluation tbody tr", (rows) =>
        rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
      );
      const override = await page.textContent("p.warning");
      const metadata = await page.textContent("section.variant p.metadata");
      out({ step: "release", notes: await page.textContent("#release-notes"), report, evaluation, override, metadata });
      await shot("release");
      // Move the rollout from 5% to 20%: preview, then confirm.
      await page.goBack();
      await page.waitForSelector("#rollout-controls");
      const before = await page.textContent("#rollout-state");
      await page.selectOption("#rollout-action", "set");
      await page.fill("#rollout-percent", "20");
      await page.fill("#rollout-reason", "dashboard test: widen to 20%");
      await page.click("#rollout-preview-button");
      await page.waitForSelector("#rollout-share");
      const share = await page.textContent("#rollout-share");
      await shot("rollout-preview");
      // The form changed after the preview: Confirm applies nothing and asks for a new one.
      await page.fill("#rollout-percent", "90");
      await page.click("#rollout-confirm");
      await page.waitForSelector("#rollout-preview .error");
      const stale = await page.textContent("#rollout-preview");
      await page.fill("#rollout-percent", "20");
      await page.click("#rollout-preview-button");
      await page.waitForSelector("#rollout-confirm");
      await page.click("#rollout-confirm");
      await page.waitForFunction(() =>
        document.querySelector("#rollout-state")?.textContent.includes("at 20%"),
      );
      out({ step: "rollout", before, share, stale, after: await page.textContent("#rollout-state") });
      await shot("rollout-20");
    } else if (phase === "halted") {
      // Signing in from a bookmarked address lands there.
      await page.goto(`${base}/ui#/models`);
      await page.fill("#token", token);
      await page.click("#signin button[type=submit]");
      await page.waitForSelector("#models");
      const models = await page.$$eval("#models tbody tr", (rows) =>
        rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent.trim())),
      );
      await page.click("#models tbody a");
      await page.waitForSelector("#halt-reason");
      out({ step: "halted", models, reason: await page.textContent("#halt-reason") });
      await shot("halted");
      // Health: charts with the threshold lines, tables, heat map, deny list.
      await page.click("#health-link");
      await page.waitForSelector("#health-variants");
      await page.waitForSelector("#charts canvas");
      const legends = await page.$$eval(".u-legend .u-series .u-label", (ls) =>
        ls.map((l) => l.textContent),
      );
      const titles = await page.$$eval(".u-title", (ts) => ts.map((t) => t.textContent));
      const heat = await page.$$eval("#heatmap tbody tr", (rows) =>
        rows.map((r) => [r.querySelector("th").textContent, ...Array.from(r.querySelectorAll("td")).map((td) => td.textContent)]),
      );
      const deny = await page.$$eval("#deny tbody tr", (rows) =>
        rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
      );
      const clients = await page.$$eval("#health-clients tbody tr", (rows) =>
        rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
      );
      const cells = (sel) =>
        page.$$eval(sel, (rows) =>
          rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
        );
      const latency = await cells("#health-latency tbody tr");
      const latency_by_soc = await cells("#latency-by-soc tbody tr");
      const variants = await cells("#health-variants tbody tr");
      const crashes = (await page.$("#crash-compare")) ? await page.textContent("#crash-compare") : null;
      out({
        step: "health", titles, legends, heat, deny, clients, latency, latency_by_soc, variants,
        crashes, halt: await page.textContent("#halt-reason"),
      });
      await shot("health");
      // Override the first deny entry from the page.
      if (deny.length) {
        await page.click("#deny tbody tr:first-child button.deny-override");
        // It says what changes for which devices before anything is sent.
        await page.waitForSelector("#deny-confirm .deny-effect");
        const effect = await page.textContent("#deny-confirm .deny-effect");
        const before = await page.$eval("#deny tbody tr td:nth-child(6)", (td) => td.textContent);
        await shot("deny-confirm");
        await page.click("#deny-confirm .deny-confirm");
        await page.waitForFunction(
          () => document.querySelector("#deny tbody tr td:nth-child(6)")?.textContent === "allow",
        );
        out({ step: "deny_override", effect, before, row: await page.$eval("#deny tbody tr", (r) => r.textContent) });
        await shot("deny-override");
      }
      // Explain: a device profile and what it would get.
      await page.click("#nav-explain");
      await page.waitForSelector("#explain");
      await page.fill("#ex-model", "mlp");
      await page.fill("#ex-soc", "SM8550");
      await page.fill("#ex-device", "Pixel 8");
      await page.fill("#ex-app", "2.0.0");
      await page.fill("#ex-backends", "XnnpackBackend,VulkanBackend");
      await page.fill("#ex-install", "explain-device-1");
      await page.click("#explain button[type=submit]");
      await page.waitForSelector("#explain-chosen");
      const rows = await page.$$eval("#explain-table tbody tr", (rs) =>
        rs.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent)),
      );
      out({ step: "explain", chosen: await page.textContent("#explain-chosen"), rows });
      await shot("explain");
      // An address the dashboard does not have says so (not the model list).
      await page.goto(`${base}/ui#/nonsense/route`);
      await page.waitForFunction(() => document.body.textContent.includes("is not a page of the dashboard"));
      out({ step: "unknown_route", models_shown: (await page.$("#models")) !== null });
      // Signing out forgets the token.
      await page.click("#signout");
      await page.waitForSelector("#signin");
      out({ step: "signed_out_again", stored: await page.evaluate(() => sessionStorage.length) });
    } else {
      throw new Error(`unknown phase ${phase}`);
    }
  } finally {
    await browser.close();
  }
  if (problems.length) {
    throw new Error(problems.join("\n"));
  }
}

run(main);
