import { faultMatrix } from "./fault-matrix";

// The fault matrix (fault-matrix.ts) for runpod; one file per provider so that vitest runs them side by side.
faultMatrix("runpod");
