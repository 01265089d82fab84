// The browser set-up the console's end-to-end scripts share: environment variables, a
// headless Chromium (playwright-core) on a throwaway profile, and steps that print
// "ok - NAME" or "not ok - NAME" (with a screenshot) and a closing "N passed, N failed".
import { chromium } from "playwright-core";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// env is a required environment variable.
export const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`missing environment variable ${k}`);
  return v;
};

export function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}

// openBrowser starts Chromium on a fresh profile named after name; a failed step's
// screenshot is SCREENSHOTS/<failPrefix><step>.png.
export async function openBrowser(name, failPrefix) {
  const shots = env("SCREENSHOTS");
  mkdirSync(shots, { recursive: true });
  const profile = mkdtempSync(join(tmpdir(), `${name}-chromium-`));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
  });
  context.setDefaultTimeout(15000);
  const page = context.pages()[0] || (await context.newPage());

  let passed = 0;
  let failed = 0;
  async function step(name, fn) {
    try {
      await fn();
      passed++;
      console.log(`ok - ${name}`);
    } catch (err) {
      failed++;
      console.log(`not ok - ${name}\n  ${String(err && err.stack ? err.stack : err).split("\n").join("\n  ")}`);
      await page.screenshot({ path: join(shots, `${failPrefix}${name.replace(/\W+/g, "-")}.png`), fullPage: true }).catch(() => {});
    }
  }
  // finish closes the browser, removes the profile and exits 1 when a step failed.
  async function finish() {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed === 0 ? 0 : 1);
  }
  return { page, shots, step, finish };
}
