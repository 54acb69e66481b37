// The experiment page in a real browser, for tests/tests/e2e/console/experiment.rs: reached
// from the model page, its metrics, classes and history as shown, a stop with a winner and a
// reason confirmed from the page, and no sideways scrolling on a phone.
// Usage: node tests/ui/experiment.cjs URL TOKEN SCREENSHOT_DIR
// Prints one JSON object per line: {"step": ..., ...facts the Rust test checks}. Fails (exit 1)
// on any page error, console error or failed expectation.
"use strict";

const path = require("path");
const { out, expect, launch, run } = require("./browser.cjs");

const [base, token, shots] = process.argv.slice(2);

const rowsOf = (page, sel) =>
  page.$$eval(`${sel} tbody tr`, (rows) =>
    rows.map((r) => Array.from(r.querySelectorAll("td")).map((td) => td.textContent.trim())),
  );

async function main() {
  const browser = await launch();
  const problems = [];
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") {
      problems.push(`console error: ${m.text()}`);
    }
  });
  await page.goto(`${base}/ui#/model/demo-mlp`);
  await page.fill("#token", token);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#experiment-link");
  await page.click("#experiment-link");
  await page.waitForSelector("#experiment-metrics");
  out({
    step: "status",
    hash: await page.evaluate(() => location.hash),
    state: await page.textContent("#experiment-state"),
    metrics: await rowsOf(page, "#experiment-metrics"),
    classes: await rowsOf(page, "#experiment-classes"),
    history: await rowsOf(page, "#experiment-history"),
  });
  await page.screenshot({ path: path.join(shots, "experiment-1440.png"), fullPage: true });
  // Stop it with a winner and a reason: the page asks first, then says what it did.
  await page.selectOption("#experiment-winner", "control");
  await page.fill("#experiment-reason", "dashboard test: vulkan falls back");
  await page.click("#experiment-stop");
  await page.waitForSelector("#experiment-confirm");
  const asked = await page.textContent("#experiment-result");
  await page.click("#experiment-confirm");
  await page.waitForFunction(() =>
    document.querySelector("#experiment-state")?.textContent.includes("stopped"),
  );
  out({
    step: "stopped",
    asked,
    result: await page.textContent("#experiment-result"),
    state: await page.textContent("#experiment-state"),
    history: await rowsOf(page, "#experiment-history"),
    stop_disabled: await page.$eval("#experiment-stop", (b) => b.disabled),
  });
  // A phone: nothing scrolls sideways (wide tables scroll in their own box).
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const widths = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
  out({ step: "phone", ...widths });
  await page.screenshot({ path: path.join(shots, "experiment-390.png"), fullPage: true });
  expect(problems.length === 0, `no page or console errors: ${problems.join("; ")}`);
  await browser.close();
}

run(main);
