// Bundled by bench/lib/fake-cloud.mjs so the wire-faithful test fakes also run as plain HTTP servers.
export { DEFAULT_SWITCHES as SIM_OLLAMA_SWITCHES } from "../../src/sim/ollama/machine";
export { FAKE_MODELS, OllamaRegistryFake } from "../../test/fakes/ollama-registry";
export { RUNPOD_FAKE_KEY, RunpodFake } from "../../test/fakes/runpod";
export { VAST_FAKE_KEY, VastFake } from "../../test/fakes/vast";
export { VRAMFARM_FAKE_TOKEN, VramfarmFake } from "../../test/fakes/vramfarm";
