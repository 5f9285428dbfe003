import { expect, it } from "vitest";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { driveUntil, fireNext, Recorder, scenarioPerTest } from "../robustness/drive";
import { Faulty, type FaultyProvider } from "../robustness/faulty";

// Finding 3: any 404 was read as "gone", whatever its body (a proxy page, a wrong base URL).

const { clock, useFakes } = scenarioPerTest();

const BODY = { gpu: "4090", template: "custom", image: "ghcr.io/you/batch:1", cmd: "python run.py", max_minutes: 60 };

for (const provider of ["vast", "vramfarm"] as const satisfies readonly FaultyProvider[]) {
  it(`${provider}: a 404 proxy page read twice does not verify a teardown`, async () => {
    const fake =
      provider === "vast" ? new VastFake({ bootMs: 30_000, lingerMs: 5_000 }) : new VramfarmFake({ bootMs: 30_000 });
    const faulty = new Faulty(provider, fake);
    useFakes(faulty);
    const recorder = new Recorder();
    const rented = await recorder.call("/v1/leases", { method: "POST", json: { ...BODY, provider } });
    expect(rented.status).toBe(202);
    const id = (rented.json as { id: string }).id;
    expect((await driveUntil(clock, recorder, id, ["running"])).reached).toBe(true);
    // The machine keeps running (terminates ignored) and every status read meets a proxy's 404 page.
    faulty.inject("terminate", { kind: "ignore" }, { times: 100 });
    const proxy404 = { kind: "http", status: 404 } as const;
    faulty.inject("status", proxy404, { times: 6 });
    await recorder.call(`/v1/leases/${id}/stop`, { method: "POST" });
    for (let i = 0; i < 4; i++) await fireNext(clock, id);
    // Failed on main: "stopped" with teardown_verified_at while the machine ran on.
    expect((await recorder.lease(id)).status).toBe("stopping");
    expect(fake.model.list()).toHaveLength(1);
    faulty.clear();
    expect((await driveUntil(clock, recorder, id, ["stopped"])).reached).toBe(true);
    clock.advance(60_000);
    expect(fake.model.list()).toHaveLength(0);
  });
}
