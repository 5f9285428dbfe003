import { createRoute, z } from "@hono/zod-openapi";
import { ApiError, errorResponses } from "../errors";
import { randomSecret } from "../lib/crypto";
import { idPattern, newId } from "../lib/ids";
import { bearerSecurity, createRouter } from "../router";
import { insertToken, listTokens, revokeToken, scopeValues } from "./tokens-store";

/** Issued tokens carry this prefix, so authenticate can skip the lookup for anything else. */
const TOKEN_PREFIX = "gl_";
const TOKEN_RANDOM_BYTES = 32;

const ScopesSchema = z
  .array(z.enum(scopeValues))
  .min(1)
  .max(16)
  .transform((scopes) => [...new Set(scopes)])
  .openapi({
    description: "read: GET routes; rent: create leases, run schedules; stop: stop leases; admin: everything",
    example: ["read", "rent", "stop"],
  });

const CreateTokenSchema = z
  .object({
    name: z.string().trim().min(1).max(100).openapi({ example: "nightly-batch" }),
    scopes: ScopesSchema,
  })
  .openapi("CreateToken");

const TokenSchema = z
  .object({
    id: z.string().openapi({ example: "tok_01jb3k8x0m4q7r2s5t6v9w" }),
    name: z.string(),
    scopes: z.array(z.enum(scopeValues)),
    created_at: z.string(),
    last_used_at: z.string().nullable().openapi({ description: "updated at most about once a minute" }),
    revoked_at: z.string().nullable(),
  })
  .openapi("Token");

const CreatedTokenSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    scopes: z.array(z.enum(scopeValues)),
    token: z.string().openapi({ description: "the bearer token; shown only in this response", example: "gl_…" }),
    created_at: z.string(),
  })
  .openapi("CreatedToken");

const createTokenRoute = createRoute({
  method: "post",
  path: "/tokens",
  tags: ["tokens"],
  summary: "Create a scoped API token (admin)",
  security: bearerSecurity,
  request: { body: { content: { "application/json": { schema: CreateTokenSchema } }, required: true } },
  responses: {
    201: {
      description: "The token; its value is shown only here and stored only as a SHA-256 hash.",
      content: { "application/json": { schema: CreatedTokenSchema } },
    },
    ...errorResponses(),
  },
});

const listTokensRoute = createRoute({
  method: "get",
  path: "/tokens",
  tags: ["tokens"],
  summary: "List tokens, revoked ones included (admin)",
  security: bearerSecurity,
  responses: {
    200: {
      description: "Every token, newest first; never a token value or its hash.",
      content: { "application/json": { schema: z.object({ tokens: z.array(TokenSchema) }) } },
    },
    ...errorResponses(),
  },
});

const revokeTokenRoute = createRoute({
  method: "delete",
  path: "/tokens/{id}",
  tags: ["tokens"],
  summary: "Revoke a token (admin); it fails with 401 from the next request on",
  security: bearerSecurity,
  request: { params: z.object({ id: z.string().openapi({ param: { name: "id", in: "path" } }) }) },
  responses: {
    200: {
      description: "Revoked (also when it already was).",
      content: { "application/json": { schema: z.object({ ok: z.literal(true) }) } },
    },
    ...errorResponses("not_found"),
  },
});

export const tokenRoutes = createRouter()
  .openapi(createTokenRoute, async (c) => {
    const { name, scopes } = c.req.valid("json");
    const { db, clock } = c.get("services");
    const now = clock();
    const secret = `${TOKEN_PREFIX}${randomSecret(TOKEN_RANDOM_BYTES)}`;
    const stored = await insertToken(db, { id: newId("tok", now), name, scopes, secret, createdAt: now });
    return c.json(
      { id: stored.id, name: stored.name, scopes: stored.scopes, token: secret, created_at: stored.created_at },
      201,
    );
  })
  .openapi(listTokensRoute, async (c) => {
    const tokens = await listTokens(c.get("services").db);
    return c.json({ tokens }, 200);
  })
  .openapi(revokeTokenRoute, async (c) => {
    const { id } = c.req.valid("param");
    const { db, clock } = c.get("services");
    if (!idPattern.test(id) || !(await revokeToken(db, id, clock()))) {
      throw new ApiError("not_found", "no such token");
    }
    return c.json({ ok: true as const }, 200);
  });
