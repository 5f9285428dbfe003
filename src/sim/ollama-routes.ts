import { ApiError } from "../errors";
import { createRouter } from "../router";
import { simCloud } from "./cloud";

/**
 * Each sim machine's Ollama server, where a client (curl, the `openai` npm client) reaches it:
 * `/sim/ollama/{ref}/api/...` and `/sim/ollama/{ref}/v1/...`. Like a real Ollama server behind
 * RunPod's proxy it asks for no token; it exists only while ENABLE_SIM is on. Other ports of a
 * sim machine have nothing listening behind them: a proxy's 502.
 */
export const simOllamaRoutes = createRouter()
  .use("/sim/*", async (c, next) => {
    if (!c.get("services").config.enableSim) {
      throw new ApiError("not_found", "the simulated cloud is off (set ENABLE_SIM=true)");
    }
    await next();
  })
  .all("/sim/ollama/*", async (c) => {
    const res = await simCloud(c.get("services").env.SIM_CLOUD).fetch(c.req.raw);
    // A fresh Response: the object's answer has immutable headers, and every answer gets X-Request-Id.
    return new Response(res.body, res);
  })
  .all("/sim/ports/*", (c) => {
    const port = new URL(c.req.url).pathname.split("/")[4] ?? "";
    return c.text(`nothing listens on port ${port} of a simulated machine`, 502);
  });
