// Browser end-to-end test of the console's production sign-in: the authorization code flow
// with PKCE against a real hydra, in headless Chromium driven by playwright-core.
// test/e2e/console_oidc_test.go starts hydra with a login and consent app that accepts one
// person, the gateway with --issuer and --console-client-id, and runs this script with:
//   XEMA_URL     the gateway
//   ISSUER       hydra's issuer (the button's name), ISSUER_URL its public URL
//   LOGIN_URL    the login and consent app
//   PERSON       the subject the login app signs in
//   HELD         approval id of a held call of the person's org
//   SCREENSHOTS  directory for the screenshots of docs/console.md
//   CHROMIUM     the browser (default /usr/bin/chromium)
// It prints one "ok - NAME" line per step and closes with "N passed, N failed".
import { join } from "node:path";
import { env, expect, openBrowser } from "./harness.mjs";

const base = env("XEMA_URL");
const issuer = env("ISSUER");
const issuerOrigin = new URL(env("ISSUER_URL")).origin;
const loginOrigin = new URL(env("LOGIN_URL")).origin;
const person = env("PERSON");
const held = env("HELD");

const { page, shots, step, finish } = await openBrowser("xema-console-oidc", "failed-oidc-");

// Every request: the console's own go to the gateway; hydra and the login app are reached
// only by top-level navigation (the redirects of the flow), never by script.
const requests = [];
page.on("request", (req) => requests.push({ url: req.url(), type: req.resourceType(), nav: req.isNavigationRequest() }));
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));

const signInButton = () => page.getByRole("button", { name: `Sign in with ${issuer}`, exact: true });
let token = "";

await step("a deep link before sign-in offers the issuer's sign-in", async () => {
  const res = await page.goto(`${base}/console/approvals`);
  await page.waitForURL(/\/console\/login\?next=%2Fconsole%2Fapprovals$/);
  await signInButton().waitFor();
  const csp = res.headers()["content-security-policy"];
  expect(csp.includes("connect-src 'self';") && csp.includes("form-action 'self';"), "the CSP is still the strict one: " + csp);
  await page.screenshot({ path: join(shots, "login-oidc.png"), fullPage: true });
});

await step("sign in through hydra lands on the deep link as the person", async () => {
  await signInButton().click();
  await page.waitForURL(`${base}/console/approvals`);
  await page.getByRole("heading", { name: /^Pending/ }).waitFor();
  expect(new URL(page.url()).search === "", "no code or state left in the URL: " + page.url());
  token = await page.evaluate(() => sessionStorage.getItem("xema.console.token"));
  expect(token && token.split(".").length === 3, "the access token (a JWT) is in sessionStorage");
  expect((await page.evaluate(() => localStorage.length)) === 0, "nothing in localStorage");
  expect((await page.evaluate(() => sessionStorage.getItem("xema.console.signin"))) === null, "the verifier and state are gone");
  expect((await page.evaluate(() => document.cookie)) === "", "no cookie on the gateway");
  const who = await page.locator("#who").textContent();
  expect(who.includes(person), `signed in as ${person}: ${who}`);
  // Went through hydra and the login and consent app, and came back to the callback.
  const navs = requests.filter((r) => r.nav).map((r) => new URL(r.url));
  const authorize = navs.find((u) => u.origin === issuerOrigin && u.pathname === "/oauth2/auth" && u.searchParams.get("login_verifier") === null);
  expect(authorize, "the browser went to hydra's authorization endpoint");
  const q = authorize.searchParams;
  expect(q.get("response_type") === "code" && q.get("code_challenge_method") === "S256" && /^[A-Za-z0-9_-]{43}$/.test(q.get("code_challenge")) &&
    q.get("redirect_uri") === `${base}/console/callback` && q.get("scope").split(" ").includes("openid") && q.get("audience") === "xema" && q.get("state"),
    "the authorization request: " + authorize);
  expect(navs.some((u) => u.origin === loginOrigin && u.pathname === "/login") && navs.some((u) => u.origin === loginOrigin && u.pathname === "/consent"),
    "the login and consent app was asked");
  expect(navs.some((u) => u.href.startsWith(`${base}/console/callback?`) && u.searchParams.get("code")), "hydra sent the code to /console/callback");
});

await step("the org's held call shows, through the API with the person's token", async () => {
  const card = page.getByRole("region", { name: `Held call ${held}` });
  await card.waitFor();
  expect((await card.textContent()).includes("agent:support-bot"), "the held call names its requester");
  await card.getByRole("button", { name: "Approve" }).waitFor();
  await page.screenshot({ path: join(shots, "approvals-oidc.png"), fullPage: true });
});

await step("a reload keeps the deep link and the sign-in", async () => {
  await page.reload();
  await page.getByRole("region", { name: `Held call ${held}` }).waitFor();
  expect(page.url() === `${base}/console/approvals`, "still on the deep link: " + page.url());
});

await step("a callback the tab did not start is refused", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(/\/console\/login/);
  await page.goto(`${base}/console/callback?code=forged&state=forged`);
  const alert = page.getByRole("alert");
  await alert.waitFor();
  expect((await alert.textContent()).includes("does not belong"), "refused: " + (await alert.textContent()));
  expect(new URL(page.url()).search === "", "the forged code is out of the URL: " + page.url());
  expect((await page.evaluate(() => sessionStorage.getItem("xema.console.token"))) === null, "not signed in");
});

await step("no script request left the gateway, no URL carried the token, no page error", async () => {
  const bad = requests.filter((r) => {
    const o = new URL(r.url).origin;
    return (o !== new URL(base).origin && !r.nav) || (token && r.url.includes(token)) || ![new URL(base).origin, issuerOrigin, loginOrigin].includes(o);
  });
  expect(bad.length === 0, "unexpected requests: " + bad.map((r) => `${r.type} ${r.url.slice(0, 100)}`).join(", "));
  expect(pageErrors.length === 0, "page errors: " + pageErrors.join("; "));
});

await finish();
