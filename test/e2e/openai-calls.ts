import type OpenAI from "openai";
import { expect } from "vitest";

/** A completion, a streamed completion and the model list through `client`: the calls made (3). */
export async function openaiCalls(client: OpenAI, model: string): Promise<number> {
  const completion = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hi" }],
  });
  expect(completion.model).toBe(model);
  expect(completion.choices[0]?.message.content?.trim()).toBeTruthy();

  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Say hi" }],
    stream: true,
  });
  let streamed = "";
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    streamed += chunk.choices[0]?.delta?.content ?? "";
  }
  expect(chunks).toBeGreaterThan(1);
  expect(streamed.trim()).toBeTruthy();

  const models = await client.models.list();
  expect(models.data.map((m) => m.id)).toContain(model);
  return 3;
}
