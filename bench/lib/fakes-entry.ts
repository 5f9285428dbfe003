// Bundled by bench/lib/fake-cloud.mjs so the wire-faithful test fakes also run as plain HTTP servers.
export { RunpodFake, RUNPOD_FAKE_KEY } from "../../test/fakes/runpod";
export { VastFake, VAST_FAKE_KEY } from "../../test/fakes/vast";
export { VramfarmFake, VRAMFARM_FAKE_TOKEN } from "../../test/fakes/vramfarm";
