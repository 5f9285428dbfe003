import { hasScope } from "../../auth/middleware";
import type { Schedule } from "../../schedules/schema";
import type { Caller } from "../../services";
import { ActionsHeader, CsrfField, Empty, Time } from "../ui";

export function SchedulesPage(props: { schedules: Schedule[]; caller: Caller; csrf: string }) {
  if (!props.schedules.length) {
    return (
      <Empty>
        No schedules yet. Create one with <code>POST /v1/schedules</code> or <code>gpulease schedules add</code>; it
        shows here with its next run.
      </Empty>
    );
  }
  const canToggle = hasScope(props.caller, "admin");
  const canRun = hasScope(props.caller, "rent");
  return (
    <div class="table-wrap">
      <table class="cards">
        <caption class="visually-hidden">Schedules</caption>
        <thead>
          <tr>
            <th scope="col">Schedule</th>
            <th scope="col">When</th>
            <th scope="col">Next run</th>
            <th scope="col">Last run</th>
            <th scope="col">State</th>
            {canToggle || canRun ? <ActionsHeader /> : null}
          </tr>
        </thead>
        <tbody>
          {props.schedules.map((s) => (
            <tr data-schedule-id={s.id}>
              <td data-label="Schedule">
                <a class="lease-name" href={`/schedules/${s.id}`}>
                  {s.name}
                </a>
                <code class="muted id block">{s.id}</code>
              </td>
              <td data-label="When">
                <code>{s.cron}</code>
                <span class="muted small block">{s.timezone}</span>
              </td>
              <td data-label="Next run">
                {s.enabled ? <Time at={s.next_run_at} /> : <span class="muted">disabled</span>}
              </td>
              <td data-label="Last run">
                <Time at={s.last_run_at} />
                {s.last_lease_id ? (
                  <a class="small block" href={`/leases/${s.last_lease_id}`}>
                    its lease
                  </a>
                ) : null}
                {s.last_skip ? (
                  <span class="muted small block">
                    {s.last_skip.status}: {s.last_skip.detail ?? ""}
                  </span>
                ) : null}
              </td>
              <td data-label="State">
                <span class={`badge ${s.enabled ? "badge-on" : "badge-off"}`}>
                  {s.enabled ? "enabled" : "disabled"}
                </span>
              </td>
              {canToggle || canRun ? (
                <td data-label="Actions" class="actions">
                  {canToggle ? (
                    <form method="post" action={`/schedules/${s.id}/enabled`} class="inline">
                      <CsrfField csrf={props.csrf} />
                      <input type="hidden" name="enabled" value={s.enabled ? "false" : "true"} />
                      <button type="submit" aria-label={`${s.enabled ? "Disable" : "Enable"} ${s.name}`}>
                        {s.enabled ? "Disable" : "Enable"}
                      </button>
                    </form>
                  ) : null}{" "}
                  {canRun ? (
                    <form method="post" action={`/schedules/${s.id}/run`} class="inline">
                      <CsrfField csrf={props.csrf} />
                      <button type="submit" aria-label={`Run now: ${s.name}`}>
                        Run now
                      </button>
                    </form>
                  ) : null}
                </td>
              ) : null}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
