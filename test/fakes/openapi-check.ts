import openapi from "../../docs/runpod-rest-v2.openapi.json";

/*
 * A small JSON Schema (2020-12 subset) check against the component schemas of RunPod's own REST
 * v2 OpenAPI document (docs/runpod-rest-v2.openapi.json). Ajv compiles validators with
 * `new Function`, which workerd forbids, so the fake and the tests use this instead. It covers
 * what that document uses: $ref, allOf, anyOf, not, if/then, type (incl. lists and "null"),
 * enum, required, properties, items, additionalProperties/unevaluatedProperties false,
 * minimum, minLength, maxItems and pattern.
 */

type Schema = Record<string, unknown>;
const schemas = (openapi as unknown as { components: { schemas: Record<string, Schema> } }).components.schemas;

export type RunpodSchemaName = keyof typeof openapi.components.schemas;

/** The problems of `value` against the named component schema; empty when it conforms. */
export function checkRunpodSchema(name: RunpodSchemaName, value: unknown): string[] {
  const schema = schemas[name];
  if (!schema) throw new Error(`no schema ${name} in the RunPod OpenAPI document`);
  return check(schema, value, "$").errors;
}

interface Result {
  errors: string[];
  /** object keys some subschema evaluated (for unevaluatedProperties) */
  evaluated: Set<string>;
}

function resolve(schema: Schema): Schema {
  const ref = schema.$ref;
  if (typeof ref !== "string") return schema;
  const name = ref.replace("#/components/schemas/", "");
  const target = schemas[name];
  if (!target) throw new Error(`unresolved $ref ${ref}`);
  return { ...target, ...Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "$ref")) };
}

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function check(raw: Schema, value: unknown, path: string): Result {
  const schema = resolve(raw);
  const errors: string[] = [];
  const evaluated = new Set<string>();
  const merge = (r: Result) => {
    errors.push(...r.errors);
    for (const k of r.evaluated) evaluated.add(k);
  };

  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string];
    const actual = typeOf(value);
    if (!types.includes(actual) && !(actual === "integer" && types.includes("number")))
      errors.push(`${path}: expected ${types.join("|")}, got ${actual}`);
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value))
    errors.push(`${path}: ${JSON.stringify(value)} not in ${JSON.stringify(schema.enum)}`);
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && value.length < schema.minLength) errors.push(`${path}: too short`);
    if (typeof schema.pattern === "string" && !new RegExp(schema.pattern, "u").test(value))
      errors.push(`${path}: does not match ${schema.pattern}`);
  }
  if (typeof value === "number" && typeof schema.minimum === "number" && value < schema.minimum)
    errors.push(`${path}: below ${schema.minimum}`);
  if (Array.isArray(value)) {
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) errors.push(`${path}: too many items`);
    if (schema.items)
      for (const [i, item] of value.entries())
        errors.push(...check(schema.items as Schema, item, `${path}[${i}]`).errors);
  }
  if (Array.isArray(schema.allOf)) for (const sub of schema.allOf as Schema[]) merge(check(sub, value, path));
  if (Array.isArray(schema.anyOf)) {
    const results = (schema.anyOf as Schema[]).map((sub) => check(sub, value, path));
    const passing = results.filter((r) => r.errors.length === 0);
    if (passing.length === 0)
      errors.push(`${path}: matches none of anyOf (${results.map((r) => r.errors[0]).join("; ")})`);
    for (const r of passing) for (const k of r.evaluated) evaluated.add(k);
  }
  if (schema.not && check(schema.not as Schema, value, path).errors.length === 0) errors.push(`${path}: matches "not"`);
  if (schema.if) {
    const condition = check(schema.if as Schema, value, path);
    if (condition.errors.length === 0 && schema.then) merge(check(schema.then as Schema, value, path));
  }

  if (typeOf(value) === "object") {
    const object = value as Record<string, unknown>;
    if (Array.isArray(schema.required))
      for (const key of schema.required as string[]) if (!(key in object)) errors.push(`${path}: missing ${key}`);
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    for (const [key, sub] of Object.entries(properties)) {
      evaluated.add(key);
      if (key in object) errors.push(...check(sub, object[key], `${path}.${key}`).errors);
    }
    if (schema.additionalProperties === false)
      for (const key of Object.keys(object))
        if (!(key in properties)) errors.push(`${path}: additional property '${key}' not allowed`);
    if (typeof schema.additionalProperties === "object")
      for (const [key, v] of Object.entries(object))
        if (!(key in properties))
          errors.push(...check(schema.additionalProperties as Schema, v, `${path}.${key}`).errors);
    if (schema.unevaluatedProperties === false)
      for (const key of Object.keys(object))
        if (!evaluated.has(key)) errors.push(`${path}: unevaluated property '${key}' not allowed`);
  }
  return { errors, evaluated };
}
