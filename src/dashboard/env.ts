import type { ExecutionContext } from "hono";
import type { Session } from "../auth/sessions";
import type { AppEnv } from "../services";

/** The dashboard's routes see the signed-in session beside the app's services. */
export type DashEnv = {
  Bindings: AppEnv["Bindings"];
  Variables: AppEnv["Variables"] & { session: Session };
};

/** How the dashboard reaches the API in-process (the app's own fetch). */
export type ApiFetch = (request: Request, env: Env, ctx: ExecutionContext | undefined) => Promise<Response>;
