// Browser end-to-end test of the Xema console, in a real headless Chromium driven by
// playwright-core. test/e2e/console_test.go starts the gateway, prepares the data and runs
// this script with:
//   XEMA_URL        the gateway
//   XEMA_TOKEN      an org administrator's development token
//   HELD_APPROVE    approval id of a held call to approve
//   HELD_REJECT     approval id of a held call to reject
//   DENIED_REF      a ref one call was denied
//   DENIED_AUDIT    that denial's audit id
//   BIOME_ID, BIOME_VERSION  a submitted, not yet granted biome version
//   SCREENSHOTS     directory for the screenshots of docs/console.md
//   CHROMIUM        the browser (default /usr/bin/chromium)
// It prints one "ok - NAME" line per step and closes with "N passed, N failed".
import { join } from "node:path";
import { env, expect, openBrowser } from "./harness.mjs";

const base = env("XEMA_URL");
const token = env("XEMA_TOKEN");

const { page, shots, step, finish } = await openBrowser("xema-console", "failed-");

// Every request the console makes goes to the gateway, and no URL carries the token.
const foreign = [];
page.on("request", (req) => {
  const u = new URL(req.url());
  if (u.origin !== new URL(base).origin && u.protocol !== "data:") foreign.push(req.url());
  if (req.url().includes(token)) foreign.push("token in URL: " + req.url().slice(0, 60));
});
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));

const shot = (name) => page.screenshot({ path: join(shots, name + ".png"), fullPage: true });
const approvalCard = (id) => page.getByRole("region", { name: `Held call ${id}` });

await step("a deep link before sign-in goes to the login page and back", async () => {
  await page.goto(`${base}/console/approvals`);
  await page.waitForURL(/\/console\/login\?next=/);
  await page.getByLabel("Token").fill("not-a-token");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").waitFor();
  await page.getByLabel("Token").fill(token);
  await shot("login");
  await page.keyboard.press("Enter"); // the form works from the keyboard
  await page.waitForURL(`${base}/console/approvals`);
  await page.getByRole("heading", { name: /^Pending/ }).waitFor();
  const stored = await page.evaluate(() => ({ s: Object.keys(sessionStorage), l: Object.keys(localStorage), c: document.cookie }));
  expect(stored.s.length === 1 && stored.l.length === 0 && stored.c === "", `token storage: ${JSON.stringify(stored)}`);
});

await step("approve a held call and see it run", async () => {
  const card = approvalCard(env("HELD_APPROVE"));
  await card.waitFor();
  expect((await card.textContent()).includes("ticket:comment.add@1"), "the held call shows its ref");
  expect((await card.textContent()).includes("agent:support-bot"), "the held call shows its requester");
  expect((await card.textContent()).includes('"text": "approve me"'), "the held call shows its input");
  await shot("approvals");
  await card.getByRole("button", { name: "Approve" }).click();
  const decided = approvalCard(env("HELD_APPROVE"));
  await decided.getByText("done", { exact: true }).waitFor();
  const text = await decided.textContent();
  expect(text.includes("Output") && text.includes("ticketId"), "the run's output is shown: " + text);
});

await step("reject a held call with a reason", async () => {
  const card = approvalCard(env("HELD_REJECT"));
  await card.getByRole("button", { name: "Reject" }).click();
  await card.getByLabel("Reason").fill("not during the freeze");
  await shot("approvals-reject");
  await card.getByRole("button", { name: "Confirm reject" }).click();
  const decided = approvalCard(env("HELD_REJECT"));
  await decided.getByText("rejected", { exact: true }).waitFor();
  expect((await decided.textContent()).includes("not during the freeze"), "the reason is shown");
  await page.reload(); // the view survives a reload
  await approvalCard(env("HELD_REJECT")).getByText("not during the freeze").waitFor();
  await shot("approvals-decided");
});

await step("find a denial by ref and read its why-denied", async () => {
  await page.getByRole("link", { name: "Audit" }).click();
  await page.getByLabel("Ref").fill(env("DENIED_REF"));
  await page.getByLabel("Decision").selectOption("denied");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/\/console\/audit\?ref=/);
  const row = page.getByRole("link", { name: env("DENIED_AUDIT") });
  await row.waitFor();
  const rows = await page.getByRole("table", { name: "Audit records" }).locator("tbody tr").count();
  expect(rows === 1, `want one denial of ${env("DENIED_REF")}, got ${rows}`);
  await shot("audit");
  await row.click();
  await page.waitForURL(`${base}/console/audit/${env("DENIED_AUDIT")}`);
  await page.getByRole("heading", { name: "Why it was denied" }).waitFor();
  const reasons = await page.getByRole("list", { name: "Reasons" }).textContent();
  expect(reasons.includes("ENVIRONMENT_NOT_ALLOWED"), "reasons: " + reasons);
  await page.getByRole("list", { name: "Suggestions" }).waitFor();
  await page.reload();
  await page.getByRole("heading", { name: "Why it was denied" }).waitFor();
  await shot("audit-record");
});

await step("a held call's record links to its approval and its run", async () => {
  await page.goto(`${base}/console/approvals`);
  const card = approvalCard(env("HELD_APPROVE"));
  await card.getByRole("link").first().click();
  await page.getByRole("heading", { name: "Linked records" }).waitFor();
  const linked = await page.locator("main ul").last().textContent();
  expect(linked.includes("approved"), "linked records show the approval: " + linked);
});

await step("approve a grant from a digest", async () => {
  await page.getByRole("link", { name: "Biomes" }).click();
  const id = env("BIOME_ID");
  const version = env("BIOME_VERSION");
  await page.getByRole("link", { name: `${id} ${version}` }).click();
  await page.waitForURL(`${base}/console/biomes/${id}/${version}`);
  await page.getByRole("table", { name: "Required capabilities" }).waitFor();
  await page.locator(".diff .added").first().waitFor(); // the diff against the installed version, in colour
  await shot("biome");
  await page.getByLabel("Profile").selectOption("internal-agent");
  await page.getByLabel("Environments of ticket:find@2").fill("project");
  await page.getByLabel("Rate limit of ticket:find@2").fill("30/1m");
  await page.getByRole("button", { name: "Review grant" }).click();
  const effect = page.getByRole("table", { name: "Effect of the grant" });
  await effect.waitFor();
  expect((await effect.textContent()).includes("30/1m"), "the preview shows the customized limit");
  const impact = await page.locator("#grant-impact").textContent();
  expect(/\d+ considered; 0 would now be denied, 0 would now be allowed/.test(impact), "the preview shows the grant's dry-run impact: " + impact);
  await shot("biome-grant-preview");
  await page.getByRole("button", { name: "Approve grant" }).click();
  await page.getByText(/^Grant .* recorded/).waitFor();
  await page.getByRole("link", { name: "Biomes" }).click();
  const row = page.locator("tr", { has: page.getByRole("link", { name: `${id} ${version}` }) });
  await row.getByText("granted", { exact: true }).waitFor();
  await shot("biomes");
});

await step("catalog lists refs with their lifecycle", async () => {
  await page.getByRole("link", { name: "Catalog" }).click();
  const table = page.getByRole("table", { name: "Capabilities" });
  await table.waitFor();
  expect((await table.textContent()).includes("kb:page.read@1"), "the catalog lists kb:page.read@1");
  await shot("catalog");
});

await step("sign out forgets the token", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/console\/login/);
  expect((await page.evaluate(() => sessionStorage.length)) === 0, "session storage is empty after sign out");
  await page.goto(`${base}/console/audit`);
  await page.waitForURL(/\/console\/login\?next=/);
});

await step("no request left the gateway and no page error", async () => {
  expect(foreign.length === 0, "foreign requests: " + foreign.join(", "));
  expect(pageErrors.length === 0, "page errors: " + pageErrors.join("; "));
});

await finish();
