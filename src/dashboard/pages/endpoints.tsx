import type { Endpoint } from "../../endpoints/schema";
import { BarChart } from "../charts";
import { duration, money } from "../format";
import { Empty, StatusBadge, Time } from "../ui";

const usd = (value: number | null) => (value === null ? "—" : money(value, "USD", value < 1 ? 4 : 2));
const seconds = (value: number, step: number) => `${(value / 1000).toFixed(step < 1000 ? 1 : 0)} s`;

/** The Endpoints page: every endpoint, its replicas and today's figures; its cold starts as a chart with their table. */
export function EndpointsPage(props: { endpoints: Endpoint[] }) {
  if (props.endpoints.length === 0) {
    return (
      <Empty>
        No endpoints yet: <code>gpulease endpoint create NAME --model M</code> or <code>POST /v1/endpoints</code>.
      </Empty>
    );
  }
  return (
    <>
      <div class="table-wrap">
        <table>
          <caption class="visually-hidden">Endpoints, by name</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Model</th>
              <th scope="col">State</th>
              <th scope="col" class="r">
                Running
              </th>
              <th scope="col" class="r">
                Requests today
              </th>
              <th scope="col" class="r">
                Tokens today
              </th>
              <th scope="col" class="r">
                Cost / M tokens
              </th>
              <th scope="col" class="r">
                Spend today
              </th>
            </tr>
          </thead>
          <tbody>
            {props.endpoints.map((e) => (
              <tr>
                <th scope="row">
                  <a href={`#endpoint-${e.name}`}>{e.name}</a>
                </th>
                <td>{e.model}</td>
                <td>
                  <StatusBadge status={e.state} />
                </td>
                <td class="r">
                  {e.replicas.filter((r) => r.status === "running").length} of {e.min_replicas}–{e.max_replicas}
                </td>
                <td class="r">{e.usage_today.requests}</td>
                <td class="r">{e.usage_today.prompt_tokens + e.usage_today.completion_tokens}</td>
                <td class="r">{usd(e.usage_today.usd_per_million_tokens)}</td>
                <td class={e.budget_daily_usd !== null && e.spend_today_usd >= e.budget_daily_usd ? "r bad" : "r"}>
                  {usd(e.spend_today_usd)}
                  {e.budget_daily_usd === null ? "" : ` of ${usd(e.budget_daily_usd)}`}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {props.endpoints.map((e) => (
        <EndpointSection endpoint={e} />
      ))}
    </>
  );
}

function EndpointSection({ endpoint: e }: { endpoint: Endpoint }) {
  const starts = e.cold_starts;
  const mean = starts.length ? starts.reduce((sum, s) => sum + s.duration_ms, 0) / starts.length : 0;
  return (
    <section class="panel" aria-labelledby={`endpoint-${e.name}`}>
      <h2 id={`endpoint-${e.name}`}>{e.name}</h2>
      <dl class="facts">
        <dt>Base URL</dt>
        <dd>
          <code>{e.base_url}</code> <span class="muted small">model "{e.name}"</span>
        </dd>
        <dt>Scaling</dt>
        <dd>
          {e.min_replicas}–{e.max_replicas} replicas, stopped after {e.idle_minutes} min idle, another above{" "}
          {e.target_in_flight} requests in flight each
        </dd>
        <dt>Cold start</dt>
        <dd>
          {e.cold_start_wait_s > 0 ? `requests held up to ${e.cold_start_wait_s} s` : "503 with Retry-After at once"}
        </dd>
        <dt>Failed starts in a row</dt>
        <dd>{e.failed_starts}</dd>
      </dl>
      <h3>Replicas</h3>
      {e.replicas.length === 0 ? (
        <Empty>No replica: it costs nothing until the next request.</Empty>
      ) : (
        <div class="table-wrap">
          <table>
            <caption class="visually-hidden">Replicas of {e.name}</caption>
            <thead>
              <tr>
                <th scope="col">Lease</th>
                <th scope="col">State</th>
                <th scope="col" class="r">
                  In flight
                </th>
                <th scope="col">Last request</th>
              </tr>
            </thead>
            <tbody>
              {e.replicas.map((r) => (
                <tr>
                  <td>{r.lease_id ? <a href={`/leases/${r.lease_id}`}>{r.lease_id}</a> : "renting…"}</td>
                  <td>
                    <StatusBadge status={r.status} />
                  </td>
                  <td class="r">{r.in_flight}</td>
                  <td>
                    <Time at={r.last_request_at} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h3>Cold starts</h3>
      <BarChart
        id={`cold-${e.name}`}
        title={`Cold starts of ${e.name}`}
        description={
          starts.length === 0
            ? "No cold start yet."
            : `${starts.length} cold starts, oldest first: first waiting request until a replica answered, ${duration(mean)} on average. The table below has each.`
        }
        emptyText="No cold start yet."
        series={["cold start"]}
        bars={starts.map((s) => ({ label: s.at.slice(11, 16), values: { "cold start": s.duration_ms } }))}
        line={null}
        format={seconds}
      />
      {starts.length > 0 && (
        <details class="figures">
          <summary>Every cold start</summary>
          <div class="table-wrap scroll">
            <table>
              <caption class="visually-hidden">Cold starts of {e.name}</caption>
              <thead>
                <tr>
                  <th scope="col">Answered at</th>
                  <th scope="col" class="r">
                    Duration
                  </th>
                </tr>
              </thead>
              <tbody>
                {[...starts].reverse().map((s) => (
                  <tr>
                    <td>
                      <Time at={s.at} />
                    </td>
                    <td class="r">{duration(s.duration_ms)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </details>
      )}
    </section>
  );
}
