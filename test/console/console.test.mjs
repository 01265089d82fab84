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
//   ACME_TOKEN      an administrator of org acme
//   AGENT_TOKEN     an agent's token (no console view but the audit log and the catalog)
//   SECRET          a credential's secret, which no page may show
//   APPROVER_TOKEN  a member of the org (not an administrator) whom the grant lets decide held calls
//   SCREENSHOTS     directory for the screenshots of docs/console.md
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   CONNECT_SERVER  (optional) provider id of an OAuth-protected MCP server of user connections
//   ISSUER_URL, LOGIN_URL  its authorization server (hydra) and hydra's login and consent app,
//                   which the browser may reach by navigation only, while connecting
// It prints one "ok - NAME" line per step and closes with "N passed, N failed".
import { join } from "node:path";
import { env, expect, openBrowser } from "./harness.mjs";

const base = env("XEMA_URL");
const token = env("XEMA_TOKEN");

const { page, shots, step, finish } = await openBrowser("xema-console", "failed-");

// Every request the console makes goes to the gateway, and no URL carries the token; only
// while an account is being connected may the browser navigate (never script) to the
// authorization server and its login app.
const foreign = [];
const connectServer = process.env.CONNECT_SERVER || "";
const authOrigins = [process.env.ISSUER_URL, process.env.LOGIN_URL].filter(Boolean).map((x) => new URL(x).origin);
let connecting = false;
page.on("request", (req) => {
  const u = new URL(req.url());
  const away = connecting && req.isNavigationRequest() && authOrigins.includes(u.origin);
  if (u.origin !== new URL(base).origin && u.protocol !== "data:" && !away) foreign.push(req.url());
  if (req.url().includes(token)) foreign.push("token in URL: " + req.url().slice(0, 60));
});
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));

const nav = (name) => page.getByRole("navigation", { name: "Console" }).getByRole("link", { name, exact: true });
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

// apiGet calls the gateway from the page, as the console does.
const apiGet = (path, t) => page.evaluate(async ([p, tok]) => (await fetch(p, { headers: { Authorization: "Bearer " + tok } })).json(), [path, t || token]);

await step("the overview shows the org's calls as the API counts them", async () => {
  await page.goto(`${base}/console/?window=1h`);
  const heading = page.getByRole("heading", { name: /^Calls in the last 1h: \d+$/ });
  await heading.waitFor();
  const stats = await apiGet("/v1/stats?window=1h");
  const shown = Number((await heading.textContent()).match(/(\d+)$/)[1]);
  expect(shown === stats.totals.calls && shown >= 10, `overview ${shown} calls, the API ${stats.totals.calls}`);
  await page.getByRole("img", { name: /^Calls per 1 min over the last 1h/ }).waitFor();
  const totals = await page.getByRole("list", { name: "Totals" }).textContent();
  for (const k of ["allowed", "denied", "failed"]) expect(totals.includes(`${stats.totals[k]} ${k}`), `totals ${totals} lack ${stats.totals[k]} ${k}`);
  expect(totals.includes(`${stats.totals.held} held`), "totals show the held calls: " + totals);
  const held = await page.getByRole("region", { name: "Held calls" }).textContent();
  expect(held.includes(`${stats.held.waiting} calls wait`) && /the oldest for/.test(held), "held calls waiting: " + held);
  await page.getByRole("table", { name: "Runners" }).waitFor();
  const mainText = await page.locator("main").textContent();
  expect(!/\b1 calls\b/.test(mainText) && !/ to in /.test(mainText), "the overview's grammar: " + mainText);
  await shot("overview");
  // A denial reason links to the audit search it counts.
  const reason = stats.topDenialReasons[0];
  await page.getByRole("list", { name: "Top denial reasons" }).getByRole("link", { name: reason.code }).click();
  await page.waitForURL(/\/console\/audit\?.*reason=/);
  await page.getByRole("table", { name: "Audit records" }).waitFor();
  const rows = await page.getByRole("table", { name: "Audit records" }).locator("tbody tr").count();
  expect(rows === reason.count, `${reason.code}: the overview counts ${reason.count}, its audit search lists ${rows}`);
  // A narrow window: the same page, nothing cut off sideways.
  await page.goto(`${base}/console/?window=1h`);
  await page.setViewportSize({ width: 390, height: 800 });
  try {
    await heading.waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    await shot("overview-narrow");
    expect(overflow <= 0, `the narrow overview scrolls sideways by ${overflow}px`);
  } finally {
    await page.setViewportSize({ width: 1280, height: 800 });
  }
});

await step("approve a held call from its deep link and see it run", async () => {
  await page.goto(`${base}/console/approvals`);
  await approvalCard(env("HELD_REJECT")).waitFor();
  // The navigation counts the calls waiting for a decision.
  const waiting = (await apiGet("/v1/approvals?status=pending&limit=100")).approvals.length;
  const badge = page.locator("#pending-count");
  await badge.waitFor();
  expect((await badge.textContent()) === String(waiting) && waiting >= 2, `the pending count ${await badge.textContent()}, the API ${waiting}`);
  const icon = await page.evaluate(async () => { const r = await fetch("/favicon.ico"); return [r.status, r.headers.get("content-type")]; });
  expect(icon[0] === 200 && icon[1].startsWith("image/svg+xml"), "GET /favicon.ico: " + icon);
  await shot("approvals");
  // The link a notification carries (notify.Config.DeepLink): the call's own page.
  await page.goto(`${base}/console/approvals/${env("HELD_APPROVE")}`);
  const card = approvalCard(env("HELD_APPROVE"));
  await card.waitFor();
  expect((await card.textContent()).includes("ticket:comment.add@1"), "the held call shows its ref");
  expect((await card.textContent()).includes("agent:support-bot"), "the held call shows its requester");
  expect((await card.textContent()).includes('"text": "approve me"'), "the held call shows its input");
  expect((await card.locator(".side-effects").textContent()) === "Adds a comment the customer can read.", "the held call shows its capability's side effects");
  await card.getByRole("button", { name: "Approve" }).click();
  const decided = approvalCard(env("HELD_APPROVE"));
  await decided.getByText("done", { exact: true }).waitFor();
  const text = await decided.textContent();
  expect(text.includes("Output") && text.includes("ticketId"), "the run's output is shown: " + text);
});

await step("reject a held call with a reason", async () => {
  await nav("Approvals").click();
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
  await page.goto(`${base}/console/approvals?status=any`);
  await approvalCard(env("HELD_APPROVE")).getByText("done", { exact: true }).waitFor();
  await shot("approvals-decided");
  await page.goto(`${base}/console/approvals`);
  await page.getByRole("heading", { name: /^Pending/ }).waitFor();
  const left = (await apiGet("/v1/approvals?status=pending&limit=100")).approvals.length;
  expect((await page.locator("#pending-count").count()) === (left ? 1 : 0), `the pending count once decided (${left} left)`);
});

await step("find a denial by ref and read its why-denied", async () => {
  await nav("Audit").click();
  const search = page.getByRole("search", { name: "Search the audit log" }); // not the held calls' filter, which has a Ref too
  await search.waitFor();
  await search.getByLabel("Ref").fill(env("DENIED_REF"));
  await page.getByLabel("Decision").selectOption("denied");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/\/console\/audit\?ref=/);
  const row = page.getByRole("link", { name: env("DENIED_AUDIT") });
  await row.waitFor();
  // The denial may be in the unfiltered page the search replaces: count once every row is
  // the filtered ref's.
  const table = page.getByRole("table", { name: "Audit records" });
  await table.locator("tbody tr").filter({ hasNotText: env("DENIED_REF") }).first().waitFor({ state: "detached" });
  const rows = await table.locator("tbody tr").count();
  expect(rows === 2, `want two denials of ${env("DENIED_REF")}, got ${rows}`);
  await shot("audit");
  // A call that ran is one row: its decision, and its outcome linking to the outcome record.
  await page.goto(`${base}/console/audit?ref=${encodeURIComponent("kb:page.read@1")}`);
  const reads = page.getByRole("table", { name: "Audit records" });
  await reads.waitFor();
  const ids = await reads.locator("tbody tr td:nth-child(2)").allTextContents();
  const ran = await apiGet("/v1/audit?ref=kb:page.read@1&limit=100&omit=people-reads");
  const calls = ran.records.filter((r) => !r.auditId.endsWith(".outcome")).length;
  expect(ids.length === calls && !ids.some((id) => id.endsWith(".outcome")), `audit rows ${ids.length} for ${calls} calls: ${ids}`);
  const ok = reads.getByRole("link", { name: "ok", exact: true }).first();
  const lines = await reads.locator("td.time time").first().evaluate((t) => t.getClientRects().length);
  expect(lines === 1, `the time column wraps onto ${lines} lines`);
  await ok.click();
  await page.waitForURL(/\/console\/audit\/[^/]+\.outcome$/);
  await page.goto(`${base}/console/audit?ref=${encodeURIComponent(env("DENIED_REF"))}&decision=denied`);
  await row.click();
  await page.waitForURL(`${base}/console/audit/${env("DENIED_AUDIT")}`);
  await page.getByRole("heading", { name: "Why it was denied" }).waitFor();
  const reasons = await page.getByRole("list", { name: "Reasons" }).textContent();
  expect(reasons.includes("ENVIRONMENT_NOT_ALLOWED"), "reasons: " + reasons);
  const next = await page.getByRole("list", { name: "Suggestions" }).textContent();
  expect(next.includes(env("DENIED_NEXT")), `the console's next steps ${next} lack the denial's own: ${env("DENIED_NEXT")}`);
  await page.reload();
  await page.getByRole("heading", { name: "Why it was denied" }).waitFor();
  await shot("audit-record");
});

await step("a held call's record links to its approval and its run", async () => {
  await page.goto(`${base}/console/approvals/${env("HELD_APPROVE")}`);
  const card = approvalCard(env("HELD_APPROVE"));
  await card.getByRole("link", { name: /^inv_/ }).click();
  await page.getByRole("heading", { name: "Linked records" }).waitFor();
  const linked = await page.locator("main ul").last().textContent();
  expect(linked.includes("approved"), "linked records show the approval: " + linked);
});

await step("approve a grant from a digest", async () => {
  await nav("Biomes").click();
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
  expect(/\d+ considered; 0 would now be denied, 0 would now be held for approval, 0 would now be allowed/.test(impact), "the preview shows the grant's dry-run impact: " + impact);
  await shot("biome-grant-preview");
  await page.getByRole("button", { name: "Approve grant" }).click();
  const recorded = await page.getByText(/^Grant .* recorded/).textContent();
  // The page shows the grant it just recorded, without a reload.
  const grantId = recorded.match(/^Grant (\S+)/)[1];
  const list = await page.getByRole("list", { name: "Grants of this version" }).textContent();
  expect(list.includes(grantId), "the grants of the version list the new one: " + list);
  expect(!(await page.locator("main").textContent()).includes("Not granted"), "the page still says Not granted");
  await nav("Biomes").click();
  const row = page.locator("tr", { has: page.getByRole("link", { name: `${id} ${version}` }) });
  await row.getByText("granted", { exact: true }).waitFor();
  await shot("biomes");
});

await step("the built-in biome is one row, built in, and its link opens", async () => {
  const rows = page.locator("tr", { has: page.getByRole("link", { name: /^xema 0\.0\.0\+/ }) });
  expect((await rows.count()) === 1, "one row of the built-in biome");
  const text = await rows.textContent();
  expect(text.includes("built in") && !text.includes("awaiting approval") && !text.includes("?"), "the built-in row: " + text);
  await rows.getByRole("link").click();
  await page.waitForURL(/\/console\/biomes\/xema\/0\.0\.0(%2B|\+)/);
  await page.getByText(/the gateway's built-in biome/).waitFor();
  expect((await page.getByRole("alert").count()) === 0, "no error on the built-in biome's page");
});

await step("catalog lists refs with their lifecycle", async () => {
  await nav("Catalog").click();
  const table = page.getByRole("table", { name: "Capabilities" });
  await table.waitFor();
  expect((await table.textContent()).includes("kb:page.read@1"), "the catalog lists kb:page.read@1");
  // An administrator also sees every capability of the org's biomes, and why each is or is not callable.
  const org = page.getByRole("table", { name: "Every capability of the org's biomes" });
  const row = (ref) => org.locator("tbody tr", { has: page.getByRole("link", { name: ref, exact: true }) }).locator("td.callable").textContent();
  expect((await row("kb:page.read@1")) === "yes", "kb:page.read@1 for the admin: " + (await row("kb:page.read@1")));
  expect((await row("kb:page.publish@1")) === "yes, once approved", "kb:page.publish@1: " + (await row("kb:page.publish@1")));
  const unbound = await row("connector:channel.send-message@1");
  expect(unbound.startsWith("no") && unbound.includes("binding"), "an unbound connector says why it is not callable: " + unbound);
  await shot("catalog");
});

await step("a capability's page says who may call it", async () => {
  await page.getByRole("table", { name: "Capabilities" }).getByRole("link", { name: "kb:page.read@1" }).click();
  await page.waitForURL(/\/console\/capabilities\/kb(%3A|:)page\.read(%40|@)1$/);
  await page.getByRole("heading", { name: "kb:page.read@1" }).waitFor();
  const grants = await page.getByRole("table", { name: "Grants covering kb:page.read@1" }).textContent();
  expect(grants.includes("internal-agent") && grants.includes("project"), "the grants covering it: " + grants);
  await page.getByRole("heading", { name: "Input schema" }).waitFor();
  await page.reload();
  await page.getByRole("heading", { name: "Who may call it" }).waitFor();
  await shot("capability");
});

await step("providers list bindings and credentials, never a secret", async () => {
  await nav("Providers").click();
  const creds = await page.getByRole("table", { name: "Credentials" }).textContent();
  expect(creds.includes("scm-bot") && creds.includes("gitea"), "credentials: " + creds);
  expect(creds.includes("Last rotated") && /never/.test(await page.locator("td.rotated").first().textContent()), "the credential's last rotation: " + creds);
  const binds = await page.getByRole("table", { name: "Bindings" }).textContent();
  expect(binds.includes("connector:scm.*"), "bindings: " + binds);
  expect(!(await page.content()).includes(env("SECRET")), "a secret on the providers page");
  await shot("providers");
});

await step("providers: add a credential and a binding, change and remove them, register and sync an MCP server", async () => {
  await nav("Providers").click();
  await page.getByRole("heading", { name: "Bindings" }).waitFor();
  // A credential: the secret goes in a password field and never comes back.
  await page.getByRole("button", { name: "Add a credential" }).click();
  const cf = page.getByRole("form", { name: "Add a credential" });
  await cf.getByLabel("Name").fill("console-bot");
  await cf.getByLabel("Provider").fill("gitea");
  await cf.getByLabel("Secret (write-only)").fill("console-typed-secret");
  await cf.getByRole("button", { name: "Save" }).click();
  const creds = page.getByRole("table", { name: "Credentials" });
  await creds.getByText("console-bot").waitFor();
  expect(!(await page.content()).includes("console-typed-secret"), "the typed secret is on the page");
  const credId = (await creds.locator("tr", { hasText: "console-bot" }).locator("td code").first().textContent()).trim();
  // A binding with a bad base URL is refused, naming the field; nothing is added.
  const before = await page.getByRole("table", { name: "Bindings" }).locator("tbody tr:not(.form-row)").count();
  await page.getByRole("button", { name: "Add a binding" }).click();
  const bf = page.getByRole("form", { name: "Add a binding" });
  await bf.getByLabel("Refs (a ref pattern)").fill("connector:scm.*");
  await bf.getByLabel("Credential").selectOption(credId);
  await bf.getByLabel("Base URL").fill("ftp://nowhere");
  await bf.getByLabel("Project").fill("console-project");
  await bf.getByLabel("Provider settings (JSON)").fill('{"repository":"xema/console"}');
  await bf.getByRole("button", { name: "Save" }).click();
  const problems = await bf.getByRole("list", { name: "Problems" }).textContent();
  expect(problems.includes("/baseUrl"), "the refusal names the field: " + problems);
  expect((await page.getByRole("table", { name: "Bindings" }).locator("tbody tr:not(.form-row)").count()) === before, "a refused binding was added");
  await bf.getByLabel("Base URL").fill(env("PROVIDER_URL"));
  await bf.getByRole("button", { name: "Save" }).click();
  const bindings = page.getByRole("table", { name: "Bindings" });
  const row = bindings.locator("tr", { hasText: "console-project" });
  await row.waitFor();
  // Change: the new binding replaces the old one in one step.
  const oldId = (await row.getByRole("button", { name: /^Change binding / }).getAttribute("aria-label")).replace("Change binding ", "");
  await row.getByRole("button", { name: /^Change binding / }).click();
  const chf = page.getByRole("form", { name: "Change binding " + oldId });
  expect((await chf.getByLabel("Project").inputValue()) === "console-project", "the change form is not prefilled");
  await chf.getByLabel("Base URL").fill(env("PROVIDER_URL") + "/v2");
  await chf.getByRole("button", { name: "Save" }).click();
  await bindings.getByText(env("PROVIDER_URL") + "/v2").waitFor();
  expect((await bindings.locator("tr", { hasText: "console-project" }).count()) === 1, "the changed binding is not one row");
  expect((await page.getByRole("button", { name: "Change binding " + oldId }).count()) === 0, "the replaced binding is still listed");
  // The credential is in use: removing it is refused; remove the binding, then it.
  await creds.locator("tr", { hasText: "console-bot" }).getByRole("button", { name: /^Remove credential / }).click();
  await page.getByRole("button", { name: "Confirm removal" }).click();
  await page.getByRole("alert").filter({ hasText: /in use|binding/ }).waitFor();
  await page.reload();
  await bindings.locator("tr", { hasText: "console-project" }).getByRole("button", { name: /^Remove binding / }).click();
  await page.getByRole("button", { name: "Confirm removal" }).click();
  await page.getByRole("status").filter({ hasText: /Binding .* removed/ }).waitFor(); // said once the page is redrawn
  expect((await bindings.locator("tr", { hasText: "console-project" }).count()) === 0, "the removed binding is listed");
  await creds.locator("tr", { hasText: "console-bot" }).getByRole("button", { name: /^Remove credential / }).click();
  await page.getByRole("button", { name: "Confirm removal" }).click();
  await page.getByRole("status").filter({ hasText: /Credential .* removed/ }).waitFor(); // said once the page is redrawn
  expect((await creds.getByText("console-bot").count()) === 0, "the removed credential is listed");
  // An MCP server: registered, its tools listed as seeded, synced.
  await page.getByRole("button", { name: "Register an MCP server" }).click();
  const mf = page.getByRole("form", { name: "Register an MCP server" });
  await mf.getByLabel("Provider id").fill("console-tools");
  await mf.getByLabel("URL (streamable HTTP)").fill(env("MCP_URL"));
  await mf.getByRole("button", { name: "Save" }).click();
  const card = page.getByRole("region", { name: "MCP server console-tools" });
  await card.waitFor();
  const tools = await card.getByRole("table", { name: "Tools of console-tools" }).textContent();
  expect(tools.includes("console-tools:shout@1") && tools.includes("seeded"), "the registered server's tools: " + tools);
  await page.getByRole("link", { name: "Review and grant its digest" }).waitFor();
  await card.getByRole("button", { name: "Sync console-tools" }).click();
  await card.getByText("Unchanged since the last sync.").waitFor();
  await shot("providers-edit");
});

// Connections: /console/#connections (the fragment form of the page a CONNECTION_REQUIRED denial suggests) opens
// the page; Connect goes through the authorization server (hydra, its login app accepting
// alice) to the gateway's callback page and back; Disconnect ends it.
const serverRow = () => page.getByRole("table", { name: "Servers to connect" }).locator("tr", { hasText: connectServer }).first();
await step("connections: connect an account through the authorization server, see it, disconnect it", async () => {
  if (!connectServer) {
    console.log("skip - no CONNECT_SERVER (no hydra): the connect flow did not run");
    return;
  }
  await page.goto(`${base}/console/#connections`);
  await page.waitForURL(`${base}/console/connections`);
  await page.getByRole("heading", { name: "Connections", level: 1 }).waitFor();
  await nav("Connections").waitFor();
  const before = await serverRow().textContent();
  expect(before.includes("not connected") && before.includes("yours"), "the server before connecting: " + before);
  connecting = true;
  try {
    await serverRow().getByRole("button", { name: `Connect ${connectServer}`, exact: true }).click();
    // hydra, its login and consent app, then the gateway's callback page.
    await page.waitForURL(/\/v1\/connections\/callback\?/, { timeout: 30000 });
    const landed = await page.locator("body").textContent();
    expect(/connected/i.test(landed) && landed.includes(connectServer), "the callback page: " + landed);
    await shot("connections-callback");
    await page.getByRole("link", { name: /console|connections/i }).first().click();
  } finally {
    connecting = false;
  }
  await page.waitForURL(`${base}/console/connections`);
  const row = serverRow();
  await row.locator(".connection-status").getByText("connected", { exact: true }).waitFor();
  const after = await row.textContent();
  expect(/in \d+|minute|hour|day/.test(after), "the connection's expiry: " + after);
  // The org admin's table lists it as alice's own, with its id; the API agrees.
  const all = await page.getByRole("table", { name: "Connections of the org" }).textContent();
  const api = await apiGet("/v1/connections");
  const con = (api.connections || []).find((c) => c.providerId === connectServer && c.owner.kind === "user" && c.owner.ref === "user:alice");
  expect(con && con.status === "connected" && all.includes(con.id) && all.includes("yours"), "the org's connections: " + all + " / API: " + JSON.stringify(api));
  const srv = (api.servers || []).find((x) => x.providerId === connectServer);
  expect(srv && srv.connected === true && srv.status === "connected", "the API's server: " + JSON.stringify(srv));
  // No token on the page: the API answers none (a JWT would start eyJ).
  expect(!/eyJ[A-Za-z0-9_-]{10,}/.test(await page.content()), "a token on the Connections page");
  await shot("connections");
  // Disconnect, after a sentence saying what it does.
  await row.getByRole("button", { name: `Disconnect ${connectServer} (your account)` }).click();
  await page.getByRole("group", { name: "Confirm disconnect" }).getByText(/CONNECTION_REQUIRED/).waitFor();
  await page.getByRole("button", { name: "Confirm disconnect" }).click();
  await page.getByRole("status").filter({ hasText: `Disconnected ${connectServer}` }).waitFor(); // said once the page is redrawn
  await serverRow().locator(".connection-status").getByText("not connected", { exact: true }).waitFor();
  expect((await page.getByRole("table", { name: "Connections of the org" }).count()) === 0, "the disconnected connection is listed");
  expect(((await apiGet("/v1/connections")).connections || []).length === 0, "the API still lists a connection");
});

await step("the audit view leaves out people's console reads until asked", async () => {
  await nav("Audit").click();
  const table = page.getByRole("table", { name: "Audit records" });
  await table.waitFor();
  // The console's own page loads: reads of the gateway's operations (writes, such as the
  // grant approved above, stay in view).
  const reads = () => table.locator("tbody tr", { hasText: "user:alice" }).filter({ hasText: /approval:list@1|store:biome\.(get|list)@1|audit:stats\.get@1|biome:grant\.list@1|binding:list@1|credential:list@1|mcp-server:list@1|catalog:capability\.get@1/ }).count();
  expect((await reads()) === 0, "people's console reads are shown by default");
  expect((await table.locator("tbody tr", { hasText: "agent:support-bot" }).count()) > 0, "the agents' calls are not shown");
  expect((await table.locator("tbody tr", { hasText: "agent:support-bot for user:ann" }).count()) === 1, "the call made for user:ann does not name her");
  await page.getByLabel("Include people's reads through the console").check();
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/reads=include/);
  await page.getByText("Every record, people's reads through the console included.").waitFor(); // the new page, not the old one
  expect((await reads()) > 0, "people's reads are not shown when asked for");
});

await step("grants: change one with its diff and impact first, revoke another", async () => {
  await nav("Grants").click();
  await page.getByRole("heading", { name: "Grants" }).waitFor();
  const card = page.getByRole("region", { name: /^Grant / }).filter({ hasText: "ticketing 1.1.0" }).filter({ hasText: "active" });
  await card.getByRole("button", { name: "Change" }).click();
  await card.getByLabel("Profile").selectOption("read-only-assistant");
  await card.getByRole("button", { name: "Review change" }).click();
  const diff = await card.getByRole("list", { name: "Changes of the grant" }).textContent();
  expect(diff.includes("profile") && diff.includes("read-only-assistant"), "the change's diff: " + diff);
  const impact = await card.locator(".grant-change-impact").textContent();
  expect(/\d+ considered; \d+ would now be denied, \d+ would now be held for approval, \d+ would now be allowed/.test(impact), "the change's impact: " + impact);
  await shot("grants-change");
  await card.getByRole("button", { name: "Confirm change" }).click();
  const changed = page.getByRole("region", { name: /^Grant / }).filter({ hasText: "ticketing 1.1.0" });
  await changed.filter({ hasText: "superseded" }).waitFor();
  await changed.filter({ hasText: "read-only-assistant" }).filter({ hasText: "active" }).waitFor();
  // Revoke the demo biome's grant: its dry run first (the bot's reads would now be denied),
  // then the confirmation records it.
  const demo = page.getByRole("region", { name: /^Grant / }).filter({ hasText: "demo 1.0.0" }).filter({ hasText: "active" });
  await demo.getByRole("button", { name: "Revoke" }).click();
  await demo.getByText(/are denied from now on/).waitFor();
  const revokeImpact = await demo.locator(".grant-revoke-impact").textContent();
  expect(/\d+ considered; [1-9]\d* would now be denied/.test(revokeImpact), "the revoke's impact: " + revokeImpact);
  const losing = await demo.getByRole("table", { name: "Callers who would lose access" }).textContent();
  expect(losing.includes("agent:support-bot"), "the callers who would lose access: " + losing);
  const recent = await demo.getByRole("table", { name: "Recent calls that would now be denied" }).textContent();
  expect(recent.includes("kb:page.read@1"), "the calls that would now be denied: " + recent);
  await shot("grants-revoke");
  await demo.getByRole("button", { name: "Confirm revoke" }).click();
  await page.getByRole("region", { name: /^Grant / }).filter({ hasText: "demo 1.0.0" }).filter({ hasText: "revoked" }).waitFor();
  await page.reload();
  await page.getByRole("region", { name: /^Grant / }).filter({ hasText: "demo 1.0.0" }).filter({ hasText: "revoked" }).waitFor();
  await shot("grants");
});

await step("sign out forgets the token", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/console\/login/);
  expect((await page.evaluate(() => sessionStorage.length)) === 0, "session storage is empty after sign out");
  await page.goto(`${base}/console/audit`);
  await page.waitForURL(/\/console\/login\?next=/);
});

await step("an administrator of another org sees their org", async () => {
  await page.goto(`${base}/console/login`);
  await page.getByLabel("Token").fill(env("ACME_TOKEN"));
  await page.keyboard.press("Enter");
  await page.waitForURL(`${base}/console/`);
  await page.locator("#who").filter({ hasText: "user:bob" }).waitFor();
  const who = await page.locator("#who").textContent();
  expect(who.includes("user:bob") && who.includes("org acme") && !who.includes("default"), "header: " + who);
  await page.getByRole("heading", { name: "Calls in the last 24h: 0" }).waitFor(); // another org's calls are not theirs
  await page.getByRole("button", { name: "Sign out" }).click();
});

// A member whom the grant lets decide held calls, but no org administrator: the queue shows
// only the calls they may decide; the administrators' views answer with a sentence, never a
// raw denial.
await step("an approver who is a member sees the queue they may decide, and a sentence elsewhere", async () => {
  await page.goto(`${base}/console/login`);
  await page.getByLabel("Token").fill(env("APPROVER_TOKEN"));
  await page.keyboard.press("Enter");
  await page.waitForURL(`${base}/console/approvals`); // the first view they may use
  await page.locator("#who").filter({ hasText: "user:carol" }).waitFor();
  const links = await page.getByRole("navigation", { name: "Console" }).getByRole("link").allTextContents();
  expect(JSON.stringify(links) === JSON.stringify(["Approvals", "Audit", "Catalog", "Connections"]), "the approver's navigation: " + links);
  await page.getByRole("heading", { name: "Held calls" }).waitFor();
  const queue = await page.locator("main").textContent();
  expect(queue.includes("The calls you may decide") && !queue.includes("DENIED") && !queue.includes("HUMAN_BASELINE"), "the approver's queue: " + queue);
  await shot("approver");
  if (connectServer) {
    // A member connects their own account; the org's table is an admin's.
    await nav("Connections").click();
    const row = serverRow();
    await row.getByRole("button", { name: `Connect ${connectServer}`, exact: true }).waitFor();
    expect((await row.textContent()).includes("not connected"), "the member's server: " + (await row.textContent()));
    expect((await page.getByRole("heading", { name: "Every connection of the org" }).count()) === 0, "a member sees the org's connections table");
  }
  for (const path of ["/console/grants", "/console/providers", "/console/biomes"]) {
    await page.goto(base + path);
    const note = await page.getByRole("note").textContent();
    expect(/may not/.test(note), `${path}: the sentence: ` + note);
    const text = await page.locator("main").textContent();
    expect(!text.includes("DENIED") && !text.includes("MISSING_GRANT") && !text.includes("HUMAN_BASELINE"), `${path}: a raw denial: ` + text);
  }
  await page.getByRole("button", { name: "Sign out" }).click();
});

await step("an agent's token sees only the views it may use, and a sentence elsewhere", async () => {
  await page.goto(`${base}/console/login`);
  await page.getByLabel("Token").fill(env("AGENT_TOKEN"));
  await page.keyboard.press("Enter");
  await page.waitForURL(`${base}/console/audit`); // the first view it may use
  const nav = await page.getByRole("navigation", { name: "Console" }).getByRole("link").allTextContents();
  expect(JSON.stringify(nav) === JSON.stringify(["Audit", "Catalog"]), "the agent's navigation: " + nav);
  await page.goto(`${base}/console/approvals`);
  const note = await page.getByRole("note").textContent();
  expect(note.includes("may not see the calls held for approval"), "the sentence: " + note);
  const text = await page.locator("main").textContent();
  expect(!text.includes("DENIED") && !text.includes("MISSING_GRANT"), "a raw denial: " + text);
  await shot("agent-not-allowed");
  await page.getByRole("button", { name: "Sign out" }).click();
});

await step("no request left the gateway and no page error", async () => {
  expect(foreign.length === 0, "foreign requests: " + foreign.join(", "));
  expect(pageErrors.length === 0, "page errors: " + pageErrors.join("; "));
});

await finish();
