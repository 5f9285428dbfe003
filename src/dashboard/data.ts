import { hasScope } from "../auth/middleware";
import { getUsage, usageView } from "../gateway/usage-store";
import { listCreates } from "../leases/create-records";
import { getLease, type LeaseRow, listLeases } from "../leases/ledger";
import type { Caller, Services } from "../services";
import { type LeaseView, leaseView } from "./leases-view";

/** Every lease still costing or being torn down: the leases page and every page's alarms read these. */
export async function activeRows(services: Services): Promise<LeaseRow[]> {
  return (await listLeases(services.db, { status: "active", limit: 200 })).rows;
}

export async function recentStoppedRows(services: Services): Promise<LeaseRow[]> {
  return (await listLeases(services.db, { status: "stopped", limit: 10 })).rows;
}

export async function leaseRow(services: Services, leaseId: string): Promise<LeaseRow | null> {
  return /^lse_[0-9a-z]{22}$/.test(leaseId) ? getLease(services.db, leaseId) : null;
}

export function views(rows: readonly LeaseRow[], services: Services): LeaseView[] {
  const now = services.clock();
  return rows.map((row) => leaseView(row, now, services.config));
}

/** One lease's view with its create records, for its own page. */
export async function detailView(row: LeaseRow, services: Services): Promise<LeaseView> {
  const [creates, usage] = await Promise.all([listCreates(services.db, row.id), getUsage(services.db, row.id)]);
  const view = leaseView(row, services.clock(), services.config, creates);
  return { ...view, lease: { ...view.lease, usage: usageView(usage, row, services.config.eurUsd) } };
}

/** Lease pages read the ledger directly: the same rule as the API's GET routes applies. */
export const canRead = (caller: Caller) => hasScope(caller, "read");
