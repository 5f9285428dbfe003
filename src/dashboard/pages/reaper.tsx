import type { ReaperRun } from "../../reaper/runs";
import { Empty, Time } from "../ui";

export function ReaperPage({ runs }: { runs: ReaperRun[] }) {
  if (!runs.length) {
    return (
      <Empty>
        The reaper has not run yet. It runs every 10 minutes, compares each provider's machines with the ledger and
        tears down what nobody is paying attention to.
      </Empty>
    );
  }
  return (
    <>
      {runs.map((run) => (
        <section class="panel">
          <h2>
            <Time at={run.at} /> <span class="muted small">{run.mode}</span>
          </h2>
          <p class="small">
            {run.providers.map((p) => (
              <span class="block">
                <strong>{p.provider}</strong>:{" "}
                {p.error ? <span class="bad">listing failed: {p.error}</span> : `${p.listed ?? 0} machines listed`}
              </span>
            ))}
          </p>
          {run.actions.length ? (
            <ul>
              {run.actions.map((a) => (
                <li>
                  <strong>{a.kind.replace(/_/g, " ")}</strong> {a.provider ?? ""}{" "}
                  {a.provider_ref ? <code>{a.provider_ref}</code> : null}{" "}
                  <a href={`/leases/${a.lease_id}`}>{a.lease_id}</a> — {a.detail}{" "}
                  <span class={a.outcome === "failed" ? "bad" : "muted"}>({a.outcome})</span>
                </li>
              ))}
            </ul>
          ) : (
            <p class="muted small">Nothing to do: every machine is accounted for.</p>
          )}
        </section>
      ))}
    </>
  );
}
