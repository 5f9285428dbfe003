/**
 * The keeper of one lease: a Durable Object named by the lease id. RPC methods:
 * `start(leaseId)`, `stop(reason, detail?)`, `jobDone(exitCode)`, `ensureAlarm()`.
 */
export function keeperFor(env: Env, leaseId: string) {
  return env.LEASE_KEEPER.getByName(leaseId);
}
