// Bundled by bench/sizing-decisions.mjs: the runner's rule, the old estimate and the models.
export { contextFor, fitOnCards } from "../../src/models/need";
export { computeBytes, kvCacheBytes, weightsOnGpu } from "../../src/models/runner";
export { GPU_SPECS } from "../../src/providers/gpus";
export { legacyFits, legacyNeedGb } from "../../test/support/legacy-need";
export { oracleFitsOneCard } from "../../test/support/runner-oracle";
export { SIZING_CONTEXTS, SIZING_MODELS } from "../../test/support/sizing-models";
