import { raw } from "hono/html";
import type { Child } from "hono/jsx";
import type { Caller } from "../services";
import type { ApiProblem } from "./api";
import { ASSET_VERSION } from "./assets";
import { utcText } from "./format";

/** A time as UTC text; the page script shows it in the viewer's zone and keeps UTC on hover. */
export function Time({ at }: { at: string | null | undefined }) {
  if (!at) return <span class="muted">—</span>;
  return (
    <time datetime={at} title={utcText(at)}>
      {utcText(at)}
    </time>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status}`}>{status}</span>;
}

/** The session's anti-forgery value: every state-changing form carries it. */
export function CsrfField({ csrf }: { csrf: string }) {
  return <input type="hidden" name="_csrf" value={csrf} />;
}

export function ErrorPanel({ problem, title }: { problem: ApiProblem; title?: string }) {
  return (
    <div class="panel panel-error" role="alert">
      <h2>{title ?? "That did not work"}</h2>
      <p>{problem.error}</p>
      {problem.issues?.length ? (
        <ul>
          {problem.issues.map((i) => (
            <li>
              <code>{i.path}</code>: {i.message}
            </li>
          ))}
        </ul>
      ) : null}
      <p class="muted small">
        code <code>{problem.code}</code> · HTTP {problem.status}
      </p>
    </div>
  );
}

export function Empty({ children }: { children: Child }) {
  return <p class="empty">{children}</p>;
}

export interface NavItem {
  href: string;
  label: string;
  admin?: boolean;
}

const NAV: NavItem[] = [
  { href: "/", label: "Leases" },
  { href: "/offers", label: "Offers" },
  { href: "/schedules", label: "Schedules" },
  { href: "/endpoints", label: "Endpoints" },
  { href: "/account", label: "Spend" },
  { href: "/reaper", label: "Reaper" },
  { href: "/tokens", label: "Tokens", admin: true },
];

export interface LayoutProps {
  title: string;
  current: string;
  caller: Caller;
  csrf: string;
  alarms: Child;
  /** the page's live-update stream, when it has one */
  live?: string;
  children: Child;
}

/** The `<head>` every page shares: charset, viewport, both color schemes, the stylesheet. */
export function DocumentHead(props: { title: string; children?: Child }) {
  return (
    <head>
      <meta charset="utf-8" />
      <meta name="viewport" content="width=device-width, initial-scale=1" />
      <meta name="color-scheme" content="light dark" />
      <link rel="icon" href="data:," />
      <title>{`${props.title} · gpulease`}</title>
      <link rel="stylesheet" href={`/assets/dashboard.css?v=${ASSET_VERSION}`} />
      {props.children}
    </head>
  );
}

/** A table's last header cell for its row buttons, named for screen readers only. */
export function ActionsHeader() {
  return (
    <th scope="col">
      <span class="visually-hidden">Actions</span>
    </th>
  );
}

export function Layout(props: LayoutProps) {
  const admin = props.caller.scopes.includes("admin");
  return (
    <>
      {raw("<!doctype html>")}
      <html lang="en">
        <DocumentHead title={props.title}>
          <script src={`/assets/dashboard.js?v=${ASSET_VERSION}`} defer></script>
        </DocumentHead>
        <body data-live={props.live}>
          <a class="skip" href="#main">
            Skip to content
          </a>
          <header class="top">
            <a class="brand" href="/">
              gpulease
            </a>
            <nav aria-label="Main">
              <ul>
                {NAV.filter((item) => !item.admin || admin).map((item) => (
                  <li>
                    <a href={item.href} aria-current={item.href === props.current ? "page" : undefined}>
                      {item.label}
                    </a>
                  </li>
                ))}
              </ul>
            </nav>
            <form method="post" action="/logout" class="signout">
              <CsrfField csrf={props.csrf} />
              <span class="muted small who">{admin ? "admin" : props.caller.scopes.join(" · ")}</span>
              <button type="submit" class="link">
                Sign out
              </button>
            </form>
          </header>
          <div id="alarms">{props.alarms}</div>
          <main id="main">
            <h1>{props.title}</h1>
            {props.children}
          </main>
          <div id="announcer" class="visually-hidden" aria-live="polite"></div>
        </body>
      </html>
    </>
  );
}

/** Renders a JSX tree to the HTML text an SSE message carries. */
export async function renderHtml(node: unknown): Promise<string> {
  return String(await (node as Promise<string> | string));
}
