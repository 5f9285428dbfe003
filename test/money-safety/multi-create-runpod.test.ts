import { multiCreateMatrix } from "./multi-create-matrix";

// The multi-create matrix (multi-create-matrix.ts) of runpod; one file per subject so that vitest runs them side by side.
multiCreateMatrix("runpod");
