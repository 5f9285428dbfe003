import { describe, expect, it } from "vitest";
import { hostSizing, leanHostSizing } from "../../src/providers/sizing";

describe("host sizing from the model weights (docs/providers.md#sizing)", () => {
  it.each([
    [0, { diskGb: 25, vcpus: 4, ramGb: 16 }],
    [4.7, { diskGb: 25, vcpus: 4, ramGb: 16 }],
    [18, { diskGb: 42, vcpus: 4, ramGb: 26 }],
    [19.9, { diskGb: 44, vcpus: 4, ramGb: 27 }],
    [20, { diskGb: 45, vcpus: 8, ramGb: 28 }],
    [40, { diskGb: 75, vcpus: 8, ramGb: 48 }],
    [70, { diskGb: 120, vcpus: 8, ramGb: 64 }],
    [200, { diskGb: 120, vcpus: 8, ramGb: 64 }],
  ])("%s GB of weights", (weights, expected) => {
    expect(hostSizing(weights)).toEqual(expected);
  });

  it("the lean variant keeps the disk and asks for 2 vCPU and 15 GB RAM", () => {
    expect(leanHostSizing(40)).toEqual({ diskGb: 75, vcpus: 2, ramGb: 15 });
  });
});
