import type { Schedule, ScheduleRun } from "../../schedules/schema";
import { BarChart, usdTick } from "../charts";
import { duration, money } from "../format";
import { Empty, Time } from "../ui";

/** How a run ended, as the chart's series and the table say it. */
function outcome(run: ScheduleRun): string {
  if (!run.lease) return run.status === "started" ? "started" : run.status;
  if (run.lease.status !== "stopped") return "running";
  return run.lease.error ? "ended with an error" : "done";
}

const SERIES = ["done", "running", "ended with an error"];

export function SchedulePage(props: { schedule: Schedule; runs: ScheduleRun[] }) {
  const { schedule } = props;
  // The chart reads left to right, oldest first; the table keeps the API's newest first.
  const oldestFirst = [...props.runs].reverse();
  const costed = props.runs.filter((r) => r.lease);
  const total = costed.reduce((sum, r) => sum + (r.lease?.cost_usd ?? 0), 0);
  const minutes = costed.reduce((sum, r) => sum + (r.lease?.minutes ?? 0), 0);
  // Runs of one day are told apart by their time (UTC), else by their day.
  const oneDay = new Set(props.runs.map((r) => r.due_at.slice(0, 10))).size === 1;
  return (
    <>
      <section class="panel">
        <dl class="facts">
          <dt>Id</dt>
          <dd>
            <code class="id">{schedule.id}</code>
          </dd>
          <dt>When</dt>
          <dd>
            <code>{schedule.cron}</code> <span class="muted small">{schedule.timezone}</span>
          </dd>
          <dt>Next run</dt>
          <dd>{schedule.enabled ? <Time at={schedule.next_run_at} /> : <span class="muted">disabled</span>}</dd>
          <dt>Lease</dt>
          <dd>
            {[schedule.lease.provider, schedule.lease.gpu, schedule.lease.template].filter(Boolean).join(" · ") ||
              "best offer"}{" "}
            <span class="muted small">at most {schedule.lease.max_minutes} min</span>
          </dd>
        </dl>
      </section>
      <h2 id="runs">Recent runs</h2>
      {props.runs.length === 0 ? (
        <Empty>No runs yet: the first one is due at its next run time.</Empty>
      ) : (
        <>
          <BarChart
            id="runs-chart"
            title={`Cost of the last ${props.runs.length} runs`}
            description={
              `Cost per run, oldest first (labelled by ${oneDay ? "UTC time" : "UTC day"}), coloured by outcome: ${money(total, "USD")} and ` +
              `${duration(minutes * 60_000)} in all. The table below has every run.`
            }
            emptyText="None of these runs has cost anything yet."
            series={SERIES}
            alarming={["ended with an error"]}
            bars={oldestFirst.map((r) => ({
              label: oneDay ? r.due_at.slice(11, 16) : r.due_at.slice(5, 10),
              values: r.lease ? { [outcome(r)]: r.lease.cost_usd } : {},
            }))}
            line={null}
            format={usdTick}
          />
          <div class="table-wrap">
            <table class="cards runs">
              <caption class="visually-hidden">Recent runs, newest first</caption>
              <thead>
                <tr>
                  <th scope="col">Due</th>
                  <th scope="col">Outcome</th>
                  <th scope="col">Lease</th>
                  <th scope="col" class="r">
                    Minutes
                  </th>
                  <th scope="col" class="r">
                    Cost
                  </th>
                </tr>
              </thead>
              <tbody>
                {props.runs.map((r) => (
                  <tr>
                    <td data-label="Due">
                      <Time at={r.due_at} />
                    </td>
                    <td data-label="Outcome" class={outcome(r) === "failed" || r.lease?.error ? "bad" : undefined}>
                      {outcome(r)}
                      {r.detail ? <span class="muted small block">{r.detail}</span> : null}
                    </td>
                    <td data-label="Lease">{r.lease_id ? <a href={`/leases/${r.lease_id}`}>{r.lease_id}</a> : "—"}</td>
                    <td data-label="Minutes" class="r">
                      {r.lease ? r.lease.minutes.toFixed(1) : "—"}
                    </td>
                    <td data-label="Cost" class="r">
                      {r.lease ? money(r.lease.cost_usd, "USD", r.lease.cost_usd < 0.1 ? 4 : 2) : "—"}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </>
  );
}
