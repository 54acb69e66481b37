// What the browser scripts of tests/ui share: headless Chromium (Debian's, through the npm
// package playwright-core that tests/setup.sh installs), one JSON line per fact, and a run
// that exits 1 with the error's stack on any failure.
"use strict";

const path = require("path");
const modules = process.env.FERRY_UI_MODULES || path.join(__dirname, "../../.deps/ui/node_modules");
const { chromium } = require(path.join(modules, "playwright-core"));

/** Prints one fact for the Rust test. */
const out = (obj) => console.log(JSON.stringify(obj));

/** Fails the script unless `cond`. */
function expect(cond, what) {
  if (!cond) {
    throw new Error(`expected: ${what}`);
  }
}

/** Starts headless Chromium. */
function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox"],
  });
}

/** Runs `main`, exiting 0 when it resolves and 1 with the stack when it throws. */
function run(main) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(e.stack || String(e));
      process.exit(1);
    },
  );
}

module.exports = { out, expect, launch, run };
