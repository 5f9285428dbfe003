import { scrubText } from "./scrub";

export type LogLevel = "info" | "warn" | "error";
/** What a log line says besides its event: ids, counts, an error. Values are scrubbed. */
export type LogFields = Record<string, unknown>;

/** One structured log line: `{ level, event, ...fields }`, scrubbed of every secret. */
export interface Logger {
  info(event: string, fields?: LogFields): void;
  warn(event: string, fields?: LogFields): void;
  error(event: string, fields?: LogFields): void;
  /** A logger whose every line also carries `fields` (a request id, a lease id, a job name). */
  with(fields: LogFields): Logger;
  /** A logger that also scrubs these values (a lease's env, for the work on that lease). */
  hiding(values: readonly string[]): Logger;
}

const sinks: Record<LogLevel, (line: LogFields) => void> = {
  // Workers Logs index the fields of an object logged as is; strings would be free text.
  info: (line) => console.log(line),
  warn: (line) => console.warn(line),
  error: (line) => console.error(line),
};

/** The one logger of the worker: object lines, strings and errors scrubbed of `secrets`. */
export function createLogger(secrets: readonly (string | null | undefined)[], context: LogFields = {}): Logger {
  const safe = (value: unknown): unknown => {
    if (typeof value === "string") return scrubText(value, secrets);
    // An error is logged by name and message only: a stack or a cause may carry what a provider sent.
    if (value instanceof Error) return scrubText(`${value.name}: ${value.message}`, secrets);
    if (Array.isArray(value)) return value.map(safe);
    if (value && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, safe(inner)]));
    }
    return value;
  };
  const write = (level: LogLevel, event: string, fields: LogFields = {}) => {
    sinks[level]({ level, event, ...(safe({ ...context, ...fields }) as LogFields) });
  };
  return {
    info: (event, fields) => write("info", event, fields),
    warn: (event, fields) => write("warn", event, fields),
    error: (event, fields) => write("error", event, fields),
    with: (fields) => createLogger(secrets, { ...context, ...fields }),
    hiding: (values) => createLogger([...secrets, ...values], context),
  };
}
