import { json, text } from "./respond";

/**
 * What an Ollama server on a rented machine answers, once it listens. `listening` false models
 * the time between "container running" and "server up": RunPod's proxy answers 502 then.
 */
export function ollamaResponse(request: Request, listening: boolean): Response {
  if (!listening) return text("Bad Gateway", 502);
  const path = new URL(request.url).pathname;
  if (request.method === "GET" && path === "/") return text("Ollama is running", 200);
  if (request.method === "GET" && path === "/api/version") return json({ version: "0.11.4" });
  if (request.method === "GET" && path === "/api/tags") return json({ models: [] });
  return json({ error: "not found" }, 404);
}
