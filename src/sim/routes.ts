import { createRoute, z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import { requireScope } from "../auth/middleware";
import { ApiError, errorResponses } from "../errors";
import { iso } from "../lib/time";
import { bearerSecurity, createRouter } from "../router";
import type { AppEnv } from "../services";
import { SIM_GPU_SLUGS } from "./catalogue";
import { type SimMachineView, simCloud } from "./cloud";
import { SimFaultsPatchSchema, type SimSettings } from "./settings";

/** The simulated cloud exists only when ENABLE_SIM is on; otherwise its routes do not either. */
const simEnabled = createMiddleware<AppEnv>(async (c, next) => {
  if (!c.get("services").config.enableSim) {
    throw new ApiError("not_found", "the simulated cloud is off (set ENABLE_SIM=true)");
  }
  await next();
});

const guards = [simEnabled, requireScope("admin")] as const;

const seconds = z.number().min(0).max(86_400);

const ConfigPatchSchema = z
  .object({
    boot_seconds: seconds.optional().openapi({ description: "from create to running", example: 20 }),
    linger_seconds: seconds
      .optional()
      .openapi({ description: "a terminated machine still exists this long", example: 8 }),
    ready_seconds: seconds.optional().openapi({ description: "Ollama answers this long after running", example: 5 }),
    download_mbs: z
      .number()
      .min(0.001)
      .max(100_000)
      .optional()
      .openapi({ description: "how fast new machines download model weights, MB/s", example: 250 }),
    credit_usd: z
      .number()
      .min(0)
      .max(1_000_000)
      .optional()
      .openapi({ description: "the account's credit; spend is subtracted" }),
    stock_scale: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .optional()
      .openapi({ description: "multiplies every GPU type's stock", example: 1 }),
    faults: SimFaultsPatchSchema.optional().openapi({
      description: "switch faults on or off; each applies to machines created (or calls made) from now on",
      example: { no_capacity: ["h100-sxm"], ignore_terminates: 2, pull_failure: true, partial_gpu: 0.5 },
    }),
  })
  .strict()
  .openapi("SimConfigPatch");

const FaultsSchema = z.object({
  no_capacity: z.union([z.boolean(), z.array(z.string())]),
  stuck_booting: z.boolean(),
  fail_start: z.string().nullable(),
  ignore_terminates: z.number().int(),
  status_error: z.boolean(),
  listing_error: z.boolean(),
  exit: z.object({ after_seconds: z.number(), reason: z.string() }).nullable(),
  error_but_created: z.boolean(),
  pull_failure: z.object({ error: z.string(), after_fraction: z.number() }).nullable(),
  partial_gpu: z.number().nullable(),
});

const ConfigSchema = z
  .object({
    boot_seconds: z.number(),
    linger_seconds: z.number(),
    ready_seconds: z.number(),
    download_mbs: z.number(),
    credit_usd: z.number(),
    stock_scale: z.number(),
    faults: FaultsSchema,
  })
  .openapi("SimConfig");

const MachineSchema = z
  .object({
    ref: z.string().openapi({ example: "sim-3f9a0c1d2e4b" }),
    label: z.string().nullable(),
    gpu: z.string(),
    gpu_count: z.number().int(),
    price_per_hour: z.number(),
    currency: z.literal("USD"),
    created_at: z.string(),
    state: z
      .enum(["booting", "running", "failed", "exited", "terminating", "gone"])
      .openapi({ description: "the simulation's truth" }),
    shown: z.enum(["booting", "running", "exited", "gone"]).openapi({ description: "what the sim adapter reports" }),
    running_since: z.string().nullable(),
    terminate_requested_at: z.string().nullable(),
    ollama_ready: z.boolean(),
    cost_usd: z.number(),
    error: z.string().nullable(),
    ports: z.array(z.number().int()),
    ignore_terminates: z.number().int().openapi({ description: "terminates it will still ignore" }),
    ollama: z
      .object({
        model: z.string().nullable().openapi({ description: "what its start command pulls and loads" }),
        probe: z
          .object({
            phase: z.enum(["down", "pulling", "loading", "spilled", "ready", "failed"]),
            completed: z.number().nullable().optional(),
            total: z.number().nullable().optional(),
            digest: z.string().optional(),
            size: z.number().optional(),
            size_vram: z.number().optional(),
            loaded_at: z.number().nullable().optional().openapi({ description: "ready: when its load ended (ms)" }),
            error: z.string().optional(),
          })
          .openapi({ description: "what the keeper's probe finds for that model now" }),
      })
      .nullable()
      .openapi({ description: "its Ollama server (Ollama template only), at <origin>/sim/ollama/<ref>" }),
  })
  .openapi("SimMachine");

const StateSchema = z
  .object({ config: ConfigSchema, balance_usd: z.number(), machines: z.array(MachineSchema) })
  .openapi("SimState");

const PlantSchema = z
  .object({
    label: z.string().trim().min(1).max(200).nullable().openapi({ example: "gpulease-lse_01jb3k8x0m4q7r2s5t6v9w" }),
    gpu: z.enum(SIM_GPU_SLUGS).default("rtx-4090"),
    gpu_count: z.number().int().min(1).max(8).default(1),
    age_seconds: z
      .number()
      .min(0)
      .max(30 * 86_400)
      .default(0)
      .openapi({ description: "created this long ago" }),
  })
  .strict()
  .openapi("SimPlant");

const RefParamsSchema = z.object({
  ref: z
    .string()
    .min(1)
    .max(100)
    .openapi({ param: { name: "ref", in: "path" }, example: "sim-3f9a0c1d2e4b" }),
});

const OkSchema = z.object({ ok: z.literal(true) });

const common = { tags: ["sim"], security: bearerSecurity, middleware: [...guards] };

const getStateRoute = createRoute({
  ...common,
  method: "get",
  path: "/sim",
  summary: "The simulated cloud: settings, balance and machines (admin; only with ENABLE_SIM)",
  responses: {
    200: {
      description: "Settings, balance and every machine that still exists.",
      content: { "application/json": { schema: StateSchema } },
    },
    ...errorResponses("forbidden", "not_found"),
  },
});

const putConfigRoute = createRoute({
  ...common,
  method: "put",
  path: "/sim/config",
  summary:
    "Change boot, linger and ready times and the download speed, and switch faults (admin; only with ENABLE_SIM)",
  request: { body: { content: { "application/json": { schema: ConfigPatchSchema } }, required: true } },
  responses: {
    200: {
      description: "The settings now in force; fields left out kept their value.",
      content: { "application/json": { schema: z.object({ config: ConfigSchema }) } },
    },
    ...errorResponses("forbidden", "not_found"),
  },
});

const resetRoute = createRoute({
  ...common,
  method: "post",
  path: "/sim/reset",
  summary: "Back to the defaults: no machines, no faults, full credit (admin; only with ENABLE_SIM)",
  responses: {
    200: {
      description: "Reset.",
      content: { "application/json": { schema: z.object({ ok: z.literal(true), config: ConfigSchema }) } },
    },
    ...errorResponses("forbidden", "not_found"),
  },
});

const plantRoute = createRoute({
  ...common,
  method: "post",
  path: "/sim/machines",
  summary: "Plant a machine that no lease rented, e.g. a labelled leak for the reaper (admin; only with ENABLE_SIM)",
  request: { body: { content: { "application/json": { schema: PlantSchema } }, required: true } },
  responses: {
    201: {
      description: "The planted machine.",
      content: { "application/json": { schema: z.object({ machine: MachineSchema }) } },
    },
    ...errorResponses("forbidden", "not_found"),
  },
});

const removeRoute = createRoute({
  ...common,
  method: "delete",
  path: "/sim/machines/{ref}",
  summary: "Make a machine vanish at once, as if removed behind our back (admin; only with ENABLE_SIM)",
  request: { params: RefParamsSchema },
  responses: {
    200: { description: "Removed.", content: { "application/json": { schema: OkSchema } } },
    ...errorResponses("forbidden", "not_found"),
  },
});

const exitRoute = createRoute({
  ...common,
  method: "post",
  path: "/sim/machines/{ref}/exit",
  summary: "A machine dies on its own now (admin; only with ENABLE_SIM)",
  request: {
    params: RefParamsSchema,
    body: {
      content: {
        "application/json": { schema: z.object({ reason: z.string().trim().min(1).max(300).optional() }).strict() },
      },
      required: false,
    },
  },
  responses: {
    200: { description: "It exited.", content: { "application/json": { schema: OkSchema } } },
    ...errorResponses("forbidden", "not_found"),
  },
});

function configBody(settings: SimSettings): z.infer<typeof ConfigSchema> {
  return {
    boot_seconds: settings.bootSeconds,
    linger_seconds: settings.lingerSeconds,
    ready_seconds: settings.readySeconds,
    download_mbs: settings.downloadMbs,
    credit_usd: settings.creditUsd,
    stock_scale: settings.stockScale,
    faults: settings.faults,
  };
}

function machineBody(m: SimMachineView): z.infer<typeof MachineSchema> {
  return {
    ref: m.ref,
    label: m.label,
    gpu: m.gpu,
    gpu_count: m.gpu_count,
    price_per_hour: m.price_per_hour,
    currency: "USD",
    created_at: iso(m.created_at),
    state: m.state,
    shown: m.shown,
    running_since: m.running_since === null ? null : iso(m.running_since),
    terminate_requested_at: m.terminate_requested_at === null ? null : iso(m.terminate_requested_at),
    ollama_ready: m.ready,
    cost_usd: m.cost_usd,
    error: m.error,
    ports: m.ports,
    ignore_terminates: m.ignore_terminates,
    ollama: m.ollama,
  };
}

/** Admin-only control of the simulated cloud, for local runs, demos and benches. */
export const simRoutes = createRouter()
  .openapi(getStateRoute, async (c) => {
    const state = await simCloud(c.get("services").env.SIM_CLOUD).describe();
    return c.json(
      { config: configBody(state.settings), balance_usd: state.balance_usd, machines: state.machines.map(machineBody) },
      200,
    );
  })
  .openapi(putConfigRoute, async (c) => {
    const body = c.req.valid("json");
    const settings = await simCloud(c.get("services").env.SIM_CLOUD).configure({
      bootSeconds: body.boot_seconds,
      lingerSeconds: body.linger_seconds,
      readySeconds: body.ready_seconds,
      downloadMbs: body.download_mbs,
      creditUsd: body.credit_usd,
      stockScale: body.stock_scale,
      faults: body.faults,
    });
    return c.json({ config: configBody(settings) }, 200);
  })
  .openapi(resetRoute, async (c) => {
    const settings = await simCloud(c.get("services").env.SIM_CLOUD).reset();
    return c.json({ ok: true as const, config: configBody(settings) }, 200);
  })
  .openapi(plantRoute, async (c) => {
    const body = c.req.valid("json");
    const machine = await simCloud(c.get("services").env.SIM_CLOUD).plant(body);
    return c.json({ machine: machineBody(machine) }, 201);
  })
  .openapi(removeRoute, async (c) => {
    const { ref } = c.req.valid("param");
    if (!(await simCloud(c.get("services").env.SIM_CLOUD).remove(ref)))
      throw new ApiError("not_found", "no such sim machine");
    return c.json({ ok: true as const }, 200);
  })
  .openapi(exitRoute, async (c) => {
    const { ref } = c.req.valid("param");
    const reason = c.req.header("content-type")?.includes("application/json") ? c.req.valid("json").reason : undefined;
    if (!(await simCloud(c.get("services").env.SIM_CLOUD).exit(ref, reason)))
      throw new ApiError("not_found", "no such sim machine");
    return c.json({ ok: true as const }, 200);
  });
