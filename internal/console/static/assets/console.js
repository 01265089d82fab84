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
// the token and goes to the login page, unless quiet (the login page's own check).
async function api(method, path, body, quiet) {
  const headers = { Authorization: "Bearer " + token() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: "omit" });
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

// claims reads the token's payload for display only; the gateway verifies it.
function claims() {
  try {
    const p = token().split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(p));
  } catch (_) {
    return {};
  }
}

// ---- routing ----------------------------------------------------------------------------

const routes = [
  [/^\/console\/login$/, viewLogin],
  [/^\/console\/callback$/, viewCallback],
  [/^\/console\/biomes$/, viewBiomes],
  [/^\/console\/biomes\/([^/]+)\/([^/]+)$/, viewBiome],
  [/^\/console\/approvals$/, viewApprovals],
  [/^\/console\/audit$/, viewAudit],
  [/^\/console\/audit\/([^/]+)$/, viewAuditRecord],
  [/^\/console\/catalog$/, viewCatalog],
];

function go(url, replace) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  render();
}

async function render() {
  const path = location.pathname.replace(/\/+$/, "");
  const signedIn = !!token();
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  const c = claims();
  document.getElementById("who").textContent = signedIn ? `${c.sub || "?"} · org ${c.org || "default"}${c.org_role ? " · " + c.org_role : ""}` : "";
  for (const a of document.querySelectorAll("nav a")) {
    if (path.startsWith(a.getAttribute("href"))) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!signedIn && path !== "/console/login" && path !== "/console/callback") {
    return go("/console/login?next=" + encodeURIComponent(location.pathname + location.search), true);
  }
  for (const [re, fn] of routes) {
    const m = path.match(re);
    if (m) {
      try {
        await fn(...m.slice(1).map(decodeURIComponent));
      } catch (err) {
        if (err.status !== 401) show("Error", errorBox(err));
      }
      return;
    }
  }
  show("Not found", h("p", {}, "No such page. "), link("/console/approvals", "Held calls"));
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
  return next && next.startsWith("/console/") && !next.startsWith("/console/login") && !next.startsWith("/console/callback") ? next : "/console/approvals";
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
        await api("GET", "/v1/audit?limit=1", undefined, true); // any person may read their own records
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
    return h("tr", {},
      h("td", {}, link(href, b.biomeId + " " + b.version)),
      h("td", {}, risk(d.riskTier)),
      h("td", {}, Object.keys(d.domains || {}).join(", ")),
      h("td", {}, diffSummary(d.diff)),
      h("td", {}, isGranted ? h("span", { class: "tag ok" }, "granted") : h("span", { class: "tag warn" }, "awaiting approval")),
      h("td", {}, b.operator ? "operator's store" : "this org"),
      h("td", {}, b.createdAt));
  });
  show("Biomes",
    h("p", { class: "muted" }, "Submitted biome versions your org may install, newest first, with their permission digest."),
    rows.length ? h("table", {}, h("thead", {}, h("tr", {}, ["Biome", "Risk", "Domains", "Change", "Grant", "From", "Submitted"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
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
  const d = b.digest || {};
  const profiles = prof.profiles || {};
  const entries = [];
  for (const [domain, list] of Object.entries(d.domains || {})) for (const e of list) entries.push({ domain, ...e });
  const access = Object.fromEntries((d.dataAccess || []).map((a) => [a.ref, a]));

  const digestTable = h("table", { "aria-label": "Required capabilities" },
    h("thead", {}, h("tr", {}, ["Domain", "Capability", "Risk", "Effect", "Reach", "Output", "Approval", "Why the biome needs it"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, entries.map((e) => {
      const a = access[e.ref] || {};
      return h("tr", {}, h("td", {}, e.domain), h("td", {}, h("code", {}, e.ref)), h("td", {}, risk(e.riskTier)),
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
  const grantList = mine.length ? h("ul", {}, mine.map((g) => h("li", {}, `Grant ${g.grantId}: profile ${g.profile}, digest ${g.digestHash === d.hash ? "this one" : g.digestHash}, approved by ${g.approvedBy} at ${g.approvedAt}`)))
    : h("p", {}, "Not granted: callers of your org cannot use this version yet.");

  show(`Biome ${id} ${version}`,
    h("dl", {}, h("dt", {}, "Digest"), h("dd", {}, h("code", {}, d.hash || "")), h("dt", {}, "Risk tier"), h("dd", {}, risk(d.riskTier)),
      h("dt", {}, "Submitted"), h("dd", {}, b.createdAt), h("dt", {}, "From"), h("dd", {}, b.operator ? "the operator's store" : "this org")),
    h("h2", {}, "Change against the installed version"), diffList,
    h("h2", {}, "Permission digest"), digestTable,
    h("h2", {}, "Grants of this version"), grantList,
    h("h2", {}, "Approve a grant"), grantForm(b, entries, access, profiles));
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
      say(`Grant ${g.grantId} approved`);
      out.replaceChildren(h("p", { class: "tag ok", role: "status" }, `Grant ${g.grantId} recorded: ${g.biomeId} ${g.version}, profile ${g.profile}, approved by ${g.approvedBy}.`));
      confirm.hidden = true;
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  } }, "Approve grant");
  // impact is the dry run's answer: what the grant would change over the org's recorded calls.
  const impact = (dry) => {
    const i = dry.impact || {};
    return h("p", { id: "grant-impact", role: "status" },
      `Replayed over this org's calls since ${i.since}: ${i.considered} considered; `,
      h("span", { class: i.allowToDeny ? "tag bad" : "tag ok" }, `${i.allowToDeny} would now be denied`), ", ",
      h("span", { class: i.denyToAllow ? "tag warn" : "tag ok" }, `${i.denyToAllow} would now be allowed`), ".");
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

async function viewApprovals() {
  const [pending, all] = await Promise.all([api("GET", "/v1/approvals?status=pending"), api("GET", "/v1/approvals")]);
  const decided = (all.approvals || []).filter((a) => a.status !== "pending");
  const outputs = await Promise.all(decided.slice(0, 20).map((a) => api("GET", "/v1/invocations/" + encodeURIComponent(a.approvalId)).catch(() => null)));
  const card = (a, inv) => h("section", { class: "card", "aria-label": `Held call ${a.approvalId}` },
    h("dl", {},
      h("dt", {}, "Capability"), h("dd", {}, h("code", {}, a.ref)),
      h("dt", {}, "Requester"), h("dd", {}, a.requester),
      h("dt", {}, "Environment"), h("dd", {}, a.environment),
      h("dt", {}, "Approval id"), h("dd", {}, h("code", {}, a.approvalId)),
      h("dt", {}, "Audit record"), h("dd", {}, link("/console/audit/" + encodeURIComponent(a.auditId), a.auditId)),
      h("dt", {}, "Held since"), h("dd", {}, a.createdAt),
      a.status === "pending" ? [h("dt", {}, "Expires"), h("dd", {}, a.expiresAt)] : [
        h("dt", {}, "Status"), h("dd", {}, h("span", { class: "tag " + (a.status === "done" ? "ok" : a.status === "rejected" || a.status === "failed" ? "bad" : "warn") }, a.status)),
        h("dt", {}, "Decided by"), h("dd", {}, a.decidedBy || ""),
        a.reason ? [h("dt", {}, "Reason"), h("dd", {}, a.reason)] : null,
        a.outcome ? [h("dt", {}, "Outcome"), h("dd", {}, a.outcome)] : null]),
    a.input ? [h("div", { class: "muted" }, "Input"), pre(a.input)] : null,
    inv && inv.output ? [h("div", { class: "muted" }, "Output"), pre(inv.output)] : null,
    a.status === "pending" ? decideButtons(a) : null);
  show("Held calls",
    h("h2", {}, `Pending (${(pending.approvals || []).length})`),
    (pending.approvals || []).length ? (pending.approvals || []).map((a) => card(a)) : h("p", {}, "No call is waiting for a decision."),
    h("h2", {}, "Decided"),
    decided.length ? decided.map((a, i) => card(a, outputs[i])) : h("p", {}, "None yet."));
}

function decideButtons(a) {
  const box = h("div", {});
  const approve = h("button", { type: "button", class: "primary", onclick: async () => {
    try {
      const v = await api("POST", `/v1/approvals/${encodeURIComponent(a.approvalId)}/approve`, {});
      say(`Approved ${v.approvalId}: ${v.status}${v.outcome ? " (" + v.outcome + ")" : ""}`);
      await viewApprovals();
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
        await viewApprovals();
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
  };
  const form = h("form", { role: "search", "aria-label": "Search the audit log", onsubmit: (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const k of ["ref", "subject", "decision", "reason"]) if (inputs[k].value.trim()) n.set(k, inputs[k].value.trim());
    for (const k of ["since", "until"]) if (inputs[k].value) n.set(k, toISO(inputs[k].value));
    go("/console/audit" + (n.toString() ? "?" + n : ""));
  } },
  h("div", { class: "row" }, field("Ref", inputs.ref), field("Subject", inputs.subject), field("Decision", inputs.decision), field("Reason code", inputs.reason)),
  h("div", { class: "row" }, field("Since", inputs.since), field("Until", inputs.until), h("button", { type: "submit", class: "primary" }, "Search")));

  const apiq = new URLSearchParams();
  for (const k of ["ref", "subject", "decision", "reason", "since", "until", "cursor"]) if (q.get(k)) apiq.set(k, q.get(k));
  apiq.set("limit", "25");
  let results;
  try {
    const page = await api("GET", "/v1/audit?" + apiq);
    const rows = (page.records || []).map((r) => h("tr", {},
      h("td", {}, r.time), h("td", {}, link("/console/audit/" + encodeURIComponent(r.auditId), r.auditId)),
      h("td", {}, h("span", { class: "tag " + decisionClass(r.decision) }, r.decision)),
      h("td", {}, h("code", {}, r.capability)), h("td", {}, r.subject.ref), h("td", {}, r.environment),
      h("td", {}, (r.reasons || []).map((x) => x.code).join(", "))));
    const next = new URLSearchParams(q);
    next.set("cursor", page.nextCursor || "");
    results = [
      rows.length ? h("table", { "aria-label": "Audit records" }, h("thead", {}, h("tr", {}, ["Time", "Audit id", "Decision", "Capability", "Subject", "Environment", "Reasons"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
        : h("p", {}, "No record matches."),
      h("div", { class: "row" },
        q.get("cursor") ? link("/console/audit?" + new URLSearchParams([...q].filter(([k]) => k !== "cursor")), "First page") : null,
        page.nextCursor ? link("/console/audit?" + next, "Next page") : null),
    ];
  } catch (err) {
    if (err.status === 401) return;
    results = [errorBox(err)];
  }
  show("Audit", form, h("h2", {}, "Records, newest first"), results);
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
  const suggestions = (why ? why.suggestions : r.suggestions) || [];
  show(`Audit record ${id}`,
    h("dl", {},
      h("dt", {}, "Decision"), h("dd", {}, h("span", { class: "tag " + decisionClass(r.decision) }, r.decision)),
      h("dt", {}, "Capability"), h("dd", {}, h("code", {}, r.capability)),
      h("dt", {}, "Subject"), h("dd", {}, `${r.subject.ref} (${r.subject.kind})`),
      h("dt", {}, "Environment"), h("dd", {}, r.environment),
      h("dt", {}, "Time"), h("dd", {}, r.time),
      h("dt", {}, "Outcome"), h("dd", {}, r.outcome || ""),
      r.runner ? [h("dt", {}, "Runner"), h("dd", {}, r.runner)] : null,
      h("dt", {}, "Policy revision"), h("dd", {}, r.policyRevision || ""),
      r.parentAuditId ? [h("dt", {}, "Follows"), h("dd", {}, link("/console/audit/" + encodeURIComponent(r.parentAuditId), r.parentAuditId))] : null),
    h("h2", {}, why ? "Why it was denied" : "Reasons"),
    reasons.length ? h("ul", { "aria-label": "Reasons" }, reasons.map((x) => h("li", {}, h("code", {}, x.code), " — ", x.detail || ""))) : h("p", {}, "No reason recorded."),
    h("h2", {}, "What to do next"),
    suggestions.length ? h("ul", { "aria-label": "Suggestions" }, suggestions.map((s) => h("li", {}, suggestionText(s)))) : h("p", {}, "No suggestion."),
    h("h2", {}, "Linked records"),
    (children.records || []).length ? h("ul", {}, children.records.map((c) => h("li", {}, link("/console/audit/" + encodeURIComponent(c.auditId), c.auditId), ` — ${c.decision}${c.outcome ? ", " + c.outcome : ""} by ${c.subject.ref} at ${c.time}`)))
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
    h("td", {}, h("code", {}, c.ref)), h("td", {}, c.title), h("td", {}, c.biome), h("td", {}, risk(c.riskTier)),
    h("td", {}, c.mutating ? "changes data" : "reads"),
    h("td", {}, c.deprecated ? h("span", { class: "tag warn" }, "deprecated") : "published"),
    h("td", {}, c.replacedBy ? h("code", {}, c.replacedBy) : "")));
  show("Catalog", form,
    h("p", { class: "muted" }, "The capabilities you may invoke in your token's environment."),
    rows.length ? h("table", { "aria-label": "Capabilities" }, h("thead", {}, h("tr", {}, ["Ref", "Title", "Biome", "Risk", "Effect", "Lifecycle", "Replaced by"].map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows))
      : h("p", {}, "No capability."));
}

render();
