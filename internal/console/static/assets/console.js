// The Xema console: one page, one script, no dependencies. Every view is rendered from the
// public /v1 API called with the signed-in person's bearer token, which lives in
// sessionStorage only (never a URL, a cookie or a log). Text from the API is always set as
// text (textContent), never parsed as HTML.
"use strict";

const TOKEN_KEY = "xema.console.token";
// The PKCE verifier, state and deep link of a sign-in under way (sessionStorage, this tab).
const SIGNIN_KEY = "xema.console.signin";
const main = () => document.getElementById("main");

// ---- DOM helpers -------------------------------------------------------------------------

// h builds an element: attrs are set as attributes (on* as listeners), children are nodes
// or strings (text).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

let fieldSeq = 0;
// field is a labelled input (or select/textarea given as control).
function field(label, control) {
  const id = control.id || "f" + ++fieldSeq;
  control.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), control);
}

function pre(v) {
  return h("pre", {}, typeof v === "string" ? v : JSON.stringify(v, null, 2));
}

function link(href, text) {
  return h("a", { href }, text);
}

function say(msg) {
  const s = document.getElementById("status");
  s.textContent = msg;
  clearTimeout(say.t);
  say.t = setTimeout(() => (s.textContent = ""), 6000);
}

function show(title, ...content) {
  const m = main();
  m.replaceChildren(h("h1", {}, title), ...content.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  document.title = title + " · Xema console";
  m.focus();
}

function errorBox(err) {
  const text = err && err.code ? `${err.code}: ${err.message}` : String(err && err.message ? err.message : err);
  return h("div", { class: "error", role: "alert" }, text);
}

// ---- times and refs ---------------------------------------------------------------------

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const exactFormat = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });

// ago is how long before (or after) now d is, in words.
function ago(d) {
  const s = (d.getTime() - Date.now()) / 1000;
  const a = Math.abs(s);
  if (a < 45) return relative.format(Math.round(s), "second");
  if (a < 45 * 60) return relative.format(Math.round(s / 60), "minute");
  if (a < 22 * 3600) return relative.format(Math.round(s / 3600), "hour");
  if (a < 7 * 86400) return relative.format(Math.round(s / 86400), "day");
  return new Intl.DateTimeFormat(undefined, { dateStyle: "medium" }).format(d);
}

// when is a time as the viewer reads it: relative, the exact time in their zone on hover
// (and for assistive technology, as the element's title).
function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return h("time", { datetime: d.toISOString(), title: exactFormat.format(d) }, ago(d));
}

// plural is a count with its noun, singular for one: "1 call", "3 calls".
function plural(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

// exactly is a time as a date and clock time in the viewer's zone (a window's bounds, which
// relative words would make vague: "from yesterday to in 9 minutes").
function exactly(iso) {
  const d = new Date(iso);
  return isNaN(d) ? iso || "" : h("time", { datetime: d.toISOString() }, exactFormat.format(d));
}

// age is a duration in words, e.g. "2 h 5 min".
function age(ms) {
  const m = Math.max(0, Math.round(ms / 60000));
  if (m < 1) return "less than a minute";
  if (m < 60) return `${m} min`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

// capHref is a capability's page.
function capHref(ref) {
  return "/console/capabilities/" + encodeURIComponent(ref);
}

// refLink is a capability ref, a link to its page for whoever may read capability pages.
function refLink(ref) {
  if (!ref) return "";
  const c = h("code", {}, ref);
  return mayOp(viewer, "catalog:capability.get@1") ? h("a", { href: capHref(ref) }, c) : c;
}

// ---- API --------------------------------------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || "HTTP_" + status;
    this.body = body;
  }
}

// api calls the gateway with the person's token. A 401 (expired or revoked token) forgets
// the token and goes to the login page, unless quiet (the login page's own check). Cookies
// are neither sent nor kept, but for keepCookie: starting a connection sets the one cookie
// (scoped to the callback's path) that lets this browser finish it.
async function api(method, path, body, quiet, keepCookie) {
  const headers = { Authorization: "Bearer " + token() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: keepCookie ? "same-origin" : "omit" });
  let data = null;
  try { data = await res.json(); } catch (_) { /* no JSON body */ }
  if (res.status === 401 && !quiet) {
    sessionStorage.removeItem(TOKEN_KEY);
    go("/console/login?next=" + encodeURIComponent(location.pathname + location.search), true);
    throw new APIError(401, data);
  }
  if (!res.ok && res.status !== 202) throw new APIError(res.status, data);
  return data;
}

// ---- who is signed in, and what they may see ------------------------------------------

// me is GET /v1/me for the token in use: the caller as the gateway verified it (never the
// token's claims read here: their names depend on the issuer's claim mapping) and the
// gateway's own operations the policy lets it invoke.
let meCache = null;
function me() {
  const t = token();
  if (!meCache || meCache.token !== t) {
    meCache = { token: t, p: api("GET", "/v1/me") };
    meCache.p.catch(() => { meCache = null; });
  }
  return meCache.p;
}

// VIEWS are the console's views in navigation order: a view needing operations is shown
// only to callers who may invoke one of them; the others see a sentence instead.
const VIEWS = [
  { href: "/console/", name: "Overview", needs: ["audit:stats.get@1"], what: "the overview of the org's calls" },
  { href: "/console/biomes", name: "Biomes", needs: ["store:biome.list@1"], what: "the org's biomes and their grants" },
  { href: "/console/grants", name: "Grants", needs: ["biome:grant.list@1"], what: "the org's grants" },
  { href: "/console/approvals", name: "Approvals", needs: ["approval:list@1"], what: "the calls held for approval" },
  { href: "/console/audit", name: "Audit", needs: [], what: "the audit log" },
  { href: "/console/catalog", name: "Catalog", needs: [], what: "the catalog" },
  { href: "/console/providers", name: "Providers", needs: ["binding:list@1", "credential:list@1", "mcp-server:list@1"], what: "the org's providers, credentials and MCP servers" },
  { href: "/console/connections", name: "Connections", needs: ["connection:list@1"], what: "the connections to OAuth-protected MCP servers, which are people's and their org's" },
];

const V = Object.fromEntries(VIEWS.map((v) => [v.name, v]));

function may(who, view) {
  return view.needs.length === 0 || view.needs.some((r) => (who.operations || []).includes(r));
}

function isAdmin(who) {
  return who.orgRole === "org_admin" || who.orgRole === "org_owner";
}

function mayOp(who, ref) {
  return (who.operations || []).includes(ref);
}

// notForYou is what a person sees on a view their token may not use: a sentence, and the
// views they can use.
function notForYou(who, view) {
  const usable = VIEWS.filter((v) => may(who, v));
  show(view.name,
    h("p", { class: "notice", role: "note" },
      `Your token (${who.subject.ref}, environment ${who.environment}, org ${who.org}) may not see ${view.what}: `,
      "the policy gives it to the org's administrators. Ask one for access, or sign in with a token that has it."),
    usable.length ? h("p", {}, "You can use: ", usable.map((v, i) => [i ? ", " : "", link(v.href, v.name)]), ".") : null);
}

// ---- routing ----------------------------------------------------------------------------

const routes = [
  [/^\/console\/login$/, viewLogin],
  [/^\/console\/callback$/, viewCallback],
  [/^\/console$/, viewOverview, V.Overview],
  [/^\/console\/biomes$/, viewBiomes, V.Biomes],
  [/^\/console\/biomes\/([^/]+)\/([^/]+)$/, viewBiome, V.Biomes],
  [/^\/console\/approvals$/, viewApprovals, V.Approvals],
  [/^\/console\/approvals\/([^/]+)$/, viewApproval, V.Approvals],
  [/^\/console\/audit$/, viewAudit, V.Audit],
  [/^\/console\/audit\/([^/]+)$/, viewAuditRecord, V.Audit],
  [/^\/console\/catalog$/, viewCatalog, V.Catalog],
  [/^\/console\/capabilities\/([^/]+)$/, viewCapability, { name: "Capability", needs: ["catalog:capability.get@1"], what: "a capability's page with the grants that cover it" }],
  [/^\/console\/providers$/, viewProviders, V.Providers],
  [/^\/console\/grants$/, viewGrants, V.Grants],
  [/^\/console\/connections$/, viewConnections, V.Connections],
];

// hashView is the view a fragment names, e.g. /console/#connections (the link a
// CONNECTION_REQUIRED denial suggests), or null: such links are kept as /console/<name>.
function hashView() {
  const name = location.hash.replace(/^#/, "");
  if (!/^[a-z]+$/.test(name)) return null;
  const v = VIEWS.find((x) => x.href === "/console/" + name);
  return v ? v.href : null;
}

function go(url, replace) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  render();
}

// viewer is who the current view renders for (set by header).
let viewer = { operations: [] };

// header shows who is signed in and the views they may use.
function header(who) {
  viewer = who;
  const nav = document.getElementById("nav");
  const path = location.pathname.replace(/\/+$/, "") || "/console";
  nav.replaceChildren(...VIEWS.filter((v) => may(who, v)).map((v) => {
    const here = v.href === "/console/" ? path === "/console" : path.startsWith(v.href);
    return h("a", { href: v.href, "aria-current": here ? "page" : null }, v.name);
  }));
  if (may(who, V.Approvals)) pendingBadge(nav);
  nav.hidden = false;
  document.getElementById("signout").hidden = false;
  const acting = who.delegation ? ` for ${who.delegation.person.ref}` : "";
  document.getElementById("who").textContent = `${who.subject.ref}${acting} · org ${who.org}${who.orgRole ? " · " + who.orgRole : ""} · ${who.environment}`;
}

// pendingBadge shows beside Approvals how many held calls wait for the viewer's decision (an
// administrator: in the org's queue). It is a hint: when it cannot be read, none is shown.
async function pendingBadge(nav) {
  let page;
  try {
    page = await api("GET", "/v1/approvals?status=pending&limit=100");
  } catch {
    return;
  }
  const n = (page.approvals || []).length;
  const link = [...nav.querySelectorAll("a")].find((a) => a.getAttribute("href") === V.Approvals.href);
  if (!n || !link) return;
  const count = page.nextCursor ? `${n}+` : String(n);
  link.after(h("a", { href: V.Approvals.href, class: "badge", id: "pending-count", "aria-label": `${count} held ${n === 1 && !page.nextCursor ? "call waits" : "calls wait"} for a decision` }, count));
}

async function render() {
  const named = hashView();
  if (named) history.replaceState(null, "", named);
  const path = location.pathname.replace(/\/+$/, "");
  const signedIn = !!token();
  if (!signedIn) {
    document.getElementById("nav").hidden = true;
    document.getElementById("signout").hidden = true;
    document.getElementById("who").textContent = "";
    if (path !== "/console/login" && path !== "/console/callback") {
      return go("/console/login?next=" + encodeURIComponent(location.pathname + location.search), true);
    }
  }
  for (const [re, fn, view] of routes) {
    const m = path.match(re);
    if (m) {
      try {
        if (view) {
          const who = await me();
          header(who);
          if (!may(who, view)) {
            // The console's home is the first view this caller may use.
            if (view === V.Overview) return go(VIEWS.find((v) => may(who, v)).href, true);
            return notForYou(who, view);
          }
          await fn(...m.slice(1).map(decodeURIComponent));
        } else {
          await fn(...m.slice(1).map(decodeURIComponent));
        }
      } catch (err) {
        if (err.status === 401) return;
        if (err.status === 403 && view && meCache) return notForYou(await me(), view);
        show("Error", errorBox(err));
      }
      return;
    }
  }
  show("Not found", h("p", {}, "No such page. "), link("/console/", "Overview"));
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[href]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/console/")) return;
  e.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener("popstate", render);
window.addEventListener("hashchange", () => { if (hashView()) render(); });

// ---- login ------------------------------------------------------------------------------

// config is /console/config.json: how this gateway signs people in ({oidc: null} with the
// development issuer).
let configPromise = null;
function config() {
  if (!configPromise) {
    configPromise = fetch("/console/config.json", { cache: "no-store", credentials: "omit" })
      .then((r) => (r.ok ? r.json() : { oidc: null }))
      .catch(() => ({ oidc: null }));
  }
  return configPromise;
}

// safeNext is a deep link inside the console to go to after signing in.
function safeNext(next) {
  return next && next.startsWith("/console/") && !next.startsWith("/console/login") && !next.startsWith("/console/callback") ? next : "/console/";
}

function b64url(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString(n) {
  return b64url(crypto.getRandomValues(new Uint8Array(n)));
}

function redirectURI(oidc) {
  return oidc.redirectUri || location.origin + "/console/callback";
}

// signInWithIssuer starts the authorization code flow with PKCE (RFC 7636, S256): the verifier
// and the state stay in this tab's sessionStorage, the browser goes to the issuer.
async function signInWithIssuer(oidc, next) {
  const verifier = randomString(32); // 43 characters
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const state = randomString(16);
  sessionStorage.setItem(SIGNIN_KEY, JSON.stringify({ verifier, state, next: safeNext(next) }));
  const q = new URLSearchParams({
    response_type: "code", client_id: oidc.clientId, redirect_uri: redirectURI(oidc), scope: oidc.scope,
    state, code_challenge: challenge, code_challenge_method: "S256",
  });
  if (oidc.audience) q.set("audience", oidc.audience);
  const u = new URL(oidc.authorizationEndpoint);
  for (const [k, v] of q) u.searchParams.set(k, v);
  location.assign(u.toString());
}

// viewCallback is where the issuer sends the browser back: check the state, take the code
// out of the address bar, exchange it (with the verifier) through the gateway, keep the
// access token in sessionStorage and go to the page that was asked for.
async function viewCallback() {
  const q = new URLSearchParams(location.search);
  history.replaceState(null, "", "/console/callback"); // no code or state left in the URL or history
  const saved = (() => { try { return JSON.parse(sessionStorage.getItem(SIGNIN_KEY)); } catch (_) { return null; } })();
  sessionStorage.removeItem(SIGNIN_KEY); // one use
  const fail = (msg) => show("Sign in", h("div", { class: "error", role: "alert" }, msg), h("p", {}, link("/console/login", "Sign in again")));
  if (q.get("error")) return fail(`The issuer refused the sign-in: ${q.get("error")}${q.get("error_description") ? " (" + q.get("error_description") + ")" : ""}`);
  if (!saved || !saved.state || q.get("state") !== saved.state || !q.get("code")) {
    return fail("This sign-in answer does not belong to a sign-in started in this tab.");
  }
  const { oidc } = await config();
  if (!oidc) return fail("This gateway has no issuer to sign in with.");
  show("Signing in…", h("p", { class: "muted" }, "Exchanging the authorization code."));
  const res = await fetch("/console/token", {
    method: "POST", headers: { "Content-Type": "application/json" }, cache: "no-store", credentials: "omit",
    body: JSON.stringify({ code: q.get("code"), codeVerifier: saved.verifier, redirectUri: redirectURI(oidc) }),
  });
  let data = null;
  try { data = await res.json(); } catch (_) { /* no JSON body */ }
  if (!res.ok || !data || !data.accessToken) return fail((data && data.message) || `The exchange failed: HTTP ${res.status}`);
  sessionStorage.setItem(TOKEN_KEY, data.accessToken);
  go(saved.next, true);
}

async function viewLogin() {
  const next = new URLSearchParams(location.search).get("next") || "";
  const { oidc } = await config();
  if (oidc) {
    const button = h("button", { type: "button", class: "primary", onclick: () => signInWithIssuer(oidc, next).catch((x) => say(String(x))) },
      "Sign in with " + oidc.issuer);
    show("Sign in", h("p", {}, button),
      h("p", { class: "muted" }, "You sign in at your organisation's issuer; the console keeps the access token in this tab's session storage and sends it only to this gateway."),
      h("details", {}, h("summary", {}, "Paste a token instead"), tokenForm(next)));
    button.focus();
    return;
  }
  show("Sign in", tokenForm(next));
  main().querySelector("input").focus();
}

// tokenForm signs in with a pasted token (the development issuer's, or one the issuer minted
// for the gateway's audience).
function tokenForm(next) {
  const input = h("input", { type: "password", name: "token", autocomplete: "off", spellcheck: "false", required: true });
  const err = h("div", {});
  const form = h("form", {
    onsubmit: async (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      try {
        await api("GET", "/v1/me", undefined, true); // whoever the token names may ask who they are
      } catch (x) {
        sessionStorage.removeItem(TOKEN_KEY);
        err.replaceChildren(errorBox(x.status === 401 ? { message: "The gateway did not accept this token." } : x));
        return;
      }
      go(safeNext(next), true);
    },
  },
  field("Token", input),
  h("p", { class: "muted" }, "With the development issuer: ", h("code", {}, "xema dev token --data-dir DIR --subject user:you --org-role org_admin --env project"),
    ". You may approve a held call when you hold its capability in your token's environment (the agents' own, project, in the demo); each held call says whether you may. The token stays in this tab's session storage and is sent only to this gateway."),
  h("button", { type: "submit", class: "primary" }, "Sign in"), err);
  return form;
}

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  meCache = null;
  go("/console/login");
});

// ---- biomes -----------------------------------------------------------------------------

function risk(tier) {
  return h("span", { class: "risk-" + tier }, tier || "?");
}

async function viewBiomes() {
  const [biomes, grants] = await Promise.all([api("GET", "/v1/biomes"), api("GET", "/v1/grants")]);
  const granted = new Set((grants.grants || []).map((g) => g.biomeId + "@" + g.version + "#" + g.digestHash));
  const rows = (biomes.biomes || []).map((b) => {
    const d = b.digest || {};
    const href = `/console/biomes/${encodeURIComponent(b.biomeId)}/${encodeURIComponent(b.version)}`;
    const isGranted = granted.has(b.biomeId + "@" + b.version + "#" + d.hash);
    if (b.builtIn) {
      // The gateway's own operations: no digest to review, nothing to grant.
      return h("tr", {},
        h("td", {}, link(href, b.biomeId + " " + b.version)),
        h("td", {}, h("span", { class: "muted" }, "per operation")),
        h("td", {}, "the gateway's own operations"),
        h("td", {}, ""),
        h("td", {}, h("span", { class: "tag" }, "built in"), " ", h("span", { class: "muted" }, "each operation's baseline decides who may call it")),
        h("td", {}, "this gateway"),
        h("td", {}, when(b.createdAt)));
    }
    return h("tr", {},
      h("td", {}, link(href, b.biomeId + " " + b.version)),
      h("td", {}, risk(d.riskTier)),
      h("td", {}, Object.keys(d.domains || {}).join(", ")),
      h("td", {}, diffSummary(d.diff)),
      h("td", {}, isGranted ? h("span", { class: "tag ok" }, "granted") : h("span", { class: "tag warn" }, "awaiting approval")),
      h("td", {}, b.operator ? "operator's store" : "this org"),
      h("td", {}, when(b.createdAt)));
  });
  show("Biomes",
    h("p", { class: "muted" }, "Submitted biome versions your org may install, newest first, with their permission digest."),
    rows.length ? h("table", { "aria-label": "Biome versions" }, h("thead", {}, h("tr", {}, ["Biome", "Risk", "Domains", "Change", "Grant", "From", "Submitted"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", {}, "No biome submitted yet."));
}

function diffSummary(diff) {
  if (!diff) return "";
  const parts = [];
  if (!diff.previousVersion) parts.push("first install");
  else parts.push("since " + diff.previousVersion);
  if ((diff.added || []).length) parts.push(diff.added.length + " added");
  if ((diff.removed || []).length) parts.push(diff.removed.length + " removed");
  if ((diff.changed || []).length) parts.push(diff.changed.length + " changed");
  return parts.join(", ");
}

async function viewBiome(id, version) {
  const [b, grants, prof] = await Promise.all([
    api("GET", `/v1/biomes/${encodeURIComponent(id)}/${encodeURIComponent(version)}`),
    api("GET", "/v1/grants?biomeId=" + encodeURIComponent(id)),
    api("GET", "/v1/profiles"),
  ]);
  if (b.builtIn) return viewBuiltinBiome(b);
  const d = b.digest || {};
  const profiles = prof.profiles || {};
  const entries = [];
  for (const [domain, list] of Object.entries(d.domains || {})) for (const e of list) entries.push({ domain, ...e });
  const access = Object.fromEntries((d.dataAccess || []).map((a) => [a.ref, a]));

  const digestTable = h("table", { "aria-label": "Required capabilities" },
    h("thead", {}, h("tr", {}, ["Domain", "Capability", "Risk", "Effect", "Reach", "Output", "Approval", "Why the biome needs it"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, entries.map((e) => {
      const a = access[e.ref] || {};
      return h("tr", {}, h("td", {}, e.domain), h("td", {}, refLink(e.ref)), h("td", {}, risk(e.riskTier)),
        h("td", {}, a.effectClass || ""), h("td", {}, a.reach || ""), h("td", {}, a.outputClassification || ""),
        h("td", {}, e.requiresApproval ? "always" : ""), h("td", {}, e.reason || ""));
    })));

  const diff = d.diff || {};
  const diffList = h("ul", { class: "diff" },
    !diff.previousVersion ? h("li", { class: "added" }, "First version installed for this org: every capability below is new.") : h("li", {}, "Compared with the installed version " + diff.previousVersion + ":"),
    (diff.added || []).map((r) => h("li", { class: "added" }, "Added: " + r + " (newly requested)")),
    (diff.removed || []).map((r) => h("li", { class: "removed" }, "Removed: " + r + " (no longer requested)")),
    (diff.changed || []).map((c) => h("li", { class: "changed" }, "Changed: " + c.ref + " — " + describeChange(c))),
    diff.previousVersion && !(diff.added || []).length && !(diff.removed || []).length && !(diff.changed || []).length ? h("li", {}, "No permission-relevant change.") : null);

  const mine = (grants.grants || []).filter((g) => g.version === version);
  const grantList = mine.length ? h("ul", { "aria-label": "Grants of this version" }, mine.map((g) => h("li", {}, `Grant ${g.grantId}: profile ${g.profile}, digest ${g.digestHash === d.hash ? "this one" : g.digestHash}, approved by ${g.approvedBy} `, when(g.approvedAt))))
    : h("p", {}, "Not granted: callers of your org cannot use this version yet.");

  show(`Biome ${id} ${version}`,
    h("dl", {}, h("dt", {}, "Digest"), h("dd", {}, h("code", {}, d.hash || "")), h("dt", {}, "Risk tier"), h("dd", {}, risk(d.riskTier)),
      h("dt", {}, "Submitted"), h("dd", {}, when(b.createdAt)), h("dt", {}, "From"), h("dd", {}, b.operator ? "the operator's store" : "this org")),
    h("h2", {}, "Change against the installed version"), diffList,
    h("h2", {}, "Permission digest"), digestTable,
    h("h2", {}, "Grants of this version"), grantList,
    h("h2", {}, "Approve a grant"), grantForm(b, entries, access, profiles));
}

// viewBuiltinBiome is the gateway's own biome: its operations are held by their baselines.
async function viewBuiltinBiome(b) {
  const refs = (viewer.operations || []);
  show(`Biome ${b.biomeId} ${b.version}`,
    h("p", { class: "notice", role: "note" }, "This is the gateway's built-in biome: its operations (submitting biomes, granting, approving, reading the audit log…) ",
      "are not granted by your org. Each one's baseline in the policy decides who may call it, usually the org's administrators. ",
      "Its version is a hash of the operations' descriptors: another build of the gateway may publish another."),
    h("dl", {}, h("dt", {}, "Published"), h("dd", {}, when(b.createdAt))),
    refs.length ? [h("h2", {}, "Operations you may use"), h("ul", { "aria-label": "Operations" }, refs.map((r) => h("li", {}, refLink(r))))] : null);
}

function describeChange(c) {
  const f = c.fields || c.changes || {};
  if (Array.isArray(f)) return f.join(", ");
  const parts = Object.entries(f).map(([k, v]) => (v && typeof v === "object" && "from" in v ? `${k} ${v.from} → ${v.to}` : k));
  return parts.length ? parts.join(", ") : JSON.stringify(c);
}

// grantForm: a profile, a per-capability customization, a preview of the effect, then the
// confirmation that POSTs the grant.
function grantForm(b, entries, access, profiles) {
  const d = b.digest || {};
  const names = Object.keys(profiles).sort();
  const profileSel = h("select", { name: "profile" }, h("option", { value: "" }, "the biome's default profile"), names.map((n) => h("option", { value: n }, n)));
  const custom = entries.map((e) => {
    const c = {
      ref: e.ref,
      envs: h("input", { name: "environments", placeholder: "profile default", "aria-label": `Environments of ${e.ref}` }),
      subjects: h("input", { name: "subjects", placeholder: "every subject of the org", "aria-label": `Subjects of ${e.ref}` }),
      resources: h("input", { name: "resources", placeholder: "any resource", "aria-label": `Resources of ${e.ref}` }),
      rate: h("input", { name: "rate", placeholder: "e.g. 60/1m", "aria-label": `Rate limit of ${e.ref}` }),
      quota: h("input", { name: "quota", placeholder: "e.g. 1000/24h", "aria-label": `Quota of ${e.ref}` }),
      approval: h("select", { name: "approval", "aria-label": `Approval of ${e.ref}` },
        h("option", { value: "" }, "profile default"), h("option", { value: "true" }, "required"), h("option", { value: "false" }, "not required")),
    };
    c.fieldset = h("fieldset", {}, h("legend", {}, e.ref),
      h("div", { class: "row" }, field("Environments", c.envs), field("Subjects", c.subjects), field("Resources", c.resources)),
      h("div", { class: "row" }, field("Rate limit", c.rate), field("Quota", c.quota), field("Approval", c.approval)));
    return c;
  });
  const preview = h("div", { id: "grant-preview", "aria-live": "polite" });
  const out = h("div", {});
  const list = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);
  const limit = (s, what) => {
    const m = s.trim().match(/^(\d+)\s*\/\s*(\S+)$/);
    if (!m) throw new Error(`${what}: want N/PER such as 60/1m`);
    return { requests: Number(m[1]), per: m[2] };
  };
  const body = () => {
    const req = { biomeId: b.biomeId, version: b.version, digestHash: d.hash };
    if (profileSel.value) req.profile = profileSel.value;
    const customize = {};
    for (const c of custom) {
      const o = {};
      if (c.envs.value.trim()) o.environments = list(c.envs.value);
      if (c.subjects.value.trim()) o.subjects = list(c.subjects.value);
      if (c.resources.value.trim()) o.resources = list(c.resources.value);
      if (c.rate.value.trim()) o.rateLimit = limit(c.rate.value, `Rate limit of ${c.ref}`);
      if (c.quota.value.trim()) o.quota = limit(c.quota.value, `Quota of ${c.ref}`);
      if (c.approval.value) o.requiresApproval = c.approval.value === "true";
      if (Object.keys(o).length) customize[c.ref] = o;
    }
    if (Object.keys(customize).length) req.customize = customize;
    return req;
  };
  const effect = (req) => {
    const p = profiles[req.profile || ""] || null;
    return h("table", { "aria-label": "Effect of the grant" },
      h("thead", {}, h("tr", {}, ["Capability", "Granted", "Environments", "Subjects", "Limits", "Waits for a person"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, entries.map((e) => {
        const c = (req.customize || {})[e.ref];
        const a = access[e.ref] || {};
        const admitted = c ? true : p ? p.effectClasses.includes(a.effectClass) && p.riskTiers.includes(e.riskTier) : null;
        const approval = c && c.requiresApproval !== undefined ? c.requiresApproval
          : e.requiresApproval || (p ? p.approval.effectClasses.includes(a.effectClass) || p.approval.riskTiers.includes(e.riskTier) : null);
        const lim = (c && c.rateLimit ? `${c.rateLimit.requests}/${c.rateLimit.per}` : p ? `${p.rateLimit.requests}/${p.rateLimit.per}` : "profile's")
          + (c && c.quota ? `, quota ${c.quota.requests}/${c.quota.per}` : p ? `, quota ${p.quota.requests}/${p.quota.per}` : "");
        return h("tr", {},
          h("td", {}, h("code", {}, e.ref)),
          h("td", {}, admitted === null ? "as the biome's default profile decides" : admitted ? h("span", { class: "tag ok" }, "yes") : h("span", { class: "tag bad" }, "no (outside the profile)")),
          h("td", {}, c && c.environments ? c.environments.join(", ") : p ? "kinds " + p.environmentKinds.join(", ") : "profile's"),
          h("td", {}, c && c.subjects ? c.subjects.join(", ") : "every subject of the org"),
          h("td", {}, lim),
          h("td", {}, approval === null ? "profile's rule" : approval ? h("span", { class: "tag warn" }, "yes") : "no"));
      })));
  };
  const confirm = h("button", { type: "button", class: "primary", hidden: true, onclick: async () => {
    out.replaceChildren();
    try {
      const g = await api("POST", "/v1/grants", body());
      // The page is drawn again from the API, so its grants list the one just recorded.
      await viewBiome(b.biomeId, b.version);
      main().prepend(h("p", { class: "tag ok", role: "status" }, `Grant ${g.grantId} recorded: ${g.biomeId} ${g.version}, profile ${g.profile}, approved by ${g.approvedBy}.`));
      say(`Grant ${g.grantId} approved`);
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  } }, "Approve grant");
  // impact is the dry run's answer: what the grant would change over the org's recorded calls.
  const impact = (dry) => {
    const i = dry.impact || {};
    return h("p", { id: "grant-impact", role: "status" },
      `Replayed over this org's calls since ${i.since}: ${i.considered} considered; `, ...impactCounts(i));
  };
  const review = h("button", { type: "button", onclick: async () => {
    out.replaceChildren();
    confirm.hidden = true;
    try {
      const req = body();
      const dry = await api("POST", "/v1/grants?dryRun=true", req);
      preview.replaceChildren(h("h3", {}, "Effect before you confirm"), effect(req), impact(dry),
        h("details", {}, h("summary", {}, "Request body"), pre(req)));
      confirm.hidden = false;
    } catch (err) {
      preview.replaceChildren(errorBox(err));
    }
  } }, "Review grant");
  return h("form", { onsubmit: (e) => e.preventDefault(), "aria-label": "Approve a grant" },
    field("Profile", profileSel),
    h("p", { class: "muted" }, "Customize a capability only where the profile is not what you want; empty fields keep the profile's default."),
    custom.map((c) => c.fieldset),
    h("div", { class: "row" }, review, confirm), preview, out);
}

// ---- held calls -------------------------------------------------------------------------

// approvalCard is one held call: what was asked, by whom, under which policy, until when;
// whether the viewer may decide it (and why not), the decision and the output once run.
function approvalCard(a, inv) {
  return h("section", { class: "card", "aria-label": `Held call ${a.approvalId}` },
    h("dl", {},
      h("dt", {}, "Capability"), h("dd", {}, refLink(a.ref)),
      h("dt", {}, "Requester"), h("dd", {}, a.requester),
      h("dt", {}, "Environment"), h("dd", {}, a.environment),
      a.biomeVersion ? [h("dt", {}, "Biome version"), h("dd", {}, `${a.biome || ""} ${a.biomeVersion}`)] : null,
      a.riskTier ? [h("dt", {}, "Risk"), h("dd", {}, risk(a.riskTier))] : null,
      a.sideEffects ? [h("dt", {}, "Side effects"), h("dd", { class: "side-effects" }, a.sideEffects)] : null,
      a.policyRevision ? [h("dt", {}, "Held under policy"), h("dd", {}, h("code", {}, a.policyRevision))] : null,
      h("dt", {}, "Approval id"), h("dd", {}, link("/console/approvals/" + encodeURIComponent(a.approvalId), a.approvalId)),
      h("dt", {}, "Audit record"), h("dd", {}, link("/console/audit/" + encodeURIComponent(a.auditId), a.auditId)),
      h("dt", {}, "Held since"), h("dd", {}, when(a.createdAt)),
      a.status === "pending" ? [h("dt", {}, "Expires"), h("dd", {}, when(a.expiresAt))] : [
        h("dt", {}, "Status"), h("dd", {}, h("span", { class: "tag " + (a.status === "done" ? "ok" : a.status === "rejected" || a.status === "failed" ? "bad" : "warn") }, a.status)),
        h("dt", {}, "Decided by"), h("dd", {}, a.decidedBy || ""),
        a.reason ? [h("dt", {}, "Reason"), h("dd", {}, a.reason)] : null,
        a.outcome ? [h("dt", {}, "Outcome"), h("dd", {}, a.outcome)] : null]),
    a.input ? [h("div", { class: "muted" }, "Input"), pre(a.input)] : null,
    inv && inv.output ? [h("div", { class: "muted" }, "Output"), pre(inv.output)] : null,
    a.status !== "pending" ? null
      : a.canDecide === false ? h("p", { class: "notice", role: "note" }, "You may not decide this call: ", (a.whyNot && a.whyNot.message) || "the policy does not make you its approver", ".")
        : decideButtons(a));
}

const APPROVAL_STATUSES = ["pending", "approved", "running", "done", "failed", "rejected", "expired", "withdrawn", "interrupted"];

async function viewApprovals() {
  const q = new URLSearchParams(location.search);
  const status = q.get("status") || "pending";
  const inputs = {
    status: h("select", { name: "status" }, h("option", { value: "any", selected: status === "any" }, "any"),
      APPROVAL_STATUSES.map((x) => h("option", { value: x, selected: status === x }, x))),
    ref: h("input", { name: "ref", value: q.get("ref") || "", placeholder: "ticket:comment.add@1" }),
    requester: h("input", { name: "requester", value: q.get("requester") || "", placeholder: "agent:support-bot" }),
  };
  const form = h("form", { role: "search", "aria-label": "Filter held calls", onsubmit: (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    if (inputs.status.value !== "pending") n.set("status", inputs.status.value);
    for (const k of ["ref", "requester"]) if (inputs[k].value.trim()) n.set(k, inputs[k].value.trim());
    go("/console/approvals" + (n.toString() ? "?" + n : ""));
  } }, h("div", { class: "row" }, field("Status", inputs.status), field("Ref", inputs.ref), field("Requester", inputs.requester),
    h("button", { type: "submit" }, "Filter")));
  const apiq = new URLSearchParams({ limit: "25" });
  if (status !== "any") apiq.set("status", status);
  for (const k of ["ref", "requester", "cursor"]) if (q.get(k)) apiq.set(k, q.get(k));
  const page = await api("GET", "/v1/approvals?" + apiq);
  const list = page.approvals || [];
  const outputs = await Promise.all(list.map((a) => (a.status === "done" ? api("GET", "/v1/invocations/" + encodeURIComponent(a.approvalId)).catch(() => null) : null)));
  const next = new URLSearchParams(q);
  next.set("cursor", page.nextCursor || "");
  const admin = viewer.orgRole === "org_admin" || viewer.orgRole === "org_owner";
  show("Held calls", form,
    admin ? null : h("p", { class: "muted" }, "The calls you may decide: an org administrator sees the whole queue."),
    h("h2", {}, status === "pending" ? `Pending (${list.length}${page.nextCursor ? "+" : ""})` : `Status ${status} (${list.length}${page.nextCursor ? "+" : ""})`),
    list.length ? list.map((a, i) => approvalCard(a, outputs[i])) : h("p", {}, status === "pending" ? (admin ? "No call is waiting for a decision." : "No call is waiting for your decision.") : "None."),
    h("div", { class: "row" },
      q.get("cursor") ? link("/console/approvals?" + new URLSearchParams([...q].filter(([k]) => k !== "cursor")), "First page") : null,
      page.nextCursor ? link("/console/approvals?" + next, "Next page") : null));
}

// viewApproval is one held call: the deep link a notification carries.
async function viewApproval(id) {
  const a = await api("GET", "/v1/approvals/" + encodeURIComponent(id));
  const inv = a.status === "done" ? await api("GET", "/v1/invocations/" + encodeURIComponent(id)).catch(() => null) : null;
  show(`Held call ${id}`, approvalCard(a, inv), h("p", {}, link("/console/approvals", "Every held call")));
}

function decideButtons(a) {
  const box = h("div", {});
  const approve = h("button", { type: "button", class: "primary", onclick: async () => {
    try {
      const v = await api("POST", `/v1/approvals/${encodeURIComponent(a.approvalId)}/approve`, {});
      say(`Approved ${v.approvalId}: ${v.status}${v.outcome ? " (" + v.outcome + ")" : ""}`);
      go("/console/approvals/" + encodeURIComponent(a.approvalId)); // its page shows the run's outcome
    } catch (err) {
      box.replaceChildren(errorBox(err));
    }
  } }, "Approve");
  const reject = h("button", { type: "button", class: "danger", onclick: () => {
    const reason = h("textarea", { name: "reason", required: true });
    const form = h("form", { onsubmit: async (e) => {
      e.preventDefault();
      try {
        const v = await api("POST", `/v1/approvals/${encodeURIComponent(a.approvalId)}/reject`, { reason: reason.value });
        say(`Rejected ${v.approvalId}`);
        go("/console/approvals/" + encodeURIComponent(a.approvalId));
      } catch (err) {
        form.append(errorBox(err));
      }
    } }, field("Reason", reason), h("button", { type: "submit", class: "danger" }, "Confirm reject"),
    h("button", { type: "button", onclick: () => box.replaceChildren(buttons) }, "Cancel"));
    box.replaceChildren(form);
    reason.focus();
  } }, "Reject");
  const buttons = h("div", { class: "row" }, approve, reject);
  box.append(buttons);
  return box;
}

// ---- audit ------------------------------------------------------------------------------

const DECISIONS = ["allowed", "denied", "pending-approval", "invalid-input", "unknown-capability", "error", "unauthenticated", "approved", "rejected", "expired"];

function toISO(local) {
  // datetime-local is the browser's local time; the API wants RFC 3339.
  return local ? new Date(local).toISOString() : "";
}
function toLocal(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return "";
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

async function viewAudit() {
  const q = new URLSearchParams(location.search);
  const inputs = {
    ref: h("input", { name: "ref", value: q.get("ref") || "", placeholder: "kb:page.read@1" }),
    subject: h("input", { name: "subject", value: q.get("subject") || "", placeholder: "agent:support-bot" }),
    decision: h("select", { name: "decision" }, h("option", { value: "" }, "any"), DECISIONS.map((d) => h("option", { value: d, selected: q.get("decision") === d }, d))),
    reason: h("input", { name: "reason", value: q.get("reason") || "", placeholder: "MISSING_GRANT" }),
    since: h("input", { name: "since", type: "datetime-local", value: toLocal(q.get("since")) }),
    until: h("input", { name: "until", type: "datetime-local", value: toLocal(q.get("until")) }),
    reads: h("input", { name: "reads", type: "checkbox", checked: q.get("reads") === "include" }),
  };
  const form = h("form", { role: "search", "aria-label": "Search the audit log", onsubmit: (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const k of ["ref", "subject", "decision", "reason"]) if (inputs[k].value.trim()) n.set(k, inputs[k].value.trim());
    for (const k of ["since", "until"]) if (inputs[k].value) n.set(k, toISO(inputs[k].value));
    if (inputs.reads.checked) n.set("reads", "include");
    go("/console/audit" + (n.toString() ? "?" + n : ""));
  } },
  h("div", { class: "row" }, field("Ref", inputs.ref), field("Subject", inputs.subject), field("Decision", inputs.decision), field("Reason code", inputs.reason)),
  h("div", { class: "row" }, field("Since", inputs.since), field("Until", inputs.until),
    h("div", { class: "check" }, inputs.reads, h("label", { for: inputs.reads.id = "f-reads" }, "Include people's reads through the console")),
    h("button", { type: "submit", class: "primary" }, "Search")));

  const apiq = new URLSearchParams();
  for (const k of ["ref", "subject", "decision", "reason", "since", "until", "cursor"]) if (q.get(k)) apiq.set(k, q.get(k));
  // By default what agents and workflows did, and every denial: people's own page loads
  // through the console are audited too, and shown when asked for.
  if (q.get("reads") !== "include") apiq.set("omit", "people-reads");
  apiq.set("limit", "50"); // about 25 calls: a call that ran has two records, shown as one row
  let results;
  try {
    const page = await api("GET", "/v1/audit?" + apiq);
    const rows = oneRowPerCall(page.records || []).map(({ call: r, outcome: o }) => h("tr", {},
      h("td", { class: "time" }, when(r.time)), h("td", {}, link("/console/audit/" + encodeURIComponent(r.auditId), r.auditId)),
      h("td", {}, h("span", { class: "tag " + decisionClass(r.decision) }, r.decision)),
      h("td", {}, o ? link("/console/audit/" + encodeURIComponent(o.auditId), o.outcome || "recorded") : r.outcome || ""),
      h("td", {}, r.subject.kind === "" ? h("code", {}, r.capability) : refLink(r.capability)), h("td", {}, r.subject.ref, r.onBehalfOf ? [" ", h("span", { class: "muted" }, `for ${r.onBehalfOf.person.ref}`)] : null), h("td", {}, r.environment),
      h("td", {}, (r.reasons || []).map((x) => x.code).join(", "))));
    const next = new URLSearchParams(q);
    next.set("cursor", page.nextCursor || "");
    results = [
      rows.length ? h("table", { "aria-label": "Audit records" }, h("thead", {}, h("tr", {}, ["Time", "Audit id", "Decision", "Outcome", "Capability", "Subject", "Environment", "Reasons"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
        : h("p", {}, "No record matches."),
      h("div", { class: "row" },
        q.get("cursor") ? link("/console/audit?" + new URLSearchParams([...q].filter(([k]) => k !== "cursor")), "First page") : null,
        page.nextCursor ? link("/console/audit?" + next, "Next page") : null),
    ];
  } catch (err) {
    if (err.status === 401) return;
    results = [errorBox(err)];
  }
  show("Audit", form, h("h2", {}, "Records, newest first"),
    h("p", { class: "muted", id: "audit-scope" }, q.get("reads") === "include" ? "Every record, people's reads through the console included."
      : "Agents', workflows' and services' calls, and every denial; people's reads through the console are left out (they are audited: tick the box to see them)."),
    results);
}

// oneRowPerCall pairs each call's decision record with its outcome record (id "<id>.outcome")
// when both are on the page: a call is one row, its outcome a link to the outcome record. An
// outcome whose decision is on another page stays a row of its own.
function oneRowPerCall(records) {
  const ids = new Set(records.map((r) => r.auditId));
  const callOf = (r) => (r.auditId.endsWith(".outcome") ? r.auditId.slice(0, -".outcome".length) : "");
  const outcomes = new Map(records.filter((r) => ids.has(callOf(r))).map((r) => [callOf(r), r]));
  return records.filter((r) => !ids.has(callOf(r))).map((r) => ({ call: r, outcome: outcomes.get(r.auditId) }));
}

function decisionClass(d) {
  return d === "allowed" || d === "approved" ? "ok" : d === "denied" || d === "rejected" || d === "error" ? "bad" : "warn";
}

async function viewAuditRecord(id) {
  const r = await api("GET", "/v1/audit/" + encodeURIComponent(id));
  const [why, children] = await Promise.all([
    r.decision === "denied" ? api("GET", `/v1/audit/${encodeURIComponent(id)}/why-denied`).catch(() => null) : null,
    api("GET", "/v1/audit?limit=100&parent=" + encodeURIComponent(id)).catch(() => ({ records: [] })),
  ]);
  const reasons = (why ? why.reasons : r.reasons) || [];
  // A denial's next steps are the gateway's own words (package explain): the same as the
  // call's answer, why-denied in the CLI and explain say.
  const next = why ? (why.next || []) : (r.suggestions || []).map(suggestionText);
  show(`Audit record ${id}`,
    h("dl", {},
      h("dt", {}, "Decision"), h("dd", {}, h("span", { class: "tag " + decisionClass(r.decision) }, r.decision)),
      h("dt", {}, "Capability"), h("dd", {}, refLink(r.capability)),
      h("dt", {}, "Subject"), h("dd", {}, `${r.subject.ref} (${r.subject.kind})`),
      r.onBehalfOf ? [h("dt", {}, "On behalf of"), h("dd", {}, `${r.onBehalfOf.person.ref} (${r.onBehalfOf.person.kind}), through ${(r.onBehalfOf.actors || []).join(" → ")}`)] : null,
      h("dt", {}, "Environment"), h("dd", {}, r.environment),
      h("dt", {}, "Time"), h("dd", {}, when(r.time)),
      h("dt", {}, "Outcome"), h("dd", {}, r.outcome || ""),
      r.runner ? [h("dt", {}, "Runner"), h("dd", {}, r.runner)] : null,
      h("dt", {}, "Policy revision"), h("dd", {}, r.policyRevision || ""),
      r.parentAuditId ? [h("dt", {}, "Follows"), h("dd", {}, link("/console/audit/" + encodeURIComponent(r.parentAuditId), r.parentAuditId))] : null),
    h("h2", {}, why ? "Why it was denied" : "Reasons"),
    reasons.length ? h("ul", { "aria-label": "Reasons" }, reasons.map((x) => h("li", {}, h("code", {}, x.code), " — ", x.detail || ""))) : h("p", {}, "No reason recorded."),
    h("h2", {}, "What to do next"),
    next.length ? h("ul", { "aria-label": "Suggestions" }, next.map((s) => h("li", {}, s))) : h("p", {}, "No suggestion."),
    h("h2", {}, "Linked records"),
    (children.records || []).length ? h("ul", {}, children.records.map((c) => h("li", {}, link("/console/audit/" + encodeURIComponent(c.auditId), c.auditId), ` — ${c.decision}${c.outcome ? ", " + c.outcome : ""} by ${c.subject.ref} `, when(c.time))))
      : h("p", {}, "None."));
}

function suggestionText(s) {
  if (typeof s === "string") return s;
  const words = s.message || s.detail || s.text || s.description;
  const kind = s.kind || s.action || s.code || "";
  const rest = Object.entries(s).filter(([k]) => !["message", "detail", "text", "description", "kind", "action", "code"].includes(k)).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`);
  return [kind, words, rest.join("; ")].filter(Boolean).join(" — ");
}

// ---- catalog ----------------------------------------------------------------------------

async function viewCatalog() {
  const q = new URLSearchParams(location.search);
  const query = h("input", { name: "q", type: "search", value: q.get("q") || "" });
  const form = h("form", { role: "search", "aria-label": "Search the catalog", onsubmit: (e) => {
    e.preventDefault();
    go("/console/catalog" + (query.value.trim() ? "?q=" + encodeURIComponent(query.value.trim()) : ""));
  } }, h("div", { class: "row" }, field("Search capabilities", query), h("button", { type: "submit" }, "Search")));
  const hits = [];
  let cursor;
  for (let i = 0; i < 10; i++) {
    const res = await api("POST", "/v1/capabilities/search", { query: q.get("q") || "", limit: 100, cursor });
    hits.push(...(res.capabilities || []));
    if (!res.nextCursor) break;
    cursor = res.nextCursor;
  }
  const rows = hits.map((c) => h("tr", {},
    h("td", {}, refLink(c.ref)), h("td", {}, c.title), h("td", {}, c.biome), h("td", {}, risk(c.riskTier)),
    h("td", {}, c.mutating ? "changes data" : "reads"),
    h("td", {}, c.deprecated ? h("span", { class: "tag warn" }, "deprecated") : "published"),
    h("td", {}, c.replacedBy ? refLink(c.replacedBy) : "")));
  const admin = mayOp(viewer, "store:biome.list@1") && mayOp(viewer, "biome:grant.list@1");
  show("Catalog", form,
    admin && !q.get("q") ? await orgCatalog() : null,
    admin ? h("h2", {}, "What your token may invoke") : null,
    h("p", { class: "muted" }, "The capabilities you may invoke in your token's environment."),
    rows.length ? h("table", { "aria-label": "Capabilities" }, h("thead", {}, h("tr", {}, ["Ref", "Title", "Biome", "Risk", "Effect", "Lifecycle", "Replaced by"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", {}, "No capability."));
}

// orgCatalog is, for an administrator, every capability of the biome versions the org has
// granted, each with whether their own token may call it now and, when not, why: the
// preflight's blockers (a grant's environment, a missing binding...).
async function orgCatalog() {
  const [{ grants }, { biomes }] = await Promise.all([api("GET", "/v1/grants"), api("GET", "/v1/biomes")]);
  const granted = new Set((grants || []).filter((g) => g.status === "active").map((g) => `${g.biomeId}@${g.version}`));
  const caps = (biomes || []).filter((b) => granted.has(`${b.biomeId}@${b.version}`)).flatMap((b) =>
    Object.values((b.digest && b.digest.domains) || {}).flat().map((c) => ({ ...c, biome: b.biomeId, version: b.version })));
  const checks = await Promise.all(caps.map((c) => api("POST", "/v1/capabilities/preflight", { ref: c.ref })
    .catch((err) => ({ ready: false, blockers: [{ code: err.code, detail: err.message }] }))));
  const rows = caps.map((c, i) => {
    const p = checks[i];
    const held = (p.requirements || []).some((r) => r.kind === "approval");
    return h("tr", {}, h("td", {}, refLink(c.ref)), h("td", {}, `${c.biome} ${c.version}`), h("td", {}, risk(c.riskTier)),
      h("td", { class: "callable" }, p.ready ? h("span", { class: "tag ok" }, held ? "yes, once approved" : "yes")
        : [h("span", { class: "tag bad" }, "no"), " ", (p.blockers || []).map((b) => b.detail || b.code).join("; ")]));
  });
  return [h("h2", {}, "Every capability of your org's biomes"),
    h("p", { class: "muted" }, "Whether your token, in its environment, may call each one now, and why not."),
    rows.length ? h("table", { "aria-label": "Every capability of the org's biomes" }, h("thead", {}, h("tr", {}, ["Ref", "Biome", "Risk", "You may call it"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", {}, "The org has granted no biome.")];
}

// ---- overview ---------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
// svg builds an SVG element (attributes only; colours come from the stylesheet's classes,
// never a style attribute, which the CSP refuses).
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// OUTCOMES are the overview's classes of a call, stacked in this order.
const OUTCOMES = [
  { key: "allowed", label: "allowed" },
  { key: "held", label: "held for approval" },
  { key: "denied", label: "denied" },
  { key: "failed", label: "failed (invalid input, unknown ref, a dependency down)" },
];

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (v <= 4) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// callsChart draws the series as stacked bars: one per bucket, one <title> each (its counts,
// for a pointer's hover), the whole an image named by its heading and summary.
function callsChart(stats) {
  const W = 960, H = 240, L = 44, R = 8, T = 10, B = 30;
  const series = stats.series || [];
  const n = series.length || 1;
  const total = (b) => OUTCOMES.reduce((t, o) => t + b[o.key], 0);
  const top = niceMax(Math.max(0, ...series.map(total)));
  const bw = (W - L - R) / n;
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const timeFmt = new Intl.DateTimeFormat(undefined, stats.bucketSeconds >= 3600 ? { weekday: "short", hour: "2-digit", minute: "2-digit" } : { hour: "2-digit", minute: "2-digit" });
  const grid = [0, top / 2, top].map((v) => [
    svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
    svg("text", { x: L - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" }, String(v)),
  ]);
  const ticks = [];
  const every = Math.max(1, Math.round(n / 6));
  for (let i = 0; i < n; i += every) {
    ticks.push(svg("text", { x: L + i * bw, y: H - 10, class: "axis" }, timeFmt.format(new Date(series[i].start))));
  }
  const bars = series.map((b, i) => {
    let acc = 0;
    const rects = OUTCOMES.filter((o) => b[o.key] > 0).map((o) => {
      const y0 = y(acc), y1 = y(acc + b[o.key]);
      acc += b[o.key];
      return svg("rect", { x: L + i * bw + 0.5, y: y1, width: Math.max(1, bw - 1), height: Math.max(0.5, y0 - y1), class: "c-" + o.key });
    });
    const words = OUTCOMES.map((o) => `${b[o.key]} ${o.key}`).join(", ");
    return svg("g", {}, svg("title", {}, `${exactFormat.format(new Date(b.start))}: ${words}`),
      svg("rect", { x: L + i * bw, y: T, width: bw, height: H - T - B, class: "hit" }), rects);
  });
  const t = stats.totals;
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-labelledby": "chart-title chart-desc", preserveAspectRatio: "none" },
    svg("title", { id: "chart-title" }, `Calls per ${age(stats.bucketSeconds * 1000)} over the last ${stats.window}`),
    svg("desc", { id: "chart-desc" }, `${plural(t.calls, "call")}: ${t.allowed} allowed, ${t.held} held, ${t.denied} denied, ${t.failed} failed.`),
    grid, ticks, bars);
}

// auditHref is the audit search a figure of the overview counts.
function auditHref(stats, params) {
  const q = new URLSearchParams({ ...params, since: stats.since, until: stats.until });
  return "/console/audit?" + q;
}

async function viewOverview() {
  const q = new URLSearchParams(location.search);
  const win = ["1h", "24h", "7d"].includes(q.get("window")) ? q.get("window") : "24h";
  const st = await api("GET", "/v1/stats?window=" + win);
  const t = st.totals;
  const windows = h("div", { class: "windows", role: "group", "aria-label": "Window" },
    ["1h", "24h", "7d"].map((w) => h("a", { href: "/console/?window=" + w, class: "window", "aria-current": w === win ? "true" : null }, "last " + w)));
  const legend = h("ul", { class: "legend", "aria-label": "Totals" }, OUTCOMES.map((o) =>
    h("li", {}, h("span", { class: "swatch c-" + o.key, "aria-hidden": "true" }), h("strong", {}, String(t[o.key])), " " + o.label)));
  const table = h("details", {}, h("summary", {}, "The chart's figures as a table"),
    h("table", { "aria-label": "Calls per bucket" },
      h("thead", {}, h("tr", {}, ["From", ...OUTCOMES.map((o) => o.key)].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, st.series.filter((b) => OUTCOMES.some((o) => b[o.key] > 0)).map((b) =>
        h("tr", {}, h("td", {}, when(b.start)), OUTCOMES.map((o) => h("td", {}, String(b[o.key]))))))));
  const reasons = st.topDenialReasons.length ? h("ol", { "aria-label": "Top denial reasons" }, st.topDenialReasons.map((r) =>
    h("li", {}, h("a", { href: auditHref(st, { decision: "denied", reason: r.code }) }, h("code", {}, r.code)), ` ${r.count} denied`)))
    : h("p", {}, "No denial in this window.");
  const refs = st.topRefs.length ? h("ol", { "aria-label": "Top refs" }, st.topRefs.map((r) =>
    h("li", {}, refLink(r.ref), " ", h("a", { href: auditHref(st, { ref: r.ref }), "aria-label": `${plural(r.count, "call")} of ${r.ref} in the audit log` }, plural(r.count, "call")))))
    : h("p", {}, "No call in this window.");
  const held = st.held.waiting
    ? h("p", {}, h("a", { href: "/console/approvals" }, h("strong", {}, String(st.held.waiting)), st.held.waiting === 1 ? " call waits" : " calls wait"),
      " for a decision; the oldest for ", h("strong", {}, age(Date.now() - new Date(st.held.oldestSince))), " (held ", when(st.held.oldestSince), ").")
    : h("p", {}, "No call waits for a decision.");
  const runners = st.runners.length ? h("table", { "aria-label": "Runners" },
    h("thead", {}, h("tr", {}, ["Runner", "Runs", "Errors", "Average latency", "Slowest"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, st.runners.map((r) => h("tr", {}, h("td", {}, r.runner), h("td", {}, String(r.runs)),
      h("td", {}, r.errors ? h("span", { class: "tag bad" }, `${r.errors} (${Math.round((100 * r.errors) / r.runs)} %)`) : "0"),
      h("td", {}, `${r.avgLatencyMs.toFixed(1)} ms`), h("td", {}, `${r.maxLatencyMs.toFixed(1)} ms`)))))
    : h("p", {}, "Nothing ran in this window.");
  const pol = st.policy;
  const policy = h("p", { id: "policy-revision" }, "Revision ", h("code", {}, pol.revision), pol.changedAt
    ? [" since ", when(pol.changedAt), " (it replaced ", h("code", {}, pol.previous), ")."]
    : pol.seen.length ? [" decided every call of this window (the first ", when(pol.seen[0].first), ")."] : ": no call was decided in this window.");
  show("Overview", windows,
    st.uncounted ? h("p", { class: "notice", role: "status" }, `${st.uncounted} recent audit records are not counted yet: the overview's rollups are catching up with the log.`) : null,
    h("section", { "aria-labelledby": "calls-h" }, h("h2", { id: "calls-h" }, `Calls in the last ${win}: ${t.calls}`),
      h("p", { class: "muted" }, "Counted from the audit log since ", exactly(st.since),
        "; people's reads through the console are left out, as in the audit view."),
      callsChart(st), legend, table),
    h("div", { class: "panels" },
      h("section", { class: "card", "aria-labelledby": "reasons-h" }, h("h2", { id: "reasons-h" }, "Top denial reasons"), reasons),
      h("section", { class: "card", "aria-labelledby": "refs-h" }, h("h2", { id: "refs-h" }, "Top refs"), refs),
      h("section", { class: "card", "aria-labelledby": "held-h" }, h("h2", { id: "held-h" }, "Held calls"), held),
      h("section", { class: "card", "aria-labelledby": "policy-h" }, h("h2", { id: "policy-h" }, "Policy"), policy)),
    h("section", { "aria-labelledby": "runners-h" }, h("h2", { id: "runners-h" }, "Providers by runner"), runners));
}

// ---- a capability -----------------------------------------------------------------------

function limitText(l) {
  return l && l.requests ? `${l.requests} / ${l.per}` : "none";
}

async function viewCapability(ref) {
  const c = await api("GET", "/v1/catalog/" + encodeURIComponent(ref));
  const m = c.manifest || {};
  const lifecycle = h("span", { class: "tag " + (c.lifecycle === "published" ? "ok" : c.lifecycle === "deprecated" ? "warn" : "bad") }, c.lifecycle);
  const biome = c.biome.builtIn ? ["built in (", h("code", {}, c.biome.id + " " + c.biome.version), ")"]
    : link(`/console/biomes/${encodeURIComponent(c.biome.id)}/${encodeURIComponent(c.biome.version)}`, `${c.biome.id} ${c.biome.version}`);
  const grants = c.grants.length ? h("table", { "aria-label": "Grants covering " + c.ref },
    h("thead", {}, h("tr", {}, ["Grant", "Biome version", "Profile", "Subjects", "Environments", "Resources", "Rate limit", "Quota", "Approval", "Approved"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, c.grants.map((g) => h("tr", {},
      h("td", {}, h("code", {}, g.grantId)), h("td", {}, g.biomeVersion), h("td", {}, g.profile),
      h("td", {}, g.subjects ? g.subjects.join(", ") : "every subject of the org"),
      h("td", {}, (g.environments || []).join(", ")),
      h("td", {}, g.resources ? g.resources.join(", ") : "any"),
      h("td", {}, limitText(g.rateLimit)), h("td", {}, limitText(g.quota)),
      h("td", {}, g.requiresApproval ? h("span", { class: "tag warn" }, "a person approves each call") : "no"),
      h("td", {}, g.approvedBy || "", " ", when(g.approvedAt))))))
    : h("p", {}, c.biome.builtIn ? "A built-in operation: no grant covers it; its baseline in the policy decides who may call it"
      + (m.humanBaseline ? ` (${m.humanBaseline.kind}${m.humanBaseline.environments ? ", in " + m.humanBaseline.environments.join(", ") : ""})` : "") + "."
      : "No grant of your org covers it: nobody of your org may call it.");
  const examples = (m.examples || []);
  show(c.ref,
    h("p", { class: "lead" }, m.title ? h("strong", {}, m.title + ". ") : null, m.summary || ""),
    h("dl", {},
      h("dt", {}, "Side effects"), h("dd", {}, m.sideEffects || ""),
      h("dt", {}, "Risk"), h("dd", {}, risk(m.riskTier)),
      h("dt", {}, "Effect"), h("dd", {}, m.effectClass || ""),
      h("dt", {}, "Reach"), h("dd", {}, m.reach || ""),
      h("dt", {}, "Output"), h("dd", {}, m.outputClassification || ""),
      h("dt", {}, "Safe for agents"), h("dd", {}, m.safeForAgents === false ? "no" : "yes"),
      h("dt", {}, "Approval"), h("dd", {}, m.requiresApproval ? "every call waits for a person" : "as the grant says"),
      h("dt", {}, "Lifecycle"), h("dd", {}, lifecycle, c.replacedBy ? [" — replaced by ", refLink(c.replacedBy)] : null),
      h("dt", {}, "Served by"), h("dd", {}, biome, ` (runner ${c.runnerKind})`)),
    h("h2", {}, "Who may call it"), grants,
    h("h2", {}, "Input schema"), pre(m.inputSchema || {}),
    h("h2", {}, "Output schema"), pre(m.outputSchema || {}),
    h("h2", {}, "Examples"), examples.length ? examples.map((e) => pre(e)) : h("p", {}, "None given."),
    h("p", {}, link(auditHref({ since: new Date(Date.now() - 7 * 86400000).toISOString(), until: new Date().toISOString() }, { ref: c.ref }), "Its calls of the last 7 days in the audit log")));
}

// ---- providers --------------------------------------------------------------------------

async function viewProviders() {
  const part = (ref, path) => (mayOp(viewer, ref) ? api("GET", path).catch((err) => ({ error: err })) : Promise.resolve(null));
  const [bs, cs, ms] = await Promise.all([part("binding:list@1", "/v1/bindings"), part("credential:list@1", "/v1/credentials"), part("mcp-server:list@1", "/v1/mcp-servers")]);
  const creds = (cs && cs.credentials) || [];
  const section = (title, res, render, adder) => [h("h2", {}, title),
    res === null ? h("p", { class: "muted" }, "Your token may not list these.") : res.error ? errorBox(res.error) : [render(res), adder]];
  const table = (label, cols, rows) => rows.length ? h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, cols.map((x) => h("th", { scope: "col" }, x)))), h("tbody", {}, rows)) : h("p", {}, "None.");
  // opener is a button that shows a form in box (once), or nothing when the token may not.
  const opener = (ref, label, form) => {
    if (!mayOp(viewer, ref)) return null;
    const box = h("div", {});
    return [h("button", { type: "button", onclick: () => box.replaceChildren(form(box)) }, label), box];
  };
  const rowBox = () => h("div", {});
  const bindingRow = (b) => {
    const box = rowBox();
    return [h("tr", {}, h("td", {}, h("code", {}, b.refPattern)), h("td", {}, b.provider), h("td", {}, h("code", {}, b.baseUrl)),
      h("td", {}, b.project || "any"), h("td", {}, b.environment || "any"), h("td", {}, h("code", {}, b.credentialId)),
      h("td", {}, b.createdBy || "", " ", when(b.createdAt)),
      h("td", { class: "row" },
        mayOp(viewer, "binding:create@1") ? h("button", { type: "button", "aria-label": `Change binding ${b.id}`, onclick: () => box.replaceChildren(bindingForm(creds, box, b)) }, "Change") : null,
        mayOp(viewer, "binding:delete@1") ? h("button", { type: "button", class: "danger", "aria-label": `Remove binding ${b.id}`, onclick: () => box.replaceChildren(removeForm(
          `Removing binding ${b.id} leaves ${b.refPattern} unbound${b.project ? " in project " + b.project : ""}: calls to it are refused with MISSING_BINDING until another binding serves it.`,
          "/v1/bindings/" + encodeURIComponent(b.id), `Binding ${b.id} removed`, box)) }, "Remove") : null)),
    h("tr", { class: "form-row" }, h("td", { colspan: 8 }, box))];
  };
  const credentialRow = (c) => {
    const box = rowBox();
    return [h("tr", {}, h("td", {}, c.name || ""), h("td", {}, c.provider), h("td", {}, h("code", {}, c.id)),
      h("td", {}, h("code", {}, c.keyId)),
      h("td", {}, c.createdBy || "", " ", when(c.createdAt)),
      h("td", { class: "rotated" }, c.rotatedAt ? when(c.rotatedAt) : h("span", { class: "muted", title: "xema credential rotate-key re-seals every secret under a new key" }, "never")),
      h("td", {}, mayOp(viewer, "credential:delete@1") ? h("button", { type: "button", class: "danger", "aria-label": `Remove credential ${c.id}`, onclick: () => box.replaceChildren(removeForm(
        `Removing credential ${c.id} destroys its secret; a credential a binding still uses cannot be removed (remove or change the binding first).`,
        "/v1/credentials/" + encodeURIComponent(c.id), `Credential ${c.id} removed`, box)) }, "Remove") : null)),
    h("tr", { class: "form-row" }, h("td", { colspan: 7 }, box))];
  };
  show("Providers",
    h("p", { class: "muted" }, "Secrets are write-only: the gateway stores them sealed and answers none, here or in the API. Every change here is a call of the same capability as the API's (binding:create@1, credential:create@1, mcp-server:register@1...), audited as yours."),
    section("Bindings", bs, (r) => table("Bindings", ["Refs", "Provider", "Base URL", "Project", "Environment", "Credential", "Created", ""],
      (r.bindings || []).map(bindingRow)), opener("binding:create@1", "Add a binding", (box) => bindingForm(creds, box))),
    section("Credentials", cs, (r) => table("Credentials", ["Name", "Kind", "Id", "Sealed under key", "Created", "Last rotated", ""],
      creds.map(credentialRow)), opener("credential:create@1", "Add a credential", credentialForm)),
    section("Federated MCP servers", ms, (r) => (r.servers || []).length ? (r.servers || []).map((sv) =>
      h("section", { class: "card", "aria-label": "MCP server " + sv.providerId },
        h("h3", {}, sv.providerId),
        h("dl", {}, h("dt", {}, "Transport"), h("dd", {}, sv.transport, sv.url ? [" ", h("code", {}, sv.url)] : null),
          h("dt", {}, "Server version"), h("dd", {}, sv.version || ""),
          h("dt", {}, "Registered"), h("dd", {}, sv.registeredBy || "", " ", when(sv.registeredAt)),
          h("dt", {}, "Last sync"), h("dd", {}, when(sv.syncedAt))),
        mayOp(viewer, "mcp-server:sync@1") ? syncButton(sv.providerId) : null,
        table("Tools of " + sv.providerId, ["Capability", "Tool", "Lifecycle"], (sv.tools || []).map((tl) =>
          h("tr", {}, h("td", {}, refLink(tl.ref)), h("td", {}, tl.name), h("td", {}, tl.lifecycle))))))
      : h("p", {}, "None."), opener("mcp-server:register@1", "Register an MCP server", registerForm)));
}

// providerForm is a form whose submit calls the API and shows the answer or the refusal in
// place; done(result) says what happened and rerenders the view.
function providerForm(label, fields, call, done, box) {
  const out = h("div", { "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary" }, "Save");
  return h("form", { "aria-label": label, onsubmit: async (e) => {
    e.preventDefault();
    submit.disabled = true;
    out.replaceChildren();
    try {
      const res = await call();
      await done(res);
    } catch (err) {
      out.replaceChildren(errorBox(err), violationList(err));
    } finally {
      submit.disabled = false;
    }
  } }, fields, h("div", { class: "row" }, submit, h("button", { type: "button", onclick: () => box.replaceChildren() }, "Cancel")), out);
}

// violationList lists a refusal's problems, each with the field it names.
function violationList(err) {
  const v = (err && err.body && err.body.violations) || [];
  return v.length ? h("ul", { "aria-label": "Problems" }, v.map((x) => h("li", {}, h("code", {}, x.path || "/"), " ", x.message))) : null;
}

// bindingForm adds a binding, or changes old: the new one replaces it in one step. The
// provider is the chosen credential's (a binding's provider must be its credential's).
function bindingForm(creds, box, old) {
  const b = old || {};
  const input = (name, value, attrs) => h("input", { name, value: value || "", ...(attrs || {}) });
  const f = {
    refPattern: input("refPattern", b.refPattern, { required: true, placeholder: "connector:scm.*" }),
    credentialId: h("select", { name: "credentialId", required: true }, h("option", { value: "" }, "choose a credential"),
      creds.map((c) => h("option", { value: c.id, selected: c.id === b.credentialId }, `${c.name || c.id} (${c.provider})`))),
    baseUrl: input("baseUrl", b.baseUrl, { required: true, placeholder: "https://git.example.com" }),
    project: input("project", b.project, { placeholder: "every project" }),
    environment: input("environment", b.environment, { placeholder: "every environment" }),
    conversation: input("conversation", b.conversation, { placeholder: "chat providers only" }),
    config: h("textarea", { name: "config", spellcheck: "false" }, JSON.stringify(b.config || {}, null, 2)),
  };
  const body = () => {
    let config;
    try { config = JSON.parse(f.config.value || "{}"); } catch (_) { throw new Error("Settings: not JSON"); }
    const c = creds.find((x) => x.id === f.credentialId.value);
    const out = { refPattern: f.refPattern.value, provider: c ? c.provider : "", baseUrl: f.baseUrl.value, credentialId: f.credentialId.value, config };
    for (const k of ["project", "environment", "conversation"]) if (f[k].value) out[k] = f[k].value;
    if (old) out.replaces = old.id;
    return out;
  };
  return providerForm(old ? `Change binding ${old.id}` : "Add a binding", [
    old ? h("p", { class: "notice" }, `The new binding takes the place of ${old.id} in one step: its refs are never unbound in between, and a refused change leaves it as it is.`) : null,
    field("Refs (a ref pattern)", f.refPattern), field("Credential", f.credentialId), field("Base URL", f.baseUrl),
    field("Project", f.project), field("Environment", f.environment), field("Conversation", f.conversation),
    field("Provider settings (JSON)", f.config)],
  () => api("POST", "/v1/bindings", body()),
  async (res) => { await viewProviders(); say(old ? `Binding ${res.id} replaces ${old.id}` : `Binding ${res.id} added`); }, box);
}

// credentialForm stores a secret: the field is a password field, emptied once sent, and the
// answer carries only the new credential's id.
function credentialForm(box) {
  const name = h("input", { name: "name" });
  const provider = h("input", { name: "provider", required: true, placeholder: "gitea, github, slack..." });
  const secret = h("input", { name: "secret", type: "password", required: true, autocomplete: "off" });
  return providerForm("Add a credential", [field("Name", name), field("Provider", provider), field("Secret (write-only)", secret)],
    async () => {
      const body = { provider: provider.value, secret: secret.value };
      if (name.value) body.name = name.value;
      try { return await api("POST", "/v1/credentials", body); } finally { secret.value = ""; }
    },
    async (res) => { await viewProviders(); say(`Credential ${res.id} added`); }, box);
}

// registerForm registers a remote MCP server (streamable HTTP); a stdio server runs a
// command on the gateway's host and is registered with the CLI by its operator.
function registerForm(box) {
  const providerId = h("input", { name: "providerId", required: true, placeholder: "lowercase-with-dashes" });
  const url = h("input", { name: "url", required: true, type: "url", placeholder: "https://mcp.example.com/mcp" });
  const auth = h("input", { name: "auth", type: "checkbox" });
  return providerForm("Register an MCP server", [
    h("p", { class: "muted" }, "Its tools become capabilities of a biome of the same name, seeded: callable once an admin grants its digest. A stdio server runs a command on the gateway's host: its operator declares it there and registers it with xema mcp-server register."),
    field("Provider id", providerId), field("URL (streamable HTTP)", url),
    h("div", { class: "check" }, auth, h("label", { for: auth.id = "f-mcp-auth" }, "Send the gateway's service token"))],
  () => {
    const body = { providerId: providerId.value, transport: "streamable-http", url: url.value };
    if (auth.checked) body.auth = { kind: "service-token" };
    return api("POST", "/v1/mcp-servers", body);
  },
  async (res) => {
    const sv = res.server || {};
    await viewProviders();
    say(`MCP server ${sv.providerId || providerId.value} registered`);
    const id = sv.providerId || providerId.value;
    main().append(h("p", { class: "notice", role: "status" }, `${id} ${sv.version || ""} is registered with ${plural((sv.tools || []).length, "tool")}, seeded. `,
      link(`/console/biomes/${encodeURIComponent(id)}/${encodeURIComponent(sv.version || "")}`, "Review and grant its digest")));
  }, box);
}

// syncButton re-reads a server's tools now and says whether they changed.
function syncButton(id) {
  const out = h("span", { "aria-live": "polite" });
  return h("div", { class: "row" }, h("button", { type: "button", "aria-label": `Sync ${id}`, onclick: async () => {
    out.replaceChildren("Syncing...");
    try {
      const res = await api("POST", "/v1/mcp-servers/" + encodeURIComponent(id) + "/sync", {});
      out.replaceChildren(res.changed ? `Its tools changed: version ${(res.server || {}).version || ""}, a new digest to review.` : "Unchanged since the last sync.");
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  } }, "Sync now"), out);
}

// removeForm asks to confirm a removal (what it does, in words) and then deletes path.
function removeForm(what, path, said, box) {
  const out = h("div", { "aria-live": "polite" });
  return h("div", { role: "group", "aria-label": "Confirm removal" }, h("p", { class: "notice" }, what), out,
    h("div", { class: "row" },
      h("button", { type: "button", class: "danger", onclick: async () => {
        try {
          await api("DELETE", path);
          await viewProviders(); // the page without it first, then the word that it is gone
          say(said);
        } catch (err) {
          out.replaceChildren(errorBox(err));
        }
      } }, "Confirm removal"),
      h("button", { type: "button", onclick: () => box.replaceChildren() }, "Cancel")));
}

// ---- grants -----------------------------------------------------------------------------

const GRANT_STATUS = { active: "ok", superseded: "warn", revoked: "bad", proposed: "warn" };

async function viewGrants() {
  const [res, prof] = await Promise.all([api("GET", "/v1/grants"), api("GET", "/v1/profiles")]);
  const grants = (res.grants || []).slice().reverse(); // newest first
  const profiles = Object.keys(prof.profiles || {}).sort();
  const mayChange = mayOp(viewer, "biome:grant.change@1");
  const mayRevoke = mayOp(viewer, "biome:grant.revoke@1");
  const row = (g) => {
    const box = h("div", {});
    const actions = g.status !== "active" ? null : h("div", { class: "row" },
      mayChange ? h("button", { type: "button", onclick: () => box.replaceChildren(changeForm(g, profiles, box)) }, "Change") : null,
      mayRevoke ? h("button", { type: "button", class: "danger", onclick: () => box.replaceChildren(revokeForm(g, box)) }, "Revoke") : null);
    return h("section", { class: "card", "aria-label": `Grant ${g.grantId}` },
      h("dl", {},
        h("dt", {}, "Biome version"), h("dd", {}, link(`/console/biomes/${encodeURIComponent(g.biomeId)}/${encodeURIComponent(g.version)}`, `${g.biomeId} ${g.version}`)),
        h("dt", {}, "Status"), h("dd", {}, h("span", { class: "tag " + (GRANT_STATUS[g.status] || "warn") }, g.status),
          g.supersededBy ? [" by ", h("code", {}, g.supersededBy)] : null),
        h("dt", {}, "Profile"), h("dd", {}, g.profile),
        g.customize ? [h("dt", {}, "Customized"), h("dd", {}, Object.keys(g.customize).map((r, i) => [i ? ", " : "", refLink(r)]))] : null,
        h("dt", {}, "Approved"), h("dd", {}, `by ${g.approvedBy} `, when(g.approvedAt)),
        g.supersedes ? [h("dt", {}, "Replaced"), h("dd", {}, h("code", {}, g.supersedes))] : null,
        g.revokedAt ? [h("dt", {}, "Revoked"), h("dd", {}, `by ${g.revokedBy} `, when(g.revokedAt))] : null),
      h("div", { class: "muted" }, "Grant ", h("code", {}, g.grantId)),
      actions, box);
  };
  const counts = {};
  for (const g of grants) counts[g.status] = (counts[g.status] || 0) + 1;
  show("Grants",
    h("p", { class: "muted" }, "Your org's grants, newest first: ", Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(", ") || "none",
      ". A change records a new grant of the same biome version that replaces the old one; a revoke ends a grant. Both show their effect before you confirm."),
    grants.length ? grants.map(row) : h("p", {}, "No grant yet: approve one from a biome version's page."));
}

// changeForm: a new profile or customization for an active grant, its diff and dry-run
// impact first, then the confirmation that records it.
function changeForm(g, profiles, box) {
  const profile = h("select", { name: "profile" }, profiles.map((p) => h("option", { value: p, selected: p === g.profile }, p)));
  const customize = h("textarea", { name: "customize", spellcheck: "false" }, JSON.stringify(g.customize || {}, null, 2));
  const preview = h("div", { "aria-live": "polite" });
  const body = () => {
    let c;
    try { c = JSON.parse(customize.value || "{}"); } catch (_) { throw new Error("Customization: not JSON"); }
    return { profile: profile.value, customize: c };
  };
  const path = "/v1/grants/" + encodeURIComponent(g.grantId) + "/change";
  const confirm = h("button", { type: "button", class: "primary", hidden: true, onclick: async () => {
    try {
      const res = await api("POST", path, body());
      say(`Grant ${res.grant.grantId} replaces ${g.grantId}`);
      await viewGrants();
    } catch (err) {
      preview.append(errorBox(err));
    }
  } }, "Confirm change");
  const review = h("button", { type: "button", onclick: async () => {
    confirm.hidden = true;
    try {
      const dry = await api("POST", path + "?dryRun=true", body());
      const i = dry.impact || {};
      preview.replaceChildren(h("h3", {}, "What changes"),
        (dry.diff || []).length ? h("ul", { class: "diff", "aria-label": "Changes of the grant" }, dry.diff.map((d) =>
          h("li", { class: "changed" }, h("code", {}, d.path), `: ${JSON.stringify(d.from)} → ${JSON.stringify(d.to)}`)))
          : h("p", {}, "Nothing: the new grant would be the same."),
        h("p", { class: "grant-change-impact", role: "status" }, `Replayed over this org's calls since `, when(i.since), `: ${i.considered} considered; `,
          ...impactCounts(i)));
      confirm.hidden = false;
    } catch (err) {
      preview.replaceChildren(errorBox(err));
    }
  } }, "Review change");
  return h("form", { "aria-label": `Change grant ${g.grantId}`, onsubmit: (e) => e.preventDefault() },
    field("Profile", profile), field("Customization (JSON, by ref)", customize),
    h("div", { class: "row" }, review, confirm, h("button", { type: "button", onclick: () => box.replaceChildren() }, "Cancel")), preview);
}

// impactCounts are a grant dry run's counts: the calls that would now be denied, held for a
// person's approval, or allowed.
function impactCounts(i) {
  return [h("span", { class: i.allowToDeny ? "tag bad" : "tag ok" }, `${i.allowToDeny} would now be denied`), ", ",
    h("span", { class: i.allowToHeld ? "tag warn" : "tag ok" }, `${i.allowToHeld} would now be held for approval`), ", ",
    h("span", { class: i.denyToAllow ? "tag warn" : "tag ok" }, `${i.denyToAllow} would now be allowed`), "."];
}

// revokeForm shows, before a grant ends, what revoking it would deny of the org's recorded
// calls (a dry run: which callers, the newest calls), then asks for the confirmation.
function revokeForm(g, box) {
  const out = h("div", { "aria-live": "polite" });
  const path = "/v1/grants/" + encodeURIComponent(g.grantId);
  const confirm = h("button", { type: "button", class: "danger", hidden: true, onclick: async () => {
    try {
      await api("DELETE", path);
      say(`Grant ${g.grantId} revoked`);
      await viewGrants();
    } catch (err) {
      out.append(errorBox(err));
    }
  } }, "Confirm revoke");
  const review = async () => {
    out.replaceChildren(h("p", { class: "muted" }, "Replaying this org's recorded calls without the grant..."));
    try {
      const dry = await api("DELETE", path + "?dryRun=true");
      const i = dry.impact || {};
      out.replaceChildren(h("h3", {}, "What revoking would deny"),
        h("p", { class: "grant-revoke-impact", role: "status" }, "Replayed over this org's calls since ", when(i.since), `: ${i.considered} considered; `,
          h("span", { class: i.allowToDeny ? "tag bad" : "tag ok" }, `${i.allowToDeny} would now be denied`), ".",
          i.truncated ? " The replay stopped at its bound: older calls were not replayed." : null,
          i.prunedBefore ? [" Calls before ", when(i.prunedBefore), " were pruned and are not counted."] : null),
        (i.losing || []).length ? table2("Callers who would lose access", ["Caller", "Calls now denied"],
          i.losing.map((c) => h("tr", {}, h("td", {}, h("code", {}, c.subject)), h("td", {}, String(c.calls))))) : null,
        (i.recent || []).length ? table2("Recent calls that would now be denied", ["When", "Capability", "Caller", "Environment", "Record"],
          i.recent.map((c) => h("tr", {}, h("td", {}, when(c.time)), h("td", {}, refLink(c.ref)), h("td", {}, h("code", {}, c.subject)),
            h("td", {}, c.environment), h("td", {}, link("/console/audit/" + encodeURIComponent(c.auditId), "audit record"))))) : null);
      confirm.hidden = false;
      confirm.focus();
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  const group = h("div", { role: "group", "aria-label": `Revoke grant ${g.grantId}` },
    h("p", { class: "notice" }, `Revoking ends grant ${g.grantId}: the calls it covers (${g.biomeId} ${g.version}, profile ${g.profile}) are denied from now on, `,
      "on every replica, and calls held under it are denied when someone tries to approve them."),
    out,
    h("div", { class: "row" }, confirm, h("button", { type: "button", onclick: () => box.replaceChildren() }, "Cancel")));
  review();
  return group;
}

// ---- connections -----------------------------------------------------------------------

// CONNECTION_STATUS are a connection's statuses in words, with their tag's class.
const CONNECTION_STATUS = {
  connected: ["connected", "ok"],
  "needs-reconnect": ["needs reconnect", "bad"],
  missing: ["not connected", "warn"],
};

function connectionStatus(status) {
  const [words, cls] = CONNECTION_STATUS[status] || [status || "?", "warn"];
  return h("span", { class: "tag " + cls }, words);
}

// ownerWords is whose account a connection or server is, as the viewer reads it.
function ownerWords(kind, ref) {
  if (kind === "org") return "the org's";
  if (!ref || ref === viewer.subject.ref) return "yours";
  return ref;
}

// viewConnections lists the org's OAuth-protected MCP servers with the viewer's standing to
// each (their own connection for a server of user connections, the org's otherwise), and for
// an org admin every connection of the org. Connect sends the browser to the authorization
// server; it comes back through the gateway's callback page, which links here. No token is
// ever in an answer of the API, so none can be shown.
async function viewConnections() {
  const res = await api("GET", "/v1/connections");
  const servers = res.servers || [];
  const conns = res.connections || [];
  const admin = isAdmin(viewer);
  const mine = (c) => c.owner.kind === "user" && c.owner.ref === viewer.subject.ref;
  const standing = (sv) => conns.find((c) => c.providerId === sv.providerId && (sv.owner === "org" ? c.owner.kind === "org" : mine(c)));
  const mayConnect = mayOp(viewer, "connection:connect@1");
  const mayDisconnect = mayOp(viewer, "connection:disconnect@1");
  const mayAct = (owner) => owner === "user" || admin; // an org's connection is its admins' to make or end
  const serverRow = (sv) => {
    const c = standing(sv);
    const box = h("div", { "aria-live": "polite" });
    const status = sv.status || (sv.connected ? "connected" : "missing");
    const actions = !mayAct(sv.owner)
      ? h("span", { class: "muted" }, status === "connected" ? "" : status === "missing" ? "An org admin connects it for the org." : "An org admin reconnects it for the org.")
      : h("div", { class: "row" },
        status !== "connected" && mayConnect ? connectButton(sv, status === "missing" ? "Connect" : "Reconnect", box) : null,
        c && mayDisconnect ? disconnectButton(c, box) : null);
    return [h("tr", {},
      h("td", {}, h("strong", {}, sv.name || sv.providerId), sv.name ? [h("br"), h("code", {}, sv.providerId)] : null, sv.url ? [h("br"), h("code", {}, sv.url)] : null),
      h("td", {}, sv.owner === "org" ? "the org's (one for everyone)" : "yours (each person their own)"),
      h("td", { class: "connection-status" }, connectionStatus(status)),
      h("td", {}, c && c.expiresAt ? when(c.expiresAt) : ""),
      h("td", {}, c ? scopeList(c.scopes) : ""),
      h("td", {}, actions)),
    h("tr", { class: "form-row" }, h("td", { colspan: 6 }, box))];
  };
  const connectionRow = (c) => {
    const box = h("div", { "aria-live": "polite" });
    return [h("tr", {},
      h("td", {}, h("strong", {}, c.providerId)),
      h("td", {}, ownerWords(c.owner.kind, c.owner.ref)),
      h("td", {}, connectionStatus(c.status)),
      h("td", {}, c.expiresAt ? when(c.expiresAt) : ""),
      h("td", {}, scopeList(c.scopes)),
      h("td", {}, c.createdBy || "", " ", when(c.createdAt)),
      h("td", {}, c.refreshedAt ? when(c.refreshedAt) : h("span", { class: "muted" }, "never")),
      h("td", {}, h("code", {}, c.id)),
      h("td", {}, mayDisconnect ? disconnectButton(c, box) : null)),
    h("tr", { class: "form-row" }, h("td", { colspan: 9 }, box))];
  };
  show("Connections",
    h("p", { class: "muted" }, "Some MCP servers act for an account of yours or of your org, authorized at their own sign-in (OAuth). ",
      "Connect once: the gateway keeps the tokens, sealed, refreshes them and uses them only to call that server for you. ",
      "No agent and no page ever receives a token. Until a server is connected, calls through it are refused with CONNECTION_REQUIRED."),
    h("h2", {}, "Servers"),
    servers.length ? table2("Servers to connect", ["Server", "Whose account", "Status", "Expires", "Scopes", ""], servers.map(serverRow))
      : h("p", {}, "No MCP server of the org needs a connection.", admin ? " Register one with auth kind oauth (POST /v1/mcp-servers)." : ""),
    admin ? [h("h2", {}, "Every connection of the org"),
      h("p", { class: "muted" }, "As an org admin you see every person's connections as well as the org's, and may end any of them (its owner then connects again)."),
      conns.length ? table2("Connections of the org", ["Server", "Whose account", "Status", "Expires", "Scopes", "Connected by", "Last refreshed", "Id", ""], conns.map(connectionRow))
        : h("p", {}, "None yet.")] : null);
}

// scopeList is a connection's scopes, or a muted word when it has none.
function scopeList(scopes) {
  return (scopes || []).length ? scopes.map((x, i) => [i ? " " : "", h("code", {}, x)]) : h("span", { class: "muted" }, "none");
}

// connectButton starts a connection and sends the browser to the authorization server the
// answer names; the gateway's callback page links back here.
function connectButton(sv, label, box) {
  const name = `${label} ${sv.providerId}`;
  const button = h("button", { type: "button", class: "primary", "aria-label": name, onclick: async () => {
    button.disabled = true;
    box.replaceChildren(h("p", { class: "muted" }, `Asking the gateway to start a connection to ${sv.providerId}...`));
    try {
      const res = await api("POST", "/v1/connections", { providerId: sv.providerId, owner: sv.owner }, false, true);
      const u = new URL(res.url);
      if (u.protocol !== "https:" && u.protocol !== "http:") throw new Error("The gateway answered an authorization URL that is not http(s).");
      box.replaceChildren(h("p", { class: "muted" }, `Opening ${u.origin} to authorize ${sv.providerId}: you come back here once it is done.`));
      location.assign(u.toString());
    } catch (err) {
      box.replaceChildren(errorBox(err), violationList(err));
      button.disabled = false;
    }
  } }, label);
  return button;
}

// disconnectButton ends connection c after a sentence saying what that does.
function disconnectButton(c, box) {
  const whose = ownerWords(c.owner.kind, c.owner.ref);
  const name = `Disconnect ${c.providerId} (${whose === "yours" ? "your account" : whose === "the org's" ? "the org's account" : whose})`;
  return h("button", { type: "button", class: "danger", "aria-label": name, onclick: () => {
    const out = h("div", { "aria-live": "polite" });
    const confirm = h("button", { type: "button", class: "danger", onclick: async () => {
      confirm.disabled = true;
      try {
        const v = await api("DELETE", "/v1/connections/" + encodeURIComponent(c.id));
        await viewConnections(); // the page without it first, then the word that it is gone
        say(`Disconnected ${c.providerId} (${whose}): ` + (v && v.revoked ? "the authorization server revoked its tokens." : "the gateway forgot its tokens; the authorization server did not confirm revoking them."));
      } catch (err) {
        out.replaceChildren(errorBox(err));
        confirm.disabled = false;
      }
    } }, "Confirm disconnect");
    box.replaceChildren(h("div", { role: "group", "aria-label": "Confirm disconnect" },
      h("p", { class: "notice" }, `Disconnecting ${c.providerId} (${whose}) forgets its tokens and asks the authorization server to revoke them: `,
        `calls through ${c.providerId} ${c.owner.kind === "org" ? "for the org" : "for " + (whose === "yours" ? "you" : whose)} are refused with CONNECTION_REQUIRED until it is connected again.`),
      out, h("div", { class: "row" }, confirm, h("button", { type: "button", onclick: () => box.replaceChildren() }, "Cancel"))));
    confirm.focus();
  } }, "Disconnect");
}

// table2 is a labelled table of cols and rows.
function table2(label, cols, rows) {
  return h("table", { "aria-label": label }, h("thead", {}, h("tr", {}, cols.map((x) => h("th", { scope: "col" }, x)))), h("tbody", {}, rows));
}

render();
