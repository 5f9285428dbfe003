import { expect } from "vitest";
import type { Scope } from "../../src/services";
import { api } from "../helpers";

export interface IssuedToken {
  id: string;
  token: string;
  name: string;
  scopes: Scope[];
  created_at: string;
}

/** Creates a token with the admin token and returns the 201 body. */
export async function issueToken(scopes: Scope[], name = `t-${scopes.join("-")}`): Promise<IssuedToken> {
  const res = await api("/v1/tokens", { method: "POST", json: { name, scopes } });
  expect(res.status).toBe(201);
  return (await res.json()) as IssuedToken;
}
