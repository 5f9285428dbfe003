import type { Caller } from "../services";

/**
 * Requests the worker sends to itself on behalf of a signed-in dashboard session. Keyed by the
 * Request object, which only this isolate's code can hold: nothing arriving over the network can
 * be in here, so no header or cookie can claim an internal caller.
 */
const internalCallers = new WeakMap<Request, Caller>();

/** Marks `request` as made by `caller`; authenticate then takes the caller instead of a bearer token. */
export function actAs(request: Request, caller: Caller): Request {
  internalCallers.set(request, caller);
  return request;
}

/** The caller an in-process request acts as, or undefined for a request from outside. */
export function internalCallerOf(request: Request): Caller | undefined {
  return internalCallers.get(request);
}
