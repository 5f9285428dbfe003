// Bundled by bench/lib/fake-cloud.mjs so the wire-faithful test fakes also run as plain HTTP servers.
export { RUNPOD_FAKE_KEY, RunpodFake } from "../../test/fakes/runpod";
export { VAST_FAKE_KEY, VastFake } from "../../test/fakes/vast";
export { VRAMFARM_FAKE_TOKEN, VramfarmFake } from "../../test/fakes/vramfarm";
