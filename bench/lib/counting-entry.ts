// A bench-only entry for `wrangler dev` (never deployed; bench/gateway.mjs): the worker itself,
// with every D1 statement and Durable Object call its fetch handler makes counted (its waitUntil
// work included; not what the Durable Objects do inside), read at GET /__bench/counts.
import worker from "../../src/index";

export { EndpointDO, LeaseKeeper, OffersCache, RateLimiter, SimCloud, WebhookSender } from "../../src/index";

const counts = { d1: 0, durableObject: 0, byObject: {} as Record<string, number> };
const NAMESPACES = ["LEASE_KEEPER", "SIM_CLOUD", "RATE_LIMITER", "WEBHOOK_SENDER", "OFFERS_CACHE"];

/** D1: every statement prepared (each is run once here), every batch and exec. */
function countingDb(db: D1Database): D1Database {
  return new Proxy(db, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (name === "prepare" || name === "exec" || name === "batch") counts.d1 += 1;
        return Reflect.apply(value, target, args);
      };
    },
  });
}

/** A stub whose every method call (RPC or fetch) is one Durable Object call. */
function countingStub(stub: object, binding: string): object {
  return new Proxy(stub, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (typeof value !== "function" || typeof name !== "string" || name === "then") return value;
      return (...args: unknown[]) => {
        counts.durableObject += 1;
        counts.byObject[`${binding}.${name}`] = (counts.byObject[`${binding}.${name}`] ?? 0) + 1;
        return Reflect.apply(value, target, args);
      };
    },
  });
}

function countingNamespace(ns: DurableObjectNamespace, binding: string): DurableObjectNamespace {
  return new Proxy(ns, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (name !== "get" && name !== "getByName") return typeof value === "function" ? value.bind(target) : value;
      return (...args: unknown[]) => countingStub(Reflect.apply(value, target, args), binding);
    },
  });
}

// One counting view per env, as workerd hands the worker one env: what is cached by env (the
// parsed config) stays cached, as in the worker itself.
const views = new WeakMap<Env, Env>();

function countingEnv(env: Env): Env {
  const view = views.get(env) ?? countingView(env);
  views.set(env, view);
  return view;
}

function countingView(env: Env): Env {
  return new Proxy(env, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (name === "DB") return countingDb(value as D1Database);
      if (typeof name === "string" && NAMESPACES.includes(name))
        return countingNamespace(value as DurableObjectNamespace, name);
      return value;
    },
  });
}

export default {
  ...worker,
  fetch(request: Request, env: Env, ctx: ExecutionContext) {
    if (new URL(request.url).pathname === "/__bench/counts") return Response.json(counts);
    return worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, countingEnv(env), ctx);
  },
} satisfies ExportedHandler<Env>;
