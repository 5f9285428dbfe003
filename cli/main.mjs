// @ts-check
// The `gpulease` command. Argument parsing is commander's (maintained, typed, subcommands and
// help for free); colour is picocolors'. Exit codes: 0 success, 1 the API answered an error,
// 2 usage error.
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { ApiFailure, call, clientFor, jsonOnly, settings, UsageError } from "./api.mjs";
import { eventLine, followEvents, followRent } from "./follow.mjs";
import { money, pc, statusColour, table } from "./format.mjs";

/** @param {string} value */
function positiveNumber(value) {
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value.trim()) || !(n > 0)) throw new InvalidArgumentError("expected a positive number");
  return n;
}

/** @param {string} value */
function wholeNumber(value) {
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1) throw new InvalidArgumentError("expected a whole number ≥ 1");
  return Number(value);
}

/** @param {unknown} data */
const printJson = (data) => {
  process.stdout.write(`${JSON.stringify(data, null, 2)}\n`);
};

/** @typedef {import("../client/index.d.mts").operations} Operations */

/** The lease flags shared by `rent` and `schedules add`. @param {Command} command */
function leaseOptions(command) {
  return command
    .option("--offer <id>", "an offer_id from `gpulease offers`")
    .option("--provider <name>", "runpod, vast, vramfarm or sim")
    .option("--gpu <name>", "GPU name, case-insensitive substring (4090, H100)")
    .option("--vram <gb>", "minimum GPU memory, GB", positiveNumber)
    .option("--max-price <usd>", "per hour, USD", positiveNumber)
    .requiredOption("--max-minutes <n>", "stop after this many minutes of running", wholeNumber)
    .option("--max-cost <usd>", "stop when the lease has cost this much, USD", positiveNumber)
    .addOption(new Option("--template <template>", "what runs on the machine").choices(["ollama", "custom"]))
    .option("--image <image>", "Docker image (custom template)")
    .option("--cmd <command>", "command to run (custom template)")
    .option("--model <name>", "an Ollama model to pull, load and answer before the lease runs (qwen2.5:32b)")
    .option("--context-length <n>", "the context the model must hold (with --model)", wholeNumber)
    .option("--name <name>", "a name for the lease");
}

/**
 * The POST /v1/leases body from the lease flags.
 * @param {Record<string, any>} o
 */
function leaseBody(o) {
  if (o.offer && (o.provider || o.gpu || o.vram))
    throw new UsageError("--offer cannot be combined with --provider/--gpu/--vram");
  return Object.fromEntries(
    Object.entries({
      name: o.name,
      offer_id: o.offer,
      provider: o.provider,
      gpu: o.gpu,
      vram_gb: o.vram,
      max_price: o.maxPrice,
      max_minutes: o.maxMinutes,
      max_cost: o.maxCost,
      template: o.template,
      image: o.image,
      cmd: o.cmd,
      model: o.model,
      context_length: o.contextLength,
    }).filter(([, value]) => value !== undefined),
  );
}

/**
 * How a lease ended, for a morning look: its stop reason and whether the teardown was verified
 * (a stopping lease whose machine is not yet confirmed gone says so in red).
 * @param {import("../client/index.d.mts").Lease} lease
 */
function ending(lease) {
  if (lease.status === "stopped") {
    const verified = lease.teardown_verified_at ? pc.green("verified") : pc.red("NOT VERIFIED");
    return `${lease.stop_reason ?? "stopped"} · ${verified}`;
  }
  if (lease.status === "stopping") return `${lease.stop_reason ?? "stopping"} · ${pc.yellow("not yet verified")}`;
  return "";
}

/**
 * One row per UTC day (oldest first), one column per provider that spent anything, the total,
 * what providers billed where they say, and the daily budget when one is set.
 * @param {Operations["getAccountSpend"]["responses"]["200"]["content"]["application/json"]} spend
 */
function spendTable(spend) {
  const providers = [...new Set(spend.days.flatMap((d) => Object.keys(d.providers)))].sort();
  const rows = spend.days.map((d) => [
    d.day,
    ...providers.map((p) => d.providers[p] ?? 0),
    d.total,
    d.billed,
    spend.budget.daily !== null && d.total > spend.budget.daily ? pc.red("over budget") : "",
  ]);
  const header = ["DAY", ...providers.map((p) => p.toUpperCase()), "TOTAL", "BILLED", ""];
  const sum = spend.days.reduce((total, d) => total + d.total, 0);
  const budget = spend.budget.daily === null ? "no daily budget" : `daily budget ${spend.budget.daily}`;
  return `${table(header, rows)}\n\n${spend.days.length} days: ${money(Math.round(sum * 10_000) / 10_000, spend.currency)} (${budget})`;
}

/** @param {import("../client/index.d.mts").Lease} lease */
function leaseSummary(lease) {
  const rows = [
    ["id", lease.id],
    ["name", lease.name],
    ["status", statusColour(lease.status)],
    ["provider", lease.provider && `${lease.provider} ${lease.provider_ref ?? ""}`.trim()],
    ["gpu", lease.gpu && `${lease.gpu_count ?? 1}× ${lease.gpu}`],
    ["price", lease.price_per_hour === null ? null : `${money(lease.price_per_hour, lease.currency)}/h`],
    ["cost", money(lease.cost, lease.currency)],
    ["model", lease.model && `${lease.model.name}${lease.model.loaded_at ? " (loaded)" : ""}`],
    ["caps", `${lease.max_minutes} min${lease.max_cost ? `, ${lease.max_cost} USD` : ""}`],
    ["image", lease.spec.image],
    ["cmd", lease.spec.cmd],
    ["ports", lease.spec.ports.join(" ")],
    ["disk", lease.spec.disk_gb ? `${lease.spec.disk_gb} GB` : null],
    [
      "env",
      Object.keys(lease.spec.env)
        .map((key) => `${key}=***`)
        .join(" "),
    ],
    ["urls", (lease.access?.urls ?? []).join(" ")],
    ["openai", lease.access?.openai_base_url ?? null],
    [
      "usage",
      lease.usage &&
        `${lease.usage.requests} requests, ${lease.usage.prompt_tokens}+${lease.usage.completion_tokens} tokens` +
          (lease.usage.decode_tokens_per_s !== null ? `, ${lease.usage.decode_tokens_per_s} tok/s` : "") +
          (lease.usage.usd_per_million_tokens !== null
            ? `, ${lease.usage.usd_per_million_tokens} USD per M tokens`
            : ""),
    ],
    ["stop reason", lease.stop_reason],
    ["error", lease.error],
    ["created", lease.created_at],
    ["running since", lease.running_at],
    ["stopped", lease.stopped_at],
    ["teardown verified", lease.teardown_verified_at],
  ];
  return rows
    .filter(([, value]) => value)
    .map(([key, value]) => `${pc.dim(String(key).padEnd(18))}${value}`)
    .join("\n");
}

export function buildProgram() {
  const program = new Command("gpulease")
    .description("Rent GPU machines through your gpulease worker (GPULEASE_URL, GPULEASE_TOKEN).")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(pc.red(text)) });
  const json = () => new Option("--json", "print the API's JSON, nothing else on stdout");
  const ctx = () => {
    const s = settings();
    return { s, client: clientFor(s) };
  };

  program
    .command("offers")
    .description("live offers, best value first")
    .option("--vram <gb>", "minimum GPU memory, GB", positiveNumber)
    .option("--gpu <name>", "GPU name, case-insensitive substring")
    .option("--provider <p>", "runpod, vast, vramfarm, sim (comma list)")
    .option("--max-price <usd>", "per hour, USD", positiveNumber)
    .addOption(json())
    .action(async (o) => {
      const { s, client } = ctx();
      /** @type {NonNullable<Operations["listOffers"]["parameters"]["query"]>} */
      const query = {};
      if (o.vram !== undefined) query.vram_gb = o.vram;
      if (o.gpu !== undefined) query.gpu = o.gpu;
      if (o.provider !== undefined) query.provider = o.provider;
      if (o.maxPrice !== undefined) query.max_price = o.maxPrice;
      const data = await call(client.GET("/v1/offers", { params: { query } }), s.url);
      if (o.json) return printJson(data);
      const rows = data.offers.map((offer) => [
        offer.offer_id,
        offer.gpu_count > 1 ? `${offer.gpu_count}× ${offer.gpu}` : offer.gpu,
        offer.vram_gb,
        offer.price_per_hour,
        offer.currency,
        offer.provider,
        offer.availability,
        offer.load_time_s,
        offer.value,
      ]);
      console.log(table(["OFFER", "GPU", "VRAM_GB", "PER_HOUR", "CUR", "PROVIDER", "AVAIL", "LOAD_S", "VALUE"], rows));
      for (const e of data.errors) console.error(pc.yellow(`${e.provider}: ${e.code}: ${e.error}`));
    });

  leaseOptions(program.command("rent").description("rent a machine"))
    .option("--follow", "show the lease coming up, then print its access URLs")
    .addOption(json())
    .action(async (o) => {
      const body = leaseBody(o);
      const { s, client } = ctx();
      const lease = await call(client.POST("/v1/leases", { body: /** @type {any} */ (body) }), s.url);
      if (o.follow) return followRent(client, s.url, lease, { json: Boolean(o.json) });
      if (o.json) return printJson(lease);
      console.log(`${lease.id} ${statusColour(lease.status)} (gpulease events ${lease.id} --follow)`);
    });

  program
    .command("ls")
    .description("active leases (--all: every lease)")
    .option("--all", "include stopped leases")
    .addOption(json())
    .action(async (o) => {
      const { s, client } = ctx();
      /** @type {NonNullable<Operations["listLeases"]["parameters"]["query"]>} */
      const query = o.all ? { limit: 50 } : { status: "active", limit: 50 };
      const data = await call(client.GET("/v1/leases", { params: { query } }), s.url);
      if (o.json) return printJson(data);
      const rows = data.leases.map((l) => [
        l.id,
        l.name,
        statusColour(l.status),
        l.gpu,
        l.provider,
        l.price_per_hour,
        l.cost,
        l.created_at.slice(0, 19).replace("T", " "),
        ...(o.all ? [ending(l)] : []),
      ]);
      const header = ["ID", "NAME", "STATUS", "GPU", "PROVIDER", "PER_HOUR", "COST", "CREATED"];
      console.log(table(o.all ? [...header, "ENDED"] : header, rows));
    });

  program
    .command("show")
    .description("one lease")
    .argument("<id>", "lease id")
    .addOption(json())
    .action(async (id, o) => {
      const { s, client } = ctx();
      const lease = await call(client.GET("/v1/leases/{id}", { params: { path: { id } } }), s.url);
      if (o.json) return printJson(lease);
      console.log(leaseSummary(lease));
    });

  program
    .command("events")
    .description("a lease's events (--follow: live, until it is stopped)")
    .argument("<id>", "lease id")
    .option("--follow", "stream new events as they happen")
    .addOption(json())
    .action(async (id, o) => {
      const { s, client } = ctx();
      if (o.follow) return followEvents(client, s.url, id, { json: Boolean(o.json) });
      const data = jsonOnly(await call(client.GET("/v1/leases/{id}/events", { params: { path: { id } } }), s.url));
      if (o.json) return printJson(data);
      for (const event of data.events) console.log(eventLine(event));
    });

  program
    .command("stop")
    .description("stop a lease (teardown is verified in the background)")
    .argument("<id>", "lease id")
    .addOption(json())
    .action(async (id, o) => {
      const { s, client } = ctx();
      const data = await call(client.POST("/v1/leases/{id}/stop", { params: { path: { id } } }), s.url);
      if (o.json) return printJson(data);
      console.log(data.already ? `${id} was already stopping` : `${id} is stopping`);
    });

  program
    .command("stop-all")
    .description("stop every lease and every labelled machine at every provider (admin)")
    .option("--yes", "confirm")
    .addOption(json())
    .action(async (o) => {
      if (!o.yes) throw new UsageError("stop-all stops every machine: add --yes to confirm");
      const { s, client } = ctx();
      const data = await call(client.POST("/v1/leases/stop-all"), s.url);
      if (o.json) return printJson(data);
      console.log(`stopping ${data.leases} lease(s) and ${data.machines} machine(s)`);
    });

  const schedules = program.command("schedules").description("cron-started rentals");
  schedules
    .command("ls")
    .addOption(json())
    .action(async (o) => {
      const { s, client } = ctx();
      const data = await call(client.GET("/v1/schedules"), s.url);
      if (o.json) return printJson(data);
      const rows = data.schedules.map((x) => [
        x.id,
        x.name,
        x.cron,
        x.timezone,
        x.enabled ? "yes" : "no",
        x.next_run_at,
      ]);
      console.log(table(["ID", "NAME", "CRON", "TIMEZONE", "ENABLED", "NEXT_RUN"], rows));
    });
  leaseOptions(schedules.command("add").description("add a schedule that rents the lease described by the flags"))
    .requiredOption("--cron <expr>", 'five-field cron expression, e.g. "0 2 * * *"')
    .option("--timezone <tz>", "IANA time zone", "UTC")
    .option("--disabled", "create it disabled")
    .addOption(json())
    .action(async (o) => {
      const body = {
        name: o.name ?? "schedule",
        cron: o.cron,
        timezone: o.timezone,
        enabled: !o.disabled,
        lease: leaseBody(o),
      };
      const { s, client } = ctx();
      const data = await call(client.POST("/v1/schedules", { body: /** @type {any} */ (body) }), s.url);
      if (o.json) return printJson(data);
      console.log(`${data.id} next run ${data.next_run_at ?? "-"}`);
    });
  schedules
    .command("rm")
    .argument("<id>", "schedule id")
    .addOption(json())
    .action(async (id, o) => {
      const { s, client } = ctx();
      const data = await call(client.DELETE("/v1/schedules/{id}", { params: { path: { id } } }), s.url);
      if (o.json) return printJson(data);
      console.log(`${id} deleted`);
    });
  schedules
    .command("run")
    .description("start the schedule's lease now")
    .argument("<id>", "schedule id")
    .addOption(json())
    .action(async (id, o) => {
      const { s, client } = ctx();
      const lease = await call(client.POST("/v1/schedules/{id}/run", { params: { path: { id } } }), s.url);
      if (o.json) return printJson(lease);
      console.log(`${lease.id} ${statusColour(lease.status)}`);
    });

  const endpoint = program.command("endpoint").description("model endpoints: one base URL, replicas rented on demand");
  endpoint
    .command("create")
    .description("create an endpoint; its key is printed once")
    .argument("<name>", "the endpoint's name (the OpenAI `model` field)")
    .requiredOption("--model <ref>", "the model, e.g. qwen2.5:32b")
    .option("--context-length <n>", "context length", wholeNumber)
    .option("--min <n>", "replicas kept running (0: scale to zero)", (v) => (v === "0" ? 0 : wholeNumber(v)))
    .option("--max <n>", "most replicas", wholeNumber)
    .option("--idle <minutes>", "a replica with no request for this long is stopped", wholeNumber)
    .option("--wait <seconds>", "hold a request this long while a replica starts", (v) =>
      v === "0" ? 0 : wholeNumber(v),
    )
    .option("--budget <usd>", "daily budget of its replicas, USD", positiveNumber)
    .option("--provider <names>", "providers to rent at, comma-separated, in order")
    .option("--gpu <name>", "GPU name (substring)")
    .option("--max-price <usd>", "per hour, USD", positiveNumber)
    .addOption(json())
    .action(async (name, o) => {
      const body = {
        name,
        model: o.model,
        ...(o.contextLength !== undefined ? { context_length: o.contextLength } : {}),
        ...(o.min !== undefined ? { min_replicas: o.min } : {}),
        ...(o.max !== undefined ? { max_replicas: o.max } : {}),
        ...(o.idle !== undefined ? { idle_minutes: o.idle } : {}),
        ...(o.wait !== undefined ? { cold_start_wait_s: o.wait } : {}),
        ...(o.budget !== undefined ? { budget_daily_usd: o.budget } : {}),
        ...(o.provider ? { provider: o.provider } : {}),
        ...(o.gpu ? { gpu: o.gpu } : {}),
        ...(o.maxPrice !== undefined ? { max_price: o.maxPrice } : {}),
      };
      const { s, client } = ctx();
      const data = await call(client.POST("/v1/endpoints", { body: /** @type {any} */ (body) }), s.url);
      if (o.json) return printJson(data);
      console.log(`${data.endpoint.name} ${data.endpoint.state}  base URL ${data.endpoint.base_url}`);
      console.log(`key (shown once): ${data.key}`);
    });
  endpoint
    .command("ls")
    .addOption(json())
    .action(async (o) => {
      const { s, client } = ctx();
      const data = await call(client.GET("/v1/endpoints"), s.url);
      if (o.json) return printJson(data);
      const rows = data.endpoints.map((e) => [
        e.name,
        e.model,
        e.state,
        e.replicas.filter((r) => r.status === "running").length,
        `${e.min_replicas}-${e.max_replicas}`,
        e.idle_minutes,
        money(e.spend_today_usd, "USD"),
      ]);
      console.log(table(["NAME", "MODEL", "STATE", "RUNNING", "REPLICAS", "IDLE_MIN", "TODAY"], rows));
    });
  endpoint
    .command("show")
    .argument("<name>", "endpoint name")
    .addOption(json())
    .action(async (name, o) => {
      const { s, client } = ctx();
      const data = await call(client.GET("/v1/endpoints/{name}", { params: { path: { name } } }), s.url);
      if (o.json) return printJson(data);
      console.log(`${data.name}  ${data.model}  ${data.state}  ${data.base_url}`);
      console.log(
        `replicas ${data.min_replicas}-${data.max_replicas}, idle ${data.idle_minutes} min, ` +
          `today ${money(data.spend_today_usd, "USD")} (budget ${data.budget_daily_usd ?? "none"})`,
      );
      const rows = data.replicas.map((r) => [r.lease_id, r.status, r.in_flight, r.last_request_at]);
      if (rows.length) console.log(table(["LEASE", "STATUS", "IN_FLIGHT", "LAST_REQUEST"], rows));
    });
  endpoint
    .command("rm")
    .argument("<name>", "endpoint name")
    .addOption(json())
    .action(async (name, o) => {
      const { s, client } = ctx();
      const data = await call(client.DELETE("/v1/endpoints/{name}", { params: { path: { name } } }), s.url);
      if (o.json) return printJson(data);
      console.log(`${name} deleted; ${data.stopped} replica(s) stopping`);
    });

  program
    .command("account")
    .description("providers, balances, spend and budget (--days N: spend per day and provider)")
    .option("--days <n>", "spend per UTC day and provider for the last N days (1-366)", wholeNumber)
    .addOption(json())
    .action(async (o) => {
      const { s, client } = ctx();
      if (o.days !== undefined) {
        const spend = await call(client.GET("/v1/account/spend", { params: { query: { days: o.days } } }), s.url);
        if (o.json) return printJson(spend);
        return console.log(spendTable(spend));
      }
      const data = await call(client.GET("/v1/account"), s.url);
      if (o.json) return printJson(data);
      const rows = data.providers.map((p) => [p.provider, p.configured ? "yes" : "no", p.balance, p.currency, p.error]);
      console.log(table(["PROVIDER", "CONFIGURED", "BALANCE", "CUR", "ERROR"], rows));
      const b = data.budget;
      console.log(
        `\nspend today ${money(data.spend.today, data.spend.currency)} (budget ${b.daily ?? "none"}), ` +
          `this month ${money(data.spend.month, data.spend.currency)} (budget ${b.monthly ?? "none"}); ` +
          `${data.active_leases} active of ${data.limits.max_active_leases}`,
      );
    });

  return program;
}

/** Runs the command line; resolves to the exit code. @param {string[]} argv */
export async function run(argv) {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: "user" });
    return 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version are successes; every other parse failure is a usage error.
      return error.code === "commander.helpDisplayed" ||
        error.code === "commander.version" ||
        error.code === "commander.help"
        ? 0
        : 2;
    }
    if (error instanceof UsageError) {
      process.stderr.write(`${pc.red("error:")} ${error.message}\n`);
      return 2;
    }
    if (error instanceof ApiFailure) {
      process.stderr.write(`${pc.red("error:")} ${error.code}: ${error.message}\n`);
      return 1;
    }
    process.stderr.write(`${pc.red("error:")} ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}
