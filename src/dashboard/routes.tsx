import { type Context, type Handler, Hono } from "hono";
import { createMiddleware } from "hono/factory";
import type { Child } from "hono/jsx";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { callerForToken } from "../auth/middleware";
import { closeSession, openSession, SESSION_TTL_MS } from "../auth/sessions";
import type { TokenRow } from "../auth/tokens-store";
import type { Endpoint } from "../endpoints/schema";
import { ApiError } from "../errors";
import { leasesWithUnresolvedCreates } from "../leases/create-records";
import { listEvents } from "../leases/ledger";
import { billingFor } from "../leases/rent";
import type { Lease } from "../leases/schema";
import { randomSecret } from "../lib/crypto";
import { contentSecurityPolicy } from "../lib/csp";
import type { Offer, ProviderFailure } from "../offers/schemas";
import type { ReaperRun } from "../reaper/runs";
import type { Schedule, ScheduleRun } from "../schedules/schema";
import { type ApiProblem, callApi } from "./api";
import { CLIENT_SCRIPT, STYLE } from "./assets";
import { clearSessionCookie, writeSessionCookie } from "./cookie";
import { activeRows, canRead, detailView, leaseRow, recentStoppedRows, views } from "./data";
import type { ApiFetch, DashEnv } from "./env";
import { crossSite, dashboardOrigin, requireSameSiteForm, requireSession, safeNext } from "./guard";
import { Alarms } from "./leases-view";
import { liveStream } from "./live";
import { AccountPage, type AccountView } from "./pages/account";
import { EndpointsPage } from "./pages/endpoints";
import { LeasePage, LeasesPage, STOP_ALL_PHRASE } from "./pages/leases";
import { LoginPage } from "./pages/login";
import { type OfferFilters, OffersPage, RentConfirm, type RentFields, RentForm } from "./pages/offers";
import { ReaperPage } from "./pages/reaper";
import { SchedulePage } from "./pages/schedule";
import { SchedulesPage } from "./pages/schedule-list";
import type { SpendView } from "./pages/spend";
import { TokensPage } from "./pages/tokens";
import { chooseOffer, leaseBody, pickRentFields, releasePin } from "./rent-form";
import { admitAddress, admitToken, clientAddress, type SignInRefusal } from "./sign-in-limits";
import { ErrorPanel, Layout } from "./ui";
import { worstCase } from "./worst-case";

const CSP = contentSecurityPolicy();

type Ctx = Context<DashEnv>;

const securityHeaders = createMiddleware<DashEnv>(async (c, next) => {
  await next();
  c.header("Content-Security-Policy", CSP);
  c.header("X-Content-Type-Options", "nosniff");
  c.header("Referrer-Policy", "same-origin");
  if (!c.res.headers.has("Cache-Control")) c.header("Cache-Control", "no-store");
});

/** Refused before the session is even looked at: a cross-site post changes nothing, signed in or not. */
const refuseCrossSitePosts = createMiddleware<DashEnv>(async (c, next) => {
  if (c.req.method !== "GET" && c.req.method !== "HEAD" && crossSite(c)) {
    return c.text("cross-site form posts are refused", 403);
  }
  await next();
});

/**
 * The one way a dashboard route is added. `get`/`post`: a live session, and for posts the
 * same-origin and anti-forgery checks; `publicGet`/`publicPost`: no session (sign-in, assets, the
 * live stream). Every one gets the security headers (CSP); test/dashboard/page-guards.test.ts asks
 * each registered route. Only the dashboard's own routes: /v1, /docs and unknown paths keep the API's behaviour.
 */
function pageRegistry(app: Hono<DashEnv>) {
  return {
    get: <P extends string>(path: P, handler: Handler<DashEnv, P>) =>
      app.get(path, securityHeaders, refuseCrossSitePosts, requireSession, handler),
    post: <P extends string>(path: P, handler: Handler<DashEnv, P>) =>
      app.post(path, securityHeaders, refuseCrossSitePosts, requireSession, requireSameSiteForm, handler),
    publicGet: <P extends string>(path: P, handler: Handler<DashEnv, P>) => app.get(path, securityHeaders, handler),
    publicPost: <P extends string>(path: P, handler: Handler<DashEnv, P>) => app.post(path, securityHeaders, handler),
  };
}

/** The web dashboard: pages for people, every action through the HTTP API as the signed-in token. */
export function dashboardRoutes(fetchApi: ApiFetch) {
  const app = new Hono<DashEnv>();
  const api = <T,>(c: Ctx, method: "GET" | "POST" | "PATCH" | "DELETE", path: string, json?: unknown, headers = {}) =>
    callApi<T>(c, fetchApi, method, path, json, headers);

  const pages = pageRegistry(app);

  pages.publicGet("/assets/dashboard.css", (c) =>
    c.body(STYLE, 200, { "Content-Type": "text/css; charset=utf-8", "Cache-Control": "public, max-age=86400" }),
  );
  pages.publicGet("/assets/dashboard.js", (c) =>
    c.body(CLIENT_SCRIPT, 200, {
      "Content-Type": "text/javascript; charset=utf-8",
      "Cache-Control": "public, max-age=86400",
    }),
  );

  pages.publicGet("/login", (c) => {
    const expired = c.req.query("expired") === "1";
    return c.html(
      <LoginPage
        next={safeNext(c.req.query("next"), dashboardOrigin(c))}
        message={expired ? "Your session has ended (signed out, token revoked or expired). Sign in again." : undefined}
      />,
    );
  });

  pages.publicPost("/login", async (c) => {
    if (crossSite(c)) return c.text("cross-site sign-in is refused", 403);
    const form = await c.req.parseBody();
    const next = safeNext(typeof form.next === "string" ? form.next : "/", dashboardOrigin(c));
    const token = typeof form.token === "string" ? form.token.trim() : "";
    const services = c.get("services");
    // Counted before the token is checked, so that a wrong token costs its address too.
    const byAddress = await admitAddress(services, clientAddress(c.req));
    if (byAddress) return signInRefused(c, next, byAddress);
    const caller = token ? await callerForToken(services, token) : null;
    if (!caller) {
      return c.html(<LoginPage next={next} error="That token is unknown or has been revoked." />, 401);
    }
    const byToken = await admitToken(services, caller);
    if (byToken) return signInRefused(c, next, byToken);
    const { cookie } = await openSession(services, caller);
    writeSessionCookie(c, cookie, SESSION_TTL_MS / 1000);
    return c.redirect(next, 303);
  });

  // /live checks its session itself on every tick, so that an ended session is told, not redirected.
  pages.publicGet("/live", (c) => liveStream(c));

  /** A full page with the alarms on top. */
  const page = async (
    c: Ctx,
    props: { title: string; current: string; live?: string; status?: ContentfulStatusCode },
    body: Child,
  ) => {
    const session = c.get("session");
    const services = c.get("services");
    const alarms = canRead(session.caller) ? (
      <Alarms
        rows={await activeRows(services)}
        unresolvedIds={new Set(await leasesWithUnresolvedCreates(services.db))}
      />
    ) : null;
    return c.html(
      <Layout
        title={props.title}
        current={props.current}
        caller={session.caller}
        csrf={session.csrf}
        alarms={alarms}
        live={props.live}
      >
        {body}
      </Layout>,
      props.status ?? 200,
    );
  };
  const problemPage = (c: Ctx, title: string, current: string, problem: ApiProblem) =>
    page(c, { title, current, status: pageStatus(problem) }, <ErrorPanel problem={problem} />);
  const cannotRead = (c: Ctx, title: string, current: string) =>
    problemPage(c, title, current, {
      status: 403,
      code: "forbidden",
      error: "This token does not have the read scope, so it cannot see leases. Sign in with a token that has it.",
    });

  pages.post("/logout", async (c) => {
    await closeSession(c.get("services").db, c.get("session").idHash);
    clearSessionCookie(c);
    return c.redirect("/login", 303);
  });

  pages.get("/", async (c) => {
    const { caller, csrf } = c.get("session");
    if (!canRead(caller)) return cannotRead(c, "Leases", "/");
    const services = c.get("services");
    const [active, recent] = await Promise.all([activeRows(services), recentStoppedRows(services)]);
    return page(
      c,
      { title: "Leases", current: "/", live: "/live" },
      <LeasesPage
        active={views(active, services)}
        recent={views(recent, services)}
        caller={caller}
        csrf={csrf}
        notice={c.req.query("notice")}
      />,
    );
  });

  pages.get("/leases/:id", async (c) => {
    const { caller, csrf } = c.get("session");
    if (!canRead(caller)) return cannotRead(c, "Lease", "/");
    const services = c.get("services");
    const row = await leaseRow(services, c.req.param("id"));
    if (!row) {
      return page(
        c,
        { title: "No such lease", current: "/", status: 404 },
        <p class="empty">
          There is no lease <code>{c.req.param("id").slice(0, 64)}</code>. <a href="/">Back to the leases</a>.
        </p>,
      );
    }
    const view = await detailView(row, services);
    const events = await listEvents(services.db, row.id);
    const last = events[events.length - 1];
    return page(
      c,
      { title: row.name ?? row.gpu ?? row.id, current: "/", live: `/live?lease=${row.id}` },
      view ? (
        <LeasePage view={view} events={events} caller={caller} csrf={csrf} notice={c.req.query("notice")} />
      ) : null,
    ).then((res) => {
      if (last) res.headers.set("X-Last-Event-Seq", String(last.seq));
      return res;
    });
  });

  pages.post("/leases/:id/stop", async (c) => {
    const id = c.req.param("id");
    const answer = await api<{ ok: true; already?: boolean }>(c, "POST", `/v1/leases/${encodeURIComponent(id)}/stop`);
    if (!answer.ok) return problemPage(c, "The lease was not stopped", "/", answer.problem);
    const form = await c.req.parseBody();
    const origin = dashboardOrigin(c);
    const back = new URL(safeNext(typeof form.next === "string" ? form.next : `/leases/${id}`, origin), origin);
    back.searchParams.append("notice", answer.data.already ? "already" : "stopping");
    return c.redirect(`${back.pathname}${back.search}${back.hash}`, 303);
  });

  pages.post("/stop-all", async (c) => {
    const form = await c.req.parseBody();
    if (typeof form.confirm !== "string" || form.confirm.trim() !== STOP_ALL_PHRASE) {
      return c.redirect("/?notice=stop-all-unconfirmed", 303);
    }
    const answer = await api<{ ok: true; leases: number; machines: number }>(c, "POST", "/v1/leases/stop-all");
    if (!answer.ok) return problemPage(c, "Nothing was stopped", "/", answer.problem);
    return c.redirect("/?notice=stop-all", 303);
  });

  pages.get("/offers", async (c) => {
    const q = c.req.query();
    const filters: OfferFilters = { gpu: q.gpu, vram_gb: q.vram_gb, provider: q.provider, max_price: q.max_price };
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
    const answer = await api<{ offers: Offer[]; errors: ProviderFailure[] }>(c, "GET", `/v1/offers?${query}`);
    return page(
      c,
      { title: "Offers", current: "/offers" },
      <OffersPage
        filters={filters}
        offers={answer.ok ? answer.data.offers : null}
        errors={answer.ok ? answer.data.errors : []}
        problem={answer.ok ? null : answer.problem}
        caller={c.get("session").caller}
      />,
    );
  });

  pages.get("/rent", (c) => {
    const q = c.req.query();
    const fields: RentFields = pickRentFields(q);
    return page(
      c,
      { title: "Rent a machine", current: "/offers" },
      <RentForm fields={fields} csrf={c.get("session").csrf} problem={null} />,
    );
  });

  pages.post("/rent", async (c) => {
    const form = await c.req.parseBody();
    const fields = pickRentFields(form);
    const csrf = c.get("session").csrf;
    const again = (problem: ApiProblem) =>
      page(
        c,
        { title: "Rent a machine", current: "/offers", status: pageStatus(problem) },
        <RentForm fields={fields} csrf={csrf} problem={problem} />,
      );
    const released = form.confirm === "1" ? null : releasePin(fields, form);
    const body = leaseBody(fields);
    if (form.confirm !== "1") {
      const chosen = await chooseOffer(fields, (path) => api<{ offers: Offer[] }>(c, "GET", path));
      if ("problem" in chosen) return again(chosen.problem);
      const billing = billingFor(c.get("services"), chosen.offer);
      const worst = worstCase(billing, {
        pricePerHourUsd: chosen.offer.price_per_hour_usd,
        maxMinutes: Number(fields.max_minutes),
        maxCost: fields.max_cost ? Number(fields.max_cost) : null,
      });
      return page(
        c,
        { title: "Rent a machine", current: "/offers" },
        <RentConfirm
          fields={fields}
          offer={chosen.offer}
          worst={worst}
          startTimeoutMin={c.get("services").config.startTimeoutMin}
          billingStartsAt={billing.startsAt}
          idempotencyKey={`dash-${randomSecret(12)}`}
          csrf={csrf}
          released={released}
        />,
      );
    }
    const key = typeof form.idempotency_key === "string" ? form.idempotency_key.slice(0, 200) : "";
    const answer = await api<Lease>(c, "POST", "/v1/leases", body, key ? { "Idempotency-Key": key } : {});
    if (!answer.ok) return again(answer.problem);
    return c.redirect(`/leases/${answer.data.id}`, 303);
  });

  pages.get("/schedules", async (c) => {
    const answer = await api<{ schedules: Schedule[] }>(c, "GET", "/v1/schedules");
    if (!answer.ok) return problemPage(c, "Schedules", "/schedules", answer.problem);
    const { caller, csrf } = c.get("session");
    return page(
      c,
      { title: "Schedules", current: "/schedules" },
      <SchedulesPage schedules={answer.data.schedules} caller={caller} csrf={csrf} />,
    );
  });

  pages.get("/schedules/:id", async (c) => {
    const id = encodeURIComponent(c.req.param("id"));
    const [schedule, runs] = await Promise.all([
      api<Schedule>(c, "GET", `/v1/schedules/${id}`),
      api<{ runs: ScheduleRun[] }>(c, "GET", `/v1/schedules/${id}/runs?limit=14`),
    ]);
    if (!schedule.ok) return problemPage(c, "Schedule", "/schedules", schedule.problem);
    if (!runs.ok) return problemPage(c, schedule.data.name, "/schedules", runs.problem);
    return page(
      c,
      { title: schedule.data.name, current: "/schedules" },
      <SchedulePage schedule={schedule.data} runs={runs.data.runs} />,
    );
  });

  pages.post("/schedules/:id/enabled", async (c) => {
    const form = await c.req.parseBody();
    const id = encodeURIComponent(c.req.param("id"));
    const answer = await api<Schedule>(c, "PATCH", `/v1/schedules/${id}`, { enabled: form.enabled === "true" });
    if (!answer.ok) return problemPage(c, "The schedule was not changed", "/schedules", answer.problem);
    return c.redirect("/schedules", 303);
  });

  pages.post("/schedules/:id/run", async (c) => {
    const id = encodeURIComponent(c.req.param("id"));
    const answer = await api<Lease>(c, "POST", `/v1/schedules/${id}/run`);
    if (!answer.ok) return problemPage(c, "The schedule did not start", "/schedules", answer.problem);
    return c.redirect(`/leases/${answer.data.id}`, 303);
  });

  pages.get("/account", async (c) => {
    const [answer, spend] = await Promise.all([
      api<AccountView>(c, "GET", "/v1/account"),
      api<SpendView>(c, "GET", "/v1/account/spend?days=30"),
    ]);
    if (!answer.ok) return problemPage(c, "Spend", "/account", answer.problem);
    return page(
      c,
      { title: "Spend and budget", current: "/account" },
      <AccountPage account={answer.data} spend={spend.ok ? spend.data : null} />,
    );
  });

  pages.get("/endpoints", async (c) => {
    const answer = await api<{ endpoints: Endpoint[] }>(c, "GET", "/v1/endpoints");
    if (!answer.ok) return problemPage(c, "Endpoints", "/endpoints", answer.problem);
    return page(c, { title: "Endpoints", current: "/endpoints" }, <EndpointsPage endpoints={answer.data.endpoints} />);
  });

  pages.get("/reaper", async (c) => {
    const answer = await api<{ runs: ReaperRun[] }>(c, "GET", "/v1/reaper/runs?limit=20");
    if (!answer.ok) return problemPage(c, "Reaper runs", "/reaper", answer.problem);
    return page(c, { title: "Reaper runs", current: "/reaper" }, <ReaperPage runs={answer.data.runs} />);
  });

  const tokensPage = async (c: Ctx, created?: { name: string; token: string }, status: 200 | 201 = 200) => {
    const answer = await api<{ tokens: TokenRow[] }>(c, "GET", "/v1/tokens");
    if (!answer.ok) return problemPage(c, "Tokens", "/tokens", answer.problem);
    return page(
      c,
      { title: "Tokens", current: "/tokens", status },
      <TokensPage tokens={answer.data.tokens} csrf={c.get("session").csrf} created={created} />,
    );
  };

  pages.get("/tokens", (c) => tokensPage(c));

  pages.post("/tokens", async (c) => {
    const form = await c.req.parseBody({ all: true });
    const scopes = ([] as unknown[]).concat(form.scopes ?? []).filter((s) => typeof s === "string");
    const answer = await api<{ name: string; token: string }>(c, "POST", "/v1/tokens", {
      name: typeof form.name === "string" ? form.name : "",
      scopes,
    });
    if (!answer.ok) return problemPage(c, "No token was created", "/tokens", answer.problem);
    return tokensPage(c, { name: answer.data.name, token: answer.data.token }, 201);
  });

  pages.post("/tokens/:id/revoke", async (c) => {
    const answer = await api(c, "DELETE", `/v1/tokens/${encodeURIComponent(c.req.param("id"))}`);
    if (!answer.ok) return problemPage(c, "The token was not revoked", "/tokens", answer.problem);
    return c.redirect("/tokens", 303);
  });

  return app;
}

/** A page that shows an API error answers with the API's own 4xx; anything else is a 502. */
function pageStatus(problem: ApiProblem): ContentfulStatusCode {
  return problem.status >= 400 && problem.status < 500 ? (problem.status as ContentfulStatusCode) : 502;
}

/**
 * 429 for a sign-in over its budget: the error envelope for a client that asked for JSON, else
 * the sign-in page again saying why and for how long; Retry-After on both.
 */
function signInRefused(c: Ctx, next: string, refusal: SignInRefusal) {
  const who = refusal.limit === "address" ? "from this address" : "with this token";
  const error = `Too many sign-ins ${who} (at most ${refusal.perMin} a minute); try again in ${refusal.retryAfterS} s.`;
  const retryAfter = { "Retry-After": String(refusal.retryAfterS) };
  const accept = c.req.header("accept") ?? "";
  if (accept.includes("application/json") && !accept.includes("text/html")) {
    throw new ApiError("rate_limited", error, { retry_after: refusal.retryAfterS }, retryAfter);
  }
  return c.html(<LoginPage next={next} error={error} />, 429, retryAfter);
}
