// A file the provider-name scan reads (test/app/provider-names.test.ts): RunPod, vast and sim in a comment are fine.
/* VRAMFARM_TOKEN in a block comment is fine too */
export const vastHost = { provider: "runpod", key: "VRAMFARM_TOKEN", other: "simulation" };
export const offer = ["sim", `sim:4090:1`];
export const Page = () => <p>Vast.ai</p>;
